"""Batches for backend tests, built past ``append``'s checks: what a backend receives,
or what a log written before a check was introduced holds."""

from __future__ import annotations

import json
from typing import Any

import orjson

from sessionstore.contracts import EventBatch
from sessionstore.eventlog import event_text
from sessionstore.models import SessionEvent


def stored(seq: int, kind: str, time: int, data: str | dict[str, Any] = "{}", id: Any = None):
    """One event as a backend stores it, without validation (``data`` JSON text or an
    object)."""
    parsed = orjson.loads(data) if isinstance(data, str) else data
    return SessionEvent.model_construct(seq=seq, type=kind, time=time, data=parsed, id=id)


def batch_of(events: list[SessionEvent]) -> EventBatch:
    """The batch ``append`` would hand a backend for ``events`` (not checked: an event
    orjson refuses, such as a time past 64 bits, is written as the json module does)."""
    return EventBatch(list(events), [_text(event) for event in events])


def _text(event: SessionEvent) -> bytes:
    try:
        return event_text(event)
    except TypeError:
        record = {"seq": event.seq, "type": event.type, "time": event.time, "data": event.data}
        return json.dumps(record, separators=(",", ":")).encode()
