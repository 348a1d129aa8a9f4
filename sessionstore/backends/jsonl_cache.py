"""What a :class:`~.jsonl.JsonlEvents` remembers of the logs it validated, per process: a
:class:`LogState` per log, kept by :class:`LogStates`.

A state is trusted only for the file it was seen in: the same (``dev``, ``ino``), and
either unchanged (same size and mtime) or only grown, its committed bytes at the start
and before the committed end still as they were (:meth:`LogState.continues`). Anything
else is parsed whole again. So the bytes of a log are validated once, when first read
or appended to, and again only after the file changed in another way than growing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..models import SessionHeader
from .jsonl_format import ParsedLog

#: How many committed bytes at the start and before the end of a log identify it.
PROBE = 256
#: How many logs' states one :class:`LogStates` keeps; past it, it forgets them all.
REMEMBERED_LOGS = 1024


@dataclass(slots=True)
class LogState:
    """A log as last validated: the file (``dev``, ``ino``) with its ``size`` and
    ``mtime_ns`` then, the ``header`` (None: no complete header line), the committed
    events' ``next_seq``, the offset ``end`` where they end and their offset index
    ``offsets`` (see :mod:`.jsonl_format`). ``head`` and ``tail`` are committed bytes
    from offset 0 and up to ``end``, checked to recognise the same log once it has
    grown. Treated as immutable (not frozen: one is built per append)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    header: SessionHeader | None
    next_seq: int
    end: int
    head: bytes
    tail: bytes
    offsets: tuple[int, ...]

    @classmethod
    def parsed_whole(cls, st: os.stat_result, log: ParsedLog, raw: bytes, size: int) -> LogState:
        """The state of ``log``, parsed from ``raw``, in the file ``st`` describes, now
        ``size`` bytes long."""
        return cls(
            st.st_dev,
            st.st_ino,
            size,
            st.st_mtime_ns,
            log.header,
            len(log.events),
            log.end,
            raw[: min(PROBE, log.end)],
            raw[max(0, log.end - PROBE) : log.end],
            log.offsets,
        )

    @property
    def torn(self) -> bool:
        """Whether bytes of an unfinished final batch follow the committed events."""
        return self.end < self.size

    def unchanged(self, st: os.stat_result) -> bool:
        """Whether ``st`` describes this file, at the size and mtime seen."""
        return (
            st.st_size == self.size
            and st.st_mtime_ns == self.mtime_ns
            and st.st_ino == self.ino
            and st.st_dev == self.dev
        )

    def same_file(self, st: os.stat_result) -> bool:
        """Whether ``st`` describes the file this state was seen in, at this size."""
        return (st.st_dev, st.st_ino, st.st_size) == (self.dev, self.ino, self.size)

    def continues(self, fd: int, st: os.stat_result) -> bool:
        """Whether the file open as ``fd``, described by ``st``, is this log with at most
        bytes appended since: the same file, unchanged or grown, its committed bytes at
        the start and before the committed end still as they were."""
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            return False
        if st.st_size == self.size and st.st_mtime_ns == self.mtime_ns:
            return True
        return (
            st.st_size > self.size
            and os.pread(fd, len(self.head), 0) == self.head
            and os.pread(fd, len(self.tail), self.end - len(self.tail)) == self.tail
        )


class LogStates:
    """The states of the logs last validated, by session id (at most
    :data:`REMEMBERED_LOGS`). Reads and appends of the log share them."""

    def __init__(self) -> None:
        self._states: dict[str, LogState] = {}

    def get(self, session_id: str) -> LogState | None:
        return self._states.get(session_id)

    def remember(self, session_id: str, state: LogState, st: os.stat_result) -> None:
        """Keep ``state`` if ``st``, taken under the log's lock, matches it; otherwise
        (or for a log without a header) forget the log."""
        states = self._states
        if state.header is None or not state.same_file(st):
            states.pop(session_id, None)
            return
        if len(states) >= REMEMBERED_LOGS and session_id not in states:
            states.clear()
        states[session_id] = state

    def forget(self, session_id: str) -> None:
        self._states.pop(session_id, None)
