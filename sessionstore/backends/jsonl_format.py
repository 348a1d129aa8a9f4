"""The JSONL event-log format, without I/O: the header line, event lines with their batch
markers, and the parsing of a log or of part of one (see :mod:`.jsonl` for the layout).

A batch is the lines of one append, each carrying ``batch_end``, the seq of the batch's
last event; a batch is committed once the line of that event is complete. Parsing leaves
out a torn final batch and raises :class:`CorruptLogError` for anything wrong before it.

Parsing also learns the sparse offset index readers seek with: the byte offset of the
line of every event whose seq is a multiple of :data:`INDEX_EVERY`, so ``offsets[i]`` is
where the line of seq ``i * INDEX_EVERY`` starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, overload

import orjson
from pydantic import ValidationError

from ..contracts import EventBatch
from ..errors import CorruptLogError
from ..eventlog import check_stored_version
from ..gcdefer import deferred_collection
from ..models import (
    INT64_MAX,
    SessionEvent,
    SessionHeader,
    built_events,
    describe_invalid,
    events_from_records,
)

#: The folder of a namespace's logs, and the suffix of each log's file name (the
#: session id encoded by :func:`.encode_name`).
LOGS_DIR = "logs"
LOG_SUFFIX = ".jsonl"
#: The header-line key holding a session's retention in ms (absent: none).
TTL_FIELD = "ttl_ms"
#: The offset index holds the line of every event whose seq is a multiple of this.
INDEX_EVERY = 64


def header_line(header: SessionHeader, ttl_ms: int | None = None) -> bytes:
    """Line 1 of a log: the header's fields as one JSON object, with ``ttl_ms`` if given."""
    record = header.model_dump()
    if ttl_ms is not None:
        record[TTL_FIELD] = ttl_ms
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


def event_lines(batch: EventBatch) -> bytes:
    """The lines of one batch, each marked with the seq of the batch's last event: the
    event's canonical text (see :func:`~sessionstore.eventlog.event_text`) with
    ``"batch_end"`` added as its last key, which is what ``orjson.dumps`` writes for the
    record ``{"seq", "type", "time", "data", "id"?, "batch_end"}``."""
    end = _line_end(batch.events[-1].seq)
    return end.join([text[:-1] for text in batch.texts]) + end


def _line_end(batch_end: int) -> bytes:
    """What follows an event's text, less its closing brace, on its line."""
    return b',"batch_end":%d}\n' % batch_end


class MalformedLine(Exception):
    """A line that is not a well-formed event."""

    def __init__(self, detail: str, seq: int | None = None) -> None:
        super().__init__(detail)
        self.seq = seq


def parse_header(session_id: str, line: bytes, where: str | None = None) -> SessionHeader:
    """The header on line 1 (without its newline); ``session_id`` names the log in errors."""
    return parse_header_line(session_id, line, where)[0]


def parse_header_line(
    session_id: str, line: bytes, where: str | None = None
) -> tuple[SessionHeader, int | None]:
    """The header on line 1 (without its newline) and the session's ``ttl_ms`` (None
    when it has none); ``session_id`` names the log in errors, ``where`` (its path) in
    an ``UnsupportedVersionError``."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(session_id, f"the header is not JSON: {exc}", line=1) from exc
    if not isinstance(record, dict) or "version" not in record:
        raise CorruptLogError(session_id, "the header is not an object with a version", line=1)
    check_stored_version(session_id, record["version"], where)
    missing = [name for name in SessionHeader.model_fields if name not in record]
    if missing:
        raise CorruptLogError(session_id, f"the header lacks {', '.join(missing)}", line=1)
    ttl_ms = record.pop(TTL_FIELD, None)
    if ttl_ms is not None and (not is_int(ttl_ms) or ttl_ms <= 0):
        raise CorruptLogError(
            session_id, f"the header's {TTL_FIELD} is not an int > 0: {ttl_ms!r:.40}", line=1
        )
    try:
        return SessionHeader.model_validate(record, strict=True), ttl_ms
    except ValidationError as exc:
        detail = f"the header is invalid: {describe_invalid(exc)}"
        raise CorruptLogError(session_id, detail, line=1) from exc


#: The fields of an event line, besides ``batch_end``.
_EVENT_KEYS = frozenset(SessionEvent.model_fields)


def parse_event(line: bytes) -> tuple[dict[str, Any], int]:
    """One event line (without its newline), parsed once: the event object and its
    ``batch_end``. Checks all that :class:`SessionEvent` checks, so that the models
    can be built later, only for the events read (:class:`Events`). Raises
    :class:`MalformedLine`."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise MalformedLine(f"the line is not JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise MalformedLine("the line is not a JSON object")
    seq = record.get("seq")
    if not is_int(seq) or not 0 <= seq <= INT64_MAX:
        raise MalformedLine("'seq' is missing or not an int >= 0 of 64 bits")
    kind, time, data = record.get("type"), record.get("time"), record.get("data")
    event_id, batch_end = record.get("id"), record.pop("batch_end", None)
    if not isinstance(kind, str):
        raise MalformedLine("'type' is missing or not a string", seq)
    if not is_int(time) or not -INT64_MAX <= time <= INT64_MAX:
        raise MalformedLine("'time' is missing or not an int of 64 bits", seq)
    if not record.keys() <= _EVENT_KEYS:
        extra = sorted(record.keys() - _EVENT_KEYS)
        raise MalformedLine(f"unknown fields {extra!r:.80}", seq)
    if not isinstance(data, dict):
        raise MalformedLine("'data' is missing or not an object", seq)
    if event_id is not None and not isinstance(event_id, str):
        raise MalformedLine("'id' is not a string", seq)
    if not is_int(batch_end):
        raise MalformedLine("'batch_end' is missing or not an int", seq)
    return record, batch_end


