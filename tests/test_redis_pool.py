"""Under load a store waits for a free connection within its timeout, never fails for
lack of one, and never opens more than ``?max_connections=N`` (real redis-server)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from support.redis_server import RedisServer

import sessionstore
import sessionstore.aio
from sessionstore import InvalidArgumentError, SessionEvent, SessionHeader
from sessionstore.fairwait import FairQueue
from sessionstore.redis.compat import FairBlockingPool
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


def test_coroutines_cancelled_midway_leave_every_later_call_its_connection(server):
    """Calls cancelled at random points (while waiting for a place, sending, reading)
    give their connection back, in the background if need be: the 300 calls after them
    all run, on at most ``max_connections`` connections at once."""
    url = f"{server.url}?durability=none&max_connections=2"

    async def go() -> list[BaseException | None]:
        async with sessionstore.aio.connect(url, f"c-{uuid.uuid4().hex[:8]}") as store:
            session = store.session("S", "s", "e", "1h")

            async def call(index: int) -> None:
                await session.set_data(index, T0 + index)
                await session.get_data(T0 + index)

            for round_ in range(20):
                tasks = [asyncio.create_task(call(i)) for i in range(40)]
                await asyncio.sleep(0.0005 * (round_ % 5))
                for task in tasks[::2]:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            after = await asyncio.gather(*(call(i) for i in range(300)), return_exceptions=True)
            return list(after)

    with Peak(server.port) as seen:
        results = asyncio.run(go())
    assert [r for r in results if r is not None] == []
    assert seen.peak <= 2


def held_pool(store: sessionstore.Store) -> Any:
    """The connection pool of a store on a single server (it connects on first use)."""
    store.session("warm", "s", "e", "1h").get_data(T0)
    return store._backends.values._handle.get().connection_pool


def test_a_call_waits_at_most_the_timeout_for_a_free_connection(server):
    """Every connection held: the next call fails after the timeout, as
    StoreUnavailableError, instead of at once; once one is given back calls go on."""
    import time

    url = f"{server.url}?durability=none&max_connections=1"
    with sessionstore.connect(url, "p-wait", timeout=0.5) as store:
        pool = held_pool(store)
        held = pool.get_connection()
        started = time.monotonic()
        with pytest.raises(sessionstore.StoreUnavailableError):
            store.session("X", "s", "e", "1h").get_data(T0)
        assert time.monotonic() - started >= 0.5
        pool.release(held)
        assert store.session("X", "s", "e", "1h").get_data(T0) is None


def line_up(queue: FairQueue, count: int, take: Callable[[int], None]) -> list[threading.Thread]:
    """Start ``count`` threads running ``take(index)``, each once the one before waits in
    ``queue``: they wait in index order."""
    threads = []
    for index in range(count):
        thread = threading.Thread(target=take, args=(index,))
        thread.start()
        threads.append(thread)
        while queue.waiting() < index + 1:
            time.sleep(0.001)
    return threads


def test_waiting_callers_are_served_in_arrival_order_before_a_newcomer(server):
    """A pool of 2 connections, both held; 50 threads line up for one. Connections given
    back go to them in the order they came, and a caller that asks after them (the one
    that just gave a connection back) is served after every one of them."""
    pool = FairBlockingPool.from_url(server.url, max_connections=2, timeout=30)
    first, second = pool.get_connection(), pool.get_connection()
    served: list[int] = []

    def take(index: int) -> None:
        connection = pool.get_connection()
        served.append(index)
        pool.release(connection)

    threads = line_up(pool.pool, 50, take)
    pool.release(first)
    again = pool.get_connection()  # the newcomer
    assert served == list(range(50))
    pool.release(again)
    pool.release(second)
    for thread in threads:
        thread.join()
    pool.disconnect()


def test_waiting_coroutines_of_two_loops_are_served_in_arrival_order():
    """One FairQueue, one token; coroutines of two event loops (two threads) line up
    alternately and are handed the token in that order, each giving it back."""
    line = FairQueue()
    served: list[int] = []
    loops = [asyncio.new_event_loop() for _ in range(2)]
    runners = [threading.Thread(target=loop.run_forever) for loop in loops]
    for runner in runners:
        runner.start()

    async def take(index: int) -> None:
        await line.aget()
        served.append(index)
        line.put_nowait(None)

    futures = []
    for index in range(40):
        futures.append(asyncio.run_coroutine_threadsafe(take(index), loops[index % 2]))
        while line.waiting() < index + 1:
            time.sleep(0.001)
    line.put_nowait(None)
    for future in futures:
        future.result(timeout=30)
    assert served == list(range(40))
    for loop, runner in zip(loops, runners, strict=True):
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()


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

    from sessionstore.redis.compat import ClusterNodePool

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


# --- any thread, any event loop -----------------------------------------------------------


@pytest.fixture(params=["redis", "cluster"])
def any_redis(request: pytest.FixtureRequest) -> str:
    """The URL of a single server, and of a Redis Cluster."""
    if request.param == "cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    return str(request.getfixturevalue("redis_server").url)


def bump(value: Any) -> int:
    return (value or 0) + 1


def test_one_async_store_serves_ten_threads_each_with_its_own_loop(any_redis):
    """Every update of ten threads, each running its own event loop on one store, lands
    once; then one loop after another (asyncio.run twice) goes on with the same store."""
    store = sessionstore.aio.connect(f"{any_redis}?durability=none", f"p-{uuid.uuid4().hex[:8]}")
    counter = store.session("N", "s", "e", "1h")
    errors: list[BaseException] = []

    def run(index: int) -> None:
        async def count() -> None:
            for _ in range(20):
                await counter.update(bump, T0)

        try:
            asyncio.run(count())
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and not any(thread.is_alive() for thread in threads)
    assert asyncio.run(counter.update(bump, T0)) == 201
    assert asyncio.run(counter.get_data(T0)) == 201
    asyncio.run(store.close())


def named_clients(admin: redis.Redis, name: str) -> int:
    return sum(1 for client in admin.client_list() if client["name"] == name)


def wait_for_clients(admin: redis.Redis, name: str, at_most: int) -> int:
    """How many connections named ``name`` the server holds, once at most ``at_most``
    (the server sees a closed socket a moment later), or after five seconds."""
    deadline = time.monotonic() + 5
    while (held := named_clients(admin, name)) > at_most and time.monotonic() < deadline:
        time.sleep(0.01)
    return held


def test_the_connections_of_a_closed_loop_are_closed(server):
    """Five loops one after another, each opening up to four connections: the server
    never keeps more than one loop's, and none once the store is closed."""
    name = f"loops-{uuid.uuid4().hex[:8]}"
    url = f"{server.url}?durability=none&max_connections=4&client_name={name}"
    store = sessionstore.aio.connect(url, f"p-{uuid.uuid4().hex[:8]}")
    admin = redis.Redis(port=server.port)

    async def work() -> None:
        sessions = [store.session(f"S{i}", "s", "e", "1h") for i in range(8)]
        await asyncio.gather(*(s.set_data(i, T0) for i, s in enumerate(sessions)))

    for _ in range(5):
        asyncio.run(work())
        assert wait_for_clients(admin, name, 4) <= 4
    assert named_clients(admin, name) >= 1  # the last loop's, until the store closes
    asyncio.run(store.close())
    assert wait_for_clients(admin, name, 0) == 0
    admin.close()


