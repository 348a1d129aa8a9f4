"""Stored events read as records, for a reader that uses only part of each event's data
(the OpenAI Agents adapter): every field checked as :func:`~sessionstore.models.stored_events`
checks it, each value of the ``data`` object kept as its JSON text instead of parsed.

A :class:`StoredRecord` is a msgspec struct that the garbage collector does not track,
and its ``data`` a dict of :class:`msgspec.Raw` values, which it does not track either: a
long log read this way adds nothing for the collector to walk. What a reader takes out of
``data`` it parses itself (:func:`parsed_values`, one ``orjson.loads``), which refuses
what an event read refuses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec
import orjson

from .models import INT64_MAX, SessionEvent, decoded_in_place


class StoredRecord(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One stored event: the fields of :class:`~sessionstore.models.SessionEvent`, the
    values of its ``data`` object as JSON text (well formed, not yet parsed)."""

    seq: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
    type: str
    time: Annotated[int, msgspec.Meta(ge=-INT64_MAX, le=INT64_MAX)]
    data: dict[str, msgspec.Raw]
    id: str | None = None


_RECORDS = msgspec.json.Decoder(list[StoredRecord])


def stored_records(
    text: bytes, first: int, count: int, skip: int = 0, stop: int | None = None
) -> list[StoredRecord] | None:
    """Records ``skip`` to ``stop`` of a JSON array of ``count`` stored event objects
    whose seqs are ``first``, ``first + 1``, ...; None for anything
    :func:`~sessionstore.models.stored_events` refuses but the contents of data values
    (which :func:`parsed_values` judges)."""
    return decoded_in_place(_RECORDS, text, first, count, skip, stop)


def records_of_events(events: Iterable[SessionEvent]) -> list[StoredRecord]:
    """The records of events already read (a backend without a record read of its own):
    each data value serialised again; data that is not an object reads as empty."""
    dumps, raw = orjson.dumps, msgspec.Raw
    return [
        StoredRecord(
            event.seq,
            event.type,
            event.time,
            {key: raw(dumps(value)) for key, value in event.data.items()}
            if type(event.data) is dict
            else {},
            event.id,
        )
        for event in events
    ]


def parsed_values(records: list[StoredRecord]) -> list[Any]:
    """Every data value of ``records``, in order (record by record, key by key), parsed
    in one ``orjson.loads``; ``orjson.JSONDecodeError`` for a value an event read
    refuses too (a number out of range, text that is not UTF-8)."""
    joined = b",".join([value for record in records for value in record.data.values()])
    found: list[Any] = orjson.loads(b"[" + joined + b"]")
    return found
