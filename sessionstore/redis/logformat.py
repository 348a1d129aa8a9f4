"""The event-log format on Redis, as pure functions shared by the sync and async backends.

A session is a meta hash (header fields as plain text, an absent field is None, plus
``next_seq``, ``last_time`` and, for a session with a retention, ``ttl_ms``) and a stream.
Each stream entry holds the events of one append (at most :data:`ENTRY_EVENTS` of them;
a longer append writes several entries in the same script call): its id is ``<seq of
its last event>-<number of events>`` and its one field ``events`` is a JSON array of the
events' canonical texts (see :func:`~sessionstore.eventlog.event_text`), one per line::

    1) "7-8"
    2) 1) "events"
       2) "[{"seq":0,"type":"turn/start","time":1718000000000,"data":{...}},\n..."

So ``XRANGE <seq>-0 +`` starts at the entry holding ``seq``, and an entry whose first
event is at or past ``next_seq`` (committed last) is a torn tail. An entry of the first
layout (id ``<seq>-1``, fields ``seq``, ``type``, ``time``, ``data`` and ``id`` when the
event has one) is an entry of one event and is read alike, so logs written by it still
load and can be appended to. Both keys of a session with a ``ttl_ms`` carry the same
expiry, set by every append.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import orjson
from pydantic import ValidationError

from ..contracts import EventBatch
from ..errors import (
    CorruptLogError,
    InvalidArgumentError,
    SeqConflictError,
    SessionExistsError,
    SessionNotFoundError,
    UnsupportedVersionError,
)
from ..eventlog import check_stored_version
from ..leases import taken_over
from ..models import (
    FORMAT_VERSION,
    INT64_MAX,
    SessionEvent,
    SessionHeader,
    SessionInfo,
    built_events,
    describe_invalid,
    events_from_json,
    events_from_records,
)

#: Stream entries fetched per XRANGE call of the first layout's logs (one event each).
CHUNK = 1000
#: Events a whole read asks for per XRANGE call (entries of up to ENTRY_EVENTS each).
WINDOW = 10 * CHUNK
#: Reads restarted when damage turns out to be a session deleted or replaced meanwhile.
READ_ATTEMPTS = 3
HEADER_FIELDS = ("id", "version", "created_at", "cwd", "parent_id", "fork_seq")
_INT_FIELDS = frozenset({"version", "created_at", "fork_seq"})
_MAX_SEQUENCE_PART = 2**64 - 1
_FORMAT_VERSION = str(FORMAT_VERSION)
#: The most events one stream entry holds: a longer batch is stored as several entries,
#: so that a read with a limit never fetches many more events than it returns.
ENTRY_EVENTS = 1000
#: The one field of a stream entry: its events as a JSON array, one per line.
EVENTS_FIELD = b"events"
_SEPARATOR = b",\n"


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
    ``check_version``) and :class:`CorruptLogError` for a malformed header or one that
    names another session than ``session_id`` (the key's: a stored id is never trusted
    over the key it came from).
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
        header = SessionHeader(**values)
    except ValueError as exc:
        raise CorruptLogError(session_id, f"malformed header: {exc}") from None
    if header.id != session_id:
        raise CorruptLogError(session_id, f"the meta hash names session {header.id!r:.80}")
    return header


def decode_next_seq(meta: Mapping[Any, Any]) -> int:
    """``next_seq`` of a meta hash (``HGETALL`` reply), -1 when absent, malformed or
    outside [0, 2**63)."""
    raw = meta.get(b"next_seq")
    try:
        found = int(raw) if raw is not None else -1
    except ValueError:
        return -1
    return found if 0 <= found <= INT64_MAX else -1


def decode_info(
    session_id: str, meta: Mapping[Any, Any], busy: bool, where: str, expiry: Any = None
) -> SessionInfo:
    """The :class:`SessionInfo` of a meta hash (``HGETALL`` reply; ``where`` is its key):
    ``SessionNotFoundError`` when empty, :class:`CorruptLogError` when malformed.

    ``expiry`` is the meta hash's ``PEXPIRETIME``: the server's own expiry, which is
    what ``expires_at`` reports (also one an operator set by hand); -1 (none) gives None.
    Without it, the meta hash's ``expires_at`` field."""
    if not meta:
        raise SessionNotFoundError(session_id)
    header = decode_header(session_id, meta, check_version=True, where=where)
    next_seq = decode_next_seq(meta)
    if next_seq < 0:
        raise CorruptLogError(session_id, "the meta hash has no valid next_seq")
    last_time = _optional_int(session_id, meta, b"last_time") if next_seq else None
    if isinstance(expiry, int):
        expires_at = expiry if expiry >= 0 else None
    else:
        expires_at = _optional_int(session_id, meta, b"expires_at")
    return SessionInfo(header, next_seq, last_time, expires_at, busy)


