"""``?cache=yes``: value reads answered from memory, kept true by Redis client tracking.

Each test runs its own ``redis-server`` so that ``INFO commandstats`` counts only its calls.
Plain values are cached; history values are not (their read is a script, sent every time),
and stay correct with the cache on. The bound (:data:`~sessionstore.redis.tracking.BOUND`)
is proven by counting the reads that started past it and still missed an acknowledged
write (none), and by reading a value past its ttl that the server has not yet deleted.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from support.redis_server import RedisServer
from support.staleness import late_reads
from support.tcp_proxy import TcpProxy

import sessionstore
from sessionstore import InvalidArgumentError, SessionDisposedError, StoreClosedError
from sessionstore.redis import tracking
from sessionstore.redis.acl import setuser_args
from sessionstore.redis.library import library
from sessionstore.redis.tracking import BOUND

T1 = 1_700_000_000_000
T2 = T1 + 60_000
KEY = ("BTCUSDT", "cache", "binance", "1m")
#: How long an invalidation may take to reach the reading process (a loaded machine's
#: patience: how fast it must arrive is the bound's business, proven below).
ARRIVAL = 20.0


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=False) as started:
        yield started


@pytest.fixture
def steady(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound no pause of a loaded machine reaches, for the tests that count hits
    exactly: they prove what is kept, the tests of the bound (below) for how long."""
    monkeypatch.setattr(tracking, "BOUND", 60.0)


def calls(server: RedisServer, command: str) -> int:
    client = redis.Redis(port=server.port)
    try:
        return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))
    finally:
        client.close()


def hmget_calls(server: RedisServer) -> int:
    return calls(server, "hmget")


def tracking_clients(server: RedisServer) -> list[dict]:
    """The connections with client tracking on: the cache's readers."""
    client = redis.Redis(port=server.port)
    try:
        return [found for found in client.client_list() if "t" in found["flags"]]
    finally:
        client.close()


def eventually(read, expected) -> None:  # noqa: ANN001
    deadline = time.monotonic() + ARRIVAL
    while (found := read()) != expected:
        assert time.monotonic() < deadline, f"still {found!r}, not {expected!r}"
        time.sleep(0.01)


def test_a_repeated_read_of_an_unchanged_value_does_not_reach_the_server(server, steady):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        before = hmget_calls(server)
        for _ in range(50):
            assert value.get_data(T1) == {"n": 1}
        assert hmget_calls(server) - before == 1


def _write_elsewhere(url: str, n: int) -> None:
    with sessionstore.connect(url, "t-cache") as store:
        store.session(*KEY).set_data({"n": n}, T1)


