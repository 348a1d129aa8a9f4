"""The operations on event logs (:class:`sessionstore.EventLog`, its async twin and the
writers), each written once as a flow (see :mod:`sessionstore.flows`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from .arguments import check_poll, check_ttl
from .contracts import EventBackend, EventBatch
from .errors import (
    ConcurrentModificationError,
    HarnessFieldError,
    InvalidArgumentError,
    SeqConflictError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
)
from .eventlog import (
    check_batch,
    check_header,
    check_seq,
    check_session_id,
    closers,
    encode_batch,
    header_differences,
)
from .flows import Call, Flow
from .jsondata import short_repr
from .leases import Lease, taken_over
from .models import EARLIEST_TIME, SessionEvent, SessionHeader, SessionInfo
from .records import StoredRecord
from .results import LoadedSession, is_probe
from .store_state import Lifecycle, PendingSessions
from .when import now_ms

#: How many times in a row ``load`` reads and repairs, its repair overtaken by a
#: concurrent append each time, before it gives up.
REPAIR_ATTEMPTS = 50


def _open(lifecycle: Lifecycle) -> None:
    lifecycle.check_open()


def check_durable(lifecycle: Lifecycle) -> Flow[None]:
    _open(lifecycle)
    yield Call(EventBackend.check_durable)


def create(
    pending: PendingSessions, lifecycle: Lifecycle, header: SessionHeader, ttl_ms: int | None
) -> Flow[None]:
    _open(lifecycle)
    checked = pending.check_new(header)
    if (yield Call(EventBackend.exists, checked.id)):
        raise SessionExistsError(checked.id)
    pending.add(checked, ttl_ms)


def append(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    session_id: str,
    events: Iterable[SessionEvent | Mapping[str, Any]],
    expected: SessionHeader | None = None,
) -> Flow[int]:
    _open(lifecycle)
    header, ttl_ms = pending.lookup(session_id)
    if expected is not None:
        expected = _expected_header(session_id, expected)
        if header is not None and header != expected:
            # This store's create, never written: the caller names the log stored (or
            # to store) instead, which the backend judges; the create is dropped.
            pending.discard(session_id)
            ttl_ms = None
        header = expected
    batch = encode_batch(session_id, events)
    if not batch:
        if header is not None and expected is None:
            return 0
        try:
            stored_header, stored = yield Call(EventBackend.read, session_id, 0)
        except SessionNotFoundError:
            if expected is None:
                raise
            return 0  # nothing to store, nothing stored
        if expected is not None and stored_header != expected:
            raise SessionExistsError(session_id, header_differences(stored_header, expected))
        return len(stored)
    call = Call(EventBackend.append, session_id, batch, header, ttl_ms=ttl_ms)
    return (yield from _append_created(pending, header, call))


#: The headers appends named lately, checked (by identity: a header is frozen, so one
#: checked stays valid, and holding it here keeps its id from being reused).
_CHECKED_HEADERS: dict[int, SessionHeader] = {}
_CHECKED_KEPT = 256


def _expected_header(session_id: str, header: object) -> SessionHeader:
    """The ``header`` an append names (the session as its caller read it), checked."""
    known = _CHECKED_HEADERS.get(id(header))
    if known is not None and known is header:
        checked = known
    else:
        checked = check_header(header)
        if len(_CHECKED_HEADERS) >= _CHECKED_KEPT:
            _CHECKED_HEADERS.clear()
        _CHECKED_HEADERS[id(checked)] = checked
    if checked.id != session_id:
        raise InvalidArgumentError(
            f"the header given to an append to session {short_repr(session_id)} is of"
            f" session {short_repr(checked.id)}"
        )
    return checked


def _append_created(
    pending: PendingSessions, header: SessionHeader | None, call: Call
) -> Flow[int]:
    """Make ``call`` (an append); a pending ``header`` is forgotten once the append
    stored it, or once the append found the session stored with another header (the
    :class:`SessionExistsError` raised then says the create did not take, as
    :meth:`create` of a stored id says it: later appends go to the stored session)."""
    try:
        next_seq: int = yield call
    except SessionExistsError:
        if header is not None:
            pending.materialised(header)
        raise
    if header is not None:
        pending.materialised(header)
    return next_seq


def append_stored(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    session_id: str,
    batch: EventBatch,
    lease: Lease,
) -> Flow[int]:
    """:func:`append` of a batch a writer encoded (and so checked) when it was emitted,
    fenced by the writer's ``lease``: :class:`SessionBusyError` when another writer took
    the lease over (whether it still holds it or not)."""
    _open(lifecycle)
    header, ttl_ms = pending.lookup(session_id)
    call = Call(EventBackend.append, session_id, batch, header, ttl_ms=ttl_ms, lease=lease)
    return (yield from _append_created(pending, header, call))


def load(lifecycle: Lifecycle, session_id: str, lease: Lease | None = None) -> Flow[LoadedSession]:
    """Read and repair; a session whose lease a live writer other than ``lease``'s owner
    holds raises :class:`SessionBusyError` (its open turn is not interrupted). The
    closers of a writer opening (``lease`` given) are fenced by its lease."""
    _open(lifecycle)
    check_session_id(session_id)
    owner = None if lease is None else lease.owner
    if (yield Call(EventBackend.lease_busy, session_id, owner)):
        raise SessionBusyError(session_id)
    for _ in range(REPAIR_ATTEMPTS):
        header, events = yield Call(EventBackend.read, session_id, 0, repair=True)
        extra = closers(events)
        if not extra:
            return LoadedSession(header, events)
        try:
            closing = encode_batch(session_id, extra)
            yield Call(EventBackend.append, session_id, closing, None, lease=lease)
        except SeqConflictError:
            continue
        return LoadedSession(header, events + extra)
    raise ConcurrentModificationError(f"session {session_id!r} kept changing during load")


def inspect_session(lifecycle: Lifecycle, session_id: str) -> Flow[LoadedSession]:
    """What :func:`load` returns, closers included, without writing anything and
    without looking at the lease."""
    _open(lifecycle)
    header, events = yield Call(EventBackend.read, check_session_id(session_id), 0)
    return LoadedSession(header, events + closers(events))


def info(lifecycle: Lifecycle, session_id: str) -> Flow[SessionInfo]:
    _open(lifecycle)
    found: SessionInfo = yield Call(EventBackend.info, check_session_id(session_id))
    return found


def set_retention(lifecycle: Lifecycle, session_id: str, ttl: object) -> Flow[int | None]:
    _open(lifecycle)
    check_session_id(session_id)
    ttl_ms = check_ttl(ttl)
    expires_at: int | None = yield Call(EventBackend.set_retention, session_id, ttl_ms)
    return expires_at


def stored_bytes(lifecycle: Lifecycle, session_id: str) -> Flow[int]:
    _open(lifecycle)
    size: int = yield Call(EventBackend.stored_bytes, check_session_id(session_id))
    return size


def list_info(lifecycle: Lifecycle) -> Flow[list[SessionInfo]]:
    _open(lifecycle)
    found: list[SessionInfo] = yield Call(EventBackend.list_info)
    listed = [info for info in found if not is_probe(info.header.id)]
    return sorted(listed, key=lambda i: (i.header.created_at, i.header.id))


def open_writer(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    header: SessionHeader,
    ttl_ms: int | None,
    owner: str,
    lease_ms: int,
) -> Flow[tuple[int, int, Lease]]:
    """Take the session's lease for ``owner``, then find where a writer continues: (next
    seq, last time) of the repaired log, creating the session when it does not exist,
    and the lease taken (its epoch fences the writer's appends).

    :class:`SessionBusyError` when another live writer holds the lease;
    :class:`SessionExistsError` naming the differing fields when the stored (or
    pending) header differs from ``header``. On any error the lease is given up (a flow
    its driver closes early can call nothing more: its lease then expires)."""
    _open(lifecycle)
    session_id = header.id
    epoch = yield Call(EventBackend.acquire_lease, session_id, owner, lease_ms)
    if not epoch:
        raise SessionBusyError(session_id)
    lease = Lease(owner, int(epoch))
    try:
        try:
            loaded = yield from load(lifecycle, session_id, lease)
        except SessionNotFoundError:
            waiting, _ = pending.lookup(session_id)
            if waiting is None:
                yield from create(pending, lifecycle, header, ttl_ms)
            elif waiting != header:
                raise SessionExistsError(session_id, header_differences(waiting, header)) from None
            return 0, EARLIEST_TIME, lease
        if loaded.header != header:
            raise SessionExistsError(session_id, header_differences(loaded.header, header))
        return (*next_position(loaded), lease)
    except BaseException as exc:
        if not isinstance(exc, GeneratorExit):  # a closed flow can call nothing more
            yield from release_lease(session_id, owner)
        raise


def renew_lease(session_id: str, lease: Lease, lease_ms: int) -> Flow[None]:
    """Renew ``lease``; :class:`SessionBusyError` when another writer took it over (it
    expired meanwhile), whether that writer still holds it or not."""
    if not (yield Call(EventBackend.renew_lease, session_id, lease, lease_ms)):
        raise taken_over(session_id)


def release_lease(session_id: str, owner: str) -> Flow[None]:
    """Give the lease up; a failure here is not the caller's: the lease then expires."""
    with contextlib.suppress(Exception):  # it ends by itself (or with the process)
        yield Call(EventBackend.release_lease, session_id, owner)


def fork(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    parent_id: str,
    child_id: str,
    at_seq: int | None,
    ttl_ms: int | None,
) -> Flow[SessionHeader]:
    """Create ``child_id`` from the parent's committed events below ``at_seq`` (all when
    None), written in one atomic append; a fork of no events is created lazily."""
    _open(lifecycle)
    check_session_id(parent_id)
    check_session_id(child_id)
    if at_seq is not None:
        check_seq(at_seq)
    parent, events = yield Call(EventBackend.read, parent_id, 0, limit=at_seq)
    if at_seq is not None and len(events) < at_seq:
        raise InvalidArgumentError(
            f"fork at seq {at_seq}: session {parent_id!r:.80} has only {len(events)}"
            " committed events"
        )
    child = SessionHeader(id=child_id, cwd=parent.cwd, parent_id=parent_id, fork_seq=len(events))
    pending.check_new(child)
    if (yield Call(EventBackend.exists, child_id)):
        raise SessionExistsError(child_id)
    if not events:
        pending.add(child, ttl_ms)
        return child
    yield Call(EventBackend.append, child_id, encode_batch(child_id, events), child, ttl_ms=ttl_ms)
    return child


def read_from(
    lifecycle: Lifecycle, session_id: str, seq: int, limit: int | None = None
) -> Flow[list[SessionEvent]]:
    check_seq(seq)
    _open(lifecycle)
    _, events = yield Call(EventBackend.read, check_session_id(session_id), seq, limit=limit)
    return events


def read_records_from(lifecycle: Lifecycle, session_id: str, seq: int) -> Flow[list[StoredRecord]]:
    check_seq(seq)
    _open(lifecycle)
    _, records = yield Call(EventBackend.read_records, check_session_id(session_id), seq)
    return records


class EventPages:
    """Where a stream of one session's committed events is, and what it reads next: the
    one implementation of ``iter_events`` (:meth:`paged`) and ``follow``
    (:meth:`following`). A shell runs :meth:`next` and hands out the events it returns
    until :attr:`done`."""

    def __init__(
        self, lifecycle: Lifecycle, session_id: str, seq: int, batch: int | None, poll: float
    ) -> None:
        self.lifecycle = lifecycle
        self.session_id = session_id
        #: The seq the next read starts at.
        self.seq = seq
        #: The size of a page; None (follow) reads everything committed from :attr:`seq`.
        self.batch = batch
        self.poll = poll
        #: Set once a page came back short: every committed event was handed out.
        self.done = False

    @classmethod
    def paged(cls, lifecycle: Lifecycle, session_id: str, batch: object) -> EventPages:
        """The events from seq 0, ``batch`` at a time, up to the end of the log: a bad
        ``batch`` (not an int >= 1) raises :class:`InvalidArgumentError`."""
        return cls(lifecycle, session_id, 0, check_batch(batch), 0.0)

    @classmethod
    def following(
        cls, lifecycle: Lifecycle, session_id: str, from_seq: object, poll: object
    ) -> EventPages:
        """The events from ``from_seq`` on, without end: when none is new, :meth:`next`
        waits for one up to ``poll`` seconds (:meth:`EventBackend.wait_for_events`)."""
        return cls(lifecycle, session_id, check_seq(from_seq), None, check_poll(poll))

    def next(self) -> Flow[list[SessionEvent]]:
        """The next page of committed events (none while a follow waits)."""
        chunk = yield from read_from(self.lifecycle, self.session_id, self.seq, self.batch)
        if chunk:
            self.seq = chunk[-1].seq + 1
        if self.batch is not None:
            self.done = len(chunk) < self.batch
        elif not chunk:
            yield Call(EventBackend.wait_for_events, self.session_id, self.seq, self.poll)
        return chunk


def list_sessions(lifecycle: Lifecycle) -> Flow[list[SessionHeader]]:
    _open(lifecycle)
    headers: list[SessionHeader] = yield Call(EventBackend.list)
    return sorted((h for h in headers if not is_probe(h.id)), key=lambda h: (h.created_at, h.id))


def prune(lifecycle: Lifecycle) -> Flow[int]:
    _open(lifecycle)
    removed: int = yield Call(EventBackend.prune, now_ms())
    return removed


def delete_session(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    session_id: str,
    last: SessionEvent | None = None,
) -> Flow[None]:
    _open(lifecycle)
    check_session_id(session_id)
    if last is None:
        if pending.discard(session_id) and not (yield Call(EventBackend.exists, session_id)):
            return
        yield Call(EventBackend.delete, session_id)
        return
    if not isinstance(last, SessionEvent):
        raise InvalidArgumentError(
            f"delete of session {session_id!r}: last must be a SessionEvent read from the "
            f"log, not {type(last).__name__}"
        )
    # Checked as an append checks it: an event no log can hold matches none. (Its
    # harness fields are not: a log written before append checked them holds such.)
    with contextlib.suppress(HarnessFieldError):
        encode_batch(session_id, [last])
    try:
        yield Call(EventBackend.delete, session_id, last=last)
    except SessionNotFoundError:
        if pending.lookup(session_id)[0] is None:
            raise
        # Created here and not stored yet: the session holds no event.
        raise SeqConflictError(session_id, last.seq + 1, 0, "the session holds no event") from None
    pending.discard(session_id)


def next_position(loaded: LoadedSession) -> tuple[int, int]:
    """(next seq, last time) of a loaded session: where a writer continues (a log
    without events has no last time: any time may come first, one before 1970 too)."""
    last = loaded.events[-1] if loaded.events else None
    return (last.seq + 1, last.time) if last else (0, EARLIEST_TIME)