def test_a_forked_child_gets_every_place_of_an_async_store(server):
    """Calls in flight in the parent when it forks (here every place of the store taken)
    hold nothing in the child: its calls run."""
    url = f"{server.url}?durability=none&max_connections=2"
    store = sessionstore.aio.connect(url, f"p-{uuid.uuid4().hex[:8]}", timeout=1)
    counter = store.session("N", "s", "e", "1h")
    assert asyncio.run(counter.update(bump, T0)) == 1
    places = store._async.values._handle._slots
    taken = [places.get(timeout=1) for _ in range(2)]
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            code = 0 if asyncio.run(counter.update(bump, T0)) == 2 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for place in taken:
        places.put_nowait(place)
    assert asyncio.run(counter.update(bump, T0)) == 3
    asyncio.run(store.close())


# --- sustained load (SESSIONSTORE_SOAK=1): every call succeeds on the default pool -------

SOAK = bool(os.environ.get("SESSIONSTORE_SOAK"))
soak = pytest.mark.skipif(not SOAK, reason="sustained load: set SESSIONSTORE_SOAK=1")


class TimedQueue(FairQueue):
    """A FairQueue that records how long each caller waited for its item."""

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize)
        self.waits: list[float] = []

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        started = time.perf_counter()
        try:
            return super().get(block, timeout)
        finally:
            self.waits.append(time.perf_counter() - started)

    async def aget(self, timeout: float | None = None) -> Any:
        started = time.perf_counter()
        try:
            return await super().aget(timeout)
        finally:
            self.waits.append(time.perf_counter() - started)


