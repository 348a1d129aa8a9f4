"""The background drain shared by every writer of one event log: a small fixed pool of
threads (sync API) or one task (async API), whatever the number of writers.

A writer asks to be served at a time (``schedule(writer, due)``, ``due`` on the
monotonic clock); when it is due, the drain calls ``writer._serve()`` (the async drain
awaits it), which appends what is pending or renews the lease and returns when it wants
to be served next (None: not until it asks again). A writer is in the queue at most
once: asked for a time later than the one it is queued for, the drain keeps the sooner
one (``_serve`` then returns the writer's next time, which covers the later need);
asked for a sooner one, the entry is moved there (the old one is skipped when it comes
up). So the queue holds one entry per writer however often it is asked.

The sync drain renews the leases that come due together (``writer._renewal_due(now)``)
in one call, ``type(writer)._serve_together(writers)``, at most :data:`RENEWALS` at a
time, which returns when each writer is to be served next (at once for one to be served
alone, which any thread then does): on Redis one round trip renews them all. One round
trip each would cost every writer open a share of the drain that grows with the number
of writers open (see :meth:`sessionstore.writer_buffer.WriterBuffer.renewal_at` for why they
come due together). The async drain serves each writer in a task of its own, renewals
too, so that no writer waits for another.

Write-behind never stops for good: a sync drain thread that dies serving (an error
that is no ``Exception``, which the writers' ``_serve`` do not catch) is reported on
the ``sessionstore`` logger and replaced, and the writers it was serving are served
again after :data:`RETRY_AFTER` seconds; an async serving task that fails (but for a
cancellation, ``KeyboardInterrupt`` or ``SystemExit``) is reported and its writer served
again alike.

A drain also knows the writers of its store that are open (:class:`OpenWriters`), so
that closing the store closes them first. At the interpreter's normal exit (not a
signal's, nor ``os._exit``) the sync writers this process left open are closed, each
flushing what it queued, all at once and for at most :data:`EXIT_WAIT` seconds (what a
close raises, or a close not done by then, is logged), and an async writer left open
with events queued is logged as losing them: no event loop runs then to write them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from typing import Any, Generic, Protocol, TypeVar

from . import forksafe

log = logging.getLogger("sessionstore")

#: The most threads one sync drain runs (started as they are needed).
DRAIN_THREADS = 4
#: The most lease renewals a drain makes in one call.
RENEWALS = 500
#: How long after a failed serving its writers are served again (seconds).
RETRY_AFTER = 0.1


class Served(Protocol):
    def _serve(self) -> float | None: ...

    def _renewal_due(self, now: float) -> bool: ...

    @staticmethod
    def _serve_together(writers: list[Any]) -> list[float | None]: ...


class AsyncServed(Protocol):
    def _served_on(self) -> asyncio.AbstractEventLoop:
        """The event loop the writer is served on."""
        ...

    async def _serve(self) -> float | None: ...


_W = TypeVar("_W")


class DueQueue(Generic[_W]):
    """The writers waiting for a drain, soonest due first, each at most once (see the
    module doc); not thread-safe (the sync drain holds its lock around it)."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._heap: list[tuple[float, int, _W]] = []
        #: The entry of the heap that stands for each writer queued (due, order).
        self._entries: dict[_W, tuple[float, int]] = {}

    def __len__(self) -> int:
        return len(self._heap)

    def put(self, writer: _W, due: float) -> bool:
        """Queue ``writer`` for ``due``; False when it is queued for that time or sooner
        already (nothing changes)."""
        queued = self._entries.get(writer)
        if queued is not None and queued[0] <= due:
            return False
        entry = (due, next(self._order))
        self._entries[writer] = entry
        heapq.heappush(self._heap, (*entry, writer))
        return True

    def pop(self, now: float) -> _W | None:
        """The writer of the head entry when it is due at ``now`` (taken out of the
        queue), else None; moved entries are dropped on the way."""
        while self._heap and self._heap[0][0] <= now:
            due, order, writer = heapq.heappop(self._heap)
            if self._entries.get(writer) == (due, order):
                del self._entries[writer]
                return writer
        return None

    def head(self) -> float | None:
        """When the head entry is due (None when empty): no writer is due sooner."""
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()
        self._entries.clear()


