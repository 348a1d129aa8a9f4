"""Part 3 of the fault suite: the server applied a call but its reply was lost.

``tests/support/tcp_proxy.py`` sits between the client and a real redis-server and is
told to lose the reply to the next ``FCALL``: the request is forwarded and
executed, the reply swallowed, the client's connection closed. redis-py retries on the
connection error, so the same call is sent again; sessionstore must recognise it as
already applied:

* ``append``: the retry is an applied replay: no duplicate event, no error (also when the
  caller itself retries after every retry of the client lost its reply, and for the
  closers ``load`` appends, and through the async API);
* ``set_data`` (plain: ``value_swap.lua``; history: ``history_set.lua``): applying it
  twice is the same as once;
* ``update``: the swap must not apply ``fn`` twice, also when another client's
  ``set_data`` lands between the lost reply and the resend (``before_close`` hook);
* exactly once: a resent write (``update``, ``set_data``, ``delete``, plain and history)
  is recognised as applied however many other writes and deletes landed before the
  resend, so it never writes over them;
* indeterminate outcomes (the script cache lost again while a call is sent, ``WAIT``
  unblocked by a failover) raise :class:`StoreUnavailableError`, never a plain
  :class:`SessionStoreError`.
"""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from support.redis_server import RedisServer
from support.tcp_proxy import TcpProxy

import sessionstore
import sessionstore.aio
from sessionstore import SessionHeader, StoreUnavailableError, keys
from sessionstore.keys import ValueKey
from sessionstore.redis.library import install
from sessionstore.redis.retry import RETRIES

from . import figures
from .conftest import iterations
from .figures import figures_run  # noqa: F401 - used by pytestmark
from .test_writer_killed import (
    SESSION,
    T0,
    Workload,
    check_balanced,
    check_batches,
    check_closers,
    ends_mid_turn,
)

#: A short timeout: a lost reply shows up as a closed connection at once anyway.
TIMEOUT = 1.0
KEY = ("BTCUSDT", "lost-reply", "binance", "1m")
#: The request that carries a value write (plain and history): a script call.
WRITE = "FCALL"

pytestmark = pytest.mark.usefixtures("figures_run")


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=True) as own:
        # The functions are installed, so that a lost reply is never a "Function not found".
        client = redis.Redis(port=own.port)
        install(client)
        client.close()
        yield own


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy(server.port) as own:
        yield own


@pytest.fixture
def namespace() -> str:
    return f"lost-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(proxy: TcpProxy, namespace: str) -> Iterator[sessionstore.Store]:
    with sessionstore.connect(proxy.url, namespace, timeout=TIMEOUT) as opened:
        yield opened


@pytest.fixture
def direct(server: RedisServer, namespace: str) -> Iterator[sessionstore.Store]:
    """The same data, read around the proxy."""
    with sessionstore.connect(server.url, namespace, timeout=5) as opened:
        yield opened


def applied(reply: bytes) -> bool:
    """Whether a swallowed reply says the server did the work (not an error)."""
    return not reply.startswith(b"-")


def test_a_lost_reply_to_an_append_is_an_applied_replay(proxy, store, direct):
    rounds = iterations(normal=25, ci=10, soak=500)
    rng = random.Random()
    work = Workload("lost", rng)
    store.events.create(SessionHeader(id=SESSION, created_at=T0))
    # The very first append materialises the session: its reply is lost too.
    proxy.drop_replies("FCALL")
    next_seq = store.events.append(SESSION, work.batch(0, 3, "b-first"))
    assert next_seq == 3 and proxy.dropped == 1 and applied(proxy.dropped_replies[-1])
    acked = 3
    for number in range(rounds):
        size = rng.randint(1, 20)
        proxy.drop_replies("FCALL")
        batch = work.batch(next_seq, size, f"b{number}")
        assert store.events.append(SESSION, batch) == next_seq + size
        assert proxy.pending_drops() == 0 and applied(proxy.dropped_replies[-1])
        next_seq += size
        acked += size
    stored = direct.events.read_from(SESSION, 0)
    lost = acked - len(stored)
    figures.record(
        "lost_reply",
        "redis",
        faults=proxy.dropped,
        inputs=rounds + 1,
        acked_events=acked,
        lost=max(lost, 0),
        duplicates=max(-lost, 0),
    )
    assert len(stored) == next_seq == acked, "an event was lost or written twice"
    assert check_batches(stored) == rounds + 1
    assert proxy.dropped == rounds + 1


