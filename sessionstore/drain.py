"""The background drain shared by every writer of one event log: a small fixed pool of
threads (sync API) or one task (async API), whatever the number of writers.

A writer asks to be served at a time (``schedule(writer, due)``, ``due`` on the
monotonic clock); when it is due, the drain calls ``writer._serve()`` (the async drain
awaits it), which appends what is pending or renews the lease and returns when it wants
to be served next (None: not until it asks again). A writer is in the queue at most
once at a time: it asks again only once ``_serve`` has returned (see
:class:`sessionstore.writer.WriterBuffer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
from typing import Any, Protocol

from . import forksafe

#: The most threads one sync drain runs (started as they are needed).
DRAIN_THREADS = 4


class Served(Protocol):
    def _serve(self) -> float | None: ...


class AsyncServed(Protocol):
    async def _serve(self) -> float | None: ...


class Drain:
    """Serves due writers on at most :data:`DRAIN_THREADS` daemon threads."""

    def __init__(self, threads: int = DRAIN_THREADS) -> None:
        self._most = threads
        self._order = itertools.count()
        self._reset()
        forksafe.at_fork(self, "_reset")

    def _reset(self) -> None:
        # In a forked child the threads do not exist, and the writers queued are the
        # parent's (they refuse to work there): start empty.
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[tuple[float, int, Served]] = []
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    @property
    def threads(self) -> int:
        """How many threads run now (at most :data:`DRAIN_THREADS`)."""
        return sum(thread.is_alive() for thread in self._threads)

    def schedule(self, writer: Served, due: float) -> None:
        with self._cond:
            if self._closed:
                return
            heapq.heappush(self._queue, (due, next(self._order), writer))
            if self._idle == 0 and len(self._threads) < self._most:
                thread = threading.Thread(
                    target=self._run, name=f"sessionstore-drain-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._cond.notify()

    def close(self) -> None:
        """Stop the threads (what is still queued is left to the writers' ``flush``)."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()

    def _next(self) -> Served | None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if self._queue and self._queue[0][0] <= now:
                    return heapq.heappop(self._queue)[2]
                self._idle += 1
                try:
                    self._cond.wait(self._queue[0][0] - now if self._queue else None)
                finally:
                    self._idle -= 1
            return None

    def _run(self) -> None:
        while (writer := self._next()) is not None:
            due = writer._serve()
            if due is not None:
                self.schedule(writer, due)


class AsyncDrain:
    """Serves due writers from one task on the running event loop; each due writer's
    append runs as a task of its own, so one slow session never holds the others up."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._queue: list[tuple[float, int, AsyncServed]] = []
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._serving: set[asyncio.Task[None]] = set()
        self._closed = False

    def schedule(self, writer: AsyncServed, due: float) -> None:
        if self._closed:
            return
        heapq.heappush(self._queue, (due, next(self._order), writer))
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
        assert self._wake is not None
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        self._queue.clear()
        tasks: list[Any] = [self._task, *self._serving]
        for task in tasks:
            if task is not None:
                task.cancel()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(BaseException):  # cancelled on purpose
                    await task

    async def _serve(self, writer: AsyncServed) -> None:
        due = await writer._serve()
        if due is not None:
            self.schedule(writer, due)

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while not self._closed:
            now = time.monotonic()
            while self._queue and self._queue[0][0] <= now:
                writer = heapq.heappop(self._queue)[2]
                task = asyncio.get_running_loop().create_task(self._serve(writer))
                self._serving.add(task)
                task.add_done_callback(self._serving.discard)
            wake.clear()
            timeout = self._queue[0][0] - now if self._queue else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)
