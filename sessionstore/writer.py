"""Write-behind writers for harnesses: ``emit`` snapshots, checks and queues, the log's
shared background drain (:mod:`sessionstore.drain`) appends in batches within a bounded
window, ``flush`` is a durability checkpoint. A writer holds its session's lease while
it is open (see :meth:`sessionstore.EventLog.writer`).

:class:`WriterBuffer` holds every decision (seq and time, the queue, failure and retry,
when to be served); :class:`SessionWriter` and
:class:`sessionstore.aio_writer.AsyncSessionWriter`, both a :class:`WriterShell`, only
run the flows it gives them, by :func:`~sessionstore.flows.run` and
:func:`~sessionstore.flows.arun`.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import uuid
from typing import Any, NamedTuple

from . import event_flows
from .contracts import EventBackend, EventBatch
from .errors import (
    EventTimeOrderError,
    InvalidArgumentError,
    SessionBusyError,
    SessionStoreError,
    StoreClosedError,
)
from .eventlog import encode_batch
from .flows import Flow, run
from .leases import Lease, taken_over
from .models import SessionEvent, SessionHeader
from .store_state import Lifecycle, PendingSessions
from .when import now_ms, to_epoch_ms

#: The lease of a buffer made without one (in tests of its bookkeeping).
NO_LEASE = Lease("", 0)
#: The most events one append of a writer carries (a long backlog goes in several).
BATCH_MAX = 5000


class WriterContext(NamedTuple):
    """What a writer uses of its event log."""

    backend: Any
    pending: PendingSessions
    lifecycle: Lifecycle
    drain: Any


class WriterBuffer:
    """Seq and time assignment, the queue of encoded events, the failure and lease
    bookkeeping and the drain itself (:meth:`write`, a flow); shared by the sync and
    async writers, which only run its flows. Its lock guards the queue against ``emit``
    from other threads; it is never held across I/O.

    Failure: a failed append keeps its batch at the head of the queue and pauses
    background writing (:attr:`paused`); the next ``emit`` resumes it, so the failed
    batch is retried first, then the new events, in order; a later successful append
    of that batch clears the error for good.

    Unknown outcome: an append that raised (a lost reply, a timeout, a server killed
    before replying) may have been applied. The batch handed to it stays
    :attr:`unsettled` until an append of it succeeds, and the next append sends exactly
    that batch again, never a larger one: applied, the store recognises it as an applied
    replay and returns its next seq; not applied, it is written now. Either way it is
    then written, and the events emitted since follow in later batches. (A batch merged
    with newer events could be neither the stored next seq nor a replay: refused for
    ever.)
    """

    def __init__(
        self,
        session_id: str,
        next_seq: int,
        last_time: int,
        *,
        window: float = 0.2,
        lease: Lease = NO_LEASE,
        lease_ms: int = 0,
        renews: bool = False,
    ) -> None:
        self._lock = threading.Lock()
        self.session_id = session_id
        self.next_seq = next_seq
        self.last_time = last_time
        self.window = window
        #: The events emitted and not yet durable, and their canonical texts.
        self.pending: list[SessionEvent] = []
        self.texts: list[bytes] = []
        #: When each pending event was emitted (monotonic seconds).
        self.emitted: list[float] = []
        #: Events were emitted while an append was in flight: they go right after it.
        self.hurry = False
        #: The number of events of the batch last handed to an append whose success is
        #: not known yet (in flight, or failed); 0 when none.
        self.unsettled = 0
        self.error: BaseException | None = None
        self.paused = False
        self.closed = False
        #: Set once the lease is given up: the writer is served no more.
        self.released = False
        #: Set once an append or a renewal found the lease held by another writer: the
        #: writer is fenced off for good, and writes (and renews) nothing more.
        self.fenced = False
        #: The writer's lease: its owner token and epoch, which fence its appends.
        self.lease = lease
        self.lease_ms = lease_ms
        self.renews = renews
        self.renewed_at = time.monotonic()
        #: A renewal together with others failed: renew alone next (see
        #: :meth:`SessionWriter._serve_together`).
        self.renew_alone = False
        #: The process that opened the writer: the only one it writes for.
        self.owner = os.getpid()

    def check_owner(self, operation: str) -> None:
        """A writer belongs to the process that opened it: in a forked child its queue
        and its lease are the parent's, so it refuses to do anything there."""
        if os.getpid() != self.owner:
            raise SessionStoreError(
                f"{operation} on the writer of session {self.session_id!r} in process"
                f" {os.getpid()}: a writer belongs to the process that opened it"
                f" ({self.owner}); open a new writer in this process"
            )

    def check_open(self) -> None:
        if self.closed:
            raise StoreClosedError(f"writer of session {self.session_id!r} is closed")

    def make(
        self, type: str, data: dict[str, Any] | None, at: object = None
    ) -> tuple[SessionEvent, float | None]:
        """Snapshot, check and queue the next event; return it (with data of its own)
        and the time the writer must be served at, if it must be queued for it now.

        Its time is ``at`` (the caller's logical time: int epoch ms or a datetime, see
        :func:`~sessionstore.when.to_epoch_ms`), which must not be before the time of the
        event before it (:class:`EventTimeOrderError`); without ``at``, the wall clock,
        never before the event before it.

        Everything is checked first, so a bad emit raises :class:`InvalidArgumentError`
        (a ``type`` that is not a non-empty str, ``data`` that is not a dict or None),
        ``NotJSONSerializableError`` (data that is not lossless JSON) or
        ``HarnessFieldError``, and queues nothing: a bad event never wedges the
        events after it. The queued event is its canonical JSON text, so changing
        ``data`` or the returned event afterwards changes nothing stored.
        """
        check_emit(type, data)
        with self._lock:
            return self._queue(type, data, at)

    def _queue(
        self, type: str, data: dict[str, Any] | None, at: object
    ) -> tuple[SessionEvent, float | None]:
        self.check_open()
        if at is None:
            when = max(self.last_time, now_ms())
        else:
            when = to_epoch_ms(at)
            if when < self.last_time:
                raise EventTimeOrderError(self.session_id, self.next_seq, when, self.last_time)
        event = SessionEvent.model_construct(
            seq=self.next_seq, type=type, time=when, data={} if data is None else data, id=None
        )
        encoded = encode_batch(self.session_id, [event])
        [text] = encoded.texts
        # The event handed back and queued has data of its own, parsed from its text.
        queued = SessionEvent.model_validate_json(text)
        self.last_time = when
        self.next_seq += 1
        moment = time.monotonic()
        head = (not self.pending or self.paused) and not self.fenced
        self.pending.append(queued)
        self.texts.append(text)
        self.emitted.append(moment)
        self.paused = False
        return queued, (self.emitted[0] + self.window if head else None)

    @property
    def durable_seq(self) -> int:
        """The seq below which every emitted event is durable."""
        return self.next_seq - len(self.pending)

    def next_batch(self, target: int | None) -> EventBatch:
        """What a drain appends next, or nothing when it is done: a background drain
        (``target`` None) stops while paused by a failure, a flush once every event
        before seq ``target`` is durable. An unsettled batch is handed out again as it
        was; else the head of the queue, at most :data:`BATCH_MAX` events."""
        with self._lock:
            if self.durable_seq >= (self.next_seq if target is None else target) or (
                target is None and self.paused
            ):
                return EventBatch([], [])
            size = self.unsettled or min(len(self.pending), BATCH_MAX)
            self.unsettled = size
            return EventBatch(self.pending[:size], self.texts[:size])

    def written(self, count: int) -> None:
        """The first ``count`` pending events are durable: drop them; any earlier error
        was about them, so it is cleared."""
        with self._lock:
            del self.pending[:count]
            del self.texts[:count]
            del self.emitted[:count]
            self.unsettled = 0
            self.error = None
            self.paused = False
            self.hurry = bool(self.pending)

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self.error = error
            self.paused = True

    def close(self) -> None:
        """Refuse emits from now on."""
        with self._lock:
            self.closed = True

    def flush_target(self) -> int:
        """The seq a flush called now must make durable: every event emitted so far."""
        with self._lock:
            return self.next_seq

    def renewal_at(self) -> float:
        """When the lease is renewed next: a third of it after the last renewal, brought
        forward to the last multiple of a thirtieth of it on the monotonic clock, so the
        writers with the same lease come due together, and the drain renews them in one
        round trip (see :meth:`SessionWriter._serve_together`); never later than a third
        of the lease, never sooner than three tenths of it."""
        step = self.lease_ms / 30000
        return math.floor((self.renewed_at + self.lease_ms / 3000) / step) * step

    def renewal_due(self, now: float) -> bool:
        lease_held = self.renews and not self.released and not self.fenced
        return lease_held and now >= self.renewal_at()

    def renewed(self, held: bool, at: float) -> None:
        """The outcome of a renewal asked for at ``at`` by the drain for several writers
        at once: as :meth:`write` notes its own renewal's."""
        if held:
            self.renewed_at = at
        else:
            self.fenced = True
            self.failed(taken_over(self.session_id))

    def next_due(self) -> float | None:
        """When the writer wants the drain next: the oldest pending event's window (not
        while paused), or the lease's renewal; None for neither."""
        with self._lock:
            if self.released or self.fenced:
                return None
            due = []
            if self.pending and not self.paused:
                due.append(self.emitted[0] + (0.0 if self.hurry else self.window))
            if self.renews:
                due.append(self.renewal_at())
            return min(due) if due else None

    def write(self, context: WriterContext, target: int | None) -> Flow[None]:
        """The drain, run by a writer's shell under its drain lock (one at a time):
        renew the lease when due, then append batches until ``target`` is durable
        (None: one batch, unless paused), each fenced by the lease. A failure is
        noted (:meth:`failed`) and raised; the batch stays queued, unsettled. Once the
        lease was found taken over, every write raises :class:`SessionBusyError` at once,
        without I/O."""
        try:
            if self.fenced:
                raise taken_over(self.session_id)
            now = time.monotonic()
            if self.renewal_due(now):
                yield from event_flows.renew_lease(self.session_id, self.lease, self.lease_ms)
                self.renewed_at = now
            while batch := self.next_batch(target):
                yield from event_flows.append_stored(
                    context.pending, context.lifecycle, self.session_id, batch, self.lease
                )
                self.written(len(batch))
                if target is None:
                    return
        except SessionBusyError as exc:
            self.fenced = True
            self.failed(exc)
            raise
        except Exception as exc:
            self.failed(exc)
            raise

    def release(self) -> Flow[None]:
        """Give the lease up, once (run under the drain lock, after the last flush)."""
        if not self.released:
            self.released = True
            yield from event_flows.release_lease(self.session_id, self.lease.owner)

    def finish(self, context: WriterContext) -> Flow[None]:
        """What ``close`` runs under the drain lock once emits are refused: write every
        event emitted (a failed append retried first; the error of this attempt is
        raised), then give the lease up, whatever happened (a flow closed early can call
        nothing more: its lease then expires)."""
        try:
            yield from self.write(context, self.flush_target())
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                yield from self.release()
            raise
        yield from self.release()