def test_the_caller_may_retry_an_append_whose_every_reply_was_lost(proxy, store, direct):
    work = Workload("giveup", random.Random())
    header = SessionHeader(id=SESSION, created_at=T0)
    store.events.create(header)
    assert store.events.append(SESSION, work.batch(0, 4, "b0")) == 4
    batch = work.batch(4, 7, "b1")
    # The first send and both retries of the client lose their reply: the call fails...
    proxy.drop_replies("FCALL", count=RETRIES + 1)
    with pytest.raises(StoreUnavailableError) as caught:
        store.events.append(SESSION, batch)
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    assert proxy.dropped == RETRIES + 1
    assert all(applied(reply) for reply in proxy.dropped_replies)
    # ...although the batch was applied: the caller's retry of the same batch is a success.
    assert store.events.append(SESSION, batch) == 11
    stored = direct.events.read_from(SESSION, 0)
    figures.record(
        "lost_reply",
        "redis",
        faults=proxy.dropped,
        inputs=2,
        acked_events=11,
        lost=max(11 - len(stored), 0),
        duplicates=max(len(stored) - 11, 0),
    )
    assert len(stored) == 11
    check_batches(stored)


def test_a_lost_reply_to_the_closers_of_load_appends_them_once(proxy, store, direct):
    rng = random.Random()
    work = Workload("closers", rng)
    store.events.create(SessionHeader(id=SESSION, created_at=T0))
    next_seq = 0
    while True:
        next_seq = store.events.append(SESSION, work.batch(next_seq, rng.randint(1, 9), "b"))
        if ends_mid_turn(store.events.read_from(SESSION, 0)):
            break
    committed = direct.events.read_from(SESSION, 0)
    proxy.drop_replies("FCALL")
    loaded = store.events.load(SESSION)
    assert proxy.dropped == 1 and applied(proxy.dropped_replies[-1])
    closers = check_closers(committed, loaded.events)
    stored = direct.events.read_from(SESSION, 0)
    figures.record(
        "lost_reply",
        "redis",
        faults=1,
        inputs=1,
        acked_events=len(stored),
        duplicates=max(len(stored) - len(loaded.events), 0),
    )
    assert stored == loaded.events and closers >= 1
    check_balanced(stored)


def test_a_lost_reply_through_the_async_api_is_an_applied_replay(proxy, namespace, direct):
    work = Workload("async", random.Random())

    async def go() -> int:
        async with sessionstore.aio.connect(proxy.url, namespace, timeout=TIMEOUT) as store:
            await store.events.create(SessionHeader(id=SESSION, created_at=T0))
            next_seq = await store.events.append(SESSION, work.batch(0, 2, "a0"))
            for number in range(1, 6):
                proxy.drop_replies("FCALL")
                batch = work.batch(next_seq, number, f"a{number}")
                next_seq = await store.events.append(SESSION, batch)
            return next_seq

    next_seq = asyncio.run(go())
    stored = direct.events.read_from(SESSION, 0)
    figures.record(
        "lost_reply",
        "redis",
        faults=proxy.dropped,
        inputs=5,
        acked_events=next_seq,
        duplicates=max(len(stored) - next_seq, 0),
        lost=max(next_seq - len(stored), 0),
    )
    assert proxy.dropped == 5 and all(applied(r) for r in proxy.dropped_replies)
    assert len(stored) == next_seq == 17
    check_batches(stored)


def _history_versions(server: RedisServer, namespace: str) -> list[bytes]:
    at, _ = keys.history_keys(ValueKey(namespace, *KEY, "backtest"))
    client = redis.Redis(port=server.port)
    try:
        return client.zrange(at, 0, -1)
    finally:
        client.close()


