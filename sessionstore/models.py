"""The event-log records: :class:`SessionHeader` and :class:`SessionEvent`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .when import now_ms

#: The log format version this library writes and reads.
FORMAT_VERSION = 1


class SessionHeader(BaseModel):
    """Identity of one session log; stored once, when the log is materialised."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    version: int = FORMAT_VERSION
    created_at: int = Field(default_factory=now_ms)
    cwd: str | None = None
    parent_id: str | None = None
    fork_seq: int | None = Field(default=None, ge=0)


class SessionEvent(BaseModel):
    """One log entry. ``data`` is not checked here: :meth:`append` checks it is lossless JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=0)
    type: str
    time: int
    data: Any = Field(default_factory=dict)
    id: str | None = None
