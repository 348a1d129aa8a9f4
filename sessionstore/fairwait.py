"""Waiting first come, first served, from any thread and any event loop.

:class:`FairQueue` holds free items (connections, or plain tokens) and the callers
waiting for one. An item put back goes straight to the caller that has waited longest,
never to a caller that arrives later: a caller only takes a free item itself when nobody
is waiting. Threads wait with :meth:`FairQueue.get` (it has the signature of
``queue.Queue.get``, so redis-py's ``BlockingConnectionPool`` takes the class as its
``queue_class``); coroutines wait with :meth:`FairQueue.aget` on whatever event loop runs
them, each on a future of its own loop, woken thread-safely. One queue serves threads and
any number of event loops at once.

A wait fails (``queue.Empty``) only when no item was put back for a whole ``timeout``
seconds while the caller waited: a caller far back in a long line waits as long as the
line moves.

:class:`AnyLoopLock` is a mutex on a queue of one token: an ``async with`` lock that
belongs to no event loop.
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
import time
from typing import Any

from . import telemetry


class _Waiter:
    """One caller in line; ``served`` and ``item`` are set under the queue's lock."""

    __slots__ = ("item", "served", "_wake", "_loop", "_future")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.item: Any = None
        self.served = False
        self._loop = loop
        if loop is None:
            self._wake = threading.Lock()
            self._wake.acquire()
            self._future: asyncio.Future[None] | None = None
        else:
            self._future = loop.create_future()

    def give(self, item: Any) -> bool:
        """Hand ``item`` over; False when the caller can no longer be woken (its loop is
        closed), so the item must go to the next one."""
        if self._loop is None:
            self.item, self.served = item, True
            self._wake.release()
            return True
        if asyncio._get_running_loop() is self._loop:
            self._loop.call_soon(_resolve, self._future)
        else:
            try:
                self._loop.call_soon_threadsafe(_resolve, self._future)
            except RuntimeError:  # the loop is closed: nobody is left to wake
                return False
        self.item, self.served = item, True
        return True

    def wait(self, timeout: float | None) -> None:
        """Block the calling thread until served or ``timeout``."""
        self._wake.acquire(timeout=-1 if timeout is None else timeout)

    async def await_(self, timeout: float | None) -> None:
        assert self._future is not None
        await asyncio.wait((self._future,), timeout=timeout)


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


class FairQueue:
    """Free items (last in, first out) and waiting callers (first come, first served).

    ``maxsize`` bounds the free items (``queue.Full`` past it), as for ``queue.Queue``.
    ``queue`` is the list of free items, read by redis-py's pools. A wait is recorded
    as ``db.client.connection.wait_time`` of pool :attr:`pool` (:mod:`~sessionstore.telemetry`),
    unless it is None.
    """

    #: The pool whose free connections (or places) this queue holds, for telemetry.
    pool: str | None = "redis"

    def __init__(self, maxsize: int = 0) -> None:
        self.maxsize = maxsize
        self.queue: list[Any] = []
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._lock = threading.Lock()
        #: When an item was last put back: a waiter gives up only after ``timeout``
        #: seconds without one.
        self._moved = time.monotonic()

    def put_nowait(self, item: Any) -> None:
        """Give ``item`` to the longest waiting caller, else keep it free."""
        with self._lock:
            self._moved = time.monotonic()
            while self._waiters:
                if self._waiters.popleft().give(item):
                    return
            if self.maxsize and len(self.queue) >= self.maxsize:
                raise queue.Full
            self.queue.append(item)

    put = put_nowait

    def qsize(self) -> int:
        with self._lock:
            return len(self.queue)

    def waiting(self) -> int:
        """How many callers wait."""
        with self._lock:
            return len(self._waiters)

    def _take(self, loop: asyncio.AbstractEventLoop | None) -> tuple[bool, Any]:
        """(True, a free item) if nobody waits and one is free; else (False, a new
        waiter, in line)."""
        with self._lock:
            if self.queue and not self._waiters:
                return True, self.queue.pop()
            waiter = _Waiter(loop)
            self._waiters.append(waiter)
            return False, waiter

    def _settle(self, waiter: _Waiter, since: float, timeout: float | None) -> float | None:
        """After ``waiter`` woke: -1 if it was served, else how long it may still wait
        (None: forever). Raises ``queue.Empty``, taking it out of the line, once it
        waited ``timeout`` seconds without an item put back."""
        with self._lock:
            if waiter.served:
                return -1
            if timeout is None:
                return None
            left = max(since, self._moved) + timeout - time.monotonic()
            if left <= 0:
                self._waiters.remove(waiter)
                raise queue.Empty
            return left

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """A free item; waits in line (up to ``timeout`` without progress, see the module
        doc) when none is free or others wait first. Raises ``queue.Empty``."""
        if not block:
            with self._lock:
                if self.queue and not self._waiters:
                    return self.queue.pop()
            raise queue.Empty
        took, found = self._take(None)
        if took:
            return found
        waiter: _Waiter = found
        since = time.monotonic()
        left = timeout
        try:
            while left is None or left >= 0:
                waiter.wait(left)
                left = self._settle(waiter, since, timeout)
            return waiter.item
        finally:
            self._waited(since)

    async def aget(self, timeout: float | None = None) -> Any:
        """:meth:`get` for a coroutine, on the running event loop. A cancelled wait
        leaves the line; an item handed over meanwhile goes to the next caller."""
        took, found = self._take(asyncio.get_running_loop())
        if took:
            return found
        waiter: _Waiter = found
        since = time.monotonic()
        left = timeout
        try:
            while left is None or left >= 0:
                await waiter.await_(left)
                left = self._settle(waiter, since, timeout)
            return waiter.item
        except asyncio.CancelledError:
            with self._lock:
                served = waiter.served
                if not served:
                    self._waiters.remove(waiter)
            if served:
                self.put_nowait(waiter.item)
            raise
        finally:
            self._waited(since)

    def _waited(self, since: float) -> None:
        if self.pool is not None:
            telemetry.connection_waited(time.monotonic() - since, self.pool)


class AnyLoopLock:
    """An ``async with`` mutex usable from any event loop and thread, granted in the
    order asked (an ``asyncio.Lock`` belongs to the first loop that waits on it)."""

    def __init__(self) -> None:
        self._token = FairQueue()
        self._token.pool = None  # a lock, not a pool
        self._token.put_nowait(None)

    async def __aenter__(self) -> None:
        await self._token.aget()

    async def __aexit__(self, *exc: object) -> None:
        self._token.put_nowait(None)
