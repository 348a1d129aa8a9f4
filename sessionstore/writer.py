"""Write-behind writers for harnesses: ``emit`` snapshots, checks and queues, the log's
shared background drain (:mod:`sessionstore.drain`) appends in batches within a bounded
window, ``flush`` is a durability checkpoint. A writer holds its session's lease while
it is open (see :meth:`sessionstore.EventLog.writer`).

:class:`~sessionstore.writer_buffer.WriterBuffer` holds every decision (seq and time,
the queue, failure and retry, when to be served); :class:`SessionWriter` and
:class:`sessionstore.aio_writer.AsyncSessionWriter`, both a :class:`WriterShell`, only
run the flows it gives them, by :func:`~sessionstore.flows.run` and
:func:`~sessionstore.flows.arun`. :class:`Renewals` renews the leases of the sync
writers that come due together in one call.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import msgspec

from .contracts import EventBackend
from .errors import SessionStoreError
from .flows import run
from .jsontext import JSONText
from .models import SessionEvent, SessionHeader
from .writer_buffer import WriterBuffer, WriterContext, open_buffer

#: How soon the drain comes back to a writer that a flush or close of another thread
#: holds (seconds): it serves the others meanwhile.
BUSY_AGAIN = 0.01


class Renewals:
    """The leases a drain renews together (:meth:`SessionWriter._serve_together`): of
    the writers ``held`` (their drain locks taken), those due for renewal
    at ``at``; ``requests`` is what ``backend.renew_leases`` takes, :meth:`note` notes
    its answer."""

    __slots__ = ("at", "due", "backend", "requests")

    def __init__(self, held: list[Any], at: float) -> None:
        self.at = at
        self.due = [writer._buffer for writer in held if writer._buffer.renewal_due(at)]
        self.backend: Any = held[0]._context.backend if held else None
        self.requests = [(buffer.session_id, buffer.lease, buffer.lease_ms) for buffer in self.due]

    def note(self, taken: list[bool]) -> None:
        for buffer, held in zip(self.due, taken, strict=True):
            buffer.renewed(bool(held), self.at)

    @staticmethod
    def renew(held: list[Any]) -> bool:
        """Renew the leases due of the writers ``held`` (their drain locks taken) in one
        ``renew_leases`` call and note each answer; False when the call failed
        (nothing noted: each then renews alone, its failure noted there)."""
        renewals = Renewals(held, time.monotonic())
        if not renewals.requests:
            return True
        try:
            taken = renewals.backend.renew_leases(renewals.requests)
        except Exception:  # noqa: BLE001 - each renews alone, its failure noted there
            return False
        renewals.note(taken)
        return True


class WriterShell:
    """What the sync and async writers share: their buffer, their log's drain, which
    serves them when due, and :meth:`emit`, which does no I/O in either."""

    def __init__(self, context: WriterContext, buffer: WriterBuffer) -> None:
        self._context = context
        self._buffer = buffer
        context.drain.opened(self)  # closing the store closes it
        due = buffer.next_due()
        if due is not None:
            context.drain.schedule(self, due)

    def __reduce__(self) -> tuple[Any, ...]:
        """A writer holds its session's lease and the events it queued in this process:
        it does not travel (:class:`~sessionstore.errors.SessionStoreError`); a worker
        opens a writer of its own from the store, which does."""
        raise SessionStoreError(
            f"the writer of session {self._buffer.session_id!r} stays in the process that"
            " opened it: pass the store (it pickles) and open a writer in the worker"
        )

    @property
    def session_id(self) -> str:
        return self._buffer.session_id

    @property
    def next_seq(self) -> int:
        return self._buffer.next_seq

    @property
    def queued(self) -> int:
        """How many events emitted are not durable yet."""
        return self._buffer.next_seq - self._buffer.durable_seq

    def emit(
        self,
        type: str,
        data: dict[str, Any] | JSONText | msgspec.Raw | None = None,
        time: object = None,
    ) -> SessionEvent:
        """Snapshot and check ``data`` (see
        :meth:`~sessionstore.writer_buffer.WriterBuffer.make`), queue the event (seq
        assigned here) and return it. No I/O.

        ``time`` (int epoch ms or a datetime) is the event's logical time, a backtest's
        candle time say; it must not be before the time of the event before it in the
        log, else :class:`~sessionstore.errors.EventTimeOrderError` (naming the seq and
        both times) and nothing is queued. Without it the event gets the wall clock
        (never going backwards).
        """
        self._buffer.check_owner("emit")
        event, due = self._buffer.make(type, data, time)
        if due is not None:
            self._context.drain.schedule(self, due)
        return event


class SessionWriter(WriterShell):
    """Buffers events and drains them to the log on the log's shared background drain:
    an event emitted while no append is in flight is written within ``window`` seconds;
    the events emitted while one is in flight are written right after it, together.

    A failed background append keeps its batch, in order, at the head of the queue and
    pauses background writing; the next :meth:`emit` retries it first, :meth:`flush`
    and :meth:`close` retry before they raise, and an error whose batch was written
    later is never raised. A batch whose append may have been applied (its outcome was
    never learnt) is sent again exactly as it was, so it is recognised as written (see
    :class:`~sessionstore.writer_buffer.WriterBuffer`).

    Every append carries the writer's lease (token and epoch), checked by the store with
    the seq: once another writer took the lease over (it expired while this one was
    paused), this writer writes nothing more, even after that writer released it, and
    its :meth:`flush` and :meth:`close` raise
    :class:`~sessionstore.errors.SessionBusyError`; its renewal never takes the lease
    back.
    """

    def __init__(
        self,
        context: WriterContext,
        header: SessionHeader,
        *,
        window: float,
        ttl_ms: int | None,
        lease_ms: int,
    ) -> None:
        backend: EventBackend = context.backend
        flow = open_buffer(context, header, window, ttl_ms, lease_ms, backend.renews_leases)
        self._drain_lock = threading.Lock()
        super().__init__(context, run(flow, backend))

    def flush(self) -> None:
        """Return once every event emitted before this call is durable. A failed
        append is retried here first; the error of this attempt is raised."""
        self._buffer.check_owner("flush")
        self._write(self._buffer.flush_target())

    def close(self) -> None:
        """Flush (retrying a failed append), then give the session's lease up. Emits
        are refused from now on; after an error, ``flush`` or ``close`` may retry."""
        self._buffer.check_owner("close")
        self._buffer.close()
        self._context.drain.forget(self)
        with self._drain_lock:
            run(self._buffer.finish(self._context), self._context.backend)

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> float | None:
        """Run by the drain when due: renew the lease if it is time, append the head of
        the queue unless paused; return when to be served next. While a ``flush`` or
        ``close`` of another thread holds the writer (appending a backlog, say), the
        drain does not wait for it: it serves the other writers (their renewals among
        them) and comes back after :data:`BUSY_AGAIN` seconds."""
        buffer = self._buffer
        if os.getpid() != buffer.owner:
            return None
        with contextlib.suppress(Exception):  # noted by the buffer, raised by flush or close
            if not self._write(None, wait=False):
                return time.monotonic() + BUSY_AGAIN
        buffer.renew_alone = False
        return buffer.next_due()

    def _renewal_due(self, now: float) -> bool:
        """Whether the drain may renew this writer's lease together with others' (see
        :meth:`_serve_together`): it is due, the backend renews several leases in one
        call (``renew_leases``), the writer's drain lock is free (a flush under way is
        left to finish, as :meth:`_serve` does) and its last renewal together did not
        fail."""
        buffer = self._buffer
        return (
            buffer.renewal_due(now)
            and not buffer.renew_alone
            and not self._drain_lock.locked()
            and hasattr(self._context.backend, "renew_leases")
        )

    @staticmethod
    def _serve_together(writers: list[SessionWriter]) -> list[float | None]:
        """Run by the drain for writers whose leases are due together: one
        ``renew_leases`` call renews them all, each under its drain lock taken without
        waiting; returns when each is to be served next. A writer whose lock turned out
        busy, every writer when the call failed, and one with events to append are due
        at once: the drain then serves each alone (:meth:`_serve`, on any of its
        threads), so no writer waits here for another's flush."""
        now, pid = time.monotonic(), os.getpid()
        backend = writers[0]._context.backend  # a store's writers share it (and its drain)
        held: list[SessionWriter] = []
        for writer in writers:
            if (
                writer._buffer.owner == pid
                and writer._context.backend is backend
                and writer._drain_lock.acquire(blocking=False)
            ):
                held.append(writer)
        try:
            if not Renewals.renew(held):
                for writer in held:
                    writer._buffer.renew_alone = True
        finally:
            for writer in held:
                writer._drain_lock.release()
        taken = set(map(id, held))
        dues: list[float | None] = []
        for writer in writers:
            if writer._buffer.owner != pid:
                dues.append(None)  # a forked child's copy: the parent serves it
            elif id(writer) not in taken or writer._buffer.renew_alone:
                dues.append(now)
            else:
                dues.append(writer._buffer.next_due())
        return dues

    def _write(self, target: int | None, *, wait: bool = True) -> bool:
        """Write up to ``target`` under the writer's drain lock; False, doing nothing,
        when not ``wait``-ing and another thread holds it."""
        if not self._drain_lock.acquire(blocking=wait):
            return False
        try:
            run(self._buffer.write(self._context, target), self._context.backend)
        finally:
            self._drain_lock.release()
        return True
