"""Copy a namespace from one store to another, and verify that two namespaces hold the
same (``sessionstore.copy``, ``sessionstore copy``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..arguments import check_flag
from ..connection import check_exists, resolve_url
from ..errors import InvalidArgumentError, SessionNotFoundError, SessionStoreError
from ..models import SessionInfo
from ..store import Store, connect
from ..when import expired, now_ms
from .intake import Counts, NamespaceWriter, label
from .records import (
    DAMAGE,
    PAGE,
    Digest,
    Record,
    ValueItem,
    read_namespace,
    value_digest,
    value_item,
)

#: Seconds two expiries may differ by and still count as the same (the copy sets the
#: time left, as read on one clock and applied on another).
EXPIRY_TOLERANCE_MS = 5_000


class NamespaceNotEmptyError(SessionStoreError):
    """The destination namespace holds sessions or values the source does not: a copy
    or an import into it needs ``merge``. Carries what was found (``sessions``,
    ``values``: how many of each)."""

    def __init__(self, namespace: str, sessions: int, values: int) -> None:
        self.namespace, self.sessions, self.values = namespace, sessions, values
        super().__init__(
            f"namespace {namespace!r} of the destination already holds other data "
            f"({sessions} sessions and {values} values the source does not have); "
            "merge to write into it anyway"
        )


@dataclass
class CopyReport:
    """What :func:`copy` did: :class:`~.intake.Counts` of what it wrote and found, and
    the ``problems`` (one line each: a session or value it could not write, a
    difference :func:`verify` found). Empty problems: everything was copied."""

    counts: Counts
    problems: list[str] = field(default_factory=list)
    #: The differences :func:`verify` found (None: not verified).
    differences: list[str] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and not self.differences


def other_data(source: Store, destination: Store) -> tuple[int, int]:
    """How many sessions and values ``destination``'s namespace holds that ``source``'s
    does not (by session id and value key)."""
    ids = {header.id for header in source.events.list()}
    refs = set(source.list_values())
    sessions = sum(header.id not in ids for header in destination.events.list())
    values = sum(ref not in refs for ref in destination.list_values())
    return sessions, values


def refuse_other_data(source: Store, destination: Store) -> None:
    sessions, values = other_data(source, destination)
    if sessions or values:
        raise NamespaceNotEmptyError(destination.namespace, sessions, values)


def write_all(
    records: Iterable[Record],
    writer: NamespaceWriter,
    on_record: Callable[[Record], None] | None = None,
) -> None:
    for record in records:
        writer.write(record)
        if on_record is not None:
            on_record(record)
    writer.finish()


def copy(
    from_url: str | os.PathLike[str],
    to_url: str | os.PathLike[str],
    namespace: str,
    *,
    to_namespace: str | None = None,
    merge: bool = False,
    verify: bool = False,
    timeout: float | None = None,
    on_record: Callable[[Record], None] | None = None,
) -> CopyReport:
    """Copy every event-log session and every session value of ``namespace`` in the
    store ``from_url`` to ``to_namespace`` (default: the same name) of the store
    ``to_url``, exactly: headers with their fork lineage, every event with its seq,
    type, time, data and id, every plain record and history version at its logical
    time, and the time each has left before it expires. Any two backends (files,
    SQLite, Redis, Redis Cluster, Sentinel); the same store with another namespace too.

    A destination namespace holding sessions or values the source does not have raises
    :class:`NamespaceNotEmptyError` unless ``merge``. A copy interrupted in any way and
    run again goes on where it stopped: each session from the destination's next seq,
    after checking that the events already there are the source's; values are written
    again (idempotent). A session with a live writer is copied up to the events
    committed when its turn came (``report.counts.live`` names it with that count).
    With ``verify``, both sides are then compared (:func:`verify`); the differences
    are in the report. Memory: one page of events, plus the listings of the two
    namespaces (one header or key per session or value)."""
    merge, verify = check_flag("merge", merge), check_flag("verify", verify)
    target = namespace if to_namespace is None else to_namespace
    if resolve_url(from_url) == resolve_url(to_url) and target == namespace:
        raise InvalidArgumentError(f"namespace {namespace!r} would be copied onto itself")
    with _pair(from_url, to_url, namespace, to_namespace, timeout) as (source, destination):
        if not merge:
            refuse_other_data(source, destination)
        if _any_live(source.events.list_info()):
            destination.check_durable()  # before any write, not at the first session
        writer = NamespaceWriter(destination)
        write_all(read_namespace(source), writer, on_record)
        report = CopyReport(writer.counts, writer.problems)
        if verify:
            report.differences = compare(source, destination, merge=merge)
    return report


def _any_live(infos: Iterable[SessionInfo]) -> bool:
    """Whether any of the sessions ``infos`` describe has not expired (and so is to be
    written: an expired one is left out)."""
    now = now_ms()
    return any(not expired(info.expires_at, now) for info in infos)


def opened(
    url: str | os.PathLike[str] | None,
    namespace: str,
    timeout: float | None,
    *,
    source: bool = False,
) -> Store:
    """The store of ``url``; a ``source`` (only read) must exist: a file or SQLite store
    whose path does not raises :class:`~sessionstore.errors.StoreNotFoundError`, and
    nothing is created."""
    resolved = resolve_url(url)
    if source:
        check_exists(resolved)
    return connect(resolved, namespace, timeout=timeout)


@contextmanager
def _pair(
    from_url: str | os.PathLike[str] | None,
    to_url: str | os.PathLike[str] | None,
    namespace: str,
    to_namespace: str | None,
    timeout: float | None,
) -> Iterator[tuple[Store, Store]]:
    target = namespace if to_namespace is None else to_namespace
    source = opened(from_url, namespace, timeout, source=True)
    with source:
        destination = opened(to_url, target, timeout)
        with destination:
            yield source, destination


@dataclass(frozen=True, slots=True)
class Summary:
    """How a session or a value reads: its record count, digest and expiry."""

    count: int
    digest: str
    expires_at: int | None


def session_summary(store: Store, session_id: str) -> Summary | None:
    """None when the session is absent or expired (a local store lists it until
    ``prune``: a copy leaves it out)."""
    try:
        info = store.events.info(session_id)
    except SessionNotFoundError:
        return None
    if expired(info.expires_at):
        return None
    digest = Digest()
    digest.header(info.header)
    for event in store.events.iter_events(session_id):
        digest.event(event)
    return Summary(digest.count, digest.hexdigest(), info.expires_at)


def value_summary(item: ValueItem) -> Summary | None:
    count = len(item.versions) + (item.plain is not None)
    return Summary(count, value_digest(item), item.expires_at) if count else None


def _differs(what: str, one: Summary | None, other: Summary | None) -> Iterator[str]:
    if one is None and other is None:
        return
    if one is None or other is None:
        side = "destination" if other is None else "source"
        yield f"{what}: missing from the {side}"
        return
    if one.count != other.count:
        yield f"{what}: {one.count} records in the source, {other.count} in the destination"
    elif one.digest != other.digest:
        yield f"{what}: the records differ (digest {one.digest[:12]} != {other.digest[:12]})"
    if (one.expires_at is None) != (other.expires_at is None) or (
        one.expires_at is not None
        and other.expires_at is not None
        and abs(one.expires_at - other.expires_at) > EXPIRY_TOLERANCE_MS
    ):
        yield (
            f"{what}: expires at {one.expires_at} in the source, "
            f"{other.expires_at} in the destination"
        )


def compare(source: Store, destination: Store, *, merge: bool = False) -> list[str]:
    """Every difference between the two namespaces, one line each: a session or value
    missing from one side, or whose records (count, then a SHA-256 of the header and
    every event's canonical text, or of every record's time and msgpack payload) or
    expiry differ. With ``merge``, what only the destination holds is no difference."""
    found: list[str] = []
    one_store, other_store = source, destination
    ids = [header.id for header in one_store.events.list()]
    for session_id in ids:
        what = f"session {session_id!r}"
        try:
            one = session_summary(one_store, session_id)
        except DAMAGE as exc:
            found.append(f"{what}: damaged in the source ({exc})")
            continue
        try:
            other = session_summary(other_store, session_id)
        except DAMAGE as exc:
            found.append(f"{what}: damaged in the destination ({exc})")
            continue
        found += _differs(what, one, other)
    refs = one_store.list_values()
    for start in range(0, len(refs), PAGE):
        chunk = refs[start : start + PAGE]
        for ref in chunk:
            what = label(ref)
            try:
                one = value_summary(value_item(one_store, ref))
                other = value_summary(value_item(other_store, ref))
            except DAMAGE as exc:
                found.append(f"{what}: damaged ({exc})")
                continue
            found += _differs(what, one, other)
    if not merge:
        known = set(ids)
        for header in other_store.events.list():
            if header.id not in known:
                found.append(f"session {header.id!r}: only in the destination")
        known_refs = set(refs)
        for ref in other_store.list_values():
            if ref not in known_refs:
                found.append(f"{label(ref)}: only in the destination")
    return found


def verify(
    from_url: str | os.PathLike[str],
    to_url: str | os.PathLike[str],
    namespace: str,
    *,
    to_namespace: str | None = None,
    merge: bool = False,
    timeout: float | None = None,
) -> list[str]:
    """:func:`compare` of ``namespace`` of ``from_url`` with ``to_namespace`` (default:
    the same) of ``to_url``: an empty list when both hold the same."""
    merge = check_flag("merge", merge)
    with _pair(from_url, to_url, namespace, to_namespace, timeout) as (source, destination):
        return compare(source, destination, merge=merge)


__all__ = ["CopyReport", "NamespaceNotEmptyError", "copy", "verify"]