def check_emit(event_type: object, data: object) -> None:
    """Refuse what ``emit`` cannot log: the type must be a non-empty str, the data a
    dict or None."""
    if not isinstance(event_type, str):
        raise InvalidArgumentError(
            f"emit: the event type must be a str, not {_kind(event_type)} {event_type!r:.40}"
        )
    if not event_type:
        raise InvalidArgumentError("emit: the event type must not be empty")
    if data is not None and not isinstance(data, dict):
        raise InvalidArgumentError(
            f"emit({event_type!r:.40}): data must be a dict or None, not {_kind(data)}"
        )


def _kind(value: object) -> str:
    return type(value).__name__


def new_token() -> str:
    """A writer's lease owner token: unique across processes and hosts."""
    return uuid.uuid4().hex


def open_buffer(
    context: WriterContext,
    header: SessionHeader,
    window: float,
    ttl_ms: int | None,
    lease_ms: int,
    renews: bool,
) -> Flow[WriterBuffer]:
    """Open a writer (see :func:`sessionstore.event_flows.open_writer`: its lease, where its log
    continues) and make its buffer; the sync and async writers run it alike."""
    position = event_flows.open_writer(
        context.pending, context.lifecycle, header, ttl_ms, new_token(), lease_ms
    )
    next_seq, last_time, lease = yield from position
    return WriterBuffer(
        header.id,
        next_seq,
        last_time,
        window=window,
        lease=lease,
        lease_ms=lease_ms,
        renews=renews,
    )


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

    @property
    def session_id(self) -> str:
        return self._buffer.session_id

    @property
    def _here(self) -> bool:
        """Whether this process opened the writer (in a forked child it is the parent's)."""
        return self._buffer.owner == os.getpid()

    @property
    def next_seq(self) -> int:
        return self._buffer.next_seq

    def emit(
        self, type: str, data: dict[str, Any] | None = None, time: object = None
    ) -> SessionEvent:
        """Snapshot and check ``data`` (see :meth:`WriterBuffer.make`), queue the event
        (seq assigned here) and return it. No I/O.

        ``time`` (int epoch ms or a datetime) is the event's logical time, a backtest's
        candle time say; it must not be before the time of the event before it in the
        log, else :class:`EventTimeOrderError` (naming the seq and both times) and nothing
        is queued. Without it the event gets the wall clock (never going backwards).
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
    :class:`WriterBuffer`).

    Every append carries the writer's lease (token and epoch), checked by the store with
    the seq: once another writer took the lease over (it expired while this one was
    paused), this writer writes nothing more, even after that writer released it, and
    its :meth:`flush` and :meth:`close` raise :class:`SessionBusyError`; its renewal
    never takes the lease back.
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
        the queue unless paused; return when to be served next."""
        buffer = self._buffer
        if os.getpid() != buffer.owner:
            return None
        with contextlib.suppress(Exception):  # noted by the buffer, raised by flush or close
            self._write(None)
        buffer.renew_alone = False
        return buffer.next_due()

    def _renewal_due(self, now: float) -> bool:
        """Whether the drain may renew this writer's lease together with others' (see
        :meth:`_serve_together`): it is due, the backend renews several leases in one
        call (``renew_leases``), the writer's drain lock is free (a flush under way is
        waited for by the drain alone, as :meth:`_serve` does) and its last renewal
        together did not fail."""
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

    def _write(self, target: int | None) -> None:
        with self._drain_lock:
            run(self._buffer.write(self._context, target), self._context.backend)
