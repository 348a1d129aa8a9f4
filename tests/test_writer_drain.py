"""The writers of one store share one background drain: a bounded number of threads
(sync) whatever the number of writers, and an event emitted while a slow append is in
flight is written right after it. A background append that was applied but raised (its
outcome unknown) is recognised as written, sync and async (against redis-server:
``tests/faults/test_writer_outcome_unknown.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import time
import uuid
import weakref
from typing import Any

import pytest
from conftest import url_for

import sessionstore
from sessionstore import SessionHeader, SessionNotFoundError, aio
from sessionstore.drain import DRAIN_THREADS


def test_a_thousand_writers_run_a_bounded_number_of_threads():
    before = threading.active_count()
    with sessionstore.connect("memory://", "ns") as store:
        writers = [
            store.events.writer(SessionHeader(id=f"w-{n}"), window=0.01) for n in range(1000)
        ]
        for n, writer in enumerate(writers):
            writer.emit("note", {"n": n})
        for writer in writers:
            writer.flush()
        # A drain thread runs until the store closes: every one ever started is counted.
        assert 1 <= threading.active_count() - before <= DRAIN_THREADS
        assert [len(store.events.read_from(f"w-{n}", 0)) for n in range(1000)] == [1] * 1000
        for writer in writers:
            writer.close()


class HeldFirstAppend:
    """Holds the first append of ``backend`` (the real one) in flight until
    :meth:`release`; ``entered`` is set once it is."""

    def __init__(self, backend: Any) -> None:
        self.entered = threading.Event()
        self._release = threading.Event()
        append = backend.append
        calls = []

        def held(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                self.entered.set()
                assert self._release.wait(PATIENCE), "the held append was never released"
            return append(*args, **kwargs)

        backend.append = held

    def release(self) -> None:
        self._release.set()


#: Far more than any wait of these tests, so that reaching it fails them.
PATIENCE = 60.0
#: What the writer's window is made once the first append is in flight: an event that
#: waited for its own window would not be written within :data:`PATIENCE`.
LONG_WINDOW = 3600.0


def _stored(store: Any) -> int:
    try:
        return len(store.events.read_from("w", 0))
    except sessionstore.SessionNotFoundError:
        return 0


def test_an_event_emitted_during_a_slow_append_is_written_right_after_it():
    with sessionstore.connect("memory://", "ns") as store:
        writer = store.events.writer(SessionHeader(id="w"), window=0.01)
        held = HeldFirstAppend(store.events._backend)
        writer.emit("note", {"n": 0})
        assert held.entered.wait(PATIENCE), "the first event was never drained"
        writer._buffer.window = LONG_WINDOW
        writer.emit("note", {"n": 1})  # in flight: written right after it, not a window later
        held.release()
        deadline = time.monotonic() + PATIENCE
        while _stored(store) < 2:
            assert time.monotonic() < deadline, "the event waited for its own window"
            time.sleep(0.01)
        writer.close()


def test_an_async_event_emitted_during_a_slow_append_is_written_right_after_it():
    async def scenario() -> None:
        async with aio.connect("memory://", "ns") as store:
            writer = await store.events.writer(SessionHeader(id="w"), window=0.01)
            held = HeldFirstAppend(store.events._backend._target)
            writer.emit("note", {"n": 0})
            assert await asyncio.to_thread(held.entered.wait, PATIENCE)
            writer._buffer.window = LONG_WINDOW
            writer.emit("note", {"n": 1})
            held.release()
            deadline = time.monotonic() + PATIENCE
            while await _astored(store) < 2:
                assert time.monotonic() < deadline, "the event waited for its own window"
                await asyncio.sleep(0.01)
            await writer.close()

    asyncio.run(scenario())


async def _astored(store: Any) -> int:
    try:
        return len(await store.events.read_from("w", 0))
    except sessionstore.SessionNotFoundError:
        return 0


def test_the_async_writers_of_a_store_share_one_drain_task():
    async def scenario() -> int:
        async with aio.connect("memory://", "ns") as store:
            writers = [
                await store.events.writer(SessionHeader(id=f"w-{n}"), window=0.05)
                for n in range(200)
            ]
            for writer in writers:
                writer.emit("note")
            tasks = [
                t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "_LoopDrain._run"
            ]
            for writer in writers:
                await writer.close()
            return len(tasks)

    assert asyncio.run(scenario()) == 1


@pytest.mark.parametrize("backend", ["sqlite", "file", "redis"])
def test_writers_on_the_event_loops_of_many_threads_share_one_async_store(
    backend, request, tmp_path, namespace
):
    """One AsyncStore, four threads each running a loop of its own with a writer of its
    own, flushing while the drain serves: each writer is served on its own loop, every
    event stored in order, no error and no hang."""
    store = aio.connect(url_for(backend, request, tmp_path), namespace)
    failures: list[BaseException] = []

    def run(n: int) -> None:
        async def emitting() -> None:
            header = SessionHeader(id=f"s-{n}")
            async with store.events.writer(header, window=0.001, lease=5.0) as writer:
                for k in range(300):
                    writer.emit("note", {"k": k})
                    if k % 10 == 0:
                        await asyncio.sleep(0.001)
                    if k % 50 == 0:
                        await writer.flush()

        try:
            asyncio.run(emitting())
        except BaseException as exc:  # noqa: BLE001 - asserted below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PATIENCE)
    assert not any(thread.is_alive() for thread in threads), "a writer's loop hung"
    assert not failures, failures

    async def stored() -> list[list[int]]:
        found = [[e.data["k"] for e in await store.events.read_from(f"s-{n}", 0)] for n in range(4)]
        await store.close()
        return found

    assert asyncio.run(stored()) == [list(range(300))] * 4


def test_an_event_emitted_from_another_thread_is_written_on_the_writers_loop():
    async def scenario() -> list[int]:
        async with aio.connect("memory://", "ns") as store:
            writer = await store.events.writer(SessionHeader(id="w"), window=0.01)
            await asyncio.to_thread(writer.emit, "note", {"n": 1})  # no loop in that thread
            deadline = time.monotonic() + PATIENCE
            while await _astored(store) < 1:
                assert time.monotonic() < deadline, "the event was never written"
                await asyncio.sleep(0.01)
            await writer.close()
            return [event.data["n"] for event in await store.events.read_from("w", 0)]

    assert asyncio.run(scenario()) == [1]


def _applied_then_lost(backend: Any) -> list[Any]:
    """Make the first append of ``backend`` (the real one) apply its batch, then raise
    :class:`StoreUnavailableError` as a lost reply does; returns that batch, once sent."""
    append = backend.append
    lost: list[Any] = []

    def lossy(*args: Any, **kwargs: Any) -> Any:
        result = append(*args, **kwargs)
        if not lost:
            lost.append(args[1])
            raise sessionstore.StoreUnavailableError("the reply was lost")
        return result

    backend.append = lossy
    return lost


def _failed(writer: Any) -> bool:
    return writer._buffer.error is not None


def test_an_applied_append_whose_outcome_was_lost_is_recognised_as_written():
    with sessionstore.connect("memory://", "ns") as store:
        writer = store.events.writer(SessionHeader(id="w"), window=0.01)
        lost = _applied_then_lost(store.events._backend)
        emitted = [writer.emit("note", {"n": n}) for n in range(3)]
        deadline = time.monotonic() + PATIENCE
        while not _failed(writer):
            assert time.monotonic() < deadline, "the background append never failed"
            time.sleep(0.01)
        emitted += [writer.emit("note", {"n": n}) for n in range(3, 6)]
        writer.flush()
        writer.close()
        assert lost and store.events.read_from("w", 0) == emitted


def test_an_async_applied_append_whose_outcome_was_lost_is_recognised_as_written():
    async def scenario() -> None:
        async with aio.connect("memory://", "ns") as store:
            writer = await store.events.writer(SessionHeader(id="w"), window=0.01)
            lost = _applied_then_lost(store.events._backend._target)
            emitted = [writer.emit("note", {"n": n}) for n in range(3)]
            deadline = time.monotonic() + PATIENCE
            while not _failed(writer):
                assert time.monotonic() < deadline, "the background append never failed"
                await asyncio.sleep(0.01)
            emitted += [writer.emit("note", {"n": n}) for n in range(3, 6)]
            await writer.flush()
            await writer.close()
            assert lost and await store.events.read_from("w", 0) == emitted

    asyncio.run(scenario())


class InjectedFault(BaseException):
    """What kills a drain thread: no ``Exception``, so no writer catches it."""


def _faulty_appends(backend: Any, faults: int) -> list[int]:
    """Make the first ``faults`` appends of ``backend`` (the real one) raise
    :class:`InjectedFault`; returns the count of faults left."""
    append = backend.append
    left = [faults]

    def faulty(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise InjectedFault("injected")
        return append(*args, **kwargs)

    backend.append = faulty
    return left


def test_drain_threads_that_die_are_replaced_and_reported(caplog):
    with sessionstore.connect("memory://", "ns") as store:
        writer = store.events.writer(SessionHeader(id="w"), window=0.01)
        left = _faulty_appends(store.events._backend, DRAIN_THREADS + 2)
        writer.emit("note", {"n": 0})
        deadline = time.monotonic() + PATIENCE
        while _stored(store) < 1:  # written in the background: nobody flushes
            assert time.monotonic() < deadline, "write-behind stopped for good"
            time.sleep(0.01)
        assert left == [0] and store._drain.threads <= DRAIN_THREADS
        reports = [r for r in caplog.records if "drain thread failed" in r.getMessage()]
        assert len(reports) == DRAIN_THREADS + 2 and "'w'" in reports[0].getMessage()
        assert all(r.name == "sessionstore" and r.exc_info for r in reports)
        writer.close()


def test_an_async_drain_whose_serving_failed_serves_the_writer_again_and_reports_it(caplog):
    async def scenario() -> int:
        async with aio.connect("memory://", "ns") as store:
            writer = await store.events.writer(SessionHeader(id="w"), window=0.01)
            left = _faulty_appends(store.events._backend._target, 3)
            writer.emit("note", {"n": 0})
            deadline = time.monotonic() + PATIENCE
            while await _astored(store) < 1:
                assert time.monotonic() < deadline, "write-behind stopped for good"
                await asyncio.sleep(0.01)
            await writer.close()
            return left[0]

    assert asyncio.run(scenario()) == 0
    reports = [r for r in caplog.records if "failed; it is served again" in r.getMessage()]
    assert len(reports) == 3 and all(r.name == "sessionstore" for r in reports)


def test_a_writer_used_again_in_a_later_event_loop_is_served_there():
    """Opened in one ``asyncio.run``, emitting in the next: the drain serves it on the
    loop running now (its own is closed), without a flush."""
    store = aio.connect("memory://", "ns")

    async def opening() -> Any:
        return await store.events.writer(SessionHeader(id="w"), window=0.01)

    writer = asyncio.run(opening())

    async def emitting() -> int:
        for n in range(5):
            writer.emit("note", {"n": n})
        deadline = time.monotonic() + PATIENCE
        while await _astored(store) < 5:
            assert time.monotonic() < deadline, "the events were never written"
            await asyncio.sleep(0.01)
        await writer.close()
        found = await _astored(store)
        await store.close()
        return found

    assert asyncio.run(emitting()) == 5


def test_the_event_loops_a_store_served_writers_on_are_not_kept():
    store = aio.connect("memory://", "ns")
    loops: list[Any] = []

    async def one(n: int) -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        async with store.events.writer(SessionHeader(id=f"w-{n}"), window=0.001) as writer:
            writer.emit("note")
            await asyncio.sleep(0.005)  # served in the background

    for n in range(20):
        asyncio.run(one(n))
    gc.collect()
    assert [ref for ref in loops if ref() is not None] == []
    assert store._drain._loops == {}
    asyncio.run(store.close())


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_an_async_store_closed_from_another_loop_closes_writers_on_theirs(
    backend, request, tmp_path, namespace
):
    """Writers emitting on the loops of two threads while the store is closed from a
    third loop: each is closed on its own loop (or here, once its loop stopped, as
    these do when their emit is refused): every event emitted is stored, no hang."""
    url = url_for(backend, request, tmp_path)
    store = aio.connect(url, namespace)
    started = [threading.Event(), threading.Event()]
    emitted: dict[int, int] = {}

    def run(n: int) -> None:
        async def emitting() -> None:
            writer = await store.events.writer(SessionHeader(id=f"s-{n}"), window=0.001)
            started[n].set()
            count = 0
            with contextlib.suppress(sessionstore.StoreClosedError):
                while True:
                    writer.emit("note", {"k": count})
                    count += 1
                    await asyncio.sleep(0.0005)
            emitted[n] = count

        asyncio.run(emitting())

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(2)]
    for thread in threads:
        thread.start()
    assert all(event.wait(PATIENCE) for event in started)
    time.sleep(0.2)

    async def closing() -> None:
        await asyncio.wait_for(store.close(), PATIENCE)

    asyncio.run(closing())
    for thread in threads:
        thread.join(PATIENCE)
    assert sorted(emitted) == [0, 1]

    async def stored() -> dict[int, int]:
        async with aio.connect(url, namespace) as again:
            return {n: len(await again.events.read_from(f"s-{n}", 0)) for n in range(2)}

    assert asyncio.run(stored()) == emitted


EXIT_SCRIPT = """
import asyncio, sys
import sessionstore
from sessionstore import SessionHeader, aio

