"""Event logs as JSON Lines (``file://`` stores): ``<root>/<namespace>/logs/<session id>.jsonl``.

Line 1 is the header, the :class:`SessionHeader` fields as one JSON object. Every further
line is one event ``{"seq", "type", "time", "data", "id"?, "batch_end"}``: ``data`` is the
event's canonical JSON embedded as is, ``batch_end`` the seq of the last event of the batch
it was appended with. Every line ends with ``\\n``. Nothing exists before the first append,
which writes the header and the first batch together.

An append holds an exclusive ``flock`` on the log, parses all of it (refusing a damaged
log) and writes the batch with one ``write`` and an fsync, so a crash can only tear the
final batch. Readers recognise a torn final batch -- a last line without its newline or
that does not parse, with the lines of its batch before it, or a final batch that never
reaches its ``batch_end`` -- and leave it out; anything wrong before it is
:class:`CorruptLogError`, and nothing is rewritten. A file without a complete header line
(a crash during the very first append) counts as absent.
"""

from __future__ import annotations

import fcntl
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import orjson
from pydantic import ValidationError

from ..contracts import EventBackend, StoredEvent
from ..errors import (
    CorruptLogError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
    UnsupportedVersionError,
)
from ..eventlog import check_stored_version, plan_append
from ..models import SessionHeader
from .fsutil import encode_name, fsync_dir, make_dirs, os_errors, read_all, store_error

LOGS_DIR = "logs"
LOG_SUFFIX = ".jsonl"

_CHUNK = 64 * 1024
#: How often an append or delete reopens a log that was replaced while it waited for the lock.
_REOPEN_ATTEMPTS = 1000


class JsonlEvents(EventBackend):
    """Event logs of one namespace, one JSONL file per session (see the module docstring)."""

    def __init__(self, root: Path, namespace: str) -> None:
        self._dir = root / encode_name(namespace) / LOGS_DIR

    def _path(self, session_id: str) -> Path:
        return self._dir / (encode_name(session_id) + LOG_SUFFIX)

    def locate(self, session_id: str) -> str | None:
        """Absolute path of the session's ``.jsonl`` file, whether it exists yet or not."""
        return str(self._path(session_id))

    def exists(self, session_id: str) -> bool:
        path = self._path(session_id)
        with os_errors(path):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return False
            try:
                return _first_line(fd) is not None
            finally:
                os.close(fd)

    def append(
        self, session_id: str, events: list[StoredEvent], header: SessionHeader | None
    ) -> int:
        path = self._path(session_id)
        with os_errors(path):
            for _ in range(_REOPEN_ATTEMPTS):
                fd = self._open_for_append(session_id, path, events, header)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    if _still_named(fd, path):
                        return self._append_locked(fd, path, session_id, events, header)
                finally:
                    os.close(fd)
        raise StoreUnavailableError(f"{path} kept being replaced during an append")

    def _open_for_append(
        self,
        session_id: str,
        path: Path,
        events: list[StoredEvent],
        header: SessionHeader | None,
    ) -> int:
        try:
            return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            if header is None:
                raise SessionNotFoundError(session_id) from None
        # Refuse a batch that cannot start a new log before creating its file.
        plan_append(session_id, 0, events, _no_events)
        make_dirs(self._dir)
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def _append_locked(
        self,
        fd: int,
        path: Path,
        session_id: str,
        events: list[StoredEvent],
        header: SessionHeader | None,
    ) -> int:
        log = parse_log(session_id, read_all(fd))
        if log.header is None:
            if header is None:
                raise SessionNotFoundError(session_id)
            data = header_line(header) + event_lines(events)
        else:
            if header is not None and header != log.header:
                raise SessionExistsError(session_id)
            data = event_lines(events)
        stored = log.events
        if not plan_append(
            session_id, len(stored), events, lambda first, last: stored[first : last + 1]
        ):
            return len(stored)
        if log.torn:
            os.ftruncate(fd, log.end)
            os.fsync(fd)
        _write_batch(fd, path, data, log.end)
        if log.header is None:
            fsync_dir(self._dir)
        return events[-1].seq + 1

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[StoredEvent]]:
        path = self._path(session_id)
        with os_errors(path):
            log = _load(session_id, path, repair=False)
            if repair and log.header is not None and log.torn:
                log = _load(session_id, path, repair=True)
        if log.header is None:
            raise SessionNotFoundError(session_id)
        stop = None if limit is None else from_seq + limit
        return log.header, log.events[from_seq:stop]

    def list(self) -> list[SessionHeader]:
        """Headers read from the first line of each log; logs without a complete header
        are skipped, unreadable headers too, with a warning."""
        with os_errors(self._dir):
            try:
                names = os.listdir(self._dir)
            except FileNotFoundError:
                return []
            headers = []
            for name in names:
                if name.endswith(LOG_SUFFIX):
                    found = _listed_header(self._dir / name)
                    if found is not None:
                        headers.append(found)
            return headers

    def delete(self, session_id: str) -> None:
        path = self._path(session_id)
        with os_errors(path):
            for _ in range(_REOPEN_ATTEMPTS):
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    raise SessionNotFoundError(session_id) from None
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    if _still_named(fd, path):
                        if _first_line(fd) is None:
                            raise SessionNotFoundError(session_id)
                        os.unlink(path)
                        fsync_dir(self._dir)
                        return
                finally:
                    os.close(fd)
        raise StoreUnavailableError(f"{path} kept being replaced during a delete")


