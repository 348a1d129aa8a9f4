"""The event-log records: :class:`SessionHeader`, :class:`SessionEvent` and
:class:`SessionInfo`.

Both are strict: a field takes only its own type (``seq="5"``, ``seq=True`` and
``time=1.0`` are refused, never converted). Built directly, a bad field raises pydantic's
``ValidationError``; every library call raises ``InvalidArgumentError`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .jsondata import elide
from .when import now_ms

#: The log format version this library writes and reads.
FORMAT_VERSION = 1
#: Integers in headers and events stay within 64 bits, so every backend stores them alike.
INT64_MAX = 2**63 - 1


class SessionHeader(BaseModel):
    """Identity of one session log; stored once, when the log is materialised."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: str = Field(min_length=1)
    version: int = FORMAT_VERSION
    created_at: int = Field(default_factory=now_ms, ge=-INT64_MAX, le=INT64_MAX)
    cwd: str | None = None
    parent_id: str | None = None
    fork_seq: int | None = Field(default=None, ge=0, le=INT64_MAX)


class SessionEvent(BaseModel):
    """One log entry. ``data`` is not checked here: :meth:`append` checks it is lossless JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    seq: int = Field(ge=0, le=INT64_MAX)
    type: str
    time: int = Field(ge=-INT64_MAX, le=INT64_MAX)
    data: Any = Field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What ``info`` and ``list_info`` tell about a session from its metadata alone
    (no log parse): its ``header``, ``next_seq`` (the number of committed events),
    ``last_time`` (the ``time`` of the last committed event, None without events),
    ``expires_at`` (epoch ms, None when the session never expires) and ``busy`` (a live
    writer holds its lease)."""

    header: SessionHeader
    next_seq: int
    last_time: int | None
    expires_at: int | None
    busy: bool


#: Validates stored events in bulk (pydantic's public API; see :func:`events_from_json`).
_EVENT_LIST: TypeAdapter[list[SessionEvent]] = TypeAdapter(list[SessionEvent])


def events_from_json(text: bytes | str) -> list[SessionEvent]:
    """The events of a JSON array of event objects (``{"seq", "type", "time", "data",
    "id"?}``), parsed and validated in one pass by pydantic; ``ValidationError`` for
    anything that is not a valid :class:`SessionEvent` (``data`` may be any JSON here:
    a reader checks it is an object)."""
    return _EVENT_LIST.validate_json(text)


def events_from_records(records: list[dict[str, Any]]) -> list[SessionEvent]:
    """The events of parsed event objects, validated by pydantic (``data`` is kept as
    is, not copied); ``ValidationError`` for anything invalid."""
    return _EVENT_LIST.validate_python(records)


def describe_invalid(exc: ValidationError, most: int = 3) -> str:
    """A short account of what ``exc`` found wrong: field and message of its first
    ``most`` errors, without the input values (which may be huge)."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False)[:most]:
        where = ".".join(str(part) for part in error["loc"]) or "(the record)"
        parts.append(f"{elide(where)}: {error['msg']}")
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)