url, api, namespace = sys.argv[1:4]
if api == "sync":
    store = sessionstore.connect(url, namespace)
    writer = store.events.writer(SessionHeader(id="left-open"), window=60)
    for n in range(10):
        writer.emit("note", {"n": n})
else:
    async def main():
        store = aio.connect(url, namespace)
        writer = await store.events.writer(SessionHeader(id="left-open"), window=60)
        for n in range(10):
            writer.emit("note", {"n": n})
    asyncio.run(main())
if sys.argv[4] == "dropped":  # nothing holds the store or its writer any more
    import gc
    store = writer = None
    gc.collect()
print("exiting without closing")
"""


@pytest.mark.parametrize("backend", ["file", "sqlite", "redis"])
@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("held", ["held", "dropped"])
def test_a_process_exiting_with_a_writer_open_stores_or_reports_what_it_queued(
    backend, api, held, request, tmp_path
):
    """At a normal exit, a sync writer left open is closed (what it queued is stored);
    an async one cannot be (no loop runs then): its loss is logged, naming it. Also
    when nothing held the store any more (it was collected)."""
    import subprocess
    import sys

    url, namespace = url_for(backend, request, tmp_path), f"exiting-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, url, api, namespace, held],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with sessionstore.connect(url, namespace) as store:
        try:
            stored = store.events.read_from("left-open", 0)
        except SessionNotFoundError:
            stored = []
    if api == "sync":
        assert [e.data["n"] for e in stored] == list(range(10))
        assert "left open at exit" not in done.stderr
    else:
        assert stored == []
        assert "async writer of session 'left-open' open: its 10 queued events" in done.stderr


def test_the_writers_left_open_at_exit_hold_it_up_for_a_bounded_time(tmp_path):
    """A store that does not answer at exit (its server paused): the writers left open
    are closed at once, and the process ends after at most EXIT_WAIT seconds, saying
    which writers' events may not be stored."""
    import signal
    import subprocess
    import sys

    from support.redis_server import RedisServer

    script = """
import os, signal, sys
import sessionstore
import sessionstore.drain
from sessionstore import SessionHeader
sessionstore.drain.EXIT_WAIT = float(sys.argv[3])
store = sessionstore.connect(sys.argv[1] + "?durability=none", "paused", timeout=5)
writers = [store.events.writer(SessionHeader(id=f"s{n}"), window=60) for n in range(3)]
for writer in writers:
    writer.emit("note")
os.kill(int(sys.argv[2]), signal.SIGSTOP)
"""
    with RedisServer() as server:
        assert server.process is not None
        began = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-c", script, server.url, str(server.process.pid), "2"],
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            server.process.send_signal(signal.SIGCONT)
        took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert took < 2 + 10, took
    for n in range(3):
        assert f"writer of session 's{n}' left open at exit was not closed" in done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_forked_child_holds_none_of_its_parents_stores(api, tmp_path):
    """A store is held while it has an open writer (so the exit handler finds it); a
    forked child's writers are not its own: it holds none of them."""
    from sessionstore import drain

    url = (tmp_path / "store").as_uri()
    if api == "sync":
        store = sessionstore.connect(url, "forked")
        writer = store.events.writer(SessionHeader(id="f", created_at=1), window=60)
    else:
        loop = asyncio.new_event_loop()
        store = aio.connect(url, "forked")
        writer = loop.run_until_complete(
            store.events.writer(SessionHeader(id="f", created_at=1), window=60)
        )
    assert store._drain in drain._HELD
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not drain._HELD and not store._drain.open_writers() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    if api == "sync":
        writer.close()
        store.close()
    else:
        loop.run_until_complete(writer.close())
        loop.run_until_complete(store.close())
        loop.close()
    assert store._drain not in drain._HELD