def wait_figures(waits: list[float]) -> str:
    ordered = sorted(waits)
    p50, p99 = (ordered[int(len(ordered) * q)] for q in (0.5, 0.99))
    return f"wait p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms"


def step(index: int, k: int) -> tuple[str, Any]:
    """The k-th operation of caller ``index``: a write, a read, an update, an append."""
    return ("set", "get", "update", "append")[k % 4], (f"S{index % 200}", k)


@soak
@pytest.mark.slow
def test_soak_1000_threads_x_25_operations_on_one_store(server, capsys):
    threads, operations = 1000, 25
    namespace = f"p-{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []
    with sessionstore.connect(f"{server.url}?durability=none", namespace) as store:
        pool = held_pool(store)
        pool.queue_class = TimedQueue
        pool.reset()
        start = threading.Barrier(threads)

        def run(index: int) -> None:
            log = f"w-{index}"
            store.events.create(SessionHeader(id=log))
            session = store.session(f"S{index % 200}", "s", "e", "1h")
            start.wait()
            appended = 0
            for k in range(operations):
                try:
                    kind, _ = step(index, k)
                    if kind == "set":
                        session.set_data({"by": index, "k": k}, T0 + k)
                    elif kind == "get":
                        session.get_data(T0 + k)
                    elif kind == "update":
                        session.update(lambda v: {**(v or {}), "n": (v or {}).get("n", 0) + 1}, T0)
                    else:
                        event = SessionEvent(seq=appended, type="note", time=T0)
                        store.events.append(log, [event])
                        appended += 1
                except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                    errors.append(exc)

        with Peak(server.port) as seen:
            workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        waits = pool.pool.waits
    assert errors == []
    assert seen.peak <= DEFAULT_MAX_CONNECTIONS and seen.accepted <= DEFAULT_MAX_CONNECTIONS
    with capsys.disabled():
        print(f"\n{threads} threads x {operations}: {wait_figures(waits)}, peak {seen.peak}")


@soak
@pytest.mark.slow
def test_soak_5000_coroutines_x_5_operations_on_one_async_store(server, capsys):
    coroutines, operations = 5000, 5
    namespace = f"p-{uuid.uuid4().hex[:8]}"

    async def go() -> tuple[list[Any], list[float]]:
        async with sessionstore.aio.connect(f"{server.url}?durability=none", namespace) as store:
            handle = store._async.values._handle
            handle._slots = TimedQueue()
            for _ in range(DEFAULT_MAX_CONNECTIONS):
                handle._slots.put_nowait(None)

            async def one(index: int) -> None:
                log = f"w-{index}"
                await store.events.create(SessionHeader(id=log))
                session = store.session(f"S{index % 200}", "s", "e", "1h")
                appended = 0
                for k in range(operations):
                    kind, _ = step(index, k)
                    if kind == "set":
                        await session.set_data({"by": index, "k": k}, T0 + k)
                    elif kind == "get":
                        await session.get_data(T0 + k)
                    elif kind == "update":
                        await session.update(
                            lambda v: {**(v or {}), "n": (v or {}).get("n", 0) + 1}, T0
                        )
                    else:
                        event = SessionEvent(seq=appended, type="note", time=T0)
                        await store.events.append(log, [event])
                        appended += 1

            results = await asyncio.gather(
                *(one(i) for i in range(coroutines)), return_exceptions=True
            )
            return [r for r in results if r is not None], handle._slots.waits

    with Peak(server.port) as seen:
        errors, waits = asyncio.run(go())
    assert errors == []
    assert seen.peak <= DEFAULT_MAX_CONNECTIONS and seen.accepted <= DEFAULT_MAX_CONNECTIONS
    with capsys.disabled():
        print(f"\n{coroutines} coroutines x {operations}: {wait_figures(waits)}, peak {seen.peak}")