def test_a_lost_reply_to_set_data_is_harmless(server, proxy, store, direct, namespace):
    plain = store.session(*KEY)
    history = store.session(*KEY, history=True)
    plain.set_data({"n": 0}, T0)
    history.set_data({"n": 0}, T0)
    rounds = iterations(normal=10, ci=5, soak=200)
    for n in range(1, rounds + 1):
        proxy.drop_replies(WRITE)
        plain.set_data({"n": n}, T0 + n)
        proxy.drop_replies("FCALL")
        history.set_data({"n": n}, T0 + n)
        assert proxy.pending_drops() == 0
    figures.record("lost_reply", "redis", faults=proxy.dropped, inputs=2 * rounds)
    assert proxy.dropped == 2 * rounds
    assert all(applied(r) for r in proxy.dropped_replies)
    assert direct.session(*KEY).get_data(T0 + rounds) == {"n": rounds}
    assert direct.session(*KEY, history=True).get_data(T0 + rounds) == {"n": rounds}
    assert direct.session(*KEY, history=True).get_data(T0 + 3) == {"n": 3}
    expected = [str(T0 + n).encode() for n in range(rounds + 1)]
    assert _history_versions(server, namespace) == expected


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_a_lost_reply_to_the_swap_of_update_does_not_apply_fn_twice(proxy, store, direct, history):
    session = store.session(*KEY, history=history)
    session.update(lambda v: 0, T0)
    rounds = iterations(normal=5, ci=3, soak=50)
    calls = 0

    def increment(value: int) -> int:
        nonlocal calls
        calls += 1
        return value + 1

    for _ in range(rounds):
        # History: update() reads with history_get (FCALL_RO), then writes with
        # history_set (FCALL), whose reply is lost.
        proxy.drop_replies("FCALL")
        session.update(increment, T0)
    stored = direct.session(*KEY, history=history).get_data(T0)
    figures.record(
        "lost_reply",
        "redis",
        faults=proxy.dropped,
        inputs=rounds,
        duplicates=max(stored - rounds, 0),
    )
    assert stored == rounds, f"{rounds} updates stored {stored}: fn ran {calls} times"


def test_a_lost_reply_to_the_swap_of_an_async_update_does_not_apply_fn_twice(
    proxy, namespace, direct
):
    rounds = iterations(normal=5, ci=3, soak=50)

    async def go() -> None:
        async with sessionstore.aio.connect(proxy.url, namespace, timeout=TIMEOUT) as store:
            session = store.session(*KEY)
            await session.update(lambda v: 0, T0)
            for _ in range(rounds):
                proxy.drop_replies("FCALL")
                await session.update(lambda v: v + 1, T0)

    asyncio.run(go())
    stored = direct.session(*KEY).get_data(T0)
    figures.record(
        "lost_reply",
        "redis",
        faults=proxy.dropped,
        inputs=rounds,
        duplicates=max(stored - rounds, 0),
    )
    assert proxy.dropped == rounds and all(applied(r) for r in proxy.dropped_replies)
    assert stored == rounds


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
@pytest.mark.parametrize("written", [100, None], ids=["set", "clear"])
def test_a_write_between_a_lost_swap_reply_and_its_resend_does_not_make_update_apply_fn_twice(
    proxy, store, direct, history, written
):
    """Found by this suite (fixed in 284d4bf): writes used to forget the swap tokens, so
    the resend answered CONFLICT and update() applied fn again on top of the write."""
    session = store.session(*KEY, history=history)
    session.set_data(5, T0)
    session.update(lambda v: v, T0)
    other = direct.session(*KEY, history=history)
    calls: list[int] = []

    def increment(value: int) -> int:
        calls.append(value)
        return value + 1

    # The swap writes 6 and its reply is lost; before the client resends it, another
    # client's set_data stores ``written``. The update happened (6 was stored, and could
    # be read), then the set_data: ``written`` must stay, fn must not run on it.
    proxy.drop_replies("FCALL", before_close=lambda: other.set_data(written, T0))
    returned = session.update(increment, T0)
    final = other.get_data(T0)
    figures.record("lost_reply", "redis", faults=1, inputs=1, duplicates=int(final != written))
    assert proxy.dropped == 1 and not proxy.hook_errors
    assert final == written, f"fn ran on {calls}: the update was applied twice, ending at {final}"
    assert returned == 6 and calls == [5]


# --- exactly once: a resend never writes over what landed after the first send ----------

HISTORY = pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])


def _count_on(calls: list[Any]) -> Callable[[int], int]:
    def increment(value: int) -> int:
        calls.append(value)
        return value + 1

    return increment


