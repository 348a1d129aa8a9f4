"""Event logs as JSON Lines (``file://`` stores): ``<root>/<namespace>/logs/<session id>.jsonl``.

Line 1 is the header, the :class:`SessionHeader` fields as one JSON object, plus ``ttl_ms``
(an int > 0) for a session created with a retention. Every further
line is one event ``{"seq", "type", "time", "data", "id"?, "batch_end"}``: ``data`` is the
event's canonical JSON embedded as is, ``batch_end`` the seq of the last event of the batch
it was appended with. Every line ends with ``\\n``. Nothing exists before the first append,
which writes the header and the first batch together.

An append holds an exclusive ``flock`` on the log and writes the batch with one ``write``
and an fsync, so a crash can only tear the final batch. Readers recognise a torn final
batch -- a last line without its newline or that does not parse, with the lines of its
batch before it, or a final batch that never reaches its ``batch_end`` -- and leave it out;
anything wrong before it is :class:`CorruptLogError`, and nothing is rewritten. A file
without a complete header line (a crash during the very first append) counts as absent.

``read`` parses the whole log every time. An append parses only what it has not seen: each
:class:`JsonlEvents` remembers, per process, the state of every log it last validated
(its file identity, size, mtime, header, next seq and where the committed events end). A
log whose file is unchanged since is appended to without reading it; one that only grew
has just its new bytes parsed (other writers' batches, or a torn tail to cut off); any
other change is parsed whole. So an append finds damage only in bytes it parses, while
its seq decision always rests on the committed end it has validated.

Between appends a :class:`JsonlEvents` keeps the last few logs it appended to open (one
descriptor each, unlocked). An append takes its log's descriptor (no other thread of the
process uses it meanwhile: ``flock`` does not exclude holders of one descriptor), locks
it and checks with one ``stat`` of the path that the path still names that file: a log
deleted, pruned or replaced by another process meanwhile is closed and opened anew, so an
append never lands in a file that is no longer the log. The same ``stat`` gives the size
and mtime compared with the remembered state, so an append to an unchanged log costs
``flock``, ``stat``, ``write``, ``fsync``, an ``fstat`` (the new mtime, to remember) and
the unlock. Permissions are checked when a log is opened, not at every append. A forked
child never uses the descriptors or states of its parent: it closes its copies and
starts afresh. :meth:`JsonlEvents.close` (or the backend's garbage collection) closes
them; the backend stays usable.

Retention: the file's mtime is the session's last activity, so every append renews it. A
log whose header has a ``ttl_ms`` expires ``ttl_ms`` after its mtime; :meth:`prune`
removes it (its one file) under the exclusive lock, so never during an append.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import weakref
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import orjson
from pydantic import ValidationError

from ..contracts import EventBackend, StoredEvent
from ..errors import (
    CorruptLogError,
    SeqConflictError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
    UnsupportedVersionError,
)
from ..eventlog import check_stored_version, decode_events, plan_append
from ..jsondata import short_repr
from ..models import SessionEvent, SessionHeader, SessionInfo, describe_invalid
from .fsutil import encode_name, fsync_dir, make_dirs, os_errors, read_all, store_error

LOGS_DIR = "logs"
LOG_SUFFIX = ".jsonl"
#: The folder of the lease files: ``<namespace>/leases/<session id>.lock``, each
#: ``flock``ed exclusively by the live writer of its session (the kernel releases the
#: lock when the process dies); the files stay, empty.
LEASES_DIR = "leases"
LEASE_SUFFIX = ".lock"
#: The header-line key holding a session's retention in ms (absent: none).
TTL_FIELD = "ttl_ms"

_CHUNK = 64 * 1024
#: How often an append or delete reopens a log that was replaced while it waited for the lock.
_REOPEN_ATTEMPTS = 1000
#: How many logs' states (and paths) one :class:`JsonlEvents` remembers; past it, it
#: forgets them all.
_REMEMBERED_LOGS = 1024
#: How many logs one :class:`JsonlEvents` keeps open between appends; past it, the one
#: appended to longest ago is closed.
_HELD_LOGS = 32
#: How many committed bytes at the start and before the end of a log identify it.
_PROBE = 256

logger = logging.getLogger("sessionstore")


@dataclass(slots=True)
class _Seen:
    """A log as last validated: the file (``dev``, ``ino``) with its ``size`` and
    ``mtime_ns`` then, the ``header`` (None: no complete header line), the committed
    events' ``next_seq`` and the offset ``end`` where they end. ``head`` and ``tail`` are
    committed bytes from offset 0 and up to ``end``, checked to recognise the same log
    once it has grown. Treated as immutable (not frozen: one is built per append)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    header: SessionHeader | None
    next_seq: int
    end: int
    head: bytes
    tail: bytes

    @property
    def torn(self) -> bool:
        """Whether bytes of an unfinished final batch follow the committed events."""
        return self.end < self.size

    def same_file(self, st: os.stat_result) -> bool:
        """Whether ``st`` describes the file this state was seen in, at this size."""
        return (st.st_dev, st.st_ino, st.st_size) == (self.dev, self.ino, self.size)


