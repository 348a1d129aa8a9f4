"""Lease renewals of many open writers: the drain queues each writer once however often
it asks, the writers with the same lease come due together, and the sync drain renews
the leases due together in one call (on Redis one round trip), fencing off a writer
whose lease was taken over as its own renewal would."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
import redis
from conftest import url_for
from support.redis_server import RedisServer

import sessionstore
from sessionstore import SessionBusyError, SessionHeader, aio, keys
from sessionstore.drain import AsyncDrain, Drain
from sessionstore.leases import Lease
from sessionstore.writer_buffer import BATCH_MAX as WRITER_BATCH
from sessionstore.writer_buffer import WriterBuffer

#: Seconds to wait for something that must happen.
PATIENCE = 30.0
#: A short lease (seconds): renewed about every 0.15 s.
LEASE = 0.6


class Fake:
    """A writer the drain serves: it counts its serves and wants nothing more."""

    batches: list[list[Fake]] = []

    def __init__(self, renewal_due: bool = False) -> None:
        self.served = 0
        self.renewal = renewal_due
        self.done = threading.Event()

    def _serve(self) -> float | None:
        self.served += 1
        self.done.set()
        return None

    def _renewal_due(self, now: float) -> bool:
        return self.renewal

    @staticmethod
    def _serve_together(writers: list[Fake]) -> list[float | None]:
        Fake.batches.append(list(writers))
        return [writer._serve() for writer in writers]


def test_a_writer_is_queued_once_however_often_it_asks():
    drain = Drain()
    writer = Fake()
    later = time.monotonic() + 3600
    for n in range(100):  # later each time: the sooner entry stands
        drain.schedule(writer, later + n)
    assert len(drain._queue) == 1 and drain._queue.head() == later
    drain.schedule(writer, time.monotonic())  # sooner: moved there
    assert writer.done.wait(PATIENCE)
    assert writer.served == 1
    with drain._cond:
        assert drain._queue.pop(later + 3600) is None, "the entry it moved from is dropped"
    drain.close()


def test_the_leases_due_together_are_renewed_in_one_call_and_the_rest_served_alone():
    Fake.batches = []
    drain = Drain()
    renewing = [Fake(renewal_due=True) for _ in range(50)]
    appending = Fake()
    due = time.monotonic() + 0.5
    for writer in [*renewing[:25], appending, *renewing[25:]]:
        drain.schedule(writer, due)
    for writer in [*renewing, appending]:
        assert writer.done.wait(PATIENCE)
    assert [len(batch) for batch in Fake.batches] == [50]
    assert set(map(id, Fake.batches[0])) == set(map(id, renewing))
    assert [writer.served for writer in [*renewing, appending]] == [1] * 51
    drain.close()


class AsyncFake(Fake):
    """:class:`Fake` for the async drain, made on the loop that serves it."""

    def __init__(self, renewal_due: bool = False) -> None:
        super().__init__(renewal_due)
        self._loop = asyncio.get_running_loop()

    def _served_on(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def _serve(self) -> float | None:  # type: ignore[override]
        return Fake._serve(self)


def test_the_async_drain_queues_a_writer_once_and_serves_each_in_a_task_of_its_own():
    async def scenario() -> None:
        Fake.batches = []
        drain = AsyncDrain()
        once = AsyncFake()
        later = time.monotonic() + 3600
        for n in range(100):
            drain.schedule(once, later + n)
        (queue,) = [loop_drain._queue for loop_drain in drain._loops.values()]
        assert len(queue) == 1
        renewing = [AsyncFake(renewal_due=True) for _ in range(30)]
        appending = AsyncFake()
        due = time.monotonic() + 0.2
        for writer in [*renewing[:10], appending, *renewing[10:], once]:
            drain.schedule(writer, due)  # ``once`` moved sooner
        deadline = time.monotonic() + PATIENCE
        while not all(w.done.is_set() for w in [*renewing, appending, once]):
            assert time.monotonic() < deadline, "not every writer was served"
            await asyncio.sleep(0.01)
        assert Fake.batches == [], "the async drain serves every writer alone"
        assert [w.served for w in [*renewing, appending, once]] == [1] * 32
        assert queue.pop(later + 3600) is None, "the entry it moved from is dropped"
        await drain.close()

    asyncio.run(scenario())


def test_the_writers_with_one_lease_come_due_together():
    lease_ms = 30_000
    buffers = [WriterBuffer("s", 0, 0, lease_ms=lease_ms, renews=True) for _ in range(20)]
    for n, buffer in enumerate(buffers):
        buffer.renewed_at = 1000.0 + n * lease_ms / 30000 / 40  # within one thirtieth
    dues = {buffer.next_due() for buffer in buffers}
    assert len(dues) <= 2
    for buffer in buffers:
        due = buffer.next_due()
        assert due is not None
        assert buffer.renewed_at + lease_ms * 0.3 / 1000 <= due
        assert due <= buffer.renewed_at + lease_ms / 3000
        assert not buffer.renewal_due(due - 0.001) and buffer.renewal_due(due)


def _writers(store: Any, count: int, prefix: str) -> list[Any]:
    return [
        store.events.writer(SessionHeader(id=f"{prefix}{n}"), lease=LEASE) for n in range(count)
    ]


def _spy(backend: Any) -> list[int]:
    """The number of leases of each ``renew_leases`` call of ``backend`` from now on."""
    sizes: list[int] = []
    renew = backend.renew_leases

    def spied(leases: list[tuple[str, Lease, int]]) -> list[bool]:
        sizes.append(len(leases))
        return renew(leases)

    backend.renew_leases = spied
    return sizes


def _wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_redis_writers_keep_their_leases_renewed_together(redis_server, namespace):
    with (
        sessionstore.connect(redis_server.url, namespace) as store,
        sessionstore.connect(redis_server.url, namespace) as other,
    ):
        sizes = _spy(store.events._backend)
        writers = _writers(store, 30, "r")
        _wait_for(lambda: any(size > 1 for size in sizes), "no leases renewed together")
        time.sleep(LEASE * 2)  # every lease would have expired but for its renewals
        for n in range(30):
            with pytest.raises(SessionBusyError):
                other.events.writer(SessionHeader(id=f"r{n}"), lease=LEASE)
        for n, writer in enumerate(writers):
            writer.emit("note", {"n": n})
        for writer in writers:
            writer.close()
        assert [store.events.read_from(f"r{n}", 0)[0].data for n in range(30)] == [
            {"n": n} for n in range(30)
        ]


def test_a_lease_taken_over_is_found_by_a_renewal_together(redis_server, namespace):
    admin = redis.Redis(port=redis_server.port)
    with sessionstore.connect(redis_server.url, namespace) as store:
        sizes = _spy(store.events._backend)
        writers = _writers(store, 5, "f")
        admin.hset(keys.log_lease_key(namespace, "f2"), "owner", "another-writer")
        _wait_for(lambda: writers[2]._buffer.fenced, "the lease taken over was not found")
        _wait_for(lambda: any(size > 1 for size in sizes), "no leases renewed together")
        assert [writer._buffer.fenced for writer in writers] == [False, False, True, False, False]
        for writer in writers:
            writer.emit("note")
        with pytest.raises(SessionBusyError):
            writers[2].flush()
        for n in (0, 1, 3, 4):
            writers[n].close()
            assert len(store.events.read_from(f"f{n}", 0)) == 1
    admin.close()


def test_async_redis_writers_keep_their_leases(redis_server, namespace):
    async def scenario(other: Any) -> None:
        async with aio.connect(redis_server.url, namespace) as store:
            writers = [
                await store.events.writer(SessionHeader(id=f"a{n}"), lease=LEASE) for n in range(30)
            ]
            await asyncio.sleep(LEASE * 2)  # every lease would have expired but for renewals
            for n in range(30):
                with pytest.raises(SessionBusyError):
                    await asyncio.to_thread(
                        other.events.writer, SessionHeader(id=f"a{n}"), lease=LEASE
                    )
            for n, writer in enumerate(writers):
                writer.emit("note", {"n": n})
            for writer in writers:
                await writer.close()
            assert [(await store.events.read_from(f"a{n}", 0))[0].data for n in range(30)] == [
                {"n": n} for n in range(30)
            ]

    with sessionstore.connect(redis_server.url, namespace) as other:
        asyncio.run(scenario(other))


def test_a_writer_busy_flushing_holds_no_other_writer_s_renewal_up(redis_server, namespace):
    """A writer whose drain lock is held (a long flush) is left to be served alone: the
    leases due with it are renewed meanwhile."""
    with (
        sessionstore.connect(redis_server.url, namespace) as store,
        sessionstore.connect(redis_server.url, namespace) as other,
    ):
        sizes = _spy(store.events._backend)
        writers = _writers(store, 20, "b")
        busy = writers[0]._drain_lock
        busy.acquire()
        try:
            _wait_for(lambda: any(size > 1 for size in sizes), "no leases renewed together")
            time.sleep(LEASE * 2)  # every lease would have expired but for its renewals
            for n in range(1, 20):
                with pytest.raises(SessionBusyError):
                    other.events.writer(SessionHeader(id=f"b{n}"), lease=LEASE)
        finally:
            busy.release()
        for writer in writers[1:]:
            writer.close()


def test_when_renewing_together_fails_each_writer_renews_alone(redis_server, namespace):
    with (
        sessionstore.connect(redis_server.url, namespace) as store,
        sessionstore.connect(redis_server.url, namespace) as other,
    ):
        calls: list[int] = []

        def failing(leases: list[tuple[str, Lease, int]]) -> list[bool]:
            calls.append(len(leases))
            raise ConnectionError("the renewal together is lost")

        store.events._backend.renew_leases = failing
        writers = _writers(store, 20, "x")
        _wait_for(lambda: len(calls) > 1, "no renewal together was tried")
        time.sleep(LEASE * 2)  # every lease would have expired but for its renewals
        for n in range(20):
            with pytest.raises(SessionBusyError):
                other.events.writer(SessionHeader(id=f"x{n}"), lease=LEASE)
        assert not any(writer._buffer.fenced for writer in writers)
        for writer in writers:
            writer.close()


def test_renewing_leases_together_loads_the_library_when_the_server_lacks_it():
    owners = [uuid.uuid4().hex for _ in range(3)]
    with (
        RedisServer() as own,
        sessionstore.connect(own.url, "ns") as store,
    ):
        backend = store.events._backend
        admin = redis.Redis(port=own.port)
        leases = [
            (f"s{n}", Lease(owner, backend.acquire_lease(f"s{n}", owner, 5000)), 5000)
            for n, owner in enumerate(owners)
        ]
        admin.function_flush()
        assert backend.renew_leases(leases) == [True, True, True]
        admin.function_flush()
        leases[1] = ("s1", Lease("another-writer", leases[1][1].epoch), 5000)
        assert backend.renew_leases(leases) == [True, False, True]
        assert admin.hget(keys.log_lease_key("ns", "s1"), "owner") == owners[1].encode()
        assert 0 < admin.pttl(keys.log_lease_key("ns", "s0")) <= 5000
        admin.close()


@pytest.mark.parametrize("where", ["redis_server", "redis_cluster"])
def test_leases_renewed_together_are_each_renewed_unless_another_holds_it(
    where, namespace, request
):
    url = request.getfixturevalue(where).url
    with (
        sessionstore.connect(url, namespace) as store,
        sessionstore.connect(url, namespace) as rival,
    ):
        backend = store.events._backend
        assert rival.events._backend.acquire_lease("s1", "rival", 60_000)
        epochs = [backend.acquire_lease(f"s{n}", f"owner-{n}", 60_000) for n in range(6)]
        assert [bool(epoch) for epoch in epochs] == [True, False, True, True, True, True]
        leases = [(f"s{n}", Lease(f"owner-{n}", epochs[n]), 60_000) for n in range(6)]
        assert backend.renew_leases(leases) == [True, False, True, True, True, True]
        assert backend.renew_leases(leases) == [True, False, True, True, True, True]
        assert [backend.lease_busy(f"s{n}", "rival") for n in range(6)] == [
            True, False, True, True, True, True
        ]  # fmt: skip
        assert backend.renew_leases([]) == []


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_writers_held_by_long_flushes_never_keep_the_drain_from_renewing_a_lease(
    backend, request, tmp_path
):
    """More writers than drain threads, each held by a flush of another thread (here: its
    drain lock held, as a flush appending a long backlog holds it), all due: the drain
    serves around them, so an idle writer's short lease is renewed and never taken."""
    url, ns = url_for(backend, request, tmp_path), f"busy-{uuid.uuid4().hex[:8]}"
    with sessionstore.connect(url, ns) as store, sessionstore.connect(url, ns) as other:
        held = [store.events.writer(SessionHeader(id=f"held-{n}"), window=0.001) for n in range(6)]
        idle = store.events.writer(SessionHeader(id="idle"), lease=1.0)
        idle.emit("note")
        idle.flush()
        for writer in held:
            writer._drain_lock.acquire()  # a flush under way, for the next 2.5 s
            writer.emit("note")  # due at once: the drain comes to it
        try:
            time.sleep(2.5)  # the idle writer's lease is renewed between 0.3 and 0.33 s
            with pytest.raises(SessionBusyError):
                other.events.writer(SessionHeader(id="idle"), lease=1.0)
        finally:
            for writer in held:
                writer._drain_lock.release()
        idle.emit("after")
        idle.close()
        for writer in held:
            writer.close()
        assert [e.type for e in store.events.load("idle").events] == ["note", "after"]
        assert all(len(store.events.load(f"held-{n}").events) == 1 for n in range(6))


