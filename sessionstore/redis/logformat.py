"""The event-log format on Redis, as pure functions shared by the sync and async backends.

A session is a meta hash (header fields as plain text, an absent field is None, plus
``next_seq``, ``last_time`` and, for a session with a retention, ``ttl_ms``) and a stream
whose entry ``<seq>-1`` holds the fields ``seq``, ``type``, ``time``, ``data`` (canonical
JSON text) and ``id`` when the event has one. ``next_seq`` is committed last, so entries
at or past it are a torn tail. Both keys of a session with a ``ttl_ms`` carry the same
expiry, set by every append.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import msgpack
import orjson
from pydantic import ValidationError

from .. import keys
from ..contracts import EventBatch
from ..errors import (
    CorruptLogError,
    InvalidArgumentError,
    SeqConflictError,
    SessionExistsError,
    SessionNotFoundError,
    UnsupportedVersionError,
)
from ..eventlog import check_stored_version, data_of_text
from ..models import (
    FORMAT_VERSION,
    SessionEvent,
    SessionHeader,
    SessionInfo,
    describe_invalid,
    events_from_records,
)

#: Stream entries fetched per XRANGE call.
CHUNK = 1000
#: Reads restarted when damage turns out to be a session deleted or replaced meanwhile.
READ_ATTEMPTS = 3
HEADER_FIELDS = ("id", "version", "created_at", "cwd", "parent_id", "fork_seq")
_INT_FIELDS = frozenset({"version", "created_at", "fork_seq"})
_MAX_SEQUENCE_PART = 2**64 - 1
_FORMAT_VERSION = str(FORMAT_VERSION)
_packb = msgpack.Packer(use_bin_type=True).pack
#: The fields of a stream entry, in the order ``log_append.lua`` writes them (then ``id``).
_FIELD_NAMES = [b"seq", b"type", b"time", b"data"]


def text(value: Any) -> str:
    """A reply element as text (replies are bytes: the clients do not decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def restore_id(next_seq: int) -> str:
    """The largest stream id below every entry of seq >= ``next_seq``: what the stream's
    last id is set back to after a torn tail is cut off, so those ids can be added again."""
    return "0-0" if next_seq == 0 else f"{next_seq - 1}-{_MAX_SEQUENCE_PART}"


# Header ----------------------------------------------------------------------------------


def header_fields(header: SessionHeader) -> list[str]:
    """The header as flat name/value text pairs; None fields are left out."""
    pairs: list[str] = []
    for name in HEADER_FIELDS:
        value = getattr(header, name)
        if value is not None:
            pairs += [name, str(value)]
    return pairs


def _fields(meta: Mapping[Any, Any]) -> dict[str, str]:
    return {text(name): text(value) for name, value in meta.items()}


def _stored_version(raw: str | None) -> object:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return raw


def decode_header(
    session_id: str, meta: Mapping[Any, Any], *, check_version: bool, where: str | None = None
) -> SessionHeader:
    """The header stored in a meta hash (``HGETALL`` reply).

    Raises :class:`UnsupportedVersionError` for another format version (when
    ``check_version``) and :class:`CorruptLogError` for a malformed header.
    """
    try:
        fields = _fields(meta)
    except UnicodeDecodeError:
        raise CorruptLogError(session_id, "the meta hash is not valid UTF-8") from None
    if check_version:
        check_stored_version(session_id, _stored_version(fields.get("version")), where)
    values: dict[str, Any] = {}
    for name in HEADER_FIELDS:
        raw = fields.get(name)
        if raw is None:
            continue
        if name in _INT_FIELDS:
            try:
                values[name] = int(raw)
            except ValueError:
                raise CorruptLogError(
                    session_id, f"header field {name} is not an integer: {raw!r:.40}"
                ) from None
        else:
            values[name] = raw
    try:
        return SessionHeader(**values)
    except ValueError as exc:
        raise CorruptLogError(session_id, f"malformed header: {exc}") from None


def decode_next_seq(meta: Mapping[Any, Any]) -> int:
    """``next_seq`` of a meta hash (``HGETALL`` reply), -1 when absent or malformed."""
    raw = meta.get(b"next_seq")
    try:
        return int(raw) if raw is not None else -1
    except ValueError:
        return -1


def decode_info(session_id: str, meta: Mapping[Any, Any], busy: bool, where: str) -> SessionInfo:
    """The :class:`SessionInfo` of a meta hash (``HGETALL`` reply; ``where`` is its key):
    ``SessionNotFoundError`` when empty, :class:`CorruptLogError` when malformed."""
    if not meta:
        raise SessionNotFoundError(session_id)
    header = decode_header(session_id, meta, check_version=True, where=where)
    next_seq = decode_next_seq(meta)
    if next_seq < 0:
        raise CorruptLogError(session_id, "the meta hash has no valid next_seq")
    last_time = _optional_int(session_id, meta, b"last_time") if next_seq else None
    expires_at = _optional_int(session_id, meta, b"expires_at")
    return SessionInfo(header, next_seq, last_time, expires_at, busy)


def _optional_int(session_id: str, meta: Mapping[Any, Any], name: bytes) -> int | None:
    raw = meta.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise CorruptLogError(
            session_id, f"the meta hash's {name.decode()} is {raw!r:.40}"
        ) from None


# Append ----------------------------------------------------------------------------------


def _checked(value: str, what: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} {value!r:.60} is not valid Unicode") from exc
    return value


def append_args(
    batch: EventBatch, header: SessionHeader | None, ttl_ms: int | None = None
) -> list[str | bytes]:
    """ARGV of ``log_append.lua`` for a contiguous, non-empty batch (its seqs are
    implied by the first; the events travel as one MessagePack argument, which costs the
    client far less than four arguments per event); ``ttl_ms`` is the retention stored
    with a session the call materialises.

    Raises :class:`InvalidArgumentError` for header text Redis cannot store as UTF-8
    (event text is checked by :func:`~sessionstore.eventlog.encode_batch`), before
    anything is sent.
    """
    events = batch.events
    if not events:
        raise InvalidArgumentError("append needs at least one event")
    pairs = [] if header is None else [_checked(v, "header field") for v in header_fields(header)]
    flat: list[str] = []
    for event, event_text in zip(events, batch.texts, strict=True):
        flat += (
            event.type,
            str(event.time),
            data_of_text(event_text, event.id is not None).decode(),
            "" if event.id is None else "=" + event.id,
        )
    return [
        str(events[0].seq),
        _FORMAT_VERSION,
        "0" if ttl_ms is None else str(ttl_ms),
        restore_id(events[0].seq),
        "-1" if header is None else str(len(pairs) // 2),
        *pairs,
        _packb(flat),
    ]


def decode_append(session_id: str, batch: EventBatch, reply: list[Any]) -> int:
    """``log_append.lua``'s reply -> the new next seq, or the typed error."""
    code = text(reply[0])
    if code in ("OK", "REPLAY"):
        return int(reply[1])
    if code == "CONFLICT":
        next_seq, first = int(reply[1]), batch.events[0].seq
        detail = "batch differs from the stored events" if first < next_seq else ""
        raise SeqConflictError(session_id, next_seq, first, detail)
    if code == "NOTFOUND":
        raise SessionNotFoundError(session_id)
    if code == "EXISTS":
        raise SessionExistsError(session_id)
    if code == "VERSION":
        raise UnsupportedVersionError(session_id, _stored_version(text(reply[1])), FORMAT_VERSION)
    raise CorruptLogError(session_id, text(reply[1]) if len(reply) > 1 else code)


# Read ------------------------------------------------------------------------------------


class LogRead:
    """One ``read`` of a session log, fed with the replies of its commands.

    The first round trip pipelines ``HGETALL meta`` and ``XRANGE stream <from_seq>-1 +
    COUNT n`` (:meth:`take_meta`, :meth:`take`); while :attr:`done` is False, ``XRANGE
    stream <next_range>`` continues. The commands need not be atomic (nor MULTI, which
    Redis refuses under maxmemory): entries below ``next_seq`` never change, and what a
    concurrent append adds lies past the ``next_seq`` read first.

    Entries at or past ``next_seq`` are the torn tail (:attr:`tail` True when seen, False
    when known absent, None when not looked at); a missing, duplicate or malformed entry
    before it raises :class:`CorruptLogError`.
    """

    def __init__(self, session_id: str, from_seq: int, limit: int | None) -> None:
        if limit is not None and limit < 0:
            raise InvalidArgumentError(f"limit must be >= 0, not {limit!r}")
        self.session_id = session_id
        self.from_seq = from_seq
        self.limit = limit
        self.count = CHUNK if limit is None else max(1, min(CHUNK, limit))
        self.events: list[SessionEvent] = []
        self.header: SessionHeader | None = None
        self.next_seq = 0
        self.tail: bool | None = None
        self.done = False
        self._expect = from_seq
        self._end = 0
        self._last_id = ""
        self._meta: dict[Any, Any] = {}

    def first_range(self) -> tuple[str, str, int]:
        """(min, max, count) of the first XRANGE."""
        # Stream ids are 64-bit: a larger from_seq reads (nothing) from the highest id.
        return keys.stream_id(min(self.from_seq, _MAX_SEQUENCE_PART)), "+", self.count

    def next_range(self) -> tuple[str, str, int]:
        """(min, max, count) of the next XRANGE: after the last entry seen."""
        return "(" + self._last_id, "+", self.count

    def take_meta(self, meta: Mapping[Any, Any]) -> None:
        """The ``HGETALL meta`` reply: SessionNotFoundError when empty."""
        if not meta:
            raise SessionNotFoundError(self.session_id)
        self._meta = dict(meta)
        self.header = decode_header(self.session_id, meta, check_version=True)
        self.next_seq = decode_next_seq(meta)
        if self.next_seq < 0:
            raise CorruptLogError(self.session_id, "the meta hash has no valid next_seq")
        end = self.next_seq if self.limit is None else self.from_seq + self.limit
        self._end = min(self.next_seq, end)

    def take(self, entries: Sequence[Any]) -> None:
        """One XRANGE reply (a list of ``(id, fields)``)."""
        taken = self._take_well_formed(entries)
        for raw_id, fields in entries[taken:]:
            entry_id = text(raw_id)
            self._last_id = entry_id
            seq = _seq_of(self.session_id, entry_id)
            if seq >= self.next_seq:
                self.tail = True
                self.done = True
                return
            if self._expect >= self._end:
                self.done = True
                return
            self.events.append(self._decode(entry_id, seq, fields))
            self._expect += 1
        if len(entries) < self.count:
            if self._expect < self._end:
                raise CorruptLogError(
                    self.session_id,
                    f"event {self._expect} is missing: the stream ends before next_seq "
                    f"{self.next_seq}",
                    seq=self._expect,
                )
            if self.from_seq <= self.next_seq:
                self.tail = False
            self.done = True
        elif self._expect >= self._end:
            self.done = True

    def _take_well_formed(self, entries: Sequence[Any]) -> int:
        """Decode the leading entries that are exactly what ``log_append.lua`` writes and
        below the end of this read; return how many. :meth:`take` goes on with the rest,
        one by one, and so finds the end, the tail or the damage, and names it."""
        start = expect = self._expect
        records: list[dict[str, Any]] = []
        loads = orjson.loads
        kinds: dict[bytes, str] = {}  # each event type decoded once per reply
        for raw_id, fields in entries[: max(0, self._end - start)]:
            seq_text = b"%d" % expect
            if raw_id != seq_text + b"-1":
                break
            if type(fields) is list:
                size = len(fields)
                if fields[:8:2] != _FIELD_NAMES or fields[1] != seq_text:
                    break
                if size == 8:
                    event_id = None
                elif size == 10 and fields[8] == b"id":
                    event_id = fields[9]
                else:
                    break
                kind, time, data = fields[3], fields[5], fields[7]
            elif type(fields) is dict:
                kind, time, data = fields.get(b"type"), fields.get(b"time"), fields.get(b"data")
                if fields.get(b"seq") != seq_text or kind is None or time is None or data is None:
                    break
                event_id = fields.get(b"id")
            else:
                break
            try:
                parsed = loads(data)
                if type(parsed) is not dict:
                    break
                name = kinds.get(kind)
                if name is None:
                    name = kinds[kind] = kind.decode()
                record = {"seq": expect, "type": name, "time": int(time), "data": parsed}
                if event_id is not None:
                    record["id"] = event_id.decode()
                records.append(record)
            except ValueError:  # UnicodeDecodeError too
                break
            expect += 1
        valid = _valid_prefix(records)
        self.events += valid
        expect = start + len(valid)
        taken = expect - start
        if taken:
            self._expect = expect
            self._last_id = text(entries[taken - 1][0])
        return taken

    def _decode(self, entry_id: str, seq: int, fields: Any) -> SessionEvent:
        expect = self._expect
        if seq < expect:
            self._corrupt(f"entry {entry_id} repeats seq {seq}", seq)
        if seq > expect:
            self._corrupt(f"event {expect} is missing (the next entry is {entry_id})", expect)
        if entry_id != keys.stream_id(seq):
            self._corrupt(f"entry id {entry_id} should be {keys.stream_id(seq)}", seq)
        values = fields if isinstance(fields, Mapping) else _pairs(fields)
        raw: dict[str, bytes] = {}
        for name in ("seq", "type", "time", "data"):
            value = values.get(name.encode())
            if value is None:
                self._corrupt(f"entry {entry_id} has no {name} field", seq)
            raw[name] = value
        if raw["seq"] != str(seq).encode():
            self._corrupt(f"entry {entry_id} holds seq {raw['seq']!r:.20}", seq)
        raw_id = values.get(b"id")
        try:
            parsed = orjson.loads(raw["data"])
            record = {
                "seq": seq,
                "type": raw["type"].decode(),
                "time": int(raw["time"]),
                "data": parsed,
                "id": None if raw_id is None else raw_id.decode(),
            }
        except UnicodeDecodeError:
            self._corrupt(f"entry {entry_id} is not valid UTF-8", seq)
        except ValueError as exc:
            self._corrupt(f"entry {entry_id} has a malformed time or data: {exc}", seq)
        if not isinstance(parsed, dict):
            self._corrupt(f"entry {entry_id} has data that is not a JSON object", seq)
        try:
            [event] = events_from_records([record])
        except ValidationError as exc:
            self._corrupt(f"entry {entry_id} is not a valid event: {describe_invalid(exc)}", seq)
        return event

    def _corrupt(self, detail: str, seq: int) -> NoReturn:
        raise CorruptLogError(self.session_id, detail, seq=seq)

    def same_meta(self, meta: Mapping[Any, Any]) -> bool:
        """True when ``meta`` (read again after damage was found) is the one this read
        used: the damage is real, not a session deleted or replaced while reading."""
        return dict(meta) == self._meta

    @property
    def tail_unknown(self) -> bool:
        """True when reading stopped before the stream's end: the tail was not seen."""
        return self.tail is None

    def tail_probe(self) -> tuple[str, str, int]:
        """(min, max, count) of the XRANGE that tells whether a torn tail exists."""
        return str(self.next_seq), "+", 1

    def cut_args(self) -> list[str]:
        """ARGV of ``log_cut_tail.lua`` for the next_seq this read saw."""
        return [str(self.next_seq), restore_id(self.next_seq)]

    def result(self) -> tuple[SessionHeader, list[SessionEvent]]:
        assert self.header is not None
        return self.header, self.events


def _seq_of(session_id: str, entry_id: str) -> int:
    try:
        return int(entry_id.partition("-")[0])
    except ValueError:
        raise CorruptLogError(session_id, f"malformed stream entry id {entry_id!r}") from None


def _valid_prefix(records: list[dict[str, Any]]) -> list[SessionEvent]:
    """The events of the leading ``records`` that are valid events (all of them, but
    for damage)."""
    try:
        return events_from_records(records)
    except ValidationError as exc:
        bad = exc.errors()[0]["loc"][0]
        return events_from_records(records[: bad if isinstance(bad, int) else 0])


def _pairs(flat: Sequence[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


# List ------------------------------------------------------------------------------------
