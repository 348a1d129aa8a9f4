"""The rows of the SQLite event logs (``log_sessions``, ``log_events``; see
:mod:`.sqlite_schema`) as headers, events and metadata, every column checked: a row
that does not hold what this library writes raises :class:`CorruptLogError`."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from ..errors import CorruptLogError
from ..eventlog import check_stored_version
from ..models import SessionHeader, SessionInfo, describe_invalid


class NotUTF8(bytes):
    """A stored text value that is not UTF-8 (outside damage), as :func:`fetch_rows`
    reads it: no column check takes it for text, so its row is refused by name."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"text that is not UTF-8 ({len(self)} bytes)"


def fetch_rows(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    """Every row of ``sql``. The driver fails a whole statement on one text value that
    is not UTF-8; that statement is run again with each text value decoded here, and
    such a value comes back as :class:`NotUTF8` (a blob stays bytes), for the row's
    checks to refuse naming the row, as any other damage."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if not str(exc).startswith("Could not decode to UTF-8"):
            raise
    conn.text_factory = _text
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.text_factory = str


def _text(value: bytes) -> str | NotUTF8:
    """A stored text value (the driver hands its bytes), decoded."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return NotUTF8(value)


def columns(header: SessionHeader) -> tuple[object, ...]:
    """The log_sessions (version, created_at, cwd, parent_id, fork_seq) of ``header``."""
    return (header.version, header.created_at, header.cwd, header.parent_id, header.fork_seq)


def checked_ttl(session_id: str, ttl_ms: object) -> int | None:
    """A stored ``ttl_ms``: None or an int > 0, else :class:`CorruptLogError`."""
    if ttl_ms is None:
        return None
    if type(ttl_ms) is not int or ttl_ms <= 0:
        raise CorruptLogError(session_id, f"stored ttl_ms is {ttl_ms!r:.40}")
    return ttl_ms


def row_header(session_id: str, row: Sequence[Any]) -> SessionHeader:
    """A log_sessions (version, created_at, cwd, parent_id, fork_seq) row as a header."""
    version, created_at, cwd, parent_id, fork_seq = row
    try:
        return SessionHeader.model_validate(
            {
                "id": session_id,
                "version": version,
                "created_at": created_at,
                "cwd": cwd,
                "parent_id": parent_id,
                "fork_seq": fork_seq,
            },
            strict=True,
        )
    except ValidationError as exc:
        detail = f"stored header is malformed: {describe_invalid(exc)}"
        raise CorruptLogError(session_id, detail) from None


def row_record(session_id: str, row: Sequence[Any]) -> dict[str, Any]:
    """A log_events row as an event object, its data parsed, after checking every
    column that validation does not (the data is text holding a JSON object)."""
    seq, kind, time, data, event_id = row
    if not isinstance(kind, str):
        raise CorruptLogError(session_id, f"event type is {kind!r:.40}", seq=seq)
    if type(time) is not int:
        raise CorruptLogError(session_id, f"event time is {time!r:.40}", seq=seq)
    if event_id is not None and not isinstance(event_id, str):
        raise CorruptLogError(session_id, f"event id is {event_id!r:.40}", seq=seq)
    if not isinstance(data, str):
        shown = repr(data) if type(data) is NotUTF8 else type(data).__name__
        raise CorruptLogError(session_id, f"event data is {shown}", seq=seq)
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(session_id, f"event data is not JSON: {exc}", seq=seq) from None
    if not isinstance(parsed, dict):
        raise CorruptLogError(session_id, "event data is not a JSON object", seq=seq)
    if event_id is None:
        return {"seq": seq, "type": kind, "time": time, "data": parsed}
    return {"seq": seq, "type": kind, "time": time, "data": parsed, "id": event_id}


def session_info(session_id: str, row: Sequence[Any], where: str) -> SessionInfo:
    """A row of the info query (the ``log_sessions`` columns from ``version`` on, the
    session's ``expires_at``, the time of its last committed event, whether a live lease
    is held; column 0 before them) as the session's metadata; ``where`` names the table
    in errors."""
    check_stored_version(session_id, row[1], where)
    header = row_header(session_id, row[1:6])
    next_seq, expires_at, last_time = row[6], row[7], row[8]
    if type(next_seq) is not int or next_seq < 0:
        raise CorruptLogError(session_id, f"stored next seq is {next_seq!r:.40}")
    if next_seq > 0 and type(last_time) is not int:
        raise CorruptLogError(session_id, "the last committed event is missing", seq=next_seq - 1)
    return SessionInfo(header, next_seq, last_time, expires_at, bool(row[9]))
