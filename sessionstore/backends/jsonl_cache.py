"""What a :class:`~.jsonl.JsonlEvents` remembers of the logs it validated, per process (a
:class:`LogState` per log, kept by :class:`LogStates`), how it brings that up to date
with a log's file (:meth:`LogStates.catch_up`), and the reads that rest on it
(:meth:`LogStates.read_range`).

A state holds a log's file identity, size, mtime, header, next seq, where the committed
events end, and a sparse index: the offset of the line of every 64th event. Appends and
reads without repair (``read_from``, ``iter_events``, ``follow``) share it. A state is
trusted only for the file it was seen in: the same (``dev``, ``ino``), and either
unchanged (same size and mtime) or only grown, its committed bytes at the start and
before the committed end still as they were (:meth:`LogState.continues`). A log whose
file is unchanged since is not read again; one that only grew has just its new bytes
parsed (other writers' batches, or a torn tail); any other change, or a log not seen
yet, is validated whole, a chunk at a time (:func:`validated_whole`: memory bounded by
a chunk and a batch, not by the log). Then a read seeks to the indexed line at or
before ``from_seq`` and parses only the lines it returns, so it costs what it returns
once the log is validated.

The rule for damage: every byte a read or an append depends on has been validated once
in this process, so damage anywhere in a log is found by the first read of it (whatever
its ``from_seq``) and damage in bytes appended later by the first read or append after
them; a line read from the index that no longer parses, or holds another seq, makes the
read parse the log whole again rather than return it. Bytes changed in place after they
were validated are found when the file's size or mtime shows the change without a plain
growth (the log is then parsed whole) or when a read parses the changed line. A ``read``
with ``repair`` (``load``) always parses the whole log. An append's seq decision rests
on the committed end it has validated.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import CorruptLogError, SessionNotFoundError, StoreUnavailableError
from ..models import SessionEvent, SessionHeader
from .jsonl_format import (
    INDEX_EVERY,
    Events,
    ParsedLog,
    batch_offsets,
    parse_batches,
    parse_header,
    parse_range,
)
from .jsonl_io import read_from

#: How many committed bytes at the start and before the end of a log identify it.
PROBE = 256
#: How many bytes a whole validation reads at a time (:func:`validated_whole`).
VALIDATE_CHUNK = 1 << 20
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

    def appended(
        self,
        st: os.stat_result,
        header: SessionHeader | None,
        data: bytes,
        header_len: int,
        first: int,
        texts: Sequence[bytes],
    ) -> LogState:
        """The state once ``data`` was written at the committed end (the torn tail cut
        off), the file now described by ``st``: a header line of ``header_len`` bytes
        for ``header`` when the log had none (else 0 bytes, ``header`` unused), then the
        lines of the events from seq ``first`` whose canonical texts are ``texts``."""
        next_seq = first + len(texts)
        end = self.end + len(data)
        if self.header is not None:
            header, head = self.header, self.head
        else:
            head = data[:PROBE]
        offsets = self.offsets
        if -(-first // INDEX_EVERY) * INDEX_EVERY < next_seq:  # a multiple in the batch
            offsets += tuple(batch_offsets(texts, first, self.end + header_len))
        tail = (self.tail + data[-PROBE:])[-PROBE:]
        return LogState(
            st.st_dev, st.st_ino, end, st.st_mtime_ns, header, next_seq, end, head, tail, offsets
        )

    def grown(
        self, st: os.stat_result, raw: bytes, parsed: int, cut: int, found: list[int]
    ) -> LogState:
        """The state once the bytes ``raw`` after the committed end were parsed: ``parsed``
        committed events ending ``cut`` bytes into ``raw``, ``found`` the offsets of
        their indexed lines in it; the file is described by ``st``."""
        return LogState(
            st.st_dev,
            st.st_ino,
            self.end + len(raw),
            st.st_mtime_ns,
            self.header,
            self.next_seq + parsed,
            self.end + cut,
            self.head,
            (self.tail + raw[max(0, cut - PROBE) : cut])[-PROBE:],
            self.offsets + tuple(self.end + offset for offset in found),
        )

    def read_indexed(self, fd: int, from_seq: int, count: int) -> list[SessionEvent] | None:
        """The ``count`` committed events from ``from_seq`` of this log open as ``fd``,
        read from the nearest indexed line at or before it; None when the file no longer
        holds them there."""
        index = min(from_seq // INDEX_EVERY, len(self.offsets) - 1)
        start = self.offsets[index]
        skip = from_seq - index * INDEX_EVERY
        wanted = skip + count
        # The mean line length of the log sizes the first read; more follows if it was short.
        mean = (self.end - self.offsets[0]) / max(1, self.next_seq)
        step = int(mean * wanted * 1.125) + 1024
        chunks: list[bytes] = []
        lines, pos = 0, start
        while lines < wanted and pos < self.end:
            chunk = os.pread(fd, min(step, self.end - pos), pos)
            if not chunk:
                return None
            chunks.append(chunk)
            lines += chunk.count(b"\n")
            pos += len(chunk)
        return parse_range(b"".join(chunks), skip, count, from_seq)

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


def validated_whole(
    fd: int, session_id: str, st: os.stat_result, where: str
) -> tuple[LogState, Events]:
    """The state of the log open as ``fd`` (described by ``st``), validated whole as
    :func:`~.jsonl_format.parse_log` validates it, but read :data:`VALIDATE_CHUNK` bytes
    at a time, batch by batch: what it keeps is the offset index and the events of the
    last batches parsed (the last ones before its next seq), so its memory does not grow
    with the log."""
    raw = os.pread(fd, VALIDATE_CHUNK, 0)
    first = raw.find(b"\n")
    while first < 0 and len(raw) < st.st_size:  # a header line longer than a chunk
        more = os.pread(fd, VALIDATE_CHUNK, len(raw))
        if not more:
            break
        raw += more
        first = raw.find(b"\n")
    if first < 0:  # no complete header line: absent
        absent = LogState(st.st_dev, st.st_ino, len(raw), st.st_mtime_ns, None, 0, 0, b"", b"", ())
        return absent, Events(session_id, [])
    header = parse_header(session_id, raw[:first], where)
    if header.id != session_id:
        raise CorruptLogError(session_id, f"the header names session {header.id!r}", line=1)
    base, buffer = first + 1, raw[first + 1 :]  # buffer: the bytes from a batch's start
    offsets: list[int] = []
    next_seq, end, tail = 0, base, raw[max(0, base - PROBE) : base]
    last = Events(session_id, [])
    while True:
        more = os.pread(fd, VALIDATE_CHUNK, base + len(buffer))
        buffer += more
        events, cut, found = parse_batches(session_id, buffer, 0, next_seq, next_seq + 2)
        if len(events):
            next_seq += len(events)
            offsets += (base + offset for offset in found)
            end = base + cut
            tail = (tail + buffer[max(0, cut - PROBE) : cut])[-PROBE:]
            last = events
        if not more:
            break
        base, buffer = base + cut, buffer[cut:]
    head = raw[: min(PROBE, end)]  # the first chunk holds at least PROBE bytes, or all
    size = base + len(buffer)
    state = LogState(
        st.st_dev, st.st_ino, size, st.st_mtime_ns, header, next_seq, end, head, tail,
        tuple(offsets),
    )  # fmt: skip
    return state, last


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

    def catch_up(
        self, fd: int, session_id: str, st: os.stat_result, where: str
    ) -> tuple[LogState, Sequence[SessionEvent]]:
        """The state of the log at ``where``, open as ``fd`` under its lock (shared or
        exclusive) and described by ``st``, and the committed events parsed to learn it,
        which are the last ones before its next seq.

        Against the state remembered from this process's last look: if the file is the
        same and unchanged, nothing is read; if it only grew, just the bytes after the
        committed end are parsed; otherwise the whole log is.
        """
        before = self._states.get(session_id)
        if before is not None and before.unchanged(st):
            return before, []
        if before is None or not before.continues(fd, st):
            seen, last = validated_whole(fd, session_id, st, where)
            self.remember(session_id, seen, st)
            return seen, last
        raw = read_from(fd, before.end) if st.st_size > before.end else b""
        line = before.next_seq + 2  # the header and one line per event come before
        parsed, cut, found = parse_batches(session_id, raw, 0, before.next_seq, line)
        seen = before.grown(st, raw, len(parsed), cut, found)
        self.remember(session_id, seen, st)
        return seen, parsed

    def read_range(
        self, fd: int, session_id: str, from_seq: int, limit: int | None, where: str
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        """The header and the committed events ``[from_seq, from_seq + limit)`` of the
        log at ``where``, open as ``fd`` under a lock: what the log holds beyond the state
        remembered is validated first (all of it when nothing is remembered), then the
        events are read from the nearest indexed line at or before ``from_seq``."""
        for _ in range(2):
            state, parsed = self.catch_up(fd, session_id, os.fstat(fd), where)
            if state.header is None:
                raise SessionNotFoundError(session_id)
            stop = state.next_seq if limit is None else min(state.next_seq, from_seq + limit)
            if from_seq >= stop:
                return state.header, []
            first_parsed = state.next_seq - len(parsed)
            if from_seq >= first_parsed:
                return state.header, list(parsed[from_seq - first_parsed : stop - first_parsed])
            found = state.read_indexed(fd, from_seq, stop - from_seq)
            if found is not None:
                return state.header, found
            # The validated bytes are not what they were (rewritten in place without a
            # change of size or mtime): validate the log whole again.
            self.forget(session_id)
        raise StoreUnavailableError(f"{where} kept changing during a read")
