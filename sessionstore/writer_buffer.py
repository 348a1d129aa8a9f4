"""What a write-behind writer decides, with no I/O: :class:`WriterBuffer` (seq and time,
the queue of encoded events, failure and retry, the lease and its renewal, when to be
served) and the flows it gives its shells to run (:meth:`WriterBuffer.write`,
:meth:`WriterBuffer.finish`, :func:`open_buffer`). The shells are
:class:`sessionstore.writer.SessionWriter` and
:class:`sessionstore.aio_writer.AsyncSessionWriter`.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from typing import Any, NamedTuple

import msgspec
import orjson

from . import event_flows, telemetry
from .contracts import EventBatch
from .errors import (
    EventTimeOrderError,
    InvalidArgumentError,
    SessionBusyError,
    SessionStoreError,
    StoreClosedError,
    StoreUnavailableError,
)
from .eventlog import data_of_text, encode_batch
from .flows import Flow
from .jsontext import TEXT_TYPES, JSONText
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
        #: The unsettled batch's append failed with an unknown outcome: it may be stored.
        self.maybe_stored = False
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
        #: :meth:`sessionstore.writer.SessionWriter._serve_together`).
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
        self, type: str, data: dict[str, Any] | JSONText | msgspec.Raw | None, at: object = None
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
        self, type: str, data: dict[str, Any] | JSONText | msgspec.Raw | None, at: object
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
        # The event handed back and queued has data of its own, parsed from its text (by
        # orjson, which follows the nesting append takes, as pydantic's parser does not).
        queued = SessionEvent.model_construct(
            seq=event.seq,
            type=type,
            time=when,
            data=orjson.loads(data_of_text(text, False)),
            id=None,
        )
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
            self.maybe_stored = False
            self.error = None
            self.paused = False
            self.hurry = bool(self.pending)

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self.error = error
            self.paused = True
            if isinstance(error, StoreUnavailableError) and self.unsettled:
                self.maybe_stored = True

    def taken_over(self) -> SessionBusyError:
        """What a write of a writer whose lease was taken over raises: it says what it
        had queued is not stored, but for a batch whose append's outcome was unknown."""
        with self._lock:
            queued, first = len(self.pending), self.durable_seq
            unknown = self.unsettled if self.maybe_stored else 0
        outcome = ""
        if unknown:
            outcome = (
                f": its events {first} to {first + unknown - 1}, whose append's outcome was"
                " unknown, may be stored"
            )
            if queued > unknown:
                outcome += f"; the {queued - unknown} after them are not"
        elif queued:
            outcome = f": the {queued} events it had queued are not stored"
        return taken_over(self.session_id, outcome)

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
        round trip (see :meth:`sessionstore.writer.SessionWriter._serve_together`); never
        later than a third of the lease, never sooner than three tenths of it."""
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
            self.failed(self.taken_over())

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
        append batches until ``target`` is durable (None: one batch, unless paused),
        each fenced by the lease, renewing the lease before any batch when it is due (a
        backlog that takes longer than the lease keeps it, as the drain cannot renew it
        meanwhile). A failure is noted (:meth:`failed`) and raised; the batch stays
        queued, unsettled. Once the lease was found taken over, every write raises
        :class:`SessionBusyError` at once, without I/O."""
        try:
            if self.fenced:
                raise self.taken_over()
            while True:
                now = time.monotonic()
                if self.renewal_due(now):
                    yield from event_flows.renew_lease(self.session_id, self.lease, self.lease_ms)
                    self.renewed_at = now
                batch = self.next_batch(target)
                if not batch:
                    return
                yield from event_flows.append_stored(
                    context.pending, context.lifecycle, self.session_id, batch, self.lease
                )
                self.written(len(batch))
                if target is None:
                    return
        except SessionBusyError as exc:
            self.fenced = True
            error = self.taken_over()
            self.failed(error)
            raise error from exc
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
    dict, JSON text (:class:`~sessionstore.jsontext.JSONText`, ``msgspec.Raw``) or
    None."""
    if not isinstance(event_type, str):
        raise InvalidArgumentError(
            f"emit: the event type must be a str, not {_kind(event_type)} {event_type!r:.40}"
        )
    if not event_type:
        raise InvalidArgumentError("emit: the event type must not be empty")
    if data is not None and not isinstance(data, dict) and type(data) not in TEXT_TYPES:
        raise InvalidArgumentError(
            f"emit({event_type!r:.40}): data must be a dict, JSON text or None, not {_kind(data)}"
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
    buffer = WriterBuffer(
        header.id,
        next_seq,
        last_time,
        window=window,
        lease=lease,
        lease_ms=lease_ms,
        renews=renews,
    )
    telemetry.track_writer(buffer, context.backend)
    return buffer
