"""The writers of one store share one background drain: a bounded number of threads
(sync) whatever the number of writers, and an event emitted while a slow append is in
flight is written right after it. A background append that was applied but raised (its
outcome unknown) is recognised as written, sync and async (against redis-server:
``tests/faults/test_writer_outcome_unknown.py``)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import sessionstore
from sessionstore import SessionHeader, aio
from sessionstore.drain import DRAIN_THREADS


def test_a_thousand_writers_run_a_bounded_number_of_threads():
    before = threading.active_count()
    with sessionstore.connect("memory://", "ns") as store:
        writers = [
            store.events.writer(SessionHeader(id=f"w-{n}"), window=0.01) for n in range(1000)
        ]
        for n, writer in enumerate(writers):
            writer.emit("note", {"n": n})
        time.sleep(0.2)
        assert threading.active_count() - before <= DRAIN_THREADS
        for writer in writers:
            writer.flush()
        assert [len(store.events.read_from(f"w-{n}", 0)) for n in range(1000)] == [1] * 1000
        for writer in writers:
            writer.close()


def _slow_first_append(backend: Any, seconds: float) -> None:
    """Make the first append of ``backend`` (the real one) take ``seconds`` longer."""
    append = backend.append
    calls = []

    def slow(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(seconds)
        return append(*args, **kwargs)

    backend.append = slow


def _stored(store: Any) -> int:
    try:
        return len(store.events.read_from("w", 0))
    except sessionstore.SessionNotFoundError:
        return 0


def _durable_at(store: Any, count: int, began: float) -> float:
    while _stored(store) < count:
        assert time.monotonic() - began < 10
        time.sleep(0.01)
    return time.monotonic() - began


def test_an_event_emitted_during_a_slow_append_is_written_right_after_it():
    with sessionstore.connect("memory://", "ns") as store:
        writer = store.events.writer(SessionHeader(id="w"), window=1.0)
        _slow_first_append(store.events._backend, 0.6)
        began = time.monotonic()
        writer.emit("note", {"n": 0})  # drained at 1.0 s; the append ends at 1.6 s
        time.sleep(1.2)
        writer.emit("note", {"n": 1})  # in flight: written right after it, not at 2.2 s
        done = _durable_at(store, 2, began)
        assert done < 2.0
        writer.close()


def test_an_async_event_emitted_during_a_slow_append_is_written_right_after_it():
    async def scenario() -> float:
        async with aio.connect("memory://", "ns") as store:
            writer = await store.events.writer(SessionHeader(id="w"), window=1.0)
            _slow_first_append(store.events._backend._target, 0.6)
            began = time.monotonic()
            writer.emit("note", {"n": 0})
            await asyncio.sleep(1.2)
            writer.emit("note", {"n": 1})
            while await _astored(store) < 2:
                assert time.monotonic() - began < 10
                await asyncio.sleep(0.01)
            done = time.monotonic() - began
            await writer.close()
            return done

    assert asyncio.run(scenario()) < 2.0


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
                t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "AsyncDrain._run"
            ]
            for writer in writers:
                await writer.close()
            return len(tasks)

    assert asyncio.run(scenario()) == 1


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
        began = time.monotonic()
        while not _failed(writer):
            assert time.monotonic() - began < 10
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
            began = time.monotonic()
            while not _failed(writer):
                assert time.monotonic() - began < 10
                await asyncio.sleep(0.01)
            emitted += [writer.emit("note", {"n": n}) for n in range(3, 6)]
            await writer.flush()
            await writer.close()
            assert lost and await store.events.read_from("w", 0) == emitted

    asyncio.run(scenario())