def _bump(value: int | None) -> int:
    return (value or 0) + 1


@HISTORY
@pytest.mark.parametrize("delete", [False, True], ids=["20-swaps", "delete-then-20-swaps"])
def test_an_update_resent_after_20_swaps_and_a_delete_returns_its_result_applied_once(
    proxy, store, direct, history, delete
):
    session = store.session(*KEY, history=history)
    session.set_data(5, T0)
    other = direct.session(*KEY, history=history)
    calls: list[Any] = []

    def meanwhile() -> None:
        if delete:
            other.delete()
        for _ in range(20):
            other.update(_bump, T0)

    # The swap stores 6 and its reply is lost; before the resend, another client makes
    # 20 swaps (after deleting the value): the resend must be recognised as applied.
    proxy.drop_replies("FCALL", before_close=meanwhile)
    returned = session.update(_count_on(calls), T0)
    final = other.get_data(T0)
    expected = 20 if delete else 26
    figures.record("lost_reply", "redis", faults=1, inputs=1, duplicates=int(final != expected))
    assert proxy.dropped == 1 and not proxy.hook_errors
    assert returned == 6 and calls == [5], f"fn ran on {calls}: the update was applied twice"
    assert final == expected


@HISTORY
def test_a_set_data_resent_after_a_newer_acknowledged_one_does_not_overwrite_it(
    proxy, store, direct, history
):
    session = store.session(*KEY, history=history)
    other = direct.session(*KEY, history=history)
    session.set_data("first", T0)
    # set_data("A") is applied and its reply lost; another client's set_data("B") is
    # acknowledged; then the client resends A: B must stay (no A-B-A).
    proxy.drop_replies(WRITE, before_close=lambda: other.set_data("B", T0))
    session.set_data("A", T0)
    final = other.get_data(T0)
    figures.record("lost_reply", "redis", faults=1, inputs=1, duplicates=int(final != "B"))
    assert proxy.dropped == 1 and not proxy.hook_errors
    assert final == "B", "the resent set_data wrote its value over a newer acknowledged one"


@HISTORY
def test_a_delete_resent_after_another_clients_write_keeps_the_new_value(
    proxy, store, direct, history
):
    session = store.session(*KEY, history=history)
    other = direct.session(*KEY, history=history)
    session.set_data("A", T0)
    proxy.drop_replies("FCALL", before_close=lambda: other.set_data("B", T0))
    assert session.delete() is True  # the original outcome, not the resend's
    final = other.get_data(T0)
    figures.record("lost_reply", "redis", faults=1, inputs=1, duplicates=int(final != "B"))
    assert proxy.dropped == 1 and not proxy.hook_errors
    assert final == "B", "the resent delete removed a value written after it"


def test_resends_through_the_async_api_are_applied_once(proxy, namespace, direct):
    other = direct.session(*KEY)
    calls: list[Any] = []

    def meanwhile() -> None:
        other.delete()
        for _ in range(20):
            other.update(_bump, T0)

    async def go() -> tuple[Any, Any, Any]:
        async with sessionstore.aio.connect(proxy.url, namespace, timeout=TIMEOUT) as store:
            session = store.session(*KEY)
            await session.set_data(5, T0)
            proxy.drop_replies("FCALL", before_close=meanwhile)
            updated = await session.update(_count_on(calls), T0)
            after_update = other.get_data(T0)
            proxy.drop_replies(WRITE, before_close=lambda: other.set_data("B", T0))
            await session.set_data("A", T0)
            after_set = other.get_data(T0)
            proxy.drop_replies("FCALL", before_close=lambda: other.set_data("C", T0))
            deleted = await session.delete()
            return updated, after_update, (after_set, deleted)

    updated, after_update, (after_set, deleted) = asyncio.run(go())
    figures.record("lost_reply", "redis", faults=proxy.dropped, inputs=3)
    assert proxy.dropped == 3 and not proxy.hook_errors
    assert updated == 6 and calls == [5] and after_update == 20
    assert after_set == "B"
    assert deleted is True and other.get_data(T0) == "C"


