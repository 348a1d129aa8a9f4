"""What a namespace holds, as a stream of records: the one reader that copy, export and
verify share.

:func:`read_namespace` yields, for every event-log session, a :class:`SessionStart`
(header, committed event count, expiry), then its events in :class:`EventPage` pages
of at most ``page`` events, then a :class:`SessionEnd`; then one :class:`ValueItem` per
session value (its plain record and every history version, each with its logical time,
and its expiry). Only the public API is used, and memory is one page of events at a
time plus one header or value reference per session or value (the listings the public
API gives).

A session with a live writer is read up to a consistent point: the committed events
counted by :meth:`~sessionstore.EventLog.info` when its turn came, never a later
event; its :class:`SessionStart` says it was ``busy``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..contracts import Stored
from ..errors import (
    CorruptDataError,
    SessionNotFoundError,
    SessionStoreError,
    UnsupportedVersionError,
)
from ..eventlog import event_text
from ..models import SessionEvent, SessionHeader, SessionInfo
from ..results import ValueRecords, ValueRef
from ..store import Store

#: Events per page (read and written at a time; one append each).
PAGE = 1000
#: What makes a stored session unreadable (as opposed to a store that cannot be reached).
DAMAGE = (CorruptDataError, UnsupportedVersionError)


@dataclass(frozen=True, slots=True)
class SessionStart:
    """A session begins: its header, how many committed events follow (``next_seq``),
    its expiry (epoch ms, None: never) and whether a live writer held its lease."""

    header: SessionHeader
    next_seq: int
    expires_at: int | None = None
    busy: bool = False


@dataclass(frozen=True, slots=True)
class EventPage:
    """Consecutive events of the session begun last."""

    session_id: str
    events: list[SessionEvent]


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """The session begun last is complete."""

    session_id: str


@dataclass(frozen=True, slots=True)
class SessionDamaged:
    """The session begun last cannot be read on from here (``error``: a
    ``CorruptDataError`` or ``UnsupportedVersionError`` of the source); the records
    before it stand, no :class:`SessionEnd` follows."""

    session_id: str
    error: SessionStoreError


@dataclass(frozen=True, slots=True)
class ValueDamaged:
    """A value whose records cannot be read (``error``, a ``CorruptDataError``)."""

    ref: ValueRef
    error: SessionStoreError


@dataclass(frozen=True, slots=True)
class ValueItem:
    """One session value: its key, its plain record (or None), its history versions
    (oldest first) and its expiry (epoch ms, None: never)."""

    ref: ValueRef
    plain: Stored | None
    versions: list[Stored] = field(default_factory=list)
    expires_at: int | None = None

    @property
    def parts(self) -> tuple[str, str, str, str]:
        return self.ref.symbol, self.ref.strategy, self.ref.exchange, self.ref.frame


Record = SessionStart | EventPage | SessionEnd | SessionDamaged | ValueItem | ValueDamaged
#: When each of some values expires (epoch ms, None: never), in their order.


def events_upto(
    store: Store, session_id: str, stop: int, page: int = PAGE
) -> Iterator[list[SessionEvent]]:
    """The committed events of a session with seq below ``stop``, ``page`` at a time."""
    if stop <= 0:
        return
    chunk: list[SessionEvent] = []
    for event in store.events.iter_events(session_id, batch=page):
        if event.seq >= stop:
            break
        chunk.append(event)
        if len(chunk) == page:
            yield chunk
            chunk = []
            if event.seq + 1 >= stop:
                return
    if chunk:
        yield chunk


def value_item(store: Store, ref: ValueRef) -> ValueItem:
    """The records of one value and when it expires, as
    :meth:`~sessionstore.Session.records` reads them."""
    handle = store.session(*ref[:4], mode=ref.mode)
    try:
        found: ValueRecords = handle.records()
    finally:
        handle.dispose()
    expires_at = found.history_expires_at if ref.history else found.plain_expires_at
    return ValueItem(ref, found.plain, list(found.versions), expires_at)


def read_namespace(store: Store, page: int = PAGE) -> Iterator[Record]:
    """Every session (with its events) and every value of ``store``'s namespace, as
    records (see the module docstring). A session deleted or expired while the
    stream runs is left out; one that vanishes midway ends short (its writer or a
    verify then sees fewer events than its start announced); one whose events cannot be
    read ends with a :class:`SessionDamaged` and the stream goes on."""
    for info in store.events.list_info():
        try:
            info = store.events.info(info.header.id)
        except (SessionNotFoundError, *DAMAGE):
            continue  # gone, or its metadata damaged since list_info read it
        yield from session_records(store, info, page)
    refs = store.list_values()
    for start in range(0, len(refs), page):
        chunk = refs[start : start + page]
        for ref in chunk:
            try:
                item = value_item(store, ref)
            except DAMAGE as exc:
                yield ValueDamaged(ref, exc)
                continue
            if item.plain is not None or item.versions:
                yield item


def session_records(store: Store, info: SessionInfo, page: int = PAGE) -> Iterator[Record]:
    session_id = info.header.id
    yield SessionStart(info.header, info.next_seq, info.expires_at, info.busy)
    try:
        for chunk in events_upto(store, session_id, info.next_seq, page):
            yield EventPage(session_id, chunk)
    except DAMAGE as exc:
        yield SessionDamaged(session_id, exc)
        return
    yield SessionEnd(session_id)


class Digest:
    """A running SHA-256 of a session (header and events) or of a value (its records)."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.count = 0

    def header(self, header: SessionHeader) -> None:
        self._hash.update(header.model_dump_json().encode() + b"\n")

    def event(self, event: SessionEvent) -> None:
        self._hash.update(event_text(event) + b"\n")
        self.count += 1

    def stored(self, label: bytes, record: Stored) -> None:
        payload = b"-" if record.payload is None else record.payload.hex().encode()
        self._hash.update(label + b" %d " % record.when + payload + b"\n")
        self.count += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def value_digest(item: ValueItem) -> str:
    digest = Digest()
    if item.plain is not None:
        digest.stored(b"plain", item.plain)
    for version in item.versions:
        digest.stored(b"version", version)
    return digest.hexdigest()
