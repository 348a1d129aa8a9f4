"""Records into a store: the one writer that copy and import share.

:class:`NamespaceWriter` takes the records of :mod:`.records`, in their order, and
writes them into a store's namespace through the public API, exactly:

- a session is created with its header as stored (``created_at``, ``cwd``, fork
  lineage ``parent_id``/``fork_seq``) and its events are appended with their seqs,
  types, times (in whatever order they go), data and ids, a page per append. Every
  append names the seq it expects, so a run that was interrupted (a killed process,
  a lost connection) and run again goes on from the destination's next seq: the
  events already there are compared with the incoming ones first (the same canonical
  text), and a session whose stored events differ is refused, not overwritten.
  A session's expiry is set last, as the time left until the expiry it had; a session
  whose expiry has passed (a local store lists it until ``prune``) is left out.
- a value's plain record is written with ``set_data`` at its logical time, each
  history version with ``put`` at exactly its time (a recorded clear too); the expiry
  last, with ``set_ttl``. Writing a value again writes the same records: idempotent.
  A value whose key holds other records in the destination (another plain record, a
  history version the incoming value does not have) is refused, not overwritten.

What could not be written is collected in its ``problems`` (one line
each) and the run goes on with the next session or value; counts are in
its ``counts``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..codec import load_value
from ..contracts import Stored
from ..errors import SessionNotFoundError, SessionStoreError
from ..eventlog import event_text, header_differences
from ..keys import label_of
from ..models import SessionEvent
from ..results import ValueRef
from ..store import Store
from ..when import expired, now_ms
from .records import (
    PAGE,
    EventPage,
    Record,
    SessionDamaged,
    SessionEnd,
    SessionStart,
    ValueDamaged,
    ValueItem,
    value_item,
)

#: The shortest retention the copy gives something whose expiry has passed meanwhile.
EXPIRED_TTL = 0.001


@dataclass
class Counts:
    """What a run wrote and found."""

    sessions: int = 0
    events: int = 0
    #: Events found already in place (a resumed run, or a merge of the same data).
    present: int = 0
    values: int = 0
    #: Sessions that had a live writer: copied up to the seq named.
    live: dict[str, int] = field(default_factory=dict)
    #: Sessions left out because they had expired (a local store lists them until
    #: ``prune`` removes them).
    expired: list[str] = field(default_factory=list)
    #: Values left out because they had expired (named as ``symbol/strategy/...``).
    expired_values: list[str] = field(default_factory=list)


class _Open:
    """The session being written: its start and where the destination stands."""

    def __init__(self, start: SessionStart, stored: int) -> None:
        self.start = start
        self.stored = stored
        self.next = 0
        self.failed = False
        #: Expired: its records are passed over, silently.
        self.skipped = False
        self.prefix: Iterator[SessionEvent] | None = None


def label(ref: ValueRef) -> str:
    """``value 'SYM/strategy/exchange/frame/mode'``, for messages (see
    :meth:`~sessionstore.keys.ValueKey.label`)."""
    return f"value {label_of(ref[:5])!r}"


class NamespaceWriter:
    """Writes records into ``store``'s namespace (see the module docstring)."""

    def __init__(self, store: Store, page: int = PAGE) -> None:
        self.store = store
        self.page = page
        self.counts = Counts()
        self.problems: list[str] = []
        self._open: _Open | None = None

    def write(self, record: Record) -> None:
        if isinstance(record, SessionStart):
            self._begin(record)
        elif isinstance(record, EventPage):
            self._events(record)
        elif isinstance(record, SessionEnd):
            self._end(record)
        elif isinstance(record, SessionDamaged):
            self._fail(f"damaged in the source, written up to the damage ({record.error})")
            self._open = None
        elif isinstance(record, ValueDamaged):
            self.finish()
            self.problems.append(f"{label(record.ref)}: damaged in the source ({record.error})")
        else:
            self._value(record)

    def finish(self) -> None:
        """The stream has ended: a session still open was cut short."""
        if self._open is not None and not self._open.skipped:
            self._fail(
                f"the records of the session ended before its {self._open.start.next_seq} events"
            )
        self._open = None

    def _fail(self, why: str) -> None:
        current = self._open
        if current is not None and not current.failed:
            current.failed = True
            self.problems.append(f"session {current.start.header.id!r}: {why}")

    def _begin(self, start: SessionStart) -> None:
        self.finish()
        events = self.store.events
        header = start.header
        if expired(start.expires_at):
            self._open = _Open(start, 0)
            self._open.skipped = True
            self.counts.expired.append(header.id)
            return
        try:
            stored = events.info(header.id)
        except SessionNotFoundError:
            self._open = _Open(start, 0)
            events.create(header)
            return
        self._open = _Open(start, stored.next_seq)
        differs = header_differences(stored.header, header)
        if differs:
            self._fail(
                f"the destination holds another session of this id ({', '.join(differs)} differ)"
            )
        elif stored.next_seq > start.next_seq:
            self._fail(
                f"the destination holds {stored.next_seq} events, the source {start.next_seq}"
            )
        elif stored.next_seq:
            self._open.prefix = events.iter_events(header.id, batch=self.page)

    def _events(self, page: EventPage) -> None:
        current = self._open
        if (
            current is None
            or current.failed
            or current.skipped
            or page.session_id != current.start.header.id
        ):
            if current is None or page.session_id != current.start.header.id:
                self.problems.append(f"session {page.session_id!r}: events without its header")
            return
        fresh: list[SessionEvent] = []
        for event in page.events:
            if event.seq != current.next:
                self._fail(f"seq {event.seq} where {current.next} was due")
                return
            current.next += 1
            if event.seq >= current.stored:
                fresh.append(event)
                continue
            assert current.prefix is not None
            there = next(current.prefix, None)
            if there is None or event_text(there) != event_text(event):
                self._fail(f"the destination's event {event.seq} differs from the source's")
                return
            self.counts.present += 1
        if not fresh:
            return
        try:
            self.store.events.append(current.start.header.id, fresh)
        except SessionStoreError as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            return
        self.counts.events += len(fresh)

    def _end(self, end: SessionEnd) -> None:
        current = self._open
        self._open = None
        if current is None or end.session_id != current.start.header.id:
            self.problems.append(f"session {end.session_id!r}: an end without its header")
            return
        start = current.start
        if current.skipped:
            return
        if not current.failed and current.next != start.next_seq:
            self._open = current
            self._fail(f"{current.next} events where {start.next_seq} were announced")
            self._open = None
        if current.failed:
            return
        if current.next:
            self._retention(start)
        self.counts.sessions += 1
        if start.busy:
            self.counts.live[start.header.id] = start.next_seq

    def _retention(self, start: SessionStart) -> None:
        events, session_id = self.store.events, start.header.id
        if start.expires_at is None:
            if events.info(session_id).expires_at is not None:
                events.set_ttl(session_id, None)
            return
        left = max((start.expires_at - now_ms()) / 1000, EXPIRED_TTL)
        events.set_ttl(session_id, left)

    def _value(self, item: ValueItem) -> None:
        self.finish()
        ref = item.ref
        where = label_of(ref[:5])
        if expired(item.expires_at):
            self.counts.expired_values.append(where)
            return
        try:
            conflict = _conflict(item, value_item(self.store, ref), where)
            if conflict is not None:
                self.problems.append(f"{label(ref)}: {conflict}; not written, left as it was")
                return
            if item.plain is not None:
                plain = self.store.session(*item.parts, mode=ref.mode)
                value = (
                    None if item.plain.payload is None else load_value(item.plain.payload, where)
                )
                plain.set_data(value, item.plain.when)
            handle = self.store.session(*item.parts, mode=ref.mode, history=True)
            for version in item.versions:
                value = None if version.payload is None else load_value(version.payload, where)
                handle.put(value, version.when)
            # Also without an expiry: a write keeps the one an earlier run gave the value.
            left = None if item.expires_at is None else item.expires_at - now_ms()
            handle.set_ttl(None if left is None else max(left / 1000, EXPIRED_TTL))
        except SessionStoreError as exc:
            self.problems.append(f"{label(ref)}: {type(exc).__name__}: {exc}")
            return
        self.counts.values += 1


def _conflict(item: ValueItem, held: ValueItem, where: str) -> str | None:
    """Why the records ``held`` under the item's key in the destination are not the
    item's own (what an earlier run of the same copy wrote, or part of it), or None when
    they are."""
    if (
        item.plain is not None
        and held.plain is not None
        and not _same(item.plain, held.plain, where)
    ):
        return "the destination holds another plain record under this key"
    if item.versions and held.versions:
        incoming = {version.when: version for version in item.versions}
        for version in held.versions:
            other = incoming.get(version.when)
            if other is None or not _same(other, version, where):
                return (
                    "the destination's history under this key holds a version the source "
                    f"does not (at {version.when})"
                )
    return None


def _same(one: Stored, other: Stored, where: str) -> bool:
    """Whether two records hold the same value for the same time (the same value may
    be packed otherwise by another version of the codec)."""
    if one.when != other.when:
        return False
    if one.payload == other.payload:
        return True
    if one.payload is None or other.payload is None:
        return False
    return bool(load_value(one.payload, where) == load_value(other.payload, where))
