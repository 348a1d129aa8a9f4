"""Stored events read as records, for a reader that uses only part of each event's data
(the OpenAI Agents adapter): every field checked as :func:`~sessionstore.models.stored_events`
checks it, each value of the ``data`` object kept as its JSON text instead of parsed.

A :class:`StoredRecord` is a msgspec struct that the garbage collector does not track,
and its ``data`` a dict of :class:`msgspec.Raw` values, which it does not track either: a
long log read this way adds nothing for the collector to walk. What a reader takes out of
``data`` it parses itself (:func:`parsed_values`, one ``orjson.loads``), which refuses
what an event read refuses, naming the event.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec
import orjson

from .errors import CorruptDataError, CorruptLogError
from .gcdefer import deferred_collection
from .models import (
    SessionEvent,
    StoredSeq,
    StoredTime,
    decoded_in_place,
    holds_stored_events,
)


class StoredRecord(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One stored event: the fields of :class:`~sessionstore.models.SessionEvent`, the
    values of its ``data`` object as JSON text (well formed, not yet parsed). Not
    tracked by the garbage collector: a record must not be put inside its own ``data``
    (a cycle no collection would free)."""

    seq: StoredSeq
    type: str
    time: StoredTime
    data: dict[str, msgspec.Raw]
    id: str | None = None


_RECORDS = msgspec.json.Decoder(list[StoredRecord])


def stored_records(
    text: bytes, first: int, count: int, skip: int = 0, stop: int | None = None
) -> list[StoredRecord] | None:
    """Records ``skip`` to ``stop`` of a JSON array of ``count`` stored event objects
    whose seqs are ``first``, ``first + 1``, ...; None for anything
    :func:`~sessionstore.models.stored_events` refuses but the contents of the data values
    of the records returned (which :func:`parsed_values` judges): the records left out
    are checked in full, as a read of events would."""
    partial = skip > 0 or (stop is not None and stop < count)
    if partial and not holds_stored_events(text, first, count):
        return None
    return decoded_in_place(_RECORDS, text, first, count, skip, stop, numbers=False)


def records_of_events(events: Sequence[SessionEvent]) -> list[StoredRecord]:
    """The records of events already read (a backend without a record read of its own):
    each data value serialised again; data that is not an object reads as empty."""
    raw = msgspec.Raw
    with deferred_collection(len(events)):
        return [
            StoredRecord(
                event.seq,
                event.type,
                event.time,
                {key: raw(json_text(value)) for key, value in event.data.items()}
                if type(event.data) is dict
                else {},
                event.id,
            )
            for event in events
        ]


def json_text(value: Any) -> bytes:
    """The JSON text of a parsed JSON value, however deeply nested (a read takes up to
    1023 levels; ``orjson.dumps`` writes 254)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return _nested_text(value).encode()


class _Text(str):
    """A piece of JSON syntax queued by :func:`_nested_text` (a plain ``str`` is a value)."""


def _nested_text(value: Any) -> str:
    """The JSON text of a parsed JSON value, written without recursion."""
    out: list[str] = []
    todo: list[Any] = [value]
    while todo:
        item = todo.pop()
        if type(item) is _Text:
            out.append(item)
        elif type(item) is dict:
            todo.append(_Text("}"))
            pairs = list(item.items())
            for index in range(len(pairs) - 1, -1, -1):
                key, inner = pairs[index]
                todo.append(inner)
                comma = "," if index else ""
                todo.append(_Text(comma + json.dumps(key, ensure_ascii=False) + ":"))
            todo.append(_Text("{"))
        elif type(item) is list:
            todo.append(_Text("]"))
            for index in range(len(item) - 1, -1, -1):
                todo.append(item[index])
                if index:
                    todo.append(_Text(","))
            todo.append(_Text("["))
        else:
            out.append(json.dumps(item, ensure_ascii=False, allow_nan=False))
    return "".join(out)


def parsed_values(records: list[StoredRecord], session_id: str | None = None) -> list[Any]:
    """Every data value of ``records``, in order (record by record, key by key), parsed
    in one ``orjson.loads``. A value an event read refuses too (a number out of range,
    text that is not UTF-8) raises :class:`~sessionstore.errors.CorruptLogError` naming
    ``session_id`` and the first such record's seq (without ``session_id``, a
    :class:`~sessionstore.errors.CorruptDataError` naming that seq)."""
    joined = b",".join([value for record in records for value in record.data.values()])
    try:
        found: list[Any] = orjson.loads(b"[" + joined + b"]")
    except orjson.JSONDecodeError as exc:
        raise _damaged(records, session_id, exc) from None
    return found


def _damaged(
    records: list[StoredRecord], session_id: str | None, error: orjson.JSONDecodeError
) -> CorruptDataError:
    """The error naming the first of ``records`` whose data values do not parse (the
    first record when each parses alone: ``error`` is then the batch's)."""
    seq, reason = (records[0].seq if records else 0), str(error)
    for record in records:
        try:
            orjson.loads(b"[" + b",".join(record.data.values()) + b"]")
        except orjson.JSONDecodeError as exc:
            seq, reason = record.seq, str(exc)
            break
    detail = f"a value of the stored event's data is not valid JSON: {reason}"
    if session_id is None:
        return CorruptDataError(f"event {seq}", detail)
    return CorruptLogError(session_id, detail, seq=seq)