@dataclass(slots=True)
class _Held:
    """A log file open for appends: its descriptor ``fd`` and the file (``dev``, ``ino``)
    it was opened as."""

    fd: int
    dev: int
    ino: int


class JsonlEvents(EventBackend):
    """Event logs of one namespace, one JSONL file per session (see the module docstring).

    Remembers the state of the logs it validated for its later appends and keeps the
    logs it appended to last open; both are per process (a forked child starts afresh)
    and checked against the file each time. :meth:`close` closes the open logs.
    """

    def __init__(self, root: Path, namespace: str) -> None:
        self._dir = root / encode_name(namespace) / LOGS_DIR
        self._dir_name = os.fspath(self._dir)
        self._pid = os.getpid()
        self._seen: dict[str, _Seen] = {}
        self._files: dict[str, str] = {}
        #: Open logs not in use, oldest first; an append takes its log out while it runs.
        self._held: dict[str, _Held] = {}
        self._held_lock = threading.Lock()
        self._closer = weakref.finalize(self, _close_held, self._held)
        self._lease_dir = root / encode_name(namespace) / LEASES_DIR
        #: Leases this object holds: session id -> (owner, locked descriptor).
        self._leases_held: dict[str, tuple[str, int]] = {}
        self._lease_lock = threading.Lock()
        self._lease_closer = weakref.finalize(self, _close_leases, self._leases_held)

    def _path(self, session_id: str) -> Path:
        return self._dir / (encode_name(session_id) + LOG_SUFFIX)

    def _file(self, session_id: str) -> str:
        """:meth:`_path` as a string, remembered."""
        name = self._files.get(session_id)
        if name is None:
            if len(self._files) >= _REMEMBERED_LOGS:
                self._files.clear()
            name = os.path.join(self._dir_name, encode_name(session_id) + LOG_SUFFIX)
            self._files[session_id] = name
        return name

    def locate(self, session_id: str) -> str | None:
        """Absolute path of the session's ``.jsonl`` file, whether it exists yet or not."""
        return self._file(session_id)

    def close(self) -> None:
        """Close the logs kept open between appends (the next append opens its log again)."""
        self._own()
        with self._held_lock:
            _close_held(self._held)

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
        self,
        session_id: str,
        events: list[StoredEvent],
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
    ) -> int:
        path = self._file(session_id)
        try:
            self._own()
            with self._held_lock:
                log = self._held.pop(session_id, None)
            for _ in range(_REOPEN_ATTEMPTS):
                if log is None:
                    log = self._open_for_append(session_id, path, events, header)
                try:
                    fcntl.flock(log.fd, fcntl.LOCK_EX)
                    st = _named_stat(path, log)
                    if st is not None:
                        next_seq = self._append_locked(
                            log.fd, path, session_id, events, header, ttl_ms, st
                        )
                except SeqConflictError:
                    self._put_back(session_id, log)
                    raise
                except BaseException:
                    _discard(log.fd)
                    raise
                if st is not None:
                    self._put_back(session_id, log)
                    return next_seq
                # Replaced or deleted since it was opened: open whatever the path names now.
                _discard(log.fd)
                log = None
        except OSError as exc:
            raise store_error(exc, path) from exc
        raise StoreUnavailableError(f"{path} kept being replaced during an append")

    def _open_for_append(
        self,
        session_id: str,
        path: str,
        events: list[StoredEvent],
        header: SessionHeader | None,
    ) -> _Held:
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            if header is None:
                raise SessionNotFoundError(session_id) from None
            # Refuse a batch that cannot start a new log before creating its file.
            plan_append(session_id, 0, events, _no_events)
            make_dirs(self._dir)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        return _Held(fd, st.st_dev, st.st_ino)

    def _put_back(self, session_id: str, log: _Held) -> None:
        """Unlock ``log`` and keep it open for the next append, closing the log kept open
        longest if there are too many."""
        try:
            fcntl.flock(log.fd, fcntl.LOCK_UN)
        except OSError:
            with suppress(OSError):
                os.close(log.fd)  # closing releases the lock too
            return
        with self._held_lock:
            held = self._held
            replaced = held.pop(session_id, None)  # another thread's, opened meanwhile
            held[session_id] = log
            if replaced is None and len(held) <= _HELD_LOGS:
                return
            evicted = [held.pop(next(iter(held)))] if len(held) > _HELD_LOGS else []
        for other in (replaced, *evicted):
            if other is not None:
                with suppress(OSError):  # the append is done; these were unlocked
                    os.close(other.fd)

    def _drop(self, session_id: str) -> None:
        """Forget ``session_id``'s log: its state, and its descriptor if kept open."""
        self._own()
        self._seen.pop(session_id, None)
        with self._held_lock:
            log = self._held.pop(session_id, None)
        if log is not None:
            with suppress(OSError):
                os.close(log.fd)

    def _append_locked(
        self,
        fd: int,
        path: str,
        session_id: str,
        events: list[StoredEvent],
        header: SessionHeader | None,
        ttl_ms: int | None,
        st: os.stat_result,
    ) -> int:
        """Append under the lock, ``st`` describing the file open as ``fd``."""
        seen, parsed = self._catch_up(fd, session_id, st)
        new_header = None  # the header line, when this append materialises the session
        if seen.header is None:
            if header is None:
                raise SessionNotFoundError(session_id)
            new_header = header_line(header, ttl_ms)
        elif header is not None and header != seen.header:
            raise SessionExistsError(session_id)

        def stored_range(first: int, last: int) -> list[StoredEvent]:
            offset = seen.next_seq - len(parsed)
            if first >= offset:
                return parsed[first - offset : last - offset + 1]
            # Only the replay of a batch older than what was just parsed gets here: rare
            # enough to read the whole log rather than remember events.
            return parse_log(session_id, read_all(fd)).events[first : last + 1]

        if not plan_append(session_id, seen.next_seq, events, stored_range):
            return seen.next_seq
        data = event_lines(events) if new_header is None else new_header + event_lines(events)
        if seen.torn:
            os.ftruncate(fd, seen.end)
            os.fsync(fd)
        _write_batch(fd, path, data, seen.end)
        if seen.header is None:
            fsync_dir(self._dir)
            header_seen, head = header, data[:_PROBE]
        else:
            header_seen, head = seen.header, seen.head
        next_seq = events[-1].seq + 1
        st = os.fstat(fd)
        end = seen.end + len(data)
        tail = (seen.tail + data[-_PROBE:])[-_PROBE:]
        written = _Seen(
            st.st_dev, st.st_ino, end, st.st_mtime_ns, header_seen, next_seq, end, head, tail
        )
        self._remember(session_id, written, st)
        return next_seq

    def _catch_up(
        self, fd: int, session_id: str, st: os.stat_result
    ) -> tuple[_Seen, list[StoredEvent]]:
        """The log's state, under the append lock, and the committed events parsed to
        learn it, which are the last ones before its next seq; ``st`` describes the file
        open as ``fd``.

        Against the state remembered from this process's last look: if the file is the
        same and unchanged, nothing is read; if it only grew, just the bytes after the
        committed end are parsed; otherwise the whole log is.
        """
        before = self._seen.get(session_id)
        if (
            before is not None
            and st.st_size == before.size
            and st.st_mtime_ns == before.mtime_ns
            and st.st_ino == before.ino
            and st.st_dev == before.dev
        ):
            return before, []
        if before is None or not _continues(fd, before, st):
            raw = read_all(fd)
            log = parse_log(session_id, raw, self._file(session_id))
            seen = _parsed_whole(st, log, raw, len(raw))
            self._remember(session_id, seen, st)
            return seen, log.events
        raw = _read_from(fd, before.end) if st.st_size > before.end else b""
        line = before.next_seq + 2  # the header and one line per event come before
        parsed, cut = parse_batches(session_id, raw, 0, before.next_seq, line)
        seen = _Seen(
            st.st_dev,
            st.st_ino,
            before.end + len(raw),
            st.st_mtime_ns,
            before.header,
            before.next_seq + len(parsed),
            before.end + cut,
            before.head,
            (before.tail + raw[max(0, cut - _PROBE) : cut])[-_PROBE:],
        )
        self._remember(session_id, seen, st)
        return seen, parsed

    def _own(self) -> None:
        """In a forked child, forget the parent's states and close the copies of the
        descriptors it kept open (the parent's own stay open, and unlocked)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._held_lock = threading.Lock()
            self._seen = {}
            _close_held(self._held)
            # The parent's leases stay the parent's: closing the child's copies of the
            # descriptors leaves its locks in place.
            self._lease_lock = threading.Lock()
            _close_leases(self._leases_held)

    def _remember(self, session_id: str, seen: _Seen, st: os.stat_result) -> None:
        """Keep ``seen`` for the next append if ``st``, taken under the lock, matches it.
        Only after :meth:`_own` (as :meth:`_catch_up`): ``seen`` is this process's."""
        remembered = self._seen
        if seen.header is None or not seen.same_file(st):
            remembered.pop(session_id, None)
            return
        if len(remembered) >= _REMEMBERED_LOGS and session_id not in remembered:
            remembered.clear()
        remembered[session_id] = seen

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        path = self._path(session_id)
        self._own()
        with os_errors(path):
            log = self._load(session_id, path, repair=False)
            if repair and log.header is not None and log.torn:
                log = self._load(session_id, path, repair=True)
        if log.header is None:
            raise SessionNotFoundError(session_id)
        stop = None if limit is None else from_seq + limit
        return log.header, decode_events(log.events[from_seq:stop])

    # --- leases: an OS file lock, released by the kernel when the process dies -------

    renews_leases = False

    def _lease_path(self, session_id: str) -> Path:
        return self._lease_dir / (encode_name(session_id) + LEASE_SUFFIX)

    def acquire_lease(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        self._own()
        path = self._lease_path(session_id)
        with os_errors(path), self._lease_lock:
            held = self._leases_held.get(session_id)
            if held is not None:
                return held[0] == owner
            make_dirs(self._lease_dir)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            self._leases_held[session_id] = (owner, fd)
            return True

    def release_lease(self, session_id: str, owner: str) -> None:
        self._own()
        with self._lease_lock:
            held = self._leases_held.get(session_id)
            if held is None or held[0] != owner:
                return
            del self._leases_held[session_id]
        with suppress(OSError):
            os.close(held[1])  # closing releases the lock

    def lease_busy(self, session_id: str, owner: str | None = None) -> bool:
        self._own()
        held = self._leases_held.get(session_id)
        if held is not None:
            return held[0] != owner
        path = self._lease_path(session_id)
        with os_errors(path):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            finally:
                os.close(fd)
            return False

    # --- metadata: the header line and the last committed line -----------------------

    def info(self, session_id: str) -> SessionInfo:
        """From the header line and the end of the file: the log is not parsed."""
        path = self._file(session_id)
        with os_errors(path):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                raise SessionNotFoundError(session_id) from None
            try:
                line = _first_line(fd)
                if line is None:
                    raise SessionNotFoundError(session_id)
                header, ttl_ms = parse_header_line(session_id, line, path)
                if header.id != session_id:
                    raise CorruptLogError(
                        session_id, f"the header names session {header.id!r}", line=1
                    )
                return self._info(session_id, fd, header, ttl_ms, len(line) + 1)
            finally:
                os.close(fd)

    def _info(
        self, session_id: str, fd: int, header: SessionHeader, ttl_ms: int | None, start: int
    ) -> SessionInfo:
        st = os.fstat(fd)
        next_seq, last_time = _last_committed(fd, start, st.st_size)
        expires_at = None if ttl_ms is None else st.st_mtime_ns // 1_000_000 + ttl_ms
        busy = self.lease_busy(session_id)
        return SessionInfo(header, next_seq, last_time, expires_at, busy)

    def list_info(self) -> list[SessionInfo]:
        """:meth:`info` of every log :meth:`list` lists."""
        with os_errors(self._dir):
            try:
                names = os.listdir(self._dir)
            except FileNotFoundError:
                return []
            found = []
            for name in names:
                if not name.endswith(LOG_SUFFIX):
                    continue
                path = self._dir / name
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except (FileNotFoundError, PermissionError, IsADirectoryError):
                    continue
                try:
                    listed = _listed_header(path, fd)
                    if listed is not None:
                        start = len(_first_line(fd) or b"") + 1
                        found.append(self._info(listed[0].id, fd, *listed, start))
                finally:
                    os.close(fd)
            return found

    def list(self) -> list[SessionHeader]:
        """Headers read from the first line of each log; logs without a complete header
        are skipped, and so (with a warning on the ``sessionstore`` logger) are logs
        whose header is damaged, of another format version or names another session,
        and files that cannot be read."""
        with os_errors(self._dir):
            try:
                names = os.listdir(self._dir)
            except FileNotFoundError:
                return []
            headers = []
            for name in names:
                if name.endswith(LOG_SUFFIX):
                    try:
                        found = _read_listed_header(self._dir / name)
                    except (PermissionError, IsADirectoryError) as exc:
                        logger.warning("sessionstore: list skips %s: %s", self._dir / name, exc)
                        continue
                    if found is not None:
                        headers.append(found[0])
            return headers

    def prune(self, now_ms: int) -> int:
        """Remove every log whose header has a ``ttl_ms`` and whose mtime is at least
        that long before ``now_ms``; logs without a complete or readable header stay."""
        with os_errors(self._dir):
            try:
                names = os.listdir(self._dir)
            except FileNotFoundError:
                return 0
            return sum(
                self._prune_one(self._dir / name, now_ms)
                for name in names
                if name.endswith(LOG_SUFFIX)
            )

    def _prune_one(self, path: Path, now_ms: int) -> bool:
        """Remove the log at ``path`` if it has expired by ``now_ms``; whether it was."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            # Under the lock no append is half done, and the mtime is the last one's.
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not _still_named(fd, path):
                return False
            found = _listed_header(path, fd)
            if found is None:
                return False
            header, ttl_ms = found
            if ttl_ms is None or os.fstat(fd).st_mtime_ns // 1_000_000 + ttl_ms > now_ms:
                return False
            self._drop(header.id)
            os.unlink(path)
            fsync_dir(self._dir)
            return True
        finally:
            os.close(fd)

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
                        self._drop(session_id)
                        os.unlink(path)
                        fsync_dir(self._dir)
                        return
                finally:
                    os.close(fd)
        raise StoreUnavailableError(f"{path} kept being replaced during a delete")

    def _load(self, session_id: str, path: Path, *, repair: bool) -> ParsedLog:
        """Parse the log under a shared lock or, to repair, under the exclusive lock,
        cutting off its torn tail durably; remember its state for the next append."""
        flags = os.O_RDWR if repair else os.O_RDONLY
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if repair else fcntl.LOCK_SH)
            raw = read_all(fd)
            log = parse_log(session_id, raw, os.fspath(path))
            size = len(raw)
            if repair and log.header is not None and log.torn:
                os.ftruncate(fd, log.end)
                os.fsync(fd)
                size = log.end
            st = os.fstat(fd)
            self._remember(session_id, _parsed_whole(st, log, raw, size), st)
            return log
        finally:
            os.close(fd)


# --- the line format ----------------------------------------------------------------


def header_line(header: SessionHeader, ttl_ms: int | None = None) -> bytes:
    """Line 1 of a log: the header's fields as one JSON object, with ``ttl_ms`` if given."""
    record = header.model_dump()
    if ttl_ms is not None:
        record[TTL_FIELD] = ttl_ms
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


def event_lines(events: list[StoredEvent]) -> bytes:
    """The lines of one batch, each marked with the seq of the batch's last event.

    Each line is what ``orjson.dumps`` writes for the record ``{"seq", "type", "time",
    "data", "id"?, "batch_end"}`` with ``data`` embedded as is, built as text in one
    pass: the ints (plain 64-bit ints, as :func:`~sessionstore.eventlog.encode_batch`
    makes them) written as orjson writes them, the strings encoded by orjson (an event
    type once per process)."""
    batch_end = f',"batch_end":{events[-1].seq}}}\n'
    types = _TYPE_TEXTS
    lines = []
    for e in events:
        kind = types.get(e.type) or _type_text(e.type)
        if e.id is None:
            lines.append(
                f'{{"seq":{e.seq},"type":{kind},"time":{e.time},"data":{e.data}{batch_end}'
            )
        else:
            event_id = orjson.dumps(e.id).decode()
            lines.append(
                f'{{"seq":{e.seq},"type":{kind},"time":{e.time},"data":{e.data}'
                f',"id":{event_id}{batch_end}'
            )
    return "".join(lines).encode()


#: The JSON text of each event type met, for :func:`event_lines`; forgotten past a bound.
_TYPE_TEXTS: dict[str, str] = {}
_TYPE_TEXTS_KEPT = 4096


def _type_text(kind: str) -> str:
    text = orjson.dumps(kind).decode()
    if len(_TYPE_TEXTS) >= _TYPE_TEXTS_KEPT:
        _TYPE_TEXTS.clear()
    _TYPE_TEXTS[kind] = text
    return text


class _Malformed(Exception):
    """A line that is not a well-formed event."""

    def __init__(self, detail: str, seq: int | None = None) -> None:
        super().__init__(detail)
        self.seq = seq


def parse_header(session_id: str, line: bytes, where: str | None = None) -> SessionHeader:
    """The header on line 1 (without its newline); ``session_id`` names the log in errors."""
    return parse_header_line(session_id, line, where)[0]


def parse_header_line(
    session_id: str, line: bytes, where: str | None = None
) -> tuple[SessionHeader, int | None]:
    """The header on line 1 (without its newline) and the session's ``ttl_ms`` (None
    when it has none); ``session_id`` names the log in errors, ``where`` (its path) in
    an :class:`UnsupportedVersionError`."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(session_id, f"the header is not JSON: {exc}", line=1) from exc
    if not isinstance(record, dict) or "version" not in record:
        raise CorruptLogError(session_id, "the header is not an object with a version", line=1)
    check_stored_version(session_id, record["version"], where)
    missing = [name for name in SessionHeader.model_fields if name not in record]
    if missing:
        raise CorruptLogError(session_id, f"the header lacks {', '.join(missing)}", line=1)
    ttl_ms = record.pop(TTL_FIELD, None)
    if ttl_ms is not None and (not _is_int(ttl_ms) or ttl_ms <= 0):
        raise CorruptLogError(
            session_id, f"the header's {TTL_FIELD} is not an int > 0: {ttl_ms!r:.40}", line=1
        )
    try:
        return SessionHeader.model_validate(record, strict=True), ttl_ms
    except ValidationError as exc:
        detail = f"the header is invalid: {describe_invalid(exc)}"
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


def parse_log(session_id: str, raw: bytes, where: str | None = None) -> ParsedLog:
    """Parse a whole log, leaving out a torn final batch.

    Raises :class:`CorruptLogError` (with the 1-based line) for damage before it and
    :class:`UnsupportedVersionError` for a header of another format version.
    """
    first = raw.find(b"\n")
    if first < 0:
        return ParsedLog(None, [], 0, len(raw))
    header = parse_header(session_id, raw[:first], where)
    if header.id != session_id:
        raise CorruptLogError(session_id, f"the header names session {header.id!r}", line=1)
    events, end = parse_batches(session_id, raw, first + 1, 0, 2)
    return ParsedLog(header, events, end, len(raw))


def parse_batches(
    session_id: str, raw: bytes, offset: int, next_seq: int, line: int
) -> tuple[list[StoredEvent], int]:
    """The committed events in ``raw[offset:]`` and the offset where they end, leaving
    out a torn final batch.

    ``offset`` must start a batch, whose first event is expected to have seq ``next_seq``
    and to be on 1-based line ``line`` of the log. Raises :class:`CorruptLogError` for
    damage before the torn final batch.
    """
    events: list[StoredEvent] = []
    committed, end = 0, offset
    open_end: int | None = None  # batch_end of the batch being read, until its last event
    malformed: CorruptLogError | None = None  # harmless only as the very last line
    number = line - 1
    while offset < len(raw):
        if malformed is not None:
            raise malformed
        number += 1
        stop = raw.find(b"\n", offset)
        if stop < 0:
            break
        text, offset = raw[offset:stop], stop + 1
        try:
            event, batch_end = parse_event(text)
        except _Malformed as exc:
            malformed = CorruptLogError(session_id, str(exc), seq=exc.seq, line=number)
            continue
        _check_order(session_id, event, batch_end, next_seq + len(events), open_end, number)
        events.append(event)
        open_end = batch_end
        if event.seq == batch_end:
            committed, end, open_end = len(events), offset, None
    return events[:committed], end


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


def _parsed_whole(st: os.stat_result, log: ParsedLog, raw: bytes, size: int) -> _Seen:
    """The state of ``log``, parsed from ``raw``, in the file ``st`` describes, now
    ``size`` bytes long."""
    return _Seen(
        st.st_dev,
        st.st_ino,
        size,
        st.st_mtime_ns,
        log.header,
        len(log.events),
        log.end,
        raw[: min(_PROBE, log.end)],
        raw[max(0, log.end - _PROBE) : log.end],
    )


def _continues(fd: int, seen: _Seen, st: os.stat_result) -> bool:
    """Whether the file open as ``fd``, described by ``st``, is the log ``seen`` with at
    most bytes appended since: the same file, unchanged or grown, its committed bytes at
    the start and before the committed end still as they were."""
    if (st.st_dev, st.st_ino) != (seen.dev, seen.ino):
        return False
    if st.st_size == seen.size and st.st_mtime_ns == seen.mtime_ns:
        return True
    return (
        st.st_size > seen.size
        and os.pread(fd, len(seen.head), 0) == seen.head
        and os.pread(fd, len(seen.tail), seen.end - len(seen.tail)) == seen.tail
    )


def _read_from(fd: int, offset: int) -> bytes:
    """Everything in the file open as ``fd`` from ``offset`` on."""
    chunks: list[bytes] = []
    while chunk := os.pread(fd, max(_CHUNK, os.fstat(fd).st_size - offset), offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_batch(fd: int, path: str, data: bytes, end: int) -> None:
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


def _read_listed_header(path: Path) -> tuple[SessionHeader, int | None] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return _listed_header(path, fd)
    finally:
        os.close(fd)


def _listed_header(path: Path, fd: int) -> tuple[SessionHeader, int | None] | None:
    """The header and ``ttl_ms`` of the log open as ``fd``; None without a complete
    header line, and (with a warning logged) for an unreadable one or one that names
    another session than the file does."""
    line = _first_line(fd)
    if line is None:
        return None
    try:
        header, ttl_ms = parse_header_line(path.name, line, os.fspath(path))
    except (CorruptLogError, UnsupportedVersionError) as exc:
        logger.warning("sessionstore: skipping the log %s: %s", path, exc)
        return None
    if encode_name(header.id) + LOG_SUFFIX != path.name:
        logger.warning(
            "sessionstore: skipping the log %s: its header names session %s",
            path,
            short_repr(header.id),
        )
        return None
    return header, ttl_ms


def _named_stat(path: str, log: _Held) -> os.stat_result | None:
    """The ``stat`` of ``path`` if it still names the file open as ``log`` (not unlinked
    or replaced), else None. An open descriptor keeps its inode from being reused, so
    equal (``dev``, ``ino``) prove it is the same file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st if st.st_ino == log.ino and st.st_dev == log.dev else None


def _discard(fd: int) -> None:
    """Unlock (a forked child may share the descriptor's lock) and close ``fd``."""
    with suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    with suppress(OSError):
        os.close(fd)


def _close_leases(held: dict[str, tuple[str, int]]) -> None:
    """Close the lease descriptors of ``held`` (releasing their locks) and forget them."""
    fds = [fd for _, fd in held.values()]
    held.clear()
    for fd in fds:
        with suppress(OSError):
            os.close(fd)


def _last_committed(fd: int, start: int, size: int) -> tuple[int, int | None]:
    """(next seq, time of the last committed event) of a log whose events start at
    offset ``start``, read backwards from its end: the last complete line that ends its
    batch is the last committed event; what follows it is a torn tail. (0, None) for a
    log without events. Lines that do not parse are passed over (``read`` judges them)."""
    pos, carry, ended = size, b"", False
    while pos > start:
        step = min(_CHUNK, pos - start)
        pos -= step
        carry = os.pread(fd, step, pos) + carry
        if not ended:
            cut = carry.rfind(b"\n")
            if cut < 0:
                continue
            carry, ended = carry[: cut + 1], True
        lines = carry.split(b"\n")
        complete = lines[1:-1] if pos > start else lines[:-1]
        for line in reversed(complete):
            try:
                event, batch_end = parse_event(line)
            except _Malformed:
                continue
            if event.seq == batch_end:
                return event.seq + 1, event.time
        carry = lines[0] + b"\n" if pos > start else b""
    return 0, None


def _close_held(held: dict[str, _Held]) -> None:
    """Close every log of ``held``, kept open and unlocked, and forget them."""
    logs = list(held.values())
    held.clear()
    for log in logs:
        with suppress(OSError):
            os.close(log.fd)


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
