"""The event-log format on Redis, as pure functions shared by the sync and async backends.

A session is a meta hash (header fields as plain text, an absent field is None, plus
``next_seq``, ``last_time``, ``entries``, ``bytes`` and ``bytes_to`` -- the length of
the ``events`` texts of its entries below ``bytes_to``, what ``stored_bytes`` reports
while ``bytes_to`` is ``next_seq``; absent for a log materialised before they were
kept, and dropped by the next append once a client of an older version appended, so
such a log's size is estimated -- and, for a session with a retention, ``ttl_ms``)
and a stream.
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
event has one) is an entry of one event and is read alike (the reader is
:mod:`.logparse`), so logs written by it still load and can be appended to. Both keys
of a session with a ``ttl_ms`` carry the same expiry, set by every append.

A third key, the digest hash, holds :data:`DIGEST_BYTES` bytes per event (see
:func:`event_digests`) for the newest :data:`DIGEST_SLOTS` events, in fields of 64
digests each (``log_append.lua`` says where): an append that repeats stored events (a
call sent again after a lost reply) is told apart from a conflicting one by those
digests alone, so its cost never depends on what the stream holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from hashlib import blake2b
from typing import Any

from ..contracts import EventBatch
from ..errors import (
    CorruptLogError,
    InvalidArgumentError,
    SeqConflictError,
    SessionExistsError,
    SessionNotFoundError,
    UnsupportedVersionError,
)
from ..eventlog import HEADER_FIELD_BYTES, check_stored_version
from ..leases import taken_over
from ..models import FORMAT_VERSION, INT64_MAX, SessionHeader, SessionInfo
from .replies import text
from .stored_numbers import stored_int

HEADER_FIELDS = ("id", "version", "created_at", "cwd", "parent_id", "fork_seq")
_INT_FIELDS = frozenset({"version", "created_at", "fork_seq"})
#: The largest part of a stream id (each of its two parts is a 64-bit number).
MAX_SEQUENCE_PART = 2**64 - 1
_FORMAT_VERSION = str(FORMAT_VERSION)
#: The most events one stream entry holds: a longer batch is stored as several entries,
#: so that a read with a limit never fetches many more events than it returns.
ENTRY_EVENTS = 1000
#: The one field of a stream entry: its events as a JSON array, one per line.
EVENTS_FIELD = b"events"
#: What separates the event texts of an ``events`` field.
SEPARATOR = b",\n"
#: The bytes of one event's digest in the session's digest hash (``DIGEST_BYTES`` in
#: ``log_append.lua``), which keeps the digests of the newest :data:`DIGEST_SLOTS` events.
DIGEST_BYTES = 8
DIGEST_SLOTS = 65536
#: The longest header field (name or value, UTF-8) a session on Redis stores: the
#: library's scripts read no stored field longer (``FIELD_BYTES`` of ``lua/_limits.lua``);
#: ``check_header`` refuses a longer one at ``create`` on every backend.
FIELD_BYTES = HEADER_FIELD_BYTES


def restore_id(next_seq: int) -> str:
    """The largest stream id below every entry of seq >= ``next_seq``: what the stream's
    last id is set back to after a torn tail is cut off, so those ids can be added again."""
    return "0-0" if next_seq == 0 else stream_id(next_seq - 1, MAX_SEQUENCE_PART)


def stream_id(seq: int, part: int) -> str:
    """The stream id ``<seq>-<part>``."""
    return f"{seq}-{part}"


def entry_start(entry_id: str) -> int:
    """The seq of the first event of the entry ``<seq of its last event>-<number of
    events>``; -1 for an id the library never writes."""
    last, _, count = entry_id.partition("-")
    if not (last.isdigit() and count.isdigit()) or not 1 <= int(count) <= int(last) + 1:
        return -1
    return int(last) - int(count) + 1


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
    return {text(name, "strict"): text(value, "strict") for name, value in meta.items()}


def _stored_version(raw: str | None) -> object:
    found = stored_int(raw)
    return raw if found is None else found


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
            number = stored_int(raw)
            if number is None:
                raise CorruptLogError(
                    session_id, f"header field {name} is not an integer: {raw!r:.40}"
                )
            values[name] = number
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
    found = stored_int(meta.get(b"next_seq"))
    return found if found is not None and 0 <= found <= INT64_MAX else -1


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


def whole_count(raw: Any) -> int | None:
    """A count the meta hash holds (``bytes``, ``next_seq``, ``entries``): a whole
    number from 0 within 64 bits, else None."""
    found = stored_int(raw)
    return found if found is not None and 0 <= found <= INT64_MAX else None


def entry_bytes(fields: Mapping[Any, Any] | Sequence[Any]) -> int:
    """The stored text of a stream entry (an ``XRANGE`` reply's fields, as a mapping or
    a flat list): its ``events`` text, or the values of the fields of an entry of the
    first layout; what ``log_append.lua`` adds to the meta hash's ``bytes`` for an entry
    it writes."""
    values = fields.values() if isinstance(fields, Mapping) else fields[1::2]
    return sum(len(value) for value in values)


def estimated_bytes(entries: int, first: Sequence[Any], last: Sequence[Any]) -> int:
    """The bytes of a log of ``entries`` stream entries that has no count, from ``first``
    and ``last``, the ``XRANGE`` and ``XREVRANGE`` replies of as many entries at each of
    its ends: their sum when they hold every entry (a short log: exact), else their mean
    :func:`entry_bytes` times ``entries`` (an estimate)."""
    seen = {bytes(entry_id): fields for entry_id, fields in (*first, *last)}
    total = sum(entry_bytes(fields) for fields in seen.values())
    if len(seen) >= entries or not seen:
        return total
    return round(total / len(seen) * entries)


def _optional_int(session_id: str, meta: Mapping[Any, Any], name: bytes) -> int | None:
    raw = meta.get(name)
    if raw is None:
        return None
    found = stored_int(raw)
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
    epoch: int | None = None,
) -> list[str | bytes]:
    """ARGV of ``log_append.lua`` for a contiguous, non-empty batch: its first seq (the
    others follow it), the header, the last event's time, the events' digests
    (:func:`event_digests`), the stream entries to add,
    each as its number of events and its ``events`` text (see :func:`entry_text`), at most
    :data:`ENTRY_EVENTS` events per entry, then the fencing lease ``epoch`` ("" for none).
    ``ttl_ms`` is the retention stored with a session the call materialises.

    Raises :class:`InvalidArgumentError` for header text Redis cannot store as UTF-8
    (its length was checked at ``create``, by :func:`~sessionstore.eventlog.check_header`;
    event text is checked by :func:`~sessionstore.eventlog.encode_batch`), before
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
        event_digests(texts),
    ]
    if len(texts) <= ENTRY_EVENTS:
        args += (str(len(texts)), entry_text(texts))
    else:
        for start in range(0, len(texts), ENTRY_EVENTS):
            part = texts[start : start + ENTRY_EVENTS]
            args += (str(len(part)), entry_text(part))
    args.append("" if epoch is None else str(epoch))
    return args


def event_digests(texts: Sequence[bytes]) -> bytes:
    """The digests of the event texts, in order: of each, the first :data:`DIGEST_BYTES`
    bytes of its BLAKE2b digest. An event text names its seq, so two events at one seq
    have one digest only when they are the same event."""
    return b"".join([blake2b(text, digest_size=DIGEST_BYTES).digest() for text in texts])


def entry_text(texts: Sequence[bytes]) -> bytes:
    """The ``events`` field of a stream entry: a JSON array of the event texts, one per
    line (no event text holds a newline: JSON strings escape it)."""
    return b"[" + SEPARATOR.join(texts) + b"]"


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