class OpenWriters:
    """The writers of one store that are open: noted when opened (with the process that
    opened them), forgotten when their ``close`` is called. Adding to and removing from
    a dict is atomic in CPython, so any thread may do either."""

    def __init__(self) -> None:
        self._open: dict[Any, int] = {}
        self._holding = threading.Lock()
        forksafe.renew_locks(self, "_holding")
        _LIVE.add(self)

    def opened(self, writer: Any) -> None:
        # Held while a writer is open: a store dropped without closing its writers is not
        # collected before the exit handler closes them (or reports their loss).
        with self._holding:
            self._open[writer] = os.getpid()
            _HELD.add(self)

    def forget(self, writer: Any) -> None:
        with self._holding:
            self._open.pop(writer, None)
            if not self._open:
                _HELD.discard(self)

    def open_writers(self) -> list[Any]:
        """The writers this process opened that are open now, in no particular order (in
        a forked child, its parent's are not)."""
        pid = os.getpid()
        return [writer for writer, opener in list(self._open.items()) if opener == pid]


class Drain(OpenWriters):
    """Serves due writers on at most :data:`DRAIN_THREADS` daemon threads."""

    def __init__(self, threads: int = DRAIN_THREADS) -> None:
        super().__init__()
        self._most = threads
        self._names = itertools.count()
        self._reset()
        forksafe.at_fork(self, "_reset")

    def _reset(self) -> None:
        # In a forked child the threads do not exist, and the writers queued (and open)
        # are the parent's (they refuse to work there): start empty.
        self._cond = threading.Condition(threading.Lock())
        self._queue: DueQueue[Served] = DueQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False
        self._open = {}

    @property
    def threads(self) -> int:
        """How many threads run now (at most :data:`DRAIN_THREADS`)."""
        return sum(thread.is_alive() for thread in self._threads)

    def schedule(self, writer: Served, due: float) -> None:
        with self._cond:
            if self._closed:
                return
            if not self._queue.put(writer, due):
                return
            if not self._spare_thread():
                self._cond.notify()

    def _spare_thread(self) -> bool:
        """With the lock held: start a thread when none is idle and the most allowed
        are not running yet (a thread that died no longer counts); whether it did."""
        self._threads = [thread for thread in self._threads if thread.is_alive()]
        if self._idle > 0 or len(self._threads) >= self._most:
            return False
        thread = threading.Thread(
            target=self._run, name=f"sessionstore-drain-{next(self._names)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()
        return True

    def close(self) -> None:
        """Stop the threads (what is still queued is left to the writers' ``flush``)."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()

    def _next(self) -> list[Served]:
        """The writers to serve next: the first one due, with, when its lease is due for
        renewal, every other one due whose lease is too (up to :data:`RENEWALS`); none
        once closed."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                first = self._queue.pop(now)
                if first is not None:
                    found = self._renewing_with(first, now)
                    if self._queue:  # this thread may wait on a writer's flush: leave one
                        self._spare_thread()
                    return found
                head = self._queue.head()
                self._idle += 1
                try:
                    self._cond.wait(None if head is None else head - now)
                finally:
                    self._idle -= 1
            return []

    def _renewing_with(self, first: Served, now: float) -> list[Served]:
        if not first._renewal_due(now):
            return [first]
        found: list[Served] = [first]
        others: list[Served] = []
        while len(found) < RENEWALS and (writer := self._queue.pop(now)) is not None:
            (found if writer._renewal_due(now) else others).append(writer)
        for writer in others:  # put back, due now, for the other threads
            self._queue.put(writer, now)
        if others:
            self._cond.notify(len(others))
        return found

    def _run(self) -> None:
        while writers := self._next():
            try:
                if len(writers) == 1:
                    dues = [writers[0]._serve()]
                else:
                    dues = type(writers[0])._serve_together(writers)
            except BaseException as exc:  # noqa: BLE001 - reported, and the thread replaced
                self._died(writers, exc)
                return
            for writer, due in zip(writers, dues, strict=True):
                if due is not None:
                    self.schedule(writer, due)

    def _died(self, writers: list[Served], exc: BaseException) -> None:
        """This thread ends, failed by ``exc`` while serving ``writers``: report it, queue
        them again after :data:`RETRY_AFTER` and start a thread in its place."""
        log.error(
            "sessionstore: a background drain thread failed serving %d writer(s) of"
            " session(s) %s and is replaced; they are served again in %.1f s",
            len(writers),
            ", ".join(repr(getattr(w, "session_id", "?")) for w in writers[:5]),
            RETRY_AFTER,
            exc_info=exc,
        )
        with self._cond:
            current = threading.current_thread()
            self._threads = [thread for thread in self._threads if thread is not current]
            if self._closed:
                return
            due = time.monotonic() + RETRY_AFTER
            for writer in writers:
                self._queue.put(writer, due)
            if not self._spare_thread():
                self._cond.notify()


class AsyncDrain(OpenWriters):
    """Serves due writers from one task on each event loop its writers were opened on
    (a writer stays on its loop: its lock and its appends belong there); each due
    writer's append runs as a task of its own, so one slow session never holds the
    others up. A writer scheduled from another thread (an ``emit`` there) is queued
    through its loop's ``call_soon_threadsafe``; one whose loop has closed is not
    served (nothing can run it)."""

    def __init__(self) -> None:
        super().__init__()
        #: A loop's entry goes when its task ends (nothing queued, or cancelled when the
        #: loop is shut down), so that a loop run and closed is not kept.
        self._loops: dict[asyncio.AbstractEventLoop, _LoopDrain] = {}
        self._lock = threading.Lock()
        self._closed = False
        forksafe.renew_locks(self, "_lock")
        forksafe.at_fork(self, "_forget_parents")

    def _forget_parents(self) -> None:
        """In a forked child: the writers open are the parent's (they refuse to work
        here); none is kept."""
        self._open = {}

    def schedule(self, writer: AsyncServed, due: float) -> None:
        if self._closed:
            return
        loop = writer._served_on()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._on_loop(loop, writer, due)
            return
        with contextlib.suppress(RuntimeError):  # its loop is closed: nothing serves it
            loop.call_soon_threadsafe(self._on_loop, loop, writer, due)

    def _on_loop(self, loop: asyncio.AbstractEventLoop, writer: AsyncServed, due: float) -> None:
        """:meth:`schedule` on ``loop``'s own thread."""
        if self._closed:
            return
        drain = self._loops.get(loop)
        if drain is None:
            with self._lock:
                drain = self._loops.setdefault(loop, _LoopDrain(self))
        drain.schedule(loop, writer, due)

    def _ended(self, loop: asyncio.AbstractEventLoop, drain: _LoopDrain) -> None:
        """``drain``'s task on ``loop`` ended: its entry goes (a later writer of the loop
        gets a new one)."""
        with self._lock:
            if self._loops.get(loop) is drain:
                del self._loops[loop]

    async def close(self) -> None:
        """Stop serving: the tasks on the running loop are cancelled and awaited, those on
        other loops still running cancelled there."""
        self._closed = True
        with self._lock:
            drains = list(self._loops.items())
        here = asyncio.get_running_loop()
        for loop, drain in drains:
            if loop is here:
                await drain.stop()
            elif not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # it closed meanwhile
                    loop.call_soon_threadsafe(drain.cancel)


class _LoopDrain:
    """The queue and the serving task of an :class:`AsyncDrain` on one event loop; used
    from that loop's thread only."""

    def __init__(self, owner: AsyncDrain) -> None:
        self._owner = owner
        self._queue: DueQueue[AsyncServed] = DueQueue()
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._serving: set[asyncio.Task[None]] = set()

    def schedule(self, loop: asyncio.AbstractEventLoop, writer: AsyncServed, due: float) -> None:
        if not self._queue.put(writer, due):
            return
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())
        assert self._wake is not None
        self._wake.set()

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel the serving tasks; return them."""
        self._queue.clear()
        tasks = [task for task in (self._task, *self._serving) if task is not None]
        for task in tasks:
            task.cancel()
        return tasks

    async def stop(self) -> None:
        """Cancel the serving tasks and wait for them to end."""
        for task in self.cancel():
            with contextlib.suppress(BaseException):  # cancelled on purpose
                await task

    async def _serve(self, writer: AsyncServed) -> None:
        try:
            due = await writer._serve()
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - reported, and the writer served again
            log.error(
                "sessionstore: serving the writer of session %r failed; it is served"
                " again in %.1f s",
                getattr(writer, "session_id", "?"),
                RETRY_AFTER,
                exc_info=exc,
            )
            due = time.monotonic() + RETRY_AFTER
        if due is not None:
            self._owner.schedule(writer, due)

    async def _run(self) -> None:
        """Serve the writers as they come due; end when none is queued or being served
        (the next :meth:`schedule` starts a task again)."""
        wake = self._wake
        assert wake is not None
        loop = asyncio.get_running_loop()
        try:
            while not self._owner._closed:
                now = time.monotonic()
                while (writer := self._queue.pop(now)) is not None:
                    task = loop.create_task(self._serve(writer))
                    self._serving.add(task)
                    task.add_done_callback(self._served)
                wake.clear()
                head = self._queue.head()
                if head is None and not self._serving:
                    return
                timeout = None if head is None else head - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout)
        finally:
            self._owner._ended(loop, self)

    def _served(self, task: asyncio.Task[None]) -> None:
        self._serving.discard(task)
        if self._wake is not None:
            self._wake.set()  # so that the task ends once nothing is left


#: The longest the exit handler waits for the writers left open to close (seconds).
EXIT_WAIT = 10.0
#: Every store's open writers, for the exit handler.
_LIVE: weakref.WeakSet[OpenWriters] = weakref.WeakSet()
#: Those that have an open writer, held (see :meth:`OpenWriters.opened`); a forked
#: child holds none of its parent's (their writers are not its own).
_HELD: set[OpenWriters] = set()
os.register_at_fork(after_in_child=_HELD.clear)


def _close_at_exit() -> None:
    """Close the sync writers this process left open, at once, for at most
    :data:`EXIT_WAIT` seconds in all (see the module doc)."""
    deadline = time.monotonic() + EXIT_WAIT
    closing: list[tuple[Any, threading.Thread]] = []
    for drain in list(_LIVE):
        for writer in drain.open_writers():
            if isinstance(drain, AsyncDrain):
                if writer.queued:
                    log.warning(
                        "sessionstore: the process is exiting with the async writer of session"
                        " %r open: its %d queued events are not stored (await its close())",
                        writer.session_id,
                        writer.queued,
                    )
                continue
            thread = threading.Thread(target=_close_one, args=(writer,), daemon=True)
            thread.start()
            closing.append((writer, thread))
    for writer, thread in closing:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            log.warning(
                "sessionstore: the writer of session %r left open at exit was not closed"
                " within %g s: its %d queued events may not be stored",
                writer.session_id,
                EXIT_WAIT,
                writer.queued,
            )


def _close_one(writer: Any) -> None:
    try:
        writer.close()
    except Exception as exc:  # noqa: BLE001 - logged: the process is exiting
        log.warning(
            "sessionstore: closing the writer of session %r left open at exit failed: %s",
            writer.session_id,
            exc,
        )


atexit.register(_close_at_exit)