@pytest.mark.parametrize(("backend", "api"), [("sqlite", "sync"), ("redis", "async")])
def test_a_backlog_flushed_for_longer_than_the_lease_keeps_it(backend, api, request, tmp_path):
    """A flush appending batch after batch (each well within the lease, all of them
    longer than it) renews the lease between batches: the drain cannot meanwhile, as
    the flush holds the writer's drain lock. No other writer takes the session over."""
    url, ns = url_for(backend, request, tmp_path), f"backlog-{uuid.uuid4().hex[:8]}"
    lease, delay, batches = 2.0, 0.4, 7  # the flush takes 1.4 leases; a batch 0.2 of one
    with sessionstore.connect(url, ns) as other:

        def slowed(backend_object: Any) -> None:
            append = backend_object.append

            def slow(*args: Any, **kwargs: Any) -> Any:
                time.sleep(delay)  # a slow link
                return append(*args, **kwargs)

            async def aslow(*args: Any, **kwargs: Any) -> Any:
                await asyncio.sleep(delay)
                return await append(*args, **kwargs)

            backend_object.append = aslow if api == "async" else slow

        taken: list[int] = []
        stop = threading.Event()

        def contend() -> None:
            while not stop.is_set():
                try:
                    other.events.writer(SessionHeader(id="s"), lease=30).close()
                    taken.append(1)
                    return
                except SessionBusyError:
                    time.sleep(0.02)

        def emit_all(writer: Any) -> None:
            for n in range(batches * WRITER_BATCH):
                writer.emit("note", {"n": n})

        contender = threading.Thread(target=contend)
        if api == "sync":
            with sessionstore.connect(url, ns) as store:
                writer = store.events.writer(SessionHeader(id="s"), lease=lease)
                slowed(store.events._backend)
                emit_all(writer)
                contender.start()
                try:
                    writer.flush()
                finally:
                    stop.set()
                    contender.join()
                writer.close()
        else:

            async def scenario() -> None:
                async with aio.connect(url, ns) as store:
                    writer = await store.events.writer(SessionHeader(id="s"), lease=lease)
                    slowed(store.events._backend)
                    emit_all(writer)
                    contender.start()
                    try:
                        await writer.flush()
                    finally:
                        stop.set()
                        await asyncio.to_thread(contender.join)
                    await writer.close()

            asyncio.run(scenario())
        assert not taken, "another writer took the lease during the flush"
        assert len(other.events.read_from("s", 0)) == batches * WRITER_BATCH