# --- the line format ----------------------------------------------------------------


def header_line(header: SessionHeader) -> bytes:
    """Line 1 of a log: the header's fields as one JSON object."""
    return orjson.dumps(header.model_dump(), option=orjson.OPT_APPEND_NEWLINE)


def event_lines(events: list[StoredEvent]) -> bytes:
    """The lines of one batch, each marked with the seq of the batch's last event."""
    batch_end = events[-1].seq
    return b"".join(_event_line(event, batch_end) for event in events)


def _event_line(event: StoredEvent, batch_end: int) -> bytes:
    record: dict[str, Any] = {
        "seq": event.seq,
        "type": event.type,
        "time": event.time,
        "data": orjson.Fragment(event.data),
    }
    if event.id is not None:
        record["id"] = event.id
    record["batch_end"] = batch_end
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


class _Malformed(Exception):
    """A line that is not a well-formed event."""

    def __init__(self, detail: str, seq: int | None = None) -> None:
        super().__init__(detail)
        self.seq = seq


def parse_header(session_id: str, line: bytes) -> SessionHeader:
    """The header on line 1 (without its newline); ``session_id`` names the log in errors."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(session_id, f"the header is not JSON: {exc}", line=1) from exc
    if not isinstance(record, dict) or "version" not in record:
        raise CorruptLogError(session_id, "the header is not an object with a version", line=1)
    check_stored_version(session_id, record["version"])
    missing = [name for name in SessionHeader.model_fields if name not in record]
    if missing:
        raise CorruptLogError(session_id, f"the header lacks {', '.join(missing)}", line=1)
    try:
        return SessionHeader.model_validate(record, strict=True)
    except ValidationError as exc:
        detail = f"the header is invalid: {exc.errors(include_url=False)}"
        raise CorruptLogError(session_id, detail, line=1) from exc


def parse_event(line: bytes) -> tuple[StoredEvent, int]:
    """One event line (without its newline): the event and its ``batch_end``.

    ``data`` is re-serialised with orjson, which gives back the canonical text it was
    appended with. Raises :class:`_Malformed`.
    """
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise _Malformed(f"the line is not JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise _Malformed("the line is not a JSON object")
    seq = record.get("seq")
    if not _is_int(seq) or seq < 0:
        raise _Malformed("'seq' is missing or not an int >= 0")
    kind, time, data = record.get("type"), record.get("time"), record.get("data")
    event_id, batch_end = record.get("id"), record.get("batch_end")
    if not isinstance(kind, str):
        raise _Malformed("'type' is missing or not a string", seq)
    if not _is_int(time):
        raise _Malformed("'time' is missing or not an int", seq)
    if not isinstance(data, dict):
        raise _Malformed("'data' is missing or not an object", seq)
    if event_id is not None and not isinstance(event_id, str):
        raise _Malformed("'id' is not a string", seq)
    if not _is_int(batch_end):
        raise _Malformed("'batch_end' is missing or not an int", seq)
    text = orjson.dumps(data).decode()
    return StoredEvent(seq, kind, time, text, event_id), batch_end


@dataclass(frozen=True)
class ParsedLog:
    """A log as read: ``header`` None when it has no complete header line (absent),
    ``events`` the committed ones, ``end`` the byte offset where they end."""

    header: SessionHeader | None
    events: list[StoredEvent]
    end: int
    size: int

    @property
    def torn(self) -> bool:
        """Whether bytes of an unfinished final batch follow the committed events."""
        return self.end < self.size


def parse_log(session_id: str, raw: bytes) -> ParsedLog:
    """Parse a whole log, leaving out a torn final batch.

    Raises :class:`CorruptLogError` (with the 1-based line) for damage before it and
    :class:`UnsupportedVersionError` for a header of another format version.
    """
    first = raw.find(b"\n")
    if first < 0:
        return ParsedLog(None, [], 0, len(raw))
    header = parse_header(session_id, raw[:first])
    if header.id != session_id:
        raise CorruptLogError(session_id, f"the header names session {header.id!r}", line=1)
    events: list[StoredEvent] = []
    committed, end = 0, first + 1
    open_end: int | None = None  # batch_end of the batch being read, until its last event
    malformed: CorruptLogError | None = None  # harmless only as the very last line
    offset, number = first + 1, 1
    while offset < len(raw):
        if malformed is not None:
            raise malformed
        number += 1
        stop = raw.find(b"\n", offset)
        if stop < 0:
            break
        line, offset = raw[offset:stop], stop + 1
        try:
            event, batch_end = parse_event(line)
        except _Malformed as exc:
            malformed = CorruptLogError(session_id, str(exc), seq=exc.seq, line=number)
            continue
        _check_order(session_id, event, batch_end, len(events), open_end, number)
        events.append(event)
        open_end = batch_end
        if event.seq == batch_end:
            committed, end, open_end = len(events), offset, None
    return ParsedLog(header, events[:committed], end, len(raw))


def _check_order(
    session_id: str,
    event: StoredEvent,
    batch_end: int,
    expected: int,
    open_end: int | None,
    number: int,
) -> None:
    """An event must continue the seqs and agree with its batch on ``batch_end``."""
    detail = None
    if event.seq != expected:
        detail = f"expected seq {expected}"
    elif open_end is None and batch_end < event.seq:
        detail = f"'batch_end' {batch_end} comes before the event's own seq"
    elif open_end is not None and batch_end != open_end:
        detail = f"'batch_end' {batch_end} differs from its batch's {open_end}"
    if detail is not None:
        raise CorruptLogError(session_id, detail, seq=event.seq, line=number)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# --- reading and writing the file -------------------------------------------------------


def _no_events(first: int, last: int) -> list[StoredEvent]:
    return []


def _write_batch(fd: int, path: Path, data: bytes, end: int) -> None:
    """One ``write`` and an fsync; on failure the file is cut back to ``end`` if possible,
    so a failed append leaves no torn tail behind."""
    try:
        written = os.write(fd, data)
        if written == len(data):
            os.fsync(fd)
            return
    except OSError as exc:
        _cut_back(fd, end)
        raise store_error(exc, path) from exc
    _cut_back(fd, end)
    raise StoreUnavailableError(
        f"file store unavailable at {path}: wrote {written} of {len(data)} bytes (disk full?)"
    )


def _cut_back(fd: int, end: int) -> None:
    try:
        os.ftruncate(fd, end)
        os.fsync(fd)
    except OSError:
        pass  # the reader leaves an unfinished batch out anyway


def _load(session_id: str, path: Path, *, repair: bool) -> ParsedLog:
    """Parse the log under a shared lock or, to repair, under the exclusive lock, cutting
    off its torn tail durably."""
    flags = os.O_RDWR if repair else os.O_RDONLY
    try:
        fd = os.open(path, flags | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SessionNotFoundError(session_id) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if repair else fcntl.LOCK_SH)
        log = parse_log(session_id, read_all(fd))
        if repair and log.header is not None and log.torn:
            os.ftruncate(fd, log.end)
            os.fsync(fd)
        return log
    finally:
        os.close(fd)


def _listed_header(path: Path) -> SessionHeader | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        line = _first_line(fd)
    finally:
        os.close(fd)
    if line is None:
        return None
    try:
        return parse_header(path.name, line)
    except (CorruptLogError, UnsupportedVersionError) as exc:
        warnings.warn(f"sessionstore: skipping {path}: {exc}", RuntimeWarning, stacklevel=2)
        return None


def _still_named(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not unlinked or replaced)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _first_line(fd: int) -> bytes | None:
    """The first line without its newline, or None when it is not complete."""
    data = b""
    while True:
        chunk = os.pread(fd, _CHUNK, len(data))
        if not chunk:
            return None
        cut = chunk.find(b"\n")
        if cut >= 0:
            return data + chunk[:cut]
        data += chunk
