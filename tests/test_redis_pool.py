"""Under load a store waits for a free connection within its timeout, never fails for
lack of one, and never opens more than ``?max_connections=N`` (real redis-server)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from support.redis_server import RedisServer

import sessionstore
import sessionstore.aio
from sessionstore import InvalidArgumentError, SessionEvent, SessionHeader
from sessionstore.redis.options import DEFAULT_MAX_CONNECTIONS, parse_options

T0 = 1_718_000_000_000
LIMIT = 8


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=False) as own:
        yield own


class Peak:
    """The most clients the server held at once (sampled by CLIENT LIST, admin included),
    and how many connections it accepted, while the block runs."""

    def __init__(self, port: int) -> None:
        self.admin = redis.Redis(port=port)
        self.peak = 0
        self.accepted = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, len(self.admin.client_list()) - 1)
            self._stop.wait(0.005)

    def __enter__(self) -> Peak:
        self._before = int(self.admin.info("stats")["total_connections_received"])
        self._thread = threading.Thread(target=self._sample)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.accepted = int(self.admin.info("stats")["total_connections_received"]) - self._before
        self.admin.close()


def work(store: sessionstore.Store, index: int) -> None:
    session = store.session(f"S{index}", "s", "e", "1h")
    session.set_data(index, T0)
    assert session.get_data(T0) == index
    store.events.create(SessionHeader(id=f"w-{index}"))
    store.events.append(f"w-{index}", [SessionEvent(seq=0, type="note", time=T0)])


def test_300_threads_share_one_store_within_max_connections(server):
    url = f"{server.url}?durability=none&max_connections={LIMIT}"
    errors: list[BaseException] = []
    with sessionstore.connect(url, f"p-{uuid.uuid4().hex[:8]}") as store, Peak(server.port) as seen:
        start = threading.Barrier(300)

        def run(index: int) -> None:
            start.wait()
            try:
                work(store, index)
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(300)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(store.events.list()) == 300
    assert errors == []
    assert seen.accepted <= LIMIT and seen.peak <= LIMIT


def test_1000_coroutines_share_one_async_store_within_max_connections(server):
    url = f"{server.url}?durability=none&max_connections={LIMIT}"

    async def go() -> list[BaseException | None]:
        async with sessionstore.aio.connect(url, f"p-{uuid.uuid4().hex[:8]}") as store:

            async def one(index: int) -> None:
                session = store.session(f"S{index}", "s", "e", "1h")
                await session.set_data(index, T0)
                assert await session.get_data(T0) == index
                await store.events.create(SessionHeader(id=f"w-{index}"))
                await store.events.append(f"w-{index}", [SessionEvent(seq=0, type="note", time=T0)])

            results = await asyncio.gather(*(one(i) for i in range(1000)), return_exceptions=True)
            assert len(await store.events.list()) == 1000
            return list(results)

    with Peak(server.port) as seen:
        results = asyncio.run(go())
    assert [r for r in results if r is not None] == []
    assert seen.accepted <= LIMIT and seen.peak <= LIMIT


def test_a_call_waits_at_most_the_timeout_for_a_free_connection(server):
    """Every connection held (by blocking reads): the next call fails after the timeout,
    as StoreUnavailableError, instead of at once."""
    import time

    url = f"{server.url}?durability=none&max_connections=1"
    with sessionstore.connect(url, "p-wait", timeout=0.5) as store:
        store.events.create(SessionHeader(id="held"))
        store.events.append("held", [SessionEvent(seq=0, type="note", time=T0)])
        holder = threading.Thread(target=lambda: next(iter(store.events.follow("held", 1)), None))
        holder.start()
        time.sleep(0.1)
        started = time.monotonic()
        with pytest.raises(sessionstore.StoreUnavailableError):
            store.session("X", "s", "e", "1h").get_data(T0)
        assert 0.4 < time.monotonic() - started < 3
        with sessionstore.connect(server.url + "?durability=none", "p-wait") as other:
            other.events.append("held", [SessionEvent(seq=1, type="note", time=T0)])
        holder.join(5)  # the follower got its event and gave the connection back
        assert store.session("X", "s", "e", "1h").get_data(T0) is None


def test_max_connections_is_read_from_the_url_and_checked():
    assert parse_options("redis://h:1/0", None, None).max_connections == DEFAULT_MAX_CONNECTIONS
    options = parse_options("redis://h:1/0?max_connections=3&db=0", None, None)
    assert options.max_connections == 3 and "max_connections" not in options.url
    for bad in ("0", "-1", "x", "2.5", ""):
        with pytest.raises(InvalidArgumentError, match="max_connections"):
            parse_options(f"redis://h:1/0?max_connections={bad}", None, None)


def test_an_unknown_url_parameter_is_refused_with_a_suggestion():
    with pytest.raises(InvalidArgumentError) as caught:
        parse_options("redis://u:pw@h:1/0?durabilty=none", None, None)
    assert "durabilty" in str(caught.value) and "?durability=" in str(caught.value)
    assert "pw" not in str(caught.value)
    for known in (
        "ssl_ca_certs=/ca.crt&ssl_certfile=/c.crt&ssl_keyfile=/c.key&ssl_cert_reqs=required",
        "protocol=2&socket_timeout=1&client_name=x&password=p&health_check_interval=3",
    ):
        parse_options(f"rediss://h:1/0?{known}", None, None)


def test_a_cluster_node_pool_takes_a_connection_back_once(redis_server):
    """redis-py releases a connection a second time after an ASK to a node it does not
    know yet; a plain blocking pool then hands that one connection to two callers."""
    import redis

    from sessionstore.redis.client import ClusterNodePool

    def twice_released(pool_class: type) -> tuple[object, object]:
        pool = pool_class.from_url(redis_server.url, max_connections=3, timeout=1)
        first, other = pool.get_connection(), pool.get_connection()
        pool.release(first)
        pool.release(first)  # the stale second release
        shared = pool.get_connection(), pool.get_connection()
        pool.release(other)
        pool.disconnect()
        return shared

    one, two = twice_released(redis.BlockingConnectionPool)
    assert one is two  # the defect the cluster pool guards against
    one, two = twice_released(ClusterNodePool)
    assert one is not two