def test_a_write_by_another_process_invalidates_the_cached_read(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        worker = multiprocessing.get_context("fork").Process(
            target=_write_elsewhere, args=(server.url, 2)
        )
        worker.start()
        worker.join(30)
        assert worker.exitcode == 0
        eventually(lambda: value.get_data(T1), {"n": 2})
        # A write through this store is seen at once.
        value.set_data({"n": 3}, T1)
        assert value.get_data(T1) == {"n": 3}


def test_a_reconnect_empties_the_cache(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        admin = redis.Redis(port=server.port)
        try:
            # Drop every client connection; then change the value with tracking gone.
            admin.client_kill_filter(_type="normal", skipme=True)
            admin.client_kill_filter(_type="pubsub", skipme=True)
            with sessionstore.connect(server.url, "t-cache") as other:
                other.session(*KEY).set_data({"n": 2}, T1)
        finally:
            admin.close()
        before = hmget_calls(server)
        assert value.get_data(T1) == {"n": 2}
        assert hmget_calls(server) - before == 1


def test_a_restarted_server_empties_the_cache(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache", timeout=1) as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        server.stop()
        server.start()
        assert value.get_data(T1) is None  # AOF off: the restarted server is empty


def test_look_ahead_applies_to_a_cached_record(server, steady):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T2)
        assert value.get_data(T1) is None  # fresh
        assert value.get_data(T1) is None  # cached
        assert value.get_data(T2) == {"n": 1}
        before = hmget_calls(server)
        assert value.get_data(T1) is None and value.get_data(T2) == {"n": 1}
        assert hmget_calls(server) == before


def test_history_values_are_not_cached_and_stay_correct(server):
    url = server.url + "?cache=yes"
    with sessionstore.connect(url, "t-cache") as store:
        mine = store.session(*KEY, history=True)
        mine.set_data({"n": 1}, T1)
        assert mine.get_data(T2) == {"n": 1}
        before = calls(server, "fcall_ro")
        for _ in range(5):
            assert mine.get_data(T2) == {"n": 1}
        assert calls(server, "fcall_ro") - before == 5  # every read asks the server
        with sessionstore.connect(server.url, "t-cache") as other:
            other.session(*KEY, history=True).set_data({"n": 2}, T2)
        # Not cached, so the other client's write is seen by the very next read.
        assert mine.get_data(T2) == {"n": 2} and mine.get_data(T1) == {"n": 1}
        assert hmget_calls(server) == 0


def test_the_async_client_refuses_the_cache(server):
    from sessionstore import aio

    with pytest.raises(InvalidArgumentError, match="cache"):
        store = aio.connect(server.url + "?cache=yes", f"t-{uuid.uuid4().hex[:8]}")
        import asyncio

        asyncio.run(store.session(*KEY).get_data(T1))


def test_a_bad_cache_value_is_refused():
    with pytest.raises(InvalidArgumentError, match="cache"):
        sessionstore.connect("redis://127.0.0.1:1/0?cache=maybe", "t-cache")


def test_connect_cache_true_is_the_url_option_and_travels(server, steady, tmp_path):
    import pickle

    with sessionstore.connect(server.url, "t-cache", cache=True) as store:
        value = store.session(*KEY)
        value.set_data({"n": 2}, T1)
        before = hmget_calls(server)
        for _ in range(20):
            assert value.get_data(T1) == {"n": 2}
        assert hmget_calls(server) - before == 1
        with pickle.loads(pickle.dumps(store)) as travelled:
            handle = travelled.session(*KEY)
            before = hmget_calls(server)
            for _ in range(20):
                assert handle.get_data(T1) == {"n": 2}
            assert hmget_calls(server) - before == 1
    with pytest.raises(InvalidArgumentError, match="cache"):
        sessionstore.connect((tmp_path / "files").as_uri(), cache=True)
    sessionstore.connect((tmp_path / "files").as_uri(), cache=False).close()


def test_a_value_handed_out_is_the_callers_own(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1, "items": [1, 2]}, T1)
        first = value.get_data(T1)
        first["n"] = 99
        first["items"].append(3)
        assert value.get_data(T1) == {"n": 1, "items": [1, 2]}


def test_a_cached_read_checks_its_arguments_and_the_handle_as_a_fresh_one(server):
    store = sessionstore.connect(server.url + "?cache=yes", "t-cache")
    value = store.session(*KEY)
    value.set_data({"n": 1}, T1)
    assert value.get_data(T1) == {"n": 1}
    with pytest.raises(InvalidArgumentError, match="when"):
        value.get_data("yesterday")
    other = store.session(*KEY)
    assert other.get_data(T1) == {"n": 1}
    other.dispose()
    with pytest.raises(SessionDisposedError):
        other.get_data(T1)
    store.close()
    with pytest.raises(StoreClosedError):
        value.get_data(T1)


def test_update_after_a_cached_read_starts_from_it_and_is_seen_at_once(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data(1, T1)
        assert value.get_data(T1) == 1
        assert value.get_data(T1) == 1  # cached
        assert value.update(lambda n: n + 1, T1) == 2
        assert value.get_data(T1) == 2


def test_a_killed_reading_connection_empties_the_cache(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        (reader,) = tracking_clients(server)
        admin = redis.Redis(port=server.port)
        try:
            # Only the tracked reader: the listener stays, and no invalidation will come.
            admin.client_kill_filter(_id=reader["id"])
            with sessionstore.connect(server.url, "t-cache") as other:
                other.session(*KEY).set_data({"n": 2}, T1)
        finally:
            admin.close()
        assert value.get_data(T1) == {"n": 2}


def test_the_servers_idle_timeout_of_the_reader_empties_the_cache(server):
    """Redis closes idle clients after ``timeout`` seconds but never a subscriber: a cache
    whose every read is a hit loses its reader, and with it the invalidations."""
    admin = redis.Redis(port=server.port)
    try:
        with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
            value = store.session(*KEY)
            value.set_data({"n": 1}, T1)
            assert value.get_data(T1) == {"n": 1}
            admin.config_set("timeout", 1)
            deadline = time.monotonic() + 10
            while tracking_clients(server):
                assert time.monotonic() < deadline, "the idle reader was not closed"
                time.sleep(0.1)
            admin.config_set("timeout", 0)
            with sessionstore.connect(server.url, "t-cache") as other:
                other.session(*KEY).set_data({"n": 2}, T1)
            assert value.get_data(T1) == {"n": 2}
    finally:
        admin.close()


def _read_in_a_forked_child(value: sessionstore.Session, queue: multiprocessing.Queue) -> None:
    try:
        first = value.get_data(T1)
        value.set_data({"n": 3}, T1)
        queue.put((first, value.get_data(T1)))
    except BaseException as exc:
        queue.put(repr(exc))
        raise


def test_a_forked_child_starts_with_an_empty_cache_and_leaves_the_parents_alone(server, steady):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        with sessionstore.connect(server.url, "t-cache") as other:
            other.session(*KEY).set_data({"n": 2}, T1)
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_read_in_a_forked_child, args=(value, queue))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        # The child read afresh (the parent's entry may still be on its way out) and saw
        # its own write at once.
        assert queue.get(timeout=5) == ({"n": 2}, {"n": 3})
        eventually(lambda: value.get_data(T1), {"n": 3})
        before = hmget_calls(server)
        for _ in range(20):
            assert value.get_data(T1) == {"n": 3}
        assert hmget_calls(server) == before  # the parent's connections still track


def test_threads_reading_a_cached_value_all_see_every_write_in_order(server):
    url = server.url + "?cache=yes"
    last = 30
    seen: list[list[int]] = [[] for _ in range(4)]
    errors: list[BaseException] = []
    with (
        sessionstore.connect(url, "t-cache") as store,
        sessionstore.connect(server.url, "t-cache") as other,
    ):
        store.session(*KEY).set_data(0, T1)
        writer = other.session(*KEY)

        def read(mine: list[int]) -> None:
            value = store.session(*KEY)
            try:
                deadline = time.monotonic() + 20
                while not mine or mine[-1] != last:
                    found = value.get_data(T1)
                    if not mine or found != mine[-1]:
                        mine.append(found)
                    assert time.monotonic() < deadline
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        readers = [threading.Thread(target=read, args=(mine,)) for mine in seen]
        for thread in readers:
            thread.start()
        for n in range(1, last + 1):
            writer.set_data(n, T1)
            time.sleep(0.005)
        for thread in readers:
            thread.join(30)
    assert not errors
    for mine in seen:
        assert mine == sorted(mine) and mine[-1] == last


def test_after_a_sentinel_failover_the_cache_reads_from_the_new_primary():
    from support.redis_sentinel import SERVICE, SentinelSetup

    with (
        SentinelSetup() as setup,
        sessionstore.connect(setup.url + "?cache=yes", "t-cache") as store,
    ):
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        old = setup.current_primary()
        sentinel = redis.Redis(port=setup.sentinels[0].port)
        try:
            sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        finally:
            sentinel.close()
        setup.wait(lambda: setup.current_primary() not in (None, old), "a new primary", 20)
        with sessionstore.connect(setup.url, "t-cache", durability="replicas:1") as other:
            deadline = time.monotonic() + 20
            while True:  # until the new primary takes writes with a replica behind it
                try:
                    other.session(*KEY).set_data({"n": 2}, T1)
                    break
                except sessionstore.SessionStoreError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
        # The demoted primary dropped the cache's connections (and would not have told it
        # of writes made on the new one): the store reads from the new primary afresh.
        eventually(lambda: value.get_data(T1), {"n": 2})
        assert store.session(*KEY).get_data(T1) == {"n": 2}
        new = setup.current_primary()
        assert new is not None
        assert tracking_clients(setup.node_at(new[1])), "the cache still reads elsewhere"


def test_a_hit_while_another_thread_applies_invalidations_waits_for_them(server, monkeypatch):
    """A drain takes the invalidation off the socket before it drops the entry: a hit in
    between finds the socket quiet, and must still not serve the invalidated record."""
    namespace = f"drain-{uuid.uuid4().hex[:8]}"
    cached = sessionstore.connect(server.url + "?cache=yes", namespace)
    other = sessionstore.connect(server.url, namespace)
    try:
        other.session(*KEY).set_data(1, 10)
        first, second = cached.session(*KEY), cached.session(*KEY)
        assert first.get_data(100) == 1 and second.get_data(100) == 1
        cache = cached._backends.values._handle.cached()
        listener = cache._listener
        read_response = listener.read_response
        taken = threading.Event()

        def slow_read_response(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            reply = read_response(*args, **kwargs)  # the invalidation is off the socket
            taken.set()
            time.sleep(0.3)  # the drain loses the processor before it drops the entry
            return reply

        monkeypatch.setattr(listener, "read_response", slow_read_response)
        other.session(*KEY).set_data(2, 10)
        eventually(lambda: bool(cache._poller.poll(0)), True)  # arrived, not yet read
        seen: dict[str, object] = {}
        drainer = threading.Thread(target=lambda: seen.update(first=first.get_data(100)))
        drainer.start()
        assert taken.wait(5)
        seen["second"] = second.get_data(100)
        drainer.join()
        assert seen == {"first": 2, "second": 2}
    finally:
        cached.close()
        other.close()


def expired_keys(client: redis.Redis) -> int:
    """How many keys the server found expired (``INFO stats``; reading it expires none)."""
    return int(client.info("stats")["expired_keys"])


def test_a_value_past_its_ttl_is_never_served_from_memory(steady):
    """Redis invalidates an expired key only once it deletes it: with active expiry off
    it stays until touched, and the cache must not keep answering for it. (``steady``:
    the bound cannot end the hits here, only the ttl can.)"""
    with RedisServer("--enable-debug-command", "local", durable=False) as server:
        admin = redis.Redis(port=server.port)
        try:
            admin.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
            ttl = 1.0
            with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
                value = store.session(*KEY, ttl=ttl)
                value.set_data({"n": 1}, T1)
                expired_by = time.monotonic() + ttl  # the server's expiry is no later
                before = hmget_calls(server)
                assert value.get_data(T1) == {"n": 1} and value.get_data(T1) == {"n": 1}
                assert hmget_calls(server) - before == 1  # the second one from memory
                time.sleep(max(0.0, expired_by - time.monotonic()) + 0.01)
                assert expired_keys(admin) == 0  # the key outlived its ttl on the server
                assert value.get_data(T1) is None
                assert expired_keys(admin) == 1  # that read reached the server
        finally:
            admin.close()


def test_a_stalled_listening_connection_stops_the_hits_within_the_bound(server, monkeypatch):
    """With the invalidations held up, a write acknowledged to another client is missed
    by no read that starts more than :data:`BOUND` after it. A listener silent for the
    timeout is given up (reads carry on, timed); once its path heals, tracking is back."""
    monkeypatch.setattr(tracking, "RETRACK_AFTER", 1.0)
    with (
        TcpProxy(server.port) as proxy,
        sessionstore.connect(proxy.url + "?cache=yes", "t-cache", timeout=1) as store,
        sessionstore.connect(server.url, "t-cache") as other,
    ):
        value, writer = store.session(*KEY), other.session(*KEY)

        def write(n: int) -> float:
            writer.set_data(n, T1)
            return time.monotonic()

        value.set_data(1, T1)
        assert value.get_data(T1) == 1
        proxy.stall("SUBSCRIBE")  # the listener's path only: the reader's still flows
        assert late_reads(lambda: value.get_data(T1), 2, write(2), BOUND) == []
        wait_until(lambda: value.get_data(T1) == 2 and not tracking_clients(server), 10)
        assert late_reads(lambda: value.get_data(T1), 3, write(3), BOUND) == []
        proxy.resume()
        wait_until(lambda: value.get_data(T1) == 3 and bool(tracking_clients(server)), 10)
        assert late_reads(lambda: value.get_data(T1), 4, write(4), BOUND) == []
        before = hmget_calls(server)
        for _ in range(20):
            assert value.get_data(T1) == 4
        assert hmget_calls(server) - before < 20, "the healed cache answers nothing"


def wait_until(condition, timeout: float) -> None:  # noqa: ANN001
    """Call ``condition`` until it holds (each call may read: it drives the cache)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.01)


def test_a_failed_cached_read_raises_as_an_uncached_one(server):
    """The read is a MULTI/EXEC: an error inside it is raised, never kept as a reply."""
    admin = redis.Redis(port=server.port)
    try:
        with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
            value = store.session(*KEY)
            value.set_data(1, T1)
            (name,) = admin.keys("ss:t-cache:val:*")
            admin.delete(name)
            admin.set(name, "not a hash")
            for _ in range(2):
                with pytest.raises(sessionstore.SessionStoreError, match="WRONGTYPE"):
                    value.get_data(T1)
            admin.delete(name)
            assert value.get_data(T1) is None
    finally:
        admin.close()


def test_a_swapdb_under_a_cached_reader_is_seen_within_the_bound(server):
    """Redis 7.0 tells tracking clients nothing of ``SWAPDB``: the mark read with each
    heartbeat names the database, and a read never misses the swap past the bound."""
    admin = redis.Redis(port=server.port)
    try:
        with (
            sessionstore.connect(server.url + "?cache=yes", "t-cache") as store,
            sessionstore.connect(server.url.replace("/0", "/1"), "t-cache") as other,
        ):
            value = store.session(*KEY)
            value.set_data(1, T1)
            other.session(*KEY).set_data(2, T1)
            for n in (2, 1, 2):
                eventually(lambda: value.get_data(T1), 3 - n)  # cached from the old one
                admin.swapdb(0, 1)
                swapped = time.monotonic()
                assert late_reads(lambda: value.get_data(T1), n, swapped, BOUND) == []
    finally:
        admin.close()


def test_a_user_that_may_not_set_the_mark_caches_timed(server):
    """Tracking needs the mark (see the module doc of :mod:`.tracking`): a user allowed
    client tracking but not ``SET`` gets the timed cache, with its bound."""
    admin = redis.Redis(port=server.port)
    try:
        args = setuser_args("nomark", "pw", "t-cache")
        tracked = ["+client|id", "+client|tracking", "+subscribe", "&__redis__:invalidate"]
        admin.execute_command(*[a for a in args if a != "+set"], *tracked)
        admin.execute_command("FUNCTION", "LOAD", library().source)
        url = f"redis://nomark:pw@127.0.0.1:{server.port}/0?cache=yes"
        with sessionstore.connect(url, "t-cache") as store:
            value = store.session(*KEY)
            value.set_data(1, T1)
            assert value.get_data(T1) == 1 and value.get_data(T1) == 1
            assert tracking_clients(server) == []
            with sessionstore.connect(server.url, "t-cache") as other:
                other.session(*KEY).set_data(2, T1)
                written = time.monotonic()
            assert late_reads(lambda: value.get_data(T1), 2, written, BOUND) == []
    finally:
        admin.close()
