"""The writers of one store share one background drain: a bounded number of threads
(sync) whatever the number of writers, and an event emitted while a slow append is in
flight is written right after it."""

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
