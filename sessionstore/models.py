"""The event-log records: :class:`SessionHeader` and :class:`SessionEvent`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .when import now_ms

#: The log format version this library writes and reads.
FORMAT_VERSION = 1
#: Integers in headers and events stay within 64 bits, so every backend stores them alike.
INT64_MAX = 2**63 - 1


class SessionHeader(BaseModel):
    """Identity of one session log; stored once, when the log is materialised."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    version: int = FORMAT_VERSION
    created_at: int = Field(default_factory=now_ms, ge=-INT64_MAX, le=INT64_MAX)
    cwd: str | None = None
    parent_id: str | None = None
    fork_seq: int | None = Field(default=None, ge=0, le=INT64_MAX)


class SessionEvent(BaseModel):
    """One log entry. ``data`` is not checked here: :meth:`append` checks it is lossless JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=0, le=INT64_MAX)
    type: str
    time: int = Field(ge=-INT64_MAX, le=INT64_MAX)
    data: Any = Field(default_factory=dict)
    id: str | None = None


_new_event = SessionEvent.__new__
_set = object.__setattr__
#: Every restored event shares one fields-set (pydantic copies it before any change).
_EVENT_FIELDS = set(SessionEvent.model_fields)


def restored_event(seq: int, type: str, time: int, data: Any, id: str | None) -> SessionEvent:
    """A :class:`SessionEvent` read back from a store, built without validation.

    Only for events that were validated when appended: it is what
    ``SessionEvent.model_construct`` builds for this model, without its per-field loop,
    which dominates loading a long log.
    """
    event = _new_event(SessionEvent)
    _set(event, "__dict__", {"seq": seq, "type": type, "time": time, "data": data, "id": id})
    _set(event, "__pydantic_fields_set__", _EVENT_FIELDS)
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event