def test_a_swap_sent_twice_with_its_slot_and_number_on_a_cluster_is_applied_once(
    redis_cluster, monkeypatch
):
    """The proxy cannot front a cluster (its nodes announce their own addresses), so the
    resend is made by hand: the same swap, same writer slot and number, same arguments,
    sent again after 20 other swaps and a delete, through the cluster client."""
    from sessionstore.contracts import Stored
    from sessionstore.redis import open_redis, writerslots

    namespace = f"lost-{uuid.uuid4().hex[:10]}"
    key = ValueKey(namespace, *KEY, "backtest")
    mine = open_redis(redis_cluster.url, namespace, timeout=5)
    others = open_redis(redis_cluster.url, namespace, timeout=5)

    def send(slot: str, call: Callable[[], Any]) -> Any:
        same = writerslots.WriterSlots()
        same.free.append([slot, 0])  # the next call takes it as number 1, as its resend
        monkeypatch.setattr(mine.values._ops, "_slots", same)
        try:
            return call()
        finally:
            monkeypatch.undo()

    try:
        mine.values.write(key, b"\x05", T0)
        swap = lambda: mine.values.swap(key, Stored(b"\x05", T0), b"\x06", T0)  # noqa: E731
        assert send("swap-1", swap) is True
        assert others.values.forget(key) is True
        current: Stored | None = None
        for step in range(20):
            assert others.values.swap(key, current, bytes([step]), T0) is True
            current = Stored(bytes([step]), T0)
        assert send("swap-1", swap) is True  # the resend: applied, nothing written
        assert others.values.read(key) == Stored(bytes([19]), T0)
        # A plain write and a delete resent after another client's write.
        write = lambda: mine.values.write(key, b"\x07", T0 + 1)  # noqa: E731
        send("write-1", write)
        others.values.write(key, b"\x08", T0 + 2)
        send("write-1", write)
        assert others.values.read(key) == Stored(b"\x08", T0 + 2)
        assert send("forget-1", lambda: mine.values.forget(key)) is True
        others.values.write(key, b"\x09", T0 + 3)
        assert send("forget-1", lambda: mine.values.forget(key)) is True
        assert others.values.read(key) == Stored(b"\x09", T0 + 3)
    finally:
        mine.close()
        others.close()


# --- indeterminate outcomes ---------------------------------------------------------------


def test_functions_lost_again_while_a_write_is_sent_is_unavailable_not_an_error(namespace):
    """FUNCTION FLUSH in a tight loop (a restart without persistence each time, as the
    client sees it): a write either succeeds or raises StoreUnavailableError saying it may
    have been applied, never the server's plain "Function not found" error."""
    with RedisServer(durable=False) as own:
        flusher = redis.Redis(port=own.port)
        halt = threading.Event()

        def flush() -> None:
            while not halt.is_set():
                flusher.function_flush()

        thread = threading.Thread(target=flush, daemon=True)
        unavailable: list[StoreUnavailableError] = []
        with sessionstore.connect(own.url, namespace, timeout=TIMEOUT) as store:
            session = store.session(*KEY, history=True)
            thread.start()
            try:
                for n in range(iterations(normal=300, ci=150, soak=3000)):
                    try:
                        session.set_data(n, T0)
                    except StoreUnavailableError as exc:
                        unavailable.append(exc)
            finally:
                halt.set()
                thread.join()
                flusher.close()
    figures.record("lost_reply", "redis", faults=len(unavailable), inputs=n + 1)
    assert unavailable, "the functions were never lost twice within one call"
    assert all("may or may not have been applied" in str(exc) for exc in unavailable)


@pytest.mark.parametrize(
    "reply",
    [
        "NOSCRIPT No matching script. Please use EVAL.",
        "ERR Function not found",
        "UNBLOCKED force unblock from blocking operation, instance state changed "
        "(master -> replica?)",
    ],
    ids=["noscript-after-reload", "function-missing-after-reload", "wait-unblocked"],
)
def test_replies_that_leave_a_write_undecided_are_store_unavailable(reply):
    from redis.exceptions import NoScriptError, ResponseError

    from sessionstore.redis.boundary import ErrorBoundary

    error = NoScriptError(reply) if reply.startswith("NOSCRIPT") else ResponseError(reply)
    translated = ErrorBoundary("redis://h:1/0", 1.0).translate(error, "value_swap.lua", "k")
    assert type(translated) is StoreUnavailableError
    assert "may or may not have been applied" in str(translated)