def _optional_int(session_id: str, meta: Mapping[Any, Any], name: bytes) -> int | None:
    raw = meta.get(name)
    if raw is None:
        return None
    try:
        found = int(raw)
    except ValueError:
        found = None
    if found is None or not -INT64_MAX <= found <= INT64_MAX:
        raise CorruptLogError(session_id, f"the meta hash's {name.decode()} is {raw!r:.40}")
    return found


# Append ----------------------------------------------------------------------------------


def _checked(value: str, what: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} {value!r:.60} is not valid Unicode") from exc
    return value


def append_args(
    batch: EventBatch,
    header: SessionHeader | None,
    ttl_ms: int | None = None,
    owner: str | None = None,
) -> list[str | bytes]:
    """ARGV of ``log_append.lua`` for a contiguous, non-empty batch: its first seq (the
    others follow it), the header, the last event's time, the stream entries to add,
    each as its number of events and its ``events`` text (see :func:`entry_text`), at most
    :data:`ENTRY_EVENTS` events per entry, then the fencing ``owner`` ("" for none).
    ``ttl_ms`` is the retention stored with a session the call materialises.

    Raises :class:`InvalidArgumentError` for header text Redis cannot store as UTF-8
    (event text is checked by :func:`~sessionstore.eventlog.encode_batch`), before
    anything is sent.
    """
    events, texts = batch.events, batch.texts
    if not events:
        raise InvalidArgumentError("append needs at least one event")
    pairs = [] if header is None else [_checked(v, "header field") for v in header_fields(header)]
    args: list[str | bytes] = [
        str(events[0].seq),
        _FORMAT_VERSION,
        "0" if ttl_ms is None else str(ttl_ms),
        restore_id(events[0].seq),
        "-1" if header is None else str(len(pairs) // 2),
        *pairs,
        str(events[-1].time),
    ]
    if len(texts) <= ENTRY_EVENTS:
        args += (str(len(texts)), entry_text(texts))
    else:
        for start in range(0, len(texts), ENTRY_EVENTS):
            part = texts[start : start + ENTRY_EVENTS]
            args += (str(len(part)), entry_text(part))
    args.append("" if owner is None else _checked(owner, "lease owner"))
    return args


def entry_text(texts: Sequence[bytes]) -> bytes:
    """The ``events`` field of a stream entry: a JSON array of the event texts, one per
    line (no event text holds a newline: JSON strings escape it)."""
    return b"[" + _SEPARATOR.join(texts) + b"]"


def decode_append(session_id: str, batch: EventBatch, reply: list[Any]) -> int:
    """``log_append.lua``'s reply -> the new next seq, or the typed error."""
    code = text(reply[0])
    if code in ("OK", "REPLAY"):
        return int(reply[1])
    if code == "CONFLICT":
        next_seq, first = int(reply[1]), batch.events[0].seq
        detail = "batch differs from the stored events" if first < next_seq else ""
        raise SeqConflictError(session_id, next_seq, first, detail)
    if code == "BUSY":
        raise taken_over(session_id)
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

    The first round trip pipelines ``HGETALL meta`` and ``XRANGE`` from the entry that
    holds ``from_seq`` (:meth:`first_range`, :meth:`take_meta`, :meth:`take`); while
    :attr:`done` is False, ``XRANGE`` :meth:`next_range` continues. Each asks for the
    entries that can hold the next events wanted (``limit``, or :data:`WINDOW` for a whole
    read): ids up to the last one's seq plus :data:`ENTRY_EVENTS`, so a reply holds at
    most that many plus ``2 * ENTRY_EVENTS`` events. The commands need not be atomic (nor MULTI,
    which Redis refuses under maxmemory): entries below ``next_seq`` never change, and
    what a concurrent append adds lies past the ``next_seq`` read first.

    Each reply is parsed once: the ``events`` fields of its entries are joined into one
    JSON document for ``orjson.loads``, whose event objects are checked field by field
    and built into :class:`SessionEvent` objects without pydantic
    (:func:`~sessionstore.models.built_events`; pydantic judges an entry that fails
    the check), and entries of the first layout are decoded from their
    fields. Entries whose first event is at or
    past ``next_seq`` are the torn tail (:attr:`tail` True when seen, False when known
    absent, None when not looked at); a missing, repeated or malformed event before it
    raises :class:`CorruptLogError`.
    """

    def __init__(self, session_id: str, from_seq: int, limit: int | None) -> None:
        if limit is not None and limit < 0:
            raise InvalidArgumentError(f"limit must be >= 0, not {limit!r}")
        self.session_id = session_id
        self.from_seq = from_seq
        self.limit = limit
        self._bound = 0
        self.events: list[SessionEvent] = []
        self.header: SessionHeader | None = None
        self.next_seq = 0
        self.tail: bool | None = None
        self.done = False
        self._expect = from_seq
        self._end = 0
        self._last_id = ""
        self._meta: dict[Any, Any] = {}

    def _range(self, start: str) -> tuple[str, str, int | None]:
        # The entries that can hold the next `window` events end at most ENTRY_EVENTS - 1
        # events after them: one reply holds at most window + 2 * ENTRY_EVENTS events.
        wanted = WINDOW if self.limit is None else self.from_seq + self.limit - self._expect
        window = max(1, wanted)
        self._bound = min(self._expect + window + ENTRY_EVENTS - 1, _MAX_SEQUENCE_PART)
        return start, _stream_id(self._bound, _MAX_SEQUENCE_PART), None

    def first_range(self) -> tuple[str, str, int | None]:
        """(min, max, count) of the first XRANGE: from the entry holding ``from_seq``."""
        # Stream ids are 64-bit: a larger from_seq reads (nothing) from the highest id.
        return self._range(_stream_id(min(self.from_seq, _MAX_SEQUENCE_PART), 0))

    def next_range(self) -> tuple[str, str, int | None]:
        """(min, max, count) of the next XRANGE: after the last entry seen."""
        return self._range("(" + self._last_id)

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
        """One XRANGE reply (a list of ``[id, [name, value, ...]]`` or ``(id, {name:
        value})``)."""
        for raw_id, fields in entries:
            entry_id = text(raw_id)
            last, count = self._span(entry_id)
            first = last - count + 1
            if first >= self.next_seq:
                self.tail = True
                break
            if self._expect >= self._end:
                break
            self._last_id = entry_id
            if last >= self.next_seq:
                self._corrupt(f"entry {entry_id} spans next_seq {self.next_seq}", first)
            if first > self._expect:
                self._corrupt(f"event {self._expect} is missing (the next entry is {entry_id})",
                              self._expect)  # fmt: skip
            if last < self._expect:
                self._corrupt(f"entry {entry_id} repeats seq {last}", last)
            skip, stop = self._expect - first, min(count, self._end - first)
            value = _events_value(fields)
            if value is not None:
                self.events += self._entry_events(entry_id, first, count, value, skip, stop)
            elif count != 1:
                self._corrupt(f"entry {entry_id} has no events field", first)
            else:
                self.events.append(self._decode_first_layout(entry_id, first, fields))
            self._expect = first + stop
        else:
            self._after(len(entries))
            return
        self.done = True

    def _after(self, size: int) -> None:
        """Every entry of a reply of ``size`` entries was taken."""
        # The reply held every entry up to the bound: one holding `expect` ends by then.
        seen_all = size == 0 or self._bound >= self._expect + ENTRY_EVENTS - 1
        if self._expect < self._end:
            if seen_all:
                self._missing()
            return
        # A torn tail's first entry starts at next_seq, so it ends by then too.
        if self._bound >= self.next_seq + ENTRY_EVENTS - 1 and self.from_seq <= self.next_seq:
            self.tail = False
        self.done = True

    def _missing(self) -> NoReturn:
        self._corrupt(
            f"event {self._expect} is missing: the stream ends before next_seq {self.next_seq}",
            self._expect,
        )

    def _span(self, entry_id: str) -> tuple[int, int]:
        """(seq of the last event, number of events) of an entry id."""
        last, _, count = entry_id.partition("-")
        try:
            found = int(last), int(count)
        except ValueError:
            found = (-1, 0)
        if not (found[1] >= 1 and found[0] >= found[1] - 1) or not last.isdigit():
            self._corrupt(f"malformed stream entry id {entry_id!r}", self._expect)
        return found

    def _entry_events(
        self, entry_id: str, first: int, count: int, value: bytes, skip: int, stop: int
    ) -> list[Any]:
        """The events ``skip`` to ``stop`` of the ``count`` events, from seq ``first``, of
        an entry's ``events`` value: one ``orjson.loads`` and one
        :func:`~sessionstore.models.built_events` checking and building the events
        wanted (and the seqs and data of the parsed records left out). An entry that
        fails any of it is judged by :meth:`_judge_entry`, which names the first damage.
        (Entry by entry, the parsed records die young: the garbage collector never moves
        them to its oldest generation.)"""
        try:
            records = orjson.loads(value)
        except orjson.JSONDecodeError:
            records = None
        partial = skip > 0 or stop < count
        if (
            type(records) is list
            and len(records) == count
            and (not partial or _in_place(records, first))
        ):
            events = built_events(records[skip:stop] if partial else records, first + skip)
            if events is not None:
                return events
        return self._judge_entry(entry_id, first, count, value)[skip:stop]

    def _judge_entry(self, entry_id: str, first: int, count: int, value: bytes) -> list[Any]:
        """The events of an entry, checked step by step: :class:`CorruptLogError` for the
        first thing wrong (not JSON, not ``count`` events, an event out of place or with
        data that is not an object, an invalid event)."""
        try:
            found = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            self._check_entry(entry_id, first, value)
            self._corrupt(f"entry {entry_id} is not valid JSON: {exc}", first)
        if type(found) is not list or len(found) != count:
            self._check_entry(entry_id, first, value)
            self._corrupt(f"entry {entry_id} does not hold {count} events", first)
        seq = first
        for record in found:
            if type(record) is not dict or record.get("seq") != seq:
                self._corrupt(f"entry {entry_id} does not hold event {seq} in place", seq)
            if type(record.get("data")) is not dict:
                self._corrupt(f"entry {entry_id} has data that is not a JSON object", seq)
            seq += 1
        try:
            return events_from_records(found)
        except ValidationError as exc:
            index = exc.errors()[0]["loc"][0]
            seq = first + index if isinstance(index, int) else first
            detail = f"stored event {seq} is invalid: {describe_invalid(exc)}"
            self._corrupt(detail, seq)

    def _check_entry(self, entry_id: str, first: int, value: bytes) -> None:
        """Raise :class:`CorruptLogError` naming the first event of an ``events`` value
        that is not a valid event (one per line), if any."""
        try:
            events_from_json(value)
        except ValidationError as exc:
            found = exc
        else:
            return
        for index, line in enumerate(value[1:-1].split(_SEPARATOR)):
            try:
                events_from_json(b"[" + line + b"]")
            except ValidationError as exc:
                found, first = exc, first + index
                break
        detail = f"entry {entry_id} holds an invalid event: {describe_invalid(found)}"
        self._corrupt(detail, first)

    def _decode_first_layout(self, entry_id: str, seq: int, fields: Any) -> SessionEvent:
        """The event of an entry of the first layout (fields seq, type, time, data, id)."""
        if entry_id != f"{seq}-1":
            self._corrupt(f"entry id {entry_id} should be {seq}-1", seq)
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
        """(min, max, count) of the XRANGE that tells whether a torn tail exists: the
        first entry that ends at or past ``next_seq``."""
        return _stream_id(self.next_seq, 0), "+", 1

    def cut_args(self) -> list[str]:
        """ARGV of ``log_cut_tail.lua`` for the next_seq this read saw."""
        return [str(self.next_seq), restore_id(self.next_seq)]

    def result(self) -> tuple[SessionHeader, list[SessionEvent]]:
        assert self.header is not None
        return self.header, self.events


def _in_place(records: list[Any], first: int) -> bool:
    """Whether parsed records are objects with data objects, holding seqs ``first``
    onwards in order."""
    if [type(record) for record in records].count(dict) != len(records):
        return False
    seqs = [record.get("seq") for record in records]
    objects = [type(record.get("data")) for record in records].count(dict)
    return seqs == list(range(first, first + len(records))) and objects == len(records)


def _events_value(fields: Any) -> bytes | None:
    """The ``events`` field of an entry, None for an entry of the first layout."""
    if type(fields) is list:
        return fields[1] if len(fields) == 2 and fields[0] == EVENTS_FIELD else None
    if isinstance(fields, Mapping) and len(fields) == 1:
        value = fields.get(EVENTS_FIELD)
        return value if isinstance(value, bytes) else None
    return None


def _stream_id(seq: int, part: int) -> str:
    return f"{seq}-{part}"


def _pairs(flat: Sequence[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


# List ------------------------------------------------------------------------------------
