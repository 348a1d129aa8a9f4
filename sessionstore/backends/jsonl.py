"""Event logs as JSON Lines (``file://`` stores): ``<root>/<namespace>/logs/<session id>.jsonl``.

Line 1 is the header, the :class:`SessionHeader` fields as one JSON object, plus ``ttl_ms``
(an int > 0) for a session created with a retention. Every further
line is one event ``{"seq", "type", "time", "data", "id"?, "batch_end"}``: ``data`` is the
event's canonical JSON embedded as is, ``batch_end`` the seq of the last event of the batch
it was appended with. Every line ends with ``\\n``. Nothing exists before the first append,
which writes the header and the first batch together.

An append holds an exclusive ``flock`` on the log and writes the batch with one ``write``
and an fsync, so a crash can only tear the final batch. A writer's append checks its lease
under that lock first (fencing): a lease file another process holds locked, or a lease this
process holds for another writer, refuses it. Readers recognise a torn final
batch -- a last line without its newline or that does not parse, with the lines of its
batch before it, or a final batch that never reaches its ``batch_end`` -- and leave it out;
anything wrong before it is :class:`CorruptLogError`, and nothing is rewritten. A file
without a complete header line (a crash during the very first append) counts as absent.

The line format and its parsing are :mod:`.jsonl_format` (no I/O); what is remembered
of validated logs is :mod:`.jsonl_cache`.

Each :class:`JsonlEvents` remembers, per process, the state of every log it last
validated (its file identity, size, mtime, header, next seq, where the committed events
end, and a sparse index: the offset of the line of every 64th event). Appends and reads
without repair (``read_from``, ``iter_events``, ``follow``) share it. A log whose file is
unchanged since is not read again; one that only grew has just its new bytes parsed
(other writers' batches, or a torn tail); any other change, or a log not seen yet, is
parsed whole. Then a read seeks to the indexed line at or before ``from_seq`` and parses
only the lines it returns, so it costs what it returns once the log is validated. The
rule for damage: every byte a read or an append depends on has been validated once in
this process, so damage anywhere in a log is found by the first read of it (whatever its
``from_seq``) and damage in bytes appended later by the first read or append after them;
a line read from the index that no longer parses, or holds another seq, makes the read
parse the log whole again rather than return it. Bytes changed in place after they were
validated are found when the file's size or mtime shows the change without a plain
growth (the log is then parsed whole) or when a read parses the changed line. A
``read`` with ``repair`` (``load``) always parses the whole log. An append's seq
decision rests on the committed end it has validated.

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
log whose header has a ``ttl_ms`` expires ``ttl_ms`` after its mtime; :meth:`JsonlEvents.prune`
removes it (its one file) under the exclusive lock, so never during an append.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from ..contracts import EventBackend, EventBatch
from ..errors import (
    CorruptLogError,
    SeqConflictError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
    UnsafePathError,
    UnsupportedVersionError,
)
from ..eventlog import event_text, plan_append
from ..jsondata import short_repr
from ..leases import taken_over
from ..models import SessionEvent, SessionHeader, SessionInfo
from .fsutil import (
    atomic_write,
    check_dirs,
    encode_name,
    fsync_dir,
    locked_elsewhere,
    make_dirs,
    open_file,
    os_errors,
    read_all,
    store_error,
    temp_path,
)
from .jsonl_cache import PROBE, LogState, LogStates
from .jsonl_format import (
    INDEX_EVERY,
    TTL_FIELD,
    MalformedLine,
    ParsedLog,
    batch_offsets,
    event_lines,
    header_line,
    parse_batches,
    parse_event,
    parse_header,
    parse_header_line,
    parse_log,
    parse_range,
)

__all__ = [
    "LEASES_DIR",
    "LEASE_SUFFIX",
    "LOGS_DIR",
    "LOG_SUFFIX",
    "TTL_FIELD",
    "JsonlEvents",
    "ParsedLog",
    "event_lines",
    "header_line",
    "parse_batches",
    "parse_event",
    "parse_header",
    "parse_header_line",
    "parse_log",
]

LOGS_DIR = "logs"
LOG_SUFFIX = ".jsonl"
#: The folder of the lease files: ``<namespace>/leases/<session id>.lock``, each
#: ``flock``ed exclusively by the live writer of its session (the kernel releases the
#: lock when the process dies); the files stay, empty.
LEASES_DIR = "leases"
LEASE_SUFFIX = ".lock"

_CHUNK = 64 * 1024
#: How often an append or delete reopens a log that was replaced while it waited for the lock.
_REOPEN_ATTEMPTS = 1000
#: How many logs' paths one :class:`JsonlEvents` remembers; past it, it forgets them all.
_REMEMBERED_LOGS = 1024
#: How many logs one :class:`JsonlEvents` keeps open between appends; past it, the one
#: appended to longest ago is closed.
_HELD_LOGS = 32

logger = logging.getLogger("sessionstore")


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
        self._root = root
        self._dir = root / encode_name(namespace) / LOGS_DIR
        self._dir_name = os.fspath(self._dir)
        self._pid = os.getpid()
        self._states = LogStates()
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

    def _check_dirs(self, directory: Path | None = None) -> None:
        """Refuse the logs folder (or ``directory``) when a folder of it below the root is
        a link (see :func:`.check_dirs`); each log is opened with ``O_NOFOLLOW``."""
        check_dirs(self._root, self._dir if directory is None else directory)

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
            self._check_dirs()
            fd = _open_existing(path)
            if fd is None:
                return False
            try:
                return _first_line(fd) is not None
            finally:
                os.close(fd)

    def append(
        self,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
        owner: str | None = None,
    ) -> int:
        path = self._file(session_id)
        try:
            self._own()
            with self._held_lock:
                log = self._held.pop(session_id, None)
            for _ in range(_REOPEN_ATTEMPTS):
                if log is None:
                    log = self._open_for_append(session_id, path, batch, header)
                try:
                    fcntl.flock(log.fd, fcntl.LOCK_EX)
                    st = _named_stat(path, log)
                    if st is not None:
                        if owner is not None and self.lease_busy(session_id, owner):
                            raise taken_over(session_id)
                        next_seq = self._append_locked(
                            log.fd, path, session_id, batch, header, ttl_ms, st
                        )
                except (SeqConflictError, SessionBusyError):
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
        batch: EventBatch,
        header: SessionHeader | None,
    ) -> _Held:
        self._check_dirs()
        try:
            fd = open_file(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            if header is None:
                raise SessionNotFoundError(session_id) from None
            # Refuse a batch that cannot start a new log before creating its file.
            plan_append(session_id, 0, batch, _no_events)
            make_dirs(self._dir)
            fd = open_file(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
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
        self._states.forget(session_id)
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
        batch: EventBatch,
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

        def stored_texts(first: int, last: int) -> list[bytes]:
            offset = seen.next_seq - len(parsed)
            if first >= offset:
                found = parsed[first - offset : last - offset + 1]
            else:
                # Only the replay of a batch older than what was just parsed gets here:
                # rare enough to read the whole log rather than remember events.
                found = parse_log(session_id, read_all(fd)).events[first : last + 1]
            return [event_text(event) for event in found]

        if not plan_append(session_id, seen.next_seq, batch, stored_texts):
            return seen.next_seq
        events = batch.events
        data = event_lines(batch) if new_header is None else new_header + event_lines(batch)
        if seen.torn:
            os.ftruncate(fd, seen.end)
            os.fsync(fd)
        _write_batch(fd, path, data, seen.end)
        if seen.header is None:
            fsync_dir(self._dir)
            header_seen, head = header, data[:PROBE]
        else:
            header_seen, head = seen.header, seen.head
        next_seq = events[-1].seq + 1
        st = os.fstat(fd)
        end = seen.end + len(data)
        tail = (seen.tail + data[-PROBE:])[-PROBE:]
        offsets = seen.offsets
        if -(-events[0].seq // INDEX_EVERY) * INDEX_EVERY < next_seq:  # a multiple in it
            lines_at = end - len(data) + (0 if new_header is None else len(new_header))
            lines = data if new_header is None else data[len(new_header) :]
            offsets += tuple(batch_offsets(lines, events[0].seq, lines_at))
        written = LogState(
            st.st_dev,
            st.st_ino,
            end,
            st.st_mtime_ns,
            header_seen,
            next_seq,
            end,
            head,
            tail,
            offsets,
        )
        self._states.remember(session_id, written, st)
        return next_seq

    def _catch_up(
        self, fd: int, session_id: str, st: os.stat_result
    ) -> tuple[LogState, Sequence[SessionEvent]]:
        """The log's state, under its lock (shared or exclusive), and the committed
        events parsed to learn it, which are the last ones before its next seq; ``st``
        describes the file open as ``fd``.

        Against the state remembered from this process's last look: if the file is the
        same and unchanged, nothing is read; if it only grew, just the bytes after the
        committed end are parsed; otherwise the whole log is.
        """
        before = self._states.get(session_id)
        if before is not None and before.unchanged(st):
            return before, []
        if before is None or not before.continues(fd, st):
            raw = read_all(fd)
            log = parse_log(session_id, raw, self._file(session_id))
            seen = LogState.parsed_whole(st, log, raw, len(raw))
            self._states.remember(session_id, seen, st)
            return seen, log.events
        raw = _read_from(fd, before.end) if st.st_size > before.end else b""
        line = before.next_seq + 2  # the header and one line per event come before
        parsed, cut, found = parse_batches(session_id, raw, 0, before.next_seq, line)
        offsets = before.offsets
        if found:
            offsets += tuple(before.end + offset for offset in found)
        seen = LogState(
            st.st_dev,
            st.st_ino,
            before.end + len(raw),
            st.st_mtime_ns,
            before.header,
            before.next_seq + len(parsed),
            before.end + cut,
            before.head,
            (before.tail + raw[max(0, cut - PROBE) : cut])[-PROBE:],
            offsets,
        )
        self._states.remember(session_id, seen, st)
        return seen, parsed

    def _own(self) -> None:
        """In a forked child, forget the parent's states and close the copies of the
        descriptors it kept open (the parent's own stay open, and unlocked)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._held_lock = threading.Lock()
            self._states = LogStates()
            _close_held(self._held)
            # The parent's leases stay the parent's: closing the child's copies of the
            # descriptors leaves its locks in place.
            self._lease_lock = threading.Lock()
            _close_leases(self._leases_held)

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        """See :meth:`EventBackend.read`; without ``repair``, in proportion to the events
        returned once the log has been validated (see the module docstring)."""
        path = self._path(session_id)
        self._own()
        with os_errors(path):
            self._check_dirs()
            if not repair:
                return self._read_range(session_id, path, from_seq, limit)
            log = self._load(session_id, path, repair=False)
            if log.header is not None and log.torn:
                log = self._load(session_id, path, repair=True)
        if log.header is None:
            raise SessionNotFoundError(session_id)
        stop = None if limit is None else from_seq + limit
        return log.header, log.events[from_seq:stop]

    def _read_range(
        self, session_id: str, path: Path, from_seq: int, limit: int | None
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        """The header and the committed events ``[from_seq, from_seq + limit)``, under a
        shared lock: what the log holds beyond the state remembered is validated first
        (all of it when nothing is remembered), then the events are read from the
        nearest indexed line at or before ``from_seq``."""
        fd = _open_log(session_id, path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            for _ in range(2):
                state, parsed = self._catch_up(fd, session_id, os.fstat(fd))
                if state.header is None:
                    raise SessionNotFoundError(session_id)
                stop = state.next_seq if limit is None else min(state.next_seq, from_seq + limit)
                if from_seq >= stop:
                    return state.header, []
                first_parsed = state.next_seq - len(parsed)
                if from_seq >= first_parsed:
                    return state.header, list(parsed[from_seq - first_parsed : stop - first_parsed])
                found = _read_indexed(fd, state, from_seq, stop - from_seq)
                if found is not None:
                    return state.header, found
                # The validated bytes are not what they were (rewritten in place without
                # a change of size or mtime): validate the log whole again.
                self._states.forget(session_id)
            raise StoreUnavailableError(f"{path} kept changing during a read")
        finally:
            os.close(fd)

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
            self._check_dirs(self._lease_dir)
            make_dirs(self._lease_dir)
            fd = open_file(path, os.O_RDWR | os.O_CREAT)
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
            self._check_dirs(self._lease_dir)
            return locked_elsewhere(path)

    # --- metadata: the header line and the last committed line -----------------------

    def info(self, session_id: str) -> SessionInfo:
        """From the header line and the end of the file: the log is not parsed."""
        path = self._file(session_id)
        with os_errors(path):
            self._check_dirs()
            fd = _open_log(session_id, path, os.O_RDONLY)
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
            self._check_dirs()
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
                    fd = open_file(path, os.O_RDONLY)
                except (FileNotFoundError, PermissionError):
                    continue
                except UnsafePathError as exc:
                    logger.warning("sessionstore: list skips %s: %s", path, exc)
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
            self._check_dirs()
            try:
                names = os.listdir(self._dir)
            except FileNotFoundError:
                return []
            headers = []
            for name in names:
                if name.endswith(LOG_SUFFIX):
                    try:
                        found = _read_listed_header(self._dir / name)
                    except (PermissionError, UnsafePathError) as exc:
                        logger.warning("sessionstore: list skips %s: %s", self._dir / name, exc)
                        continue
                    if found is not None:
                        headers.append(found[0])
            return headers

    def prune(self, now_ms: int) -> int:
        """Remove every log whose header has a ``ttl_ms`` and whose mtime is at least
        that long before ``now_ms``; logs without a complete or readable header stay."""
        with os_errors(self._dir):
            self._check_dirs()
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
            fd = _open_existing(path)
        except UnsafePathError:
            return False  # never pruned: it is not a log the store made
        if fd is None:
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

    @contextmanager
    def _exclusive(self, session_id: str, path: Path, doing: str) -> Iterator[int]:
        """The log open as a descriptor under the exclusive lock, still named by
        ``path`` (a log replaced meanwhile is opened anew); ``SessionNotFoundError``
        when it has no complete header."""
        with os_errors(path):
            self._check_dirs()
            for _ in range(_REOPEN_ATTEMPTS):
                fd = _open_log(session_id, path, os.O_RDONLY)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    if _still_named(fd, path):
                        if _first_line(fd) is None:
                            raise SessionNotFoundError(session_id)
                        yield fd
                        return
                finally:
                    os.close(fd)
        raise StoreUnavailableError(f"{path} kept being replaced during {doing}")

    def delete(self, session_id: str) -> None:
        path = self._path(session_id)
        with self._exclusive(session_id, path, "a delete"):
            self._drop(session_id)
            os.unlink(path)
            fsync_dir(self._dir)

    def stored_bytes(self, session_id: str) -> int:
        path = self._path(session_id)
        fd = _open_log(session_id, path, os.O_RDONLY)
        try:
            if _first_line(fd) is None:
                raise SessionNotFoundError(session_id)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def set_retention(self, session_id: str, ttl_ms: int | None) -> int | None:
        """Line 1 is rewritten: the log is replaced by a copy with the new header line
        (temp file, fsync, rename, fsync of the folder) under the exclusive lock, so an
        append waiting for the lock finds the path replaced and opens the new file. The
        copy's mtime is now, so the retention runs from now."""
        path = self._path(session_id)
        with self._exclusive(session_id, path, "a change of retention") as fd:
            raw = read_all(fd)
            line = raw[: raw.index(b"\n")]
            header, _ = parse_header_line(session_id, line, os.fspath(path))
            self._drop(session_id)
            # The temp file's name does not end in the log suffix: never listed.
            temp = temp_path(path.with_name(path.name + ".rewrite"))
            atomic_write(path, header_line(header, ttl_ms) + raw[len(line) + 1 :], temp)
            mtime_ms = os.stat(path).st_mtime_ns // 1_000_000
        return None if ttl_ms is None else mtime_ms + ttl_ms

    def _load(self, session_id: str, path: Path, *, repair: bool) -> ParsedLog:
        """Parse the log under a shared lock or, to repair, under the exclusive lock,
        cutting off its torn tail durably; remember its state for the next append."""
        fd = _open_log(session_id, path, os.O_RDWR if repair else os.O_RDONLY)
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
            self._states.remember(session_id, LogState.parsed_whole(st, log, raw, size), st)
            return log
        finally:
            os.close(fd)


# --- reading and writing the file -------------------------------------------------------


def _no_events(first: int, last: int) -> list[bytes]:
    return []


def _open_existing(path: str | Path) -> int | None:
    """``path`` opened for reading, or None when there is no such file (see
    :func:`.open_file`)."""
    try:
        return open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return None


def _open_log(session_id: str, path: str | Path, flags: int) -> int:
    """The log at ``path`` opened with ``flags`` (see :func:`.open_file`);
    :class:`SessionNotFoundError` if absent."""
    try:
        return open_file(path, flags)
    except FileNotFoundError:
        raise SessionNotFoundError(session_id) from None


def _read_indexed(fd: int, state: LogState, from_seq: int, count: int) -> list[SessionEvent] | None:
    """The ``count`` committed events from ``from_seq`` of the validated log ``state``,
    read from the nearest indexed line at or before it; None when the file no longer
    holds them there."""
    index = min(from_seq // INDEX_EVERY, len(state.offsets) - 1)
    start = state.offsets[index]
    skip = from_seq - index * INDEX_EVERY
    wanted = skip + count
    # The mean line length of the log sizes the first read; more follows if it was short.
    mean = (state.end - state.offsets[0]) / max(1, state.next_seq)
    step = int(mean * wanted * 1.125) + 1024
    chunks: list[bytes] = []
    lines, pos = 0, start
    while lines < wanted and pos < state.end:
        chunk = os.pread(fd, min(step, state.end - pos), pos)
        if not chunk:
            return None
        chunks.append(chunk)
        lines += chunk.count(b"\n")
        pos += len(chunk)
    return parse_range(b"".join(chunks), skip, count, from_seq)


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
    fd = _open_existing(path)
    if fd is None:
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
        st = os.lstat(path)
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
                record, batch_end = parse_event(line)
            except MalformedLine:
                continue
            if record["seq"] == batch_end:
                return batch_end + 1, record["time"]
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
        named = os.lstat(path)
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
