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
