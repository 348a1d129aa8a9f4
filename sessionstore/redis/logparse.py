"""The reader of a session's stored stream entries (layout in :mod:`.logformat`):
:class:`LogRead` turns the replies of a ``read``'s commands into its header and events,
and finds the damage and the torn tail."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import orjson
from pydantic import ValidationError

from ..errors import CorruptLogError, InvalidArgumentError, SessionNotFoundError
from ..gcdefer import deferred_collection
from ..models import (
    SessionEvent,
    SessionHeader,
    describe_invalid,
    events_from_json,
    events_from_records,
    stored_events,
)
from ..records import records_of_events, stored_records
from .logformat import (
    ENTRY_EVENTS,
    EVENTS_FIELD,
    MAX_SEQUENCE_PART,
    SEPARATOR,
    decode_header,
    decode_next_seq,
    stream_id,
)
from .replies import text
from .stored_numbers import stored_int

#: Stream entries fetched per XRANGE call of the first layout's logs (one event each).
CHUNK = 1000
#: Events a whole read asks for per XRANGE call (entries of up to ENTRY_EVENTS each).
WINDOW = 10 * CHUNK
#: Reads restarted when damage turns out to be a session deleted or replaced meanwhile.
READ_ATTEMPTS = 3


class LogRead:
    """One ``read`` of a session log, fed with the replies of its commands.

    The first round trip pipelines ``HGETALL meta`` and ``XRANGE`` from the entry that
    holds ``from_seq`` (:meth:`first_range`, :meth:`take_meta`, :meth:`take`); while
    :attr:`done` is False, ``XRANGE`` :meth:`next_range` continues. Each asks for the
    entries that can hold the next events wanted (``limit``, or :data:`WINDOW` for a whole
    read): ids up to the last one's seq plus :data:`ENTRY_EVENTS`, so a reply holds at
    most that many plus ``2 * ENTRY_EVENTS`` events, and (``COUNT``) at most one entry
    more than the range has seqs, whatever a tenant planted in its own stream. The
    commands need not be atomic (nor MULTI, which Redis refuses under maxmemory): entries
    below ``next_seq`` never change, and what a concurrent append adds lies past the
    ``next_seq`` read first.

    Each entry's ``events`` value is parsed once: msgspec checks its event objects field
    by field as it parses them, and they are built into :class:`SessionEvent` objects
    without pydantic (:func:`~sessionstore.models.stored_events`; pydantic judges an
    entry that fails the check), and entries of the first layout are decoded from their
    fields. Entries whose first event is at or
    past ``next_seq`` are the torn tail (:attr:`tail` True when seen, False when known
    absent, None when not looked at); a missing, repeated or malformed event before it
    raises :class:`CorruptLogError`.
    """

    def __init__(
        self,
        session_id: str,
        from_seq: int,
        limit: int | None,
        records: bool = False,
        where: str | None = None,
    ) -> None:
        if limit is not None and limit < 0:
            raise InvalidArgumentError(f"limit must be >= 0, not {limit!r}")
        self.session_id = session_id
        self.from_seq = from_seq
        self.limit = limit
        self._where = where
        self._bound = 0
        self._asked = 0
        #: The events read, or with ``records`` their :class:`StoredRecord` objects.
        self.events: list[Any] = []
        self.records = records
        self.header: SessionHeader | None = None
        self.next_seq = 0
        self.tail: bool | None = None
        self.done = False
        self._expect = from_seq
        self._end = 0
        self._last_id = ""
        self._meta: dict[Any, Any] = {}

    def _range(self, start: str, first: int) -> tuple[str, str, int]:
        # The entries that can hold the next `window` events end at most ENTRY_EVENTS - 1
        # events after them: one reply holds at most window + 2 * ENTRY_EVENTS events.
        wanted = WINDOW if self.limit is None else self.from_seq + self.limit - self._expect
        window = max(1, wanted)
        self._bound = min(self._expect + window + ENTRY_EVENTS - 1, MAX_SEQUENCE_PART)
        # A log has one entry per seq it ends at (an id's first part): one more than the
        # range's seqs means a planted one, which the reply then holds (read no further).
        self._asked = max(self._bound - first, 0) + 2
        return start, stream_id(self._bound, MAX_SEQUENCE_PART), self._asked

    def first_range(self) -> tuple[str, str, int]:
        """(min, max, count) of the first XRANGE: from the entry holding ``from_seq``."""
        # Stream ids are 64-bit: a larger from_seq reads (nothing) from the highest id.
        first = min(self.from_seq, MAX_SEQUENCE_PART)
        return self._range(stream_id(first, 0), first)

    def next_range(self) -> tuple[str, str, int]:
        """(min, max, count) of the next XRANGE: after the last entry seen."""
        return self._range("(" + self._last_id, int(self._last_id.partition("-")[0]))

    def take_meta(self, meta: Mapping[Any, Any]) -> None:
        """The ``HGETALL meta`` reply: SessionNotFoundError when empty."""
        if not meta:
            raise SessionNotFoundError(self.session_id)
        self._meta = dict(meta)
        self.header = decode_header(self.session_id, meta, check_version=True, where=self._where)
        self.next_seq = decode_next_seq(meta)
        if self.next_seq < 0:
            raise CorruptLogError(self.session_id, "the meta hash has no valid next_seq")
        end = self.next_seq if self.limit is None else self.from_seq + self.limit
        self._end = min(self.next_seq, end)

    def take(self, entries: Sequence[Any]) -> None:
        """One XRANGE reply (a list of ``[id, [name, value, ...]]`` or ``(id, {name:
        value})``)."""
        with deferred_collection(self._end - self._expect if entries else 0):
            self._take(entries)

    def _take(self, entries: Sequence[Any]) -> None:
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
                event = self._decode_first_layout(entry_id, first, fields)
                self.events += records_of_events([event]) if self.records else [event]
            self._expect = first + stop
        else:
            self._after(len(entries))
            return
        self.done = True

    def _after(self, size: int) -> None:
        """Every entry of a reply of ``size`` entries was taken."""
        # The reply held every entry up to the bound (it was not cut at the count asked):
        # one holding `expect` ends by then.
        seen_all = size == 0 or (
            size < self._asked and self._bound >= self._expect + ENTRY_EVENTS - 1
        )
        if self._expect < self._end:
            if seen_all:
                self._missing()
            return
        # A torn tail's first entry starts at next_seq, so it ends by then too.
        if (
            seen_all
            and self._bound >= self.next_seq + ENTRY_EVENTS - 1
            and self.from_seq <= self.next_seq
        ):
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
        an entry's ``events`` value (or their records), parsed, checked and built in one
        pass by :func:`~sessionstore.models.stored_events` (or
        :func:`~sessionstore.records.stored_records`); the events left out are checked
        too. An entry that fails any of it is judged by :meth:`_judge_entry`, which
        names the first damage."""
        parse = stored_records if self.records else stored_events
        found = parse(value, first, count, skip, stop)
        if found is not None:
            return found
        events = self._judge_entry(entry_id, first, count, value)[skip:stop]
        return records_of_events(events) if self.records else events

    def _judge_entry(self, entry_id: str, first: int, count: int, value: bytes) -> list[Any]:
        """The events of an entry, checked step by step: :class:`CorruptLogError` for the
        first thing wrong (not JSON, not ``count`` events, an event out of place or with
        data that is not an object, an invalid event)."""
        try:
            found = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            self._check_entry(entry_id, first, value)
            at, reason = _first_unparsable(value, exc)
            self._corrupt(f"entry {entry_id} is not valid JSON: {reason}", first + at)
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
        for index, line in enumerate(value[1:-1].split(SEPARATOR)):
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
        time = stored_int(raw["time"])
        if time is None:
            self._corrupt(f"entry {entry_id} has a malformed time {raw['time']!r:.40}", seq)
        try:
            parsed = orjson.loads(raw["data"])
            record = {
                "seq": seq,
                "type": raw["type"].decode(),
                "time": time,
                "data": parsed,
                "id": None if raw_id is None else raw_id.decode(),
            }
        except UnicodeDecodeError:
            self._corrupt(f"entry {entry_id} is not valid UTF-8", seq)
        except ValueError as exc:
            self._corrupt(f"entry {entry_id} has malformed data: {exc}", seq)
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
        return stream_id(self.next_seq, 0), "+", 1

    def result(self) -> tuple[SessionHeader, list[Any]]:
        assert self.header is not None
        return self.header, self.events


def _first_unparsable(value: bytes, error: orjson.JSONDecodeError) -> tuple[int, str]:
    """The index of the first event (one per line) of an entry's ``events`` value that
    is not JSON, with what is wrong with it; the entry's ``error`` (index 0) when the
    lines do not tell (the value is not one event per line)."""
    for index, line in enumerate(value[1:-1].split(SEPARATOR)):
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            return index, str(exc)
    return 0, str(error)


def _events_value(fields: Any) -> bytes | None:
    """The ``events`` field of an entry, None for an entry of the first layout."""
    if type(fields) is list:
        return fields[1] if len(fields) == 2 and fields[0] == EVENTS_FIELD else None
    if isinstance(fields, Mapping) and len(fields) == 1:
        value = fields.get(EVENTS_FIELD)
        return value if isinstance(value, bytes) else None
    return None


def _pairs(flat: Sequence[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))