class Events(Sequence[SessionEvent]):
    """Events of checked lines (:func:`parse_event`), built as models when read: a log
    validated whole to learn where its lines are pays for the models it returns only."""

    __slots__ = ("_records", "_session_id")

    def __init__(self, session_id: str, records: list[dict[str, Any]]) -> None:
        self._session_id = session_id
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[SessionEvent]: ...

    def __getitem__(self, index: int | slice) -> SessionEvent | list[SessionEvent]:
        if isinstance(index, slice):
            return _built(self._session_id, self._records[index])
        return _built(self._session_id, [self._records[index]])[0]

    def __iter__(self) -> Any:
        return iter(self[:])


def _built(session_id: str, records: list[dict[str, Any]]) -> list[SessionEvent]:
    """The events of checked records, in seq order (see :func:`parse_batches`): built
    without pydantic when they pass :func:`built_events`, else validated by it."""
    with deferred_collection(len(records)):
        events = built_events(records, records[0]["seq"]) if records else []
    if events is not None:
        return events
    try:
        return events_from_records(records)
    except ValidationError as exc:  # parse_event checks what the model checks
        detail = f"the event is invalid: {describe_invalid(exc)}"
        raise CorruptLogError(session_id, detail) from None


@dataclass(frozen=True)
class ParsedLog:
    """A log as read: ``header`` None when it has no complete header line (absent),
    ``events`` the committed ones, ``end`` the byte offset where they end, ``offsets``
    the offset index of the committed events (see the module docstring)."""

    header: SessionHeader | None
    events: Events
    end: int
    size: int
    offsets: tuple[int, ...] = ()

    @property
    def torn(self) -> bool:
        """Whether bytes of an unfinished final batch follow the committed events."""
        return self.end < self.size


def parse_log(session_id: str, raw: bytes, where: str | None = None) -> ParsedLog:
    """Parse a whole log, leaving out a torn final batch.

    Raises :class:`CorruptLogError` (with the 1-based line) for damage before it and
    ``UnsupportedVersionError`` for a header of another format version.
    """
    first = raw.find(b"\n")
    if first < 0:
        return ParsedLog(None, Events(session_id, []), 0, len(raw))
    header = parse_header(session_id, raw[:first], where)
    if header.id != session_id:
        raise CorruptLogError(session_id, f"the header names session {header.id!r}", line=1)
    events, end, offsets = parse_batches(session_id, raw, first + 1, 0, 2)
    return ParsedLog(header, events, end, len(raw), tuple(offsets))


