"""Event logs of the SQLite backend: ``log_sessions`` (header, ``next_seq``) and
``log_events`` (one row per event), in the tables described in :mod:`.sqlite_schema`.

``next_seq`` is committed in the same transaction as the events, so a row at or past
it can only come from outside damage; it is treated as a torn tail.

An append touches only the session row, the rows it compares for an applied replay and
the rows at or past ``next_seq``, so it costs the same however long the log is; a row lost
below ``next_seq`` is found by ``read``.

An append to a session whose row this instance has read and validated, or written, before
(its header and ``ttl_ms``) is two statements in one ``BEGIN IMMEDIATE`` transaction: an
``UPDATE`` of the session row that moves ``next_seq`` only if the row still holds that
header and ``ttl_ms``, ``next_seq`` is the batch's first seq, no event row is at or past it
(no torn tail) and, for a writer's append, no lease row holds a newer epoch (the
remembered state is checked again under the write lock, so another process's append,
delete, lease or damage is never missed), then multi-row ``INSERT`` statements of the
events. Any other append (a new session, a replay, a conflict, a torn tail, a newer lease,
a row that does not match) checks the lease, reads the session row and judges it, and cuts
the torn tail, first.

A read is one ``SELECT`` (a single statement reads one snapshot of the file, so no
transaction is needed): the session row and the committed events it asks for, never a row
at or past ``next_seq``. A repairing read also asks whether a torn tail is there; only
then does it read again and cut the tail in a ``BEGIN IMMEDIATE`` transaction.

Leases: ``log_leases`` holds the writer's lease of a session, (``owner``,
``expires_at``, ``epoch``); it is taken, renewed and checked in ``BEGIN IMMEDIATE``
transactions. One that has expired is free; a released one keeps its row (owner ``''``,
``expires_at`` 0), so the newest ``epoch`` stays until the session is deleted or
pruned. A writer's append reads it in its own transaction, before anything else: a
newer epoch than the writer's refuses the append (fencing). Lease transactions
commit without waiting for the disk: every process sees them at once, and what a power
loss could undo (a lease taken, renewed or released just before it) matters to no
process, since none outlives it.

Metadata (:meth:`SqliteEvents.info`): the session row, the time of the event row just
below ``next_seq`` and the lease row, in one statement.

Retention: a session row stores its ``ttl_ms`` and ``expires_at``; every append to a
session with a ``ttl_ms`` moves ``expires_at`` in its own transaction (without one,
``expires_at`` stays NULL). :meth:`SqliteEvents.prune` deletes an expired session's row
and all its event rows in one transaction.
"""

# Over 600 lines: one EventBackend over two tables, its statements shared by the append,
# read, info and prune paths, and the one-statement append and read beside their full
# checks, which must be read together. The rows' decoding is :mod:`.sqlite_log_rows`.

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ..contracts import EventBackend, EventBatch
from ..errors import (
    CorruptLogError,
    SessionExistsError,
    SessionNotFoundError,
    UnsupportedVersionError,
)
from ..eventlog import (
    check_ends_with,
    check_stored_version,
    data_of_text,
    event_text,
    plan_append,
)
from ..gcdefer import deferred_collection
from ..jsondata import short_repr
from ..leases import Lease, next_epoch, taken, taken_over
from ..models import (
    INT64_MAX,
    SessionEvent,
    SessionHeader,
    SessionInfo,
    built_events,
    describe_invalid,
    events_from_records,
)
from ..when import now_ms as wall_clock_ms
from .sqlite_db import Database
from .sqlite_log_rows import (
    checked_ttl,
    columns,
    fetch_rows,
    row_header,
    row_record,
    session_info,
)

_SESSION_COLUMNS = "version, created_at, cwd, parent_id, fork_seq, next_seq"
_EVENT_COLUMNS = "seq, type, time, data, event_id"

