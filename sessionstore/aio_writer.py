"""The asyncio write-behind writer (:class:`AsyncSessionWriter`) and what
:meth:`sessionstore.aio.AsyncEventLog.writer` returns to open it (:class:`OpeningWriter`).

Every decision is :class:`~sessionstore.writer_buffer.WriterBuffer`'s, as for the sync
:class:`~sessionstore.writer.SessionWriter`: this writer only awaits the flows it runs
(:func:`~sessionstore.flows.arun`), and the writers of one log share one drain task
(:class:`~sessionstore.drain.AsyncDrain`, a task on each loop). A writer stays on the loop
that opened it: the drain serves it there, whichever loop or thread emits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from .flows import arun
from .models import SessionHeader
from .writer import WriterShell
from .writer_buffer import WriterBuffer, WriterContext, open_buffer

#: How often a close awaited from another loop looks whether the writer's loop still
#: runs (seconds).
CLOSE_LOOK = 0.05


class OpeningWriter:
    """What :meth:`sessionstore.aio.AsyncEventLog.writer` returns: awaiting it opens the writer (and
    returns it); ``async with`` opens it and closes it on exit. Nothing is done until
    then."""

    __slots__ = ("_open", "_writer")

    def __init__(self, open_writer: Callable[[], Awaitable[AsyncSessionWriter]]) -> None:
        self._open = open_writer
        self._writer: AsyncSessionWriter | None = None

    def __await__(self) -> Generator[Any, None, AsyncSessionWriter]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSessionWriter:
        self._writer = await self._open()
        return self._writer

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is not None:
            await self._writer.close()


class AsyncSessionWriter(WriterShell):
    """Async twin of :class:`sessionstore.SessionWriter`; ``emit`` does no I/O. The
    writers of one log share one drain task."""

    def __init__(self, context: WriterContext, buffer: WriterBuffer) -> None:
        self._drain_lock = asyncio.Lock()
        #: The loop that opened it: the drain serves it there (see AsyncDrain).
        self._loop = asyncio.get_running_loop()
        super().__init__(context, buffer)

    def _served_on(self) -> asyncio.AbstractEventLoop:
        """The loop the drain serves this writer on: the one that opened it, or, once
        that one is closed, the loop running now in this thread (a writer used again in
        a later ``asyncio.run``)."""
        if self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # no loop runs here: nothing serves it
                self._move_to(asyncio.get_running_loop())
        return self._loop

    def _move_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve this writer on ``loop`` from now on, with a lock of its own there: its
        old loop stopped, so nothing waiting there, the old lock's holder included, goes
        on."""
        self._loop, self._drain_lock = loop, asyncio.Lock()

    async def flush(self) -> None:
        """Return once every event emitted before this call is durable (a failed append
        is retried first; the error of this attempt is raised)."""
        self._buffer.check_owner("flush")
        await self._write(self._buffer.flush_target())

    async def close(self) -> None:
        """Flush (retrying a failed append), then give the session's lease up."""
        self._buffer.check_owner("close")
        self._buffer.close()
        self._context.drain.forget(self)
        async with self._drain_lock:
            await arun(self._buffer.finish(self._context), self._context.backend)

    async def __aenter__(self) -> AsyncSessionWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self) -> float | None:
        """Run by the drain when due (see :meth:`sessionstore.SessionWriter._serve`)."""
        buffer = self._buffer
        if os.getpid() != buffer.owner:
            return None
        with contextlib.suppress(Exception):  # noted by the buffer, raised by flush or close
            await self._write(None)
        return buffer.next_due()

    async def _write(self, target: int | None) -> None:
        async with self._drain_lock:
            await arun(self._buffer.write(self._context, target), self._context.backend)


async def close_from_any_loop(writer: AsyncSessionWriter) -> None:
    """``writer.close()`` awaited from any event loop: run on the writer's own loop while
    that one runs in another thread (its lock and its calls belong there), else, or
    once that loop stops before the close is done, here."""
    loop, here = writer._loop, asyncio.get_running_loop()
    if loop is here:
        return await writer.close()
    if loop.is_running():
        there = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(writer.close(), loop))
        while loop.is_running():
            done, _ = await asyncio.wait({there}, timeout=CLOSE_LOOK)
            if done and not there.cancelled():
                return there.result()
            if done:
                break  # cancelled there: its loop is shutting down
        there.cancel()
    writer._move_to(here)  # its loop stopped, or is shutting down
    await writer.close()


async def open_writer(
    context: WriterContext,
    header: SessionHeader,
    window: float,
    ttl_ms: int | None,
    lease_ms: int,
) -> AsyncSessionWriter:
    """Take the session's lease and find where its log continues (see
    :func:`~sessionstore.writer_buffer.open_buffer`), then start the writer."""
    renews = bool(context.backend.renews_leases)
    flow = open_buffer(context, header, window, ttl_ms, lease_ms, renews)
    return AsyncSessionWriter(context, await arun(flow, context.backend))