def parse_batches(
    session_id: str, raw: bytes, offset: int, next_seq: int, line: int
) -> tuple[Events, int, list[int]]:
    """The committed events in ``raw[offset:]``, the offset where they end and the
    offsets in ``raw`` of the lines of those whose seq is a multiple of
    :data:`INDEX_EVERY`, leaving out a torn final batch.

    ``offset`` must start a batch, whose first event is expected to have seq ``next_seq``
    and to be on 1-based line ``line`` of the log. Raises :class:`CorruptLogError` for
    damage before the torn final batch.
    """
    # An event's line is longer than 64 bytes: the estimate only decides on deferring.
    with deferred_collection((len(raw) - offset) // 64):
        return _parse_batches(session_id, raw, offset, next_seq, line)


def _parse_batches(
    session_id: str, raw: bytes, offset: int, next_seq: int, line: int
) -> tuple[Events, int, list[int]]:
    events: list[dict[str, Any]] = []
    offsets: list[int] = []
    committed, end = 0, offset
    open_end: int | None = None  # batch_end of the batch being read, until its last event
    number = line - 1
    while offset < len(raw):
        number += 1
        stop = raw.find(b"\n", offset)
        if stop < 0:
            break  # a last line without its newline: torn
        start, text, offset = offset, raw[offset:stop], stop + 1
        try:
            record, batch_end = parse_event(text)
        except MalformedLine as exc:
            if b"\0" in text and _unfinished(raw, offset, open_end):
                break
            seq = next_seq + len(events) if exc.seq is None else exc.seq
            raise CorruptLogError(session_id, str(exc), seq=seq, line=number) from None
        seq = record["seq"]
        _check_order(session_id, seq, batch_end, next_seq + len(events), open_end, number)
        if seq % INDEX_EVERY == 0:
            offsets.append(start)
        events.append(record)
        open_end = batch_end
        if seq == batch_end:
            committed, end, open_end = len(events), offset, None
    kept = _multiples(next_seq + committed) - _multiples(next_seq)
    del events[committed:]
    return Events(session_id, events), end, offsets[:kept]


def _unfinished(raw: bytes, offset: int, open_end: int | None) -> bool:
    """Whether a line holding zero bytes, which ends before ``offset``, lies in the final
    batch, whose ``batch_end`` is ``open_end`` (None: the line would begin a batch): a
    crash before the batch's fsync can leave zeros where its bytes were not written yet,
    the bytes around them written. So is every later line: zeros again, or an event of
    that same batch, which only a known ``batch_end`` tells (an event after zeros that
    would begin a batch may be of a later, committed batch: the zeros are then damage)."""
    for text in raw[offset:].split(b"\n")[:-1]:
        if b"\0" in text:
            continue
        if open_end is None:
            return False
        try:
            _, batch_end = parse_event(text)
        except MalformedLine:
            return False
        if batch_end != open_end:
            return False
    return True


def batch_offsets(texts: Sequence[bytes], first_seq: int, base: int) -> list[int]:
    """The offset index entries of a batch of events with the canonical ``texts`` (its
    first event has seq ``first_seq``) once its :func:`event_lines` are written at offset
    ``base``: each line is a text less its closing brace, then the same end."""
    extra = len(_line_end(first_seq + len(texts) - 1)) - 1
    found: list[int] = []
    pos, done = base, 0
    for line in range(-first_seq % INDEX_EVERY, len(texts), INDEX_EVERY):
        pos += sum(map(len, texts[done:line])) + (line - done) * extra
        found.append(pos)
        done = line
    return found


def parse_range(raw: bytes, skip: int, count: int, first_seq: int) -> list[SessionEvent] | None:
    """The events on the ``count`` lines after the first ``skip`` lines of ``raw``, a
    validated part of a log whose first line there has seq ``first_seq - skip``; None if
    they are not those events (the file changed underneath). ``raw`` may end early: only
    its complete lines count."""
    pos = 0
    for _ in range(skip):
        pos = raw.find(b"\n", pos) + 1
        if pos == 0:
            return None
    with deferred_collection(count):
        return _parse_lines(raw, pos, count, first_seq)


def _parse_lines(raw: bytes, pos: int, count: int, first_seq: int) -> list[SessionEvent] | None:
    found: list[dict[str, Any]] = []
    expected = first_seq
    for _ in range(count):
        stop = raw.find(b"\n", pos)
        if stop < 0:
            return None
        try:
            record, _ = parse_event(raw[pos:stop])
        except MalformedLine:
            return None
        if record["seq"] != expected:
            return None
        found.append(record)
        expected += 1
        pos = stop + 1
    events = built_events(found, first_seq)
    if events is not None:
        return events
    try:
        return events_from_records(found)
    except ValidationError:
        return None


def _multiples(stop: int) -> int:
    """How many multiples of :data:`INDEX_EVERY` lie in ``[0, stop)``."""
    return -(-stop // INDEX_EVERY)


def _check_order(
    session_id: str,
    seq: int,
    batch_end: int,
    expected: int,
    open_end: int | None,
    number: int,
) -> None:
    """An event must continue the seqs and agree with its batch on ``batch_end``."""
    detail = None
    if seq != expected:
        detail = f"expected seq {expected}"
    elif open_end is None and batch_end < seq:
        detail = f"'batch_end' {batch_end} comes before the event's own seq"
    elif open_end is not None and batch_end != open_end:
        detail = f"'batch_end' {batch_end} differs from its batch's {open_end}"
    if detail is not None:
        raise CorruptLogError(session_id, detail, seq=seq, line=number)


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