_CREATE_SESSION = (
    f"INSERT INTO log_sessions (namespace, id, {_SESSION_COLUMNS}, ttl_ms, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SET_NEXT_SEQ = "UPDATE log_sessions SET next_seq=?, expires_at=? WHERE namespace=? AND id=?"


def _advance_sql(ttl: bool, lease: bool) -> str:
    """The ``UPDATE`` of :meth:`SqliteEvents._advance`, for a session with a ttl or
    without (its ``expires_at`` is NULL and stays so), and for a writer's append (fenced
    by its lease) or a plain one. Parameters: namespace, session id, the batch's first
    seq, the new next seq, the header's columns, the lease's epoch, ``ttl_ms`` and the
    new ``expires_at``."""
    return (
        "UPDATE log_sessions SET next_seq=?4"
        + (", expires_at=?12" if ttl else "")
        + " WHERE namespace=?1 AND id=?2 AND next_seq=?3 AND version=?5 AND created_at=?6"
        " AND cwd IS ?7 AND parent_id IS ?8 AND fork_seq IS ?9"
        + (" AND ttl_ms=?11" if ttl else " AND ttl_ms IS NULL AND expires_at IS NULL")
        + " AND NOT EXISTS (SELECT 1 FROM log_events"
        " WHERE namespace=?1 AND session_id=?2 AND seq >= ?3)"
        + (
            " AND NOT EXISTS (SELECT 1 FROM log_leases"
            " WHERE namespace=?1 AND session_id=?2 AND epoch > ?10)"
            if lease
            else ""
        )
    )


#: :func:`_advance_sql` by (ttl, lease).
_ADVANCE = {
    (ttl, lease): _advance_sql(ttl, lease) for ttl in (False, True) for lease in (False, True)
}
_SELECT_SESSION = f"SELECT {_SESSION_COLUMNS}, ttl_ms FROM log_sessions WHERE namespace=? AND id=?"
_CUT_TAIL = "DELETE FROM log_events WHERE namespace=? AND session_id=? AND seq >= ?"


def _read_sql(repair: bool) -> str:
    """:meth:`SqliteEvents.read` in one statement (one snapshot). Its rows, in this order
    (``ORDER BY`` the first column, which each part of the compound already reads in
    order: SQLite merges them without sorting): ``(-2, version, created_at, cwd,
    parent_id)`` and ``(-1, fork_seq, next_seq, ttl_ms, torn)`` of the session row (none
    without one; ``torn``: whether an event row is at or past ``next_seq``, asked only
    for a repair, else NULL), then the event rows from seq ``?3`` below both
    ``next_seq`` and ``?4``. Five columns, not the header's beside every event: each
    column of each row costs the driver an object."""
    torn = (
        "EXISTS (SELECT 1 FROM log_events WHERE namespace=?1 AND session_id=?2 AND seq >= next_seq)"
        if repair
        else "NULL"
    )
    session = " FROM log_sessions WHERE namespace=?1 AND id=?2"
    return (
        f"SELECT -2, version, created_at, cwd, parent_id{session}"
        f" UNION ALL SELECT -1, fork_seq, next_seq, ttl_ms, {torn}{session}"
        f" UNION ALL SELECT {_EVENT_COLUMNS} FROM log_events"
        " WHERE namespace=?1 AND session_id=?2 AND seq >= ?3"
        f" AND seq < MIN((SELECT next_seq{session}), ?4) ORDER BY 1"
    )


_READ = _read_sql(repair=False)
_READ_REPAIR = _read_sql(repair=True)
#: The columns of :meth:`SqliteEvents.info`: the session row, the last committed event's
#: time and whether a live lease is held (parameter 1: now).
_INFO = (
    f"SELECT s.id, s.{_SESSION_COLUMNS.replace(', ', ', s.')}, s.expires_at,"
    " (SELECT e.time FROM log_events e WHERE e.namespace=s.namespace AND e.session_id=s.id"
    " AND e.seq=s.next_seq - 1),"
    " EXISTS (SELECT 1 FROM log_leases l WHERE l.namespace=s.namespace AND l.session_id=s.id"
    " AND l.expires_at > ?1)"
    " FROM log_sessions s WHERE s.namespace=?2"
)
#: The most event rows one INSERT statement carries (5 parameters each).
_CHUNK = 64
#: The fewest events :meth:`SqliteEvents._checked` builds with ``built_events``.
_BUILT_FROM = 16
#: How many validated session rows an instance remembers for :meth:`SqliteEvents._advance`.
_KNOWN_SESSIONS = 1024

logger = logging.getLogger("sessionstore")


@functools.cache
def _insert_sql(rows: int) -> str:
    """An INSERT of ``rows`` event rows; parameters: namespace, session id, then (seq,
    type, time, data, event_id) per row."""
    values = ", ".join(["(?1, ?2, ?, ?, ?, ?, ?)"] * rows)
    return (
        "INSERT INTO log_events (namespace, session_id, seq, type, time, data, event_id)"
        f" VALUES {values}"
    )


class SqliteEvents(EventBackend):
    """Session event logs of one namespace: ``log_sessions`` and ``log_events``."""

    def __init__(self, database: Database, namespace: str) -> None:
        self._db = database
        self._ns = namespace
        #: The table named in errors about a session row.
        self._where = f"{database.path} (log_sessions)"
        #: Session id -> (header, its columns, ttl_ms) last validated from its row.
        self._known: dict[str, tuple[SessionHeader, tuple[object, ...], int | None]] = {}

    def locate(self, session_id: str) -> str | None:
        return None

    def exists(self, session_id: str) -> bool:
        with self._db.guard(session_id) as conn:
            row = conn.execute(
                "SELECT 1 FROM log_sessions WHERE namespace=? AND id=?", (self._ns, session_id)
            ).fetchone()
        return row is not None

    def append(
        self,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
        lease: Lease | None = None,
    ) -> int:
        with self._db.transaction(session_id, immediate=True) as conn:
            first = batch.events[0].seq
            new_next = first + len(batch)
            if not self._advance(conn, session_id, header, first, new_next, lease):
                if lease is not None and self._fences_off_in(conn, session_id, lease):
                    raise taken_over(session_id)
                found = self._session(conn, session_id)
                if found is not None:
                    stored, next_seq, stored_ttl = found
                    if header is not None and header != stored:
                        raise SessionExistsError(session_id)
                    ttl_ms = checked_ttl(session_id, stored_ttl)
                    self._remember(session_id, stored, ttl_ms)
                elif header is not None:
                    stored, next_seq = header, 0
                else:
                    raise SessionNotFoundError(session_id)

                def stored_texts(first: int, last: int) -> list[bytes]:
                    found = self._events(conn, session_id, first, last - first + 1)
                    return [event_text(event) for event in found]

                if not plan_append(session_id, next_seq, batch, stored_texts):
                    return next_seq
                expires_at = None if ttl_ms is None else wall_clock_ms() + ttl_ms
                if found is None:
                    conn.execute(
                        _CREATE_SESSION,
                        (self._ns, session_id, *columns(stored), new_next, ttl_ms, expires_at),
                    )
                    if ttl_ms is None or (type(ttl_ms) is int and ttl_ms > 0):
                        self._remember(session_id, stored, ttl_ms)
                else:
                    conn.execute(_SET_NEXT_SEQ, (new_next, expires_at, self._ns, session_id))
                # The torn tail starts at the committed next seq, which is ``first`` here.
                self._cut_tail(conn, session_id, first)
            self._insert(conn, session_id, batch)
            return new_next

    def stored_bytes(self, session_id: str) -> int:
        with self._db.guard(session_id) as conn:
            found = conn.execute(
                "SELECT (SELECT COALESCE(SUM(LENGTH(type) + LENGTH(data) + COALESCE("
                "LENGTH(event_id), 0) + 16), 0) FROM log_events WHERE namespace=?1 AND "
                "session_id=?2) FROM log_sessions WHERE namespace=?1 AND id=?2",
                (self._ns, session_id),
            ).fetchone()
        if found is None:
            raise SessionNotFoundError(session_id)
        return int(found[0])

    def set_retention(self, session_id: str, ttl_ms: int | None) -> int | None:
        with self._db.transaction(session_id, immediate=True) as conn:
            expires_at = None if ttl_ms is None else wall_clock_ms() + ttl_ms
            changed = conn.execute(
                "UPDATE log_sessions SET ttl_ms=?, expires_at=? WHERE namespace=? AND id=?",
                (ttl_ms, expires_at, self._ns, session_id),
            ).rowcount
        if changed != 1:
            raise SessionNotFoundError(session_id)
        self._known.pop(session_id, None)
        return expires_at

    def _advance(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        header: SessionHeader | None,
        first: int,
        new_next: int,
        lease: Lease | None,
    ) -> bool:
        """The common append, in one statement: move ``next_seq`` from ``first`` to
        ``new_next`` (and ``expires_at``) if the session row holds exactly the header
        and ``ttl_ms`` this instance validated before, ``next_seq`` is ``first``, no
        event row is at or past it and no lease row of the session has an epoch newer
        than ``lease``'s.

        False, with nothing written, when the session is not remembered, ``header``
        differs from it, or the rows do not match (a conflict, a replay, a torn tail, a
        newer lease, another process's delete or damage): the caller then checks the
        lease, reads and judges the row and cuts the tail.
        """
        known = self._known.get(session_id)
        if known is None:
            return False
        stored, columns, ttl_ms = known
        if header is not None and header != stored:
            return False
        params: tuple[object, ...] = (self._ns, session_id, first, new_next, *columns)
        if ttl_ms is not None:
            epoch = None if lease is None else lease.epoch
            params += (epoch, ttl_ms, wall_clock_ms() + ttl_ms)
        elif lease is not None:
            params += (lease.epoch,)
        sql = _ADVANCE[ttl_ms is not None, lease is not None]
        return conn.execute(sql, params).rowcount == 1

    def _remember(self, session_id: str, header: SessionHeader, ttl_ms: int | None) -> None:
        """Note the header and ``ttl_ms`` just read and validated from a session row, or
        written to it, for :meth:`_advance` and :meth:`_read_session`. A bounded cache,
        and a stale entry (the row changed since) only costs the slow path: both compare
        the row itself."""
        known = self._known
        if len(known) >= _KNOWN_SESSIONS and session_id not in known:
            known.clear()
        known[session_id] = (header, columns(header), ttl_ms)

    def _insert(self, conn: sqlite3.Connection, session_id: str, batch: EventBatch) -> None:
        """Insert the event rows with multi-row INSERTs of up to :data:`_CHUNK` rows
        (a power of two each, so that few distinct statements are ever prepared); the
        data column holds the canonical JSON of the event's data, as text."""
        rows = [
            (e.seq, e.type, e.time, data_of_text(text, e.id is not None).decode(), e.id)
            for e, text in zip(batch.events, batch.texts, strict=True)
        ]
        count = len(rows)
        done = 0
        while done < count:
            size = min(_CHUNK, count - done)
            size = 1 << (size.bit_length() - 1)
            params: list[object] = [self._ns, session_id]
            for row in rows[done : done + size] if size < count else rows:
                params += row
            conn.execute(_insert_sql(size), params)
            done += size

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        end = INT64_MAX if limit is None else min(from_seq + limit, INT64_MAX)
        params = (self._ns, session_id, from_seq, end)
        with self._db.guard(session_id) as conn:
            rows = fetch_rows(conn, _READ_REPAIR if repair else _READ, params)
        header, next_seq, torn = self._read_session(session_id, rows)
        if torn and not self._db.read_only():
            # Read again and cut under the write lock, so that the tail is judged against
            # a next_seq no other process can move meanwhile. A read-only file is never
            # repaired: its torn tail is left out all the same.
            with self._db.transaction(session_id, immediate=True) as conn:
                rows = fetch_rows(conn, _READ, params)
                header, next_seq, _ = self._read_session(session_id, rows)
                events = self._checked(session_id, rows, 2, from_seq, next_seq, limit)
                self._cut_tail(conn, session_id, next_seq)
            return header, events
        return header, self._checked(session_id, rows, 2, from_seq, next_seq, limit)

    def _read_session(self, session_id: str, rows: list[Any]) -> tuple[SessionHeader, int, object]:
        """The header, next seq and torn-tail flag in the first two rows of
        :data:`_READ`; :class:`SessionNotFoundError` without them. A header equal, column
        by column and type by type, to one this instance validated is not validated
        again; a new one is remembered for :meth:`_advance` when its ``ttl_ms`` is sound
        (a read does not judge it)."""
        if not rows:
            raise SessionNotFoundError(session_id)
        _, version, created_at, cwd, parent_id = rows[0]
        _, fork_seq, next_seq, ttl_ms, torn = rows[1]
        found = (version, created_at, cwd, parent_id, fork_seq)
        known = self._known.get(session_id)
        if (
            known is not None
            and known[1] == found
            and list(map(type, known[1])) == list(map(type, found))
            and type(next_seq) is int
            and next_seq >= 0
        ):
            return known[0], next_seq, torn
        header = self._header(session_id, found, next_seq)
        if ttl_ms is None or (type(ttl_ms) is int and ttl_ms > 0):
            self._remember(session_id, header, ttl_ms)
        return header, next_seq, torn

    def _session(
        self, conn: sqlite3.Connection, session_id: str
    ) -> tuple[SessionHeader, int, object] | None:
        """The stored header, next seq and (unchecked) ``ttl_ms`` of ``session_id``, or
        None if it has no row."""
        rows = fetch_rows(conn, _SELECT_SESSION, (self._ns, session_id))
        if not rows:
            return None
        row = rows[0]
        return self._header(session_id, row[:5], row[5]), row[5], row[6]

    def _header(self, session_id: str, row: Sequence[Any], next_seq: object) -> SessionHeader:
        """The header of the (version, created_at, cwd, parent_id, fork_seq) of a
        session row, once its version and ``next_seq`` are checked."""
        check_stored_version(session_id, row[0], self._where)
        header = row_header(session_id, row)
        if type(next_seq) is not int or next_seq < 0:
            raise CorruptLogError(session_id, f"stored next seq is {next_seq!r:.40}")
        return header

    def _events(
        self, conn: sqlite3.Connection, session_id: str, first: int, count: int
    ) -> list[SessionEvent]:
        """Exactly the ``count`` committed events from seq ``first`` (see :meth:`_checked`)."""
        if count <= 0:
            return []
        rows = fetch_rows(
            conn,
            f"SELECT {_EVENT_COLUMNS} FROM log_events WHERE namespace=? AND session_id=?"
            " AND seq >= ? AND seq < ? ORDER BY seq",
            (self._ns, session_id, first, first + count),
        )
        return self._checked(session_id, rows, 0, first, first + count, None)

    @staticmethod
    def _checked(
        session_id: str, rows: list[Any], skip: int, first: int, next_seq: int, limit: int | None
    ) -> list[SessionEvent]:
        """The events of the event rows ``rows[skip:]``: exactly the committed ones from
        seq ``first`` (below ``next_seq``, at most ``limit``), each row's data parsed once;
        a missing or malformed one raises :class:`CorruptLogError`."""
        count = max(0, next_seq - first)
        if limit is not None:
            count = min(count, limit)
        if count <= 0:
            return []
        with deferred_collection(count):
            records = []
            for expected, row in enumerate(rows[skip:] if skip else rows, start=first):
                if row[0] != expected:
                    break
                records.append(row_record(session_id, row))
            if len(records) < count:
                raise CorruptLogError(
                    session_id, "an event below the next seq is missing", seq=first + len(records)
                )
            # Below about 16 events pydantic's validation costs less than the checks of
            # built_events, and its verdict is the same.
            events = built_events(records, first) if count >= _BUILT_FROM else None
        if events is not None:
            return events
        try:
            return events_from_records(records)
        except ValidationError as exc:
            index = exc.errors()[0]["loc"][0]
            seq = first + (index if isinstance(index, int) else 0)
            detail = f"stored event is malformed: {describe_invalid(exc)}"
            raise CorruptLogError(session_id, detail, seq=seq) from None

    def _cut_tail(self, conn: sqlite3.Connection, session_id: str, next_seq: int) -> None:
        """Delete the torn tail: rows at or past the committed next seq."""
        conn.execute(_CUT_TAIL, (self._ns, session_id, next_seq))

    def acquire_lease(self, session_id: str, owner: str, ttl_ms: int) -> int:
        with self._db.transaction(session_id, immediate=True, durable=False) as conn:
            now = wall_clock_ms()
            row = conn.execute(
                "SELECT owner, expires_at, epoch FROM log_leases"
                " WHERE namespace=? AND session_id=?",
                (self._ns, session_id),
            ).fetchone()
            stored = row[2] if row is not None and type(row[2]) is int else 0
            live = row is not None and row[1] > now
            if live and row[0] != owner:
                return 0
            epoch = stored if live and stored > 0 else next_epoch(stored, now)
            conn.execute(
                "INSERT INTO log_leases (namespace, session_id, owner, expires_at, epoch)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, session_id) DO UPDATE"
                " SET owner=excluded.owner, expires_at=excluded.expires_at,"
                " epoch=excluded.epoch",
                (self._ns, session_id, owner, now + ttl_ms, epoch),
            )
            # A lapsed lease of another owner, never released: taken over.
            return taken(epoch, row is not None and not live and row[0] not in ("", owner))

    def renew_lease(self, session_id: str, lease: Lease, ttl_ms: int) -> bool:
        with self._db.transaction(session_id, immediate=True, durable=False) as conn:
            renewed = conn.execute(
                "UPDATE log_leases SET expires_at=?"
                " WHERE namespace=? AND session_id=? AND owner=? AND epoch=?",
                (wall_clock_ms() + ttl_ms, self._ns, session_id, *lease),
            ).rowcount
        return renewed == 1

    def release_lease(self, session_id: str, owner: str) -> None:
        with self._db.transaction(session_id, immediate=True, durable=False) as conn:
            conn.execute(
                "UPDATE log_leases SET owner='', expires_at=0"
                " WHERE namespace=? AND session_id=? AND owner=?",
                (self._ns, session_id, owner),
            )

    def _fences_off_in(self, conn: sqlite3.Connection, session_id: str, lease: Lease) -> bool:
        row = conn.execute(
            "SELECT 1 FROM log_leases WHERE namespace=? AND session_id=? AND epoch > ?",
            (self._ns, session_id, lease.epoch),
        ).fetchone()
        return row is not None

    def _forget_leases(self, conn: sqlite3.Connection, session_id: str) -> None:
        """With the session's rows: its lease row, unless a live writer holds it (a
        lease taken later still gets a newer epoch, see :func:`next_epoch`)."""
        conn.execute(
            "DELETE FROM log_leases WHERE namespace=? AND session_id=? AND expires_at <= ?",
            (self._ns, session_id, wall_clock_ms()),
        )

    def lease_busy(self, session_id: str, owner: str | None = None) -> bool:
        with self._db.guard(session_id) as conn:
            return self._leased_to_another(conn, session_id, owner)

    def _leased_to_another(
        self, conn: sqlite3.Connection, session_id: str, owner: str | None
    ) -> bool:
        row = conn.execute(
            "SELECT 1 FROM log_leases WHERE namespace=? AND session_id=?"
            " AND owner IS NOT ? AND expires_at > ?",
            (self._ns, session_id, owner, wall_clock_ms()),
        ).fetchone()
        return row is not None

    def info(self, session_id: str) -> SessionInfo:
        with self._db.guard(session_id) as conn:
            rows = fetch_rows(conn, _INFO + " AND s.id=?3", (wall_clock_ms(), self._ns, session_id))
        if not rows:
            raise SessionNotFoundError(session_id)
        return session_info(session_id, rows[0], self._where)

    def list_info(self) -> list[SessionInfo]:
        """:meth:`info` of every session row; a damaged one is skipped as :meth:`list`
        skips it."""
        with self._db.guard("(list)") as conn:
            rows = fetch_rows(conn, _INFO, (wall_clock_ms(), self._ns))
        found = []
        for row in rows:
            try:
                if not isinstance(row[0], str):
                    raise CorruptLogError(short_repr(row[0]), "the stored session id is not text")
                found.append(session_info(row[0], row, self._where))
            except (CorruptLogError, UnsupportedVersionError) as exc:
                logger.warning("sessionstore: list skips a session: %s", exc)
        return found

    # Defined after the helpers: inside the class body, ``list`` then names this method.
    def list(self) -> list[SessionHeader]:
        """The header of every session row; a row whose header is damaged or of another
        format version is skipped, with a warning on the ``sessionstore`` logger."""
        with self._db.guard("(list)") as conn:
            rows = fetch_rows(
                conn,
                f"SELECT id, {_SESSION_COLUMNS} FROM log_sessions WHERE namespace=?",
                (self._ns,),
            )
        headers = []
        for row in rows:
            try:
                if not isinstance(row[0], str):
                    raise CorruptLogError(short_repr(row[0]), "the stored session id is not text")
                check_stored_version(row[0], row[1])
                headers.append(row_header(row[0], row[1:6]))
            except (CorruptLogError, UnsupportedVersionError) as exc:
                logger.warning("sessionstore: list skips a session: %s", exc)
        return headers

    def delete(self, session_id: str, *, last: SessionEvent | None = None) -> None:
        self._known.pop(session_id, None)
        with self._db.transaction(session_id, immediate=True) as conn:
            if last is not None:
                self._check_ends_with(conn, session_id, last)
            gone = conn.execute(
                "DELETE FROM log_sessions WHERE namespace=? AND id=?", (self._ns, session_id)
            ).rowcount
            if not gone:
                raise SessionNotFoundError(session_id)
            conn.execute(
                "DELETE FROM log_events WHERE namespace=? AND session_id=?",
                (self._ns, session_id),
            )
            self._forget_leases(conn, session_id)

    def _check_ends_with(
        self, conn: sqlite3.Connection, session_id: str, last: SessionEvent
    ) -> None:
        """:func:`check_ends_with` of the stored session (in the delete's transaction)."""
        found = conn.execute(
            "SELECT next_seq FROM log_sessions WHERE namespace=? AND id=?", (self._ns, session_id)
        ).fetchone()
        if found is None:
            raise SessionNotFoundError(session_id)
        next_seq = found[0]
        stored = None
        if isinstance(next_seq, int) and next_seq == last.seq + 1:
            stored = event_text(self._events(conn, session_id, last.seq, 1)[0])
        check_ends_with(session_id, last, next_seq if isinstance(next_seq, int) else -1, stored)

    def prune(self, now_ms: int) -> int:
        with self._db.guard("(prune)") as conn:
            expired = conn.execute(
                "SELECT id FROM log_sessions WHERE namespace=? AND expires_at <= ?",
                (self._ns, now_ms),
            ).fetchall()
        removed = 0
        for (session_id,) in expired:
            self._known.pop(session_id, None)
            with self._db.transaction(session_id, immediate=True) as conn:
                # Checked again under the write lock: an append since may have renewed it.
                gone = conn.execute(
                    "DELETE FROM log_sessions WHERE namespace=? AND id=? AND expires_at <= ?",
                    (self._ns, session_id, now_ms),
                ).rowcount
                if gone:
                    conn.execute(
                        "DELETE FROM log_events WHERE namespace=? AND session_id=?",
                        (self._ns, session_id),
                    )
                    self._forget_leases(conn, session_id)
                    removed += 1
        return removed

    def close(self) -> None:
        self._db.close()
