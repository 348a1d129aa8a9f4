"""Event logs as JSON Lines (``file://`` stores): ``<root>/<namespace>/logs/<session id>.jsonl``.

Line 1 is the header, the :class:`SessionHeader` fields as one JSON object, plus ``ttl_ms``
(an int > 0) for a session created with a retention. Every further
line is one event ``{"seq", "type", "time", "data", "id"?, "batch_end"}``: ``data`` is the
event's canonical JSON embedded as is, ``batch_end`` the seq of the last event of the batch
it was appended with. Every line ends with ``\\n``. Nothing exists before the first append,
which writes the header and the first batch together.

An append holds an exclusive ``flock`` on the log and writes the batch with one ``write``
and an fsync, so a crash can only tear the final batch. A writer's append checks its lease
under that lock first (fencing): a lease file another process holds locked, a lease this
process holds for another writer, or a newer epoch in the lease file refuses it. Readers
recognise a torn final batch -- one that never reaches its ``batch_end``: its last line
lacks its newline, or lines of it hold zero bytes (what a crash before the fsync leaves
where bytes were not written yet) followed only by zeros or by lines a line before them
shows to be of that batch, or its last lines are missing -- and leave it out;
anything else wrong is :class:`CorruptLogError` (a complete line that does not parse is
damage, also the last one), and nothing is rewritten. A file without a complete header
line (a crash during the very first append) counts as absent.

The line format and its parsing are :mod:`.jsonl_format` (no I/O), the reads and writes
of one open log :mod:`.jsonl_io`, listing and pruning a folder of logs
:mod:`.jsonl_listing`, and the writers' lease files :mod:`.leasefile`.

Each :class:`JsonlEvents` remembers, per process, the state of every log it last
validated and reads through it (:mod:`.jsonl_cache`): a log is parsed whole once, then
only what was appended since, and a read without repair seeks to an indexed line near
``from_seq``, so it costs what it returns once the log is validated. A ``read`` with
``repair`` (``load``) always parses the whole log. An append's seq decision rests on the
committed end it has validated.

Every call walks the logs folder from the store's root without following a link and
checks each folder on its descriptor (:mod:`.dirhandle`); the log is opened, created,
renamed and removed relative to it, so a folder swapped for a link or for someone
else's is never used. Between appends the last few logs appended to stay open, unlocked
(:mod:`.fdpool`). An append walks to the logs folder, locks its log and checks with one
``stat`` in that folder that its name still names that file (a log deleted, pruned or
replaced meanwhile is opened anew), which also gives the size and mtime compared with
the remembered state: an append to an unchanged log costs the walk, ``flock``, ``stat``,
``write``, ``fsync``, an ``fstat`` (the new mtime) and the unlock. A forked child closes
its copies of the parent's descriptors and leases and starts afresh.
:meth:`JsonlEvents.close` (or the backend's garbage collection) closes the logs and the
root's descriptor; the backend stays usable.

Retention: the file's mtime is the session's last activity, so every append renews it. A
log whose header has a ``ttl_ms`` expires ``ttl_ms`` after its mtime; :meth:`JsonlEvents.prune`
removes it (its one file) under the exclusive lock, so never during an append.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..contracts import EventBackend, EventBatch
from ..errors import (
    CorruptLogError,
    SeqConflictError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from ..eventlog import check_ends_with, event_text, plan_append
from ..leases import Lease, taken_over
from ..models import SessionEvent, SessionHeader, SessionInfo
from .dirhandle import Folder, StoreRoot
from .fdpool import FdPool, HeldFile
from .fsutil import (
    atomic_write,
    close_unlocked,
    encode_name,
    os_errors,
    read_all,
    store_error,
    temp_name,
)
from .jsonl_cache import LogState, LogStates
from .jsonl_format import (
    LOG_SUFFIX,
    LOGS_DIR,
    ParsedLog,
    event_lines,
    header_line,
    parse_header_line,
    parse_log,
)
from .jsonl_io import (
    first_line,
    open_existing,
    open_log,
    still_named,
    write_batch,
)
from .jsonl_listing import list_headers, list_infos, log_info, prune_logs
from .leasefile import LeaseFiles

__all__ = ["JsonlEvents"]

#: How often an append or delete reopens a log that was replaced while it waited for the lock.
_REOPEN_ATTEMPTS = 1000
#: How many logs' paths one :class:`JsonlEvents` remembers; past it, it forgets them all.
_REMEMBERED_LOGS = 1024


class JsonlEvents(EventBackend):
    """Event logs of one namespace, one JSONL file per session (see the module docstring).

    Remembers the state of the logs it validated for its later appends and keeps the
    logs it appended to last open; both are per process (a forked child starts afresh)
    and checked against the file each time. :meth:`close` closes the open logs.
    """

    def __init__(self, root: Path, namespace: str, store_root: StoreRoot | None = None) -> None:
        self._root = store_root if store_root is not None else StoreRoot(root)
        self._namespace = namespace
        self._dir = root / encode_name(namespace) / LOGS_DIR
        self._dir_name = os.fspath(self._dir)
        self._pid = os.getpid()
        self._states = LogStates()
        self._files: dict[str, str] = {}
        #: The logs kept open between appends; an append takes its log out while it runs.
        self._pool = FdPool()
        self._lease_files = LeaseFiles(self._root, namespace)

    def _path(self, session_id: str) -> Path:
        return self._dir / _name(session_id)

    def _logs(self, *, create: bool = False) -> Folder | None:
        """The logs folder, walked from the root without links (see :mod:`.dirhandle`);
        None when it does not exist, unless ``create`` makes it."""
        return self._root.namespace(self._namespace, (LOGS_DIR,), create=create)

    @contextmanager
    def _opened_logs(self) -> Iterator[Folder | None]:
        """:meth:`_logs`, closed on leaving."""
        folder = self._logs()
        if folder is None:
            yield None
            return
        with folder:
            yield folder

    def _file(self, session_id: str) -> str:
        """:meth:`_path` as a string, remembered."""
        name = self._files.get(session_id)
        if name is None:
            if len(self._files) >= _REMEMBERED_LOGS:
                self._files.clear()
            name = os.path.join(self._dir_name, _name(session_id))
            self._files[session_id] = name
        return name

    def locate(self, session_id: str) -> str | None:
        """Absolute path of the session's ``.jsonl`` file, whether it exists yet or not."""
        return self._file(session_id)

    def close(self) -> None:
        """Close the logs kept open between appends (the next append opens its log again)."""
        self._own()
        self._pool.close()
        self._root.close()

    def exists(self, session_id: str) -> bool:
        path = self._path(session_id)
        with os_errors(path), self._opened_logs() as folder:
            fd = None if folder is None else open_existing(folder, _name(session_id))
            if fd is None:
                return False
            try:
                return first_line(fd) is not None
            finally:
                os.close(fd)

    def append(
        self,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
        lease: Lease | None = None,
    ) -> int:
        path = self._file(session_id)
        name = _name(session_id)
        try:
            self._own()
            log = self._pool.take(session_id)
            for _ in range(_REOPEN_ATTEMPTS):
                folder = None
                try:
                    folder = self._logs()
                    if log is None:
                        log, folder = self._open_for_append(session_id, folder, batch, header)
                    fcntl.flock(log.fd, fcntl.LOCK_EX)
                    st = log.named_stat(folder, name)
                    if st is not None and folder is not None:
                        if lease is not None and self._lease_files.fences_off(session_id, lease):
                            raise taken_over(session_id)
                        next_seq = self._append_locked(
                            log.fd, folder, path, session_id, batch, header, ttl_ms, st
                        )
                except (SeqConflictError, SessionBusyError):
                    if log is not None:
                        self._pool.put_back(session_id, log)
                    raise
                except BaseException:
                    if log is not None:
                        log.discard()
                    raise
                finally:
                    if folder is not None:
                        folder.close()
                if st is not None:
                    self._pool.put_back(session_id, log)
                    return next_seq
                # Replaced or deleted since it was opened: open whatever the name names now.
                log.discard()
                log = None
        except OSError as exc:
            raise store_error(exc, path) from exc
        raise StoreUnavailableError(f"{path} kept being replaced during an append")

    def _open_for_append(
        self,
        session_id: str,
        folder: Folder | None,
        batch: EventBatch,
        header: SessionHeader | None,
    ) -> tuple[HeldFile, Folder]:
        """The log opened for appending, and the logs folder it is in: ``folder``, or
        the one made for the first log (``folder`` None: it was missing)."""
        name = _name(session_id)
        if folder is not None:
            with suppress(FileNotFoundError):
                return HeldFile.of(folder.open(name, os.O_RDWR | os.O_APPEND)), folder
        if header is None:
            raise SessionNotFoundError(session_id)
        # Refuse a batch that cannot start a new log before creating its file.
        plan_append(session_id, 0, batch, _no_events)
        made = folder if folder is not None else self._logs(create=True)
        assert made is not None
        try:
            return HeldFile.of(made.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT)), made
        except BaseException:
            if made is not folder:
                made.close()
            raise

    def _drop(self, session_id: str) -> None:
        """Forget ``session_id``'s log: its state, and its descriptor if kept open."""
        self._own()
        self._states.forget(session_id)
        self._pool.drop(session_id)

    def _append_locked(
        self,
        fd: int,
        folder: Folder,
        path: str,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        ttl_ms: int | None,
        st: os.stat_result,
    ) -> int:
        """Append under the lock, ``st`` describing the file open as ``fd`` in
        ``folder``."""
        seen, parsed = self._states.catch_up(fd, session_id, st, path)
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
        data = event_lines(batch) if new_header is None else new_header + event_lines(batch)
        if seen.torn:
            os.ftruncate(fd, seen.end)
            os.fsync(fd)
        write_batch(fd, path, data, seen.end)
        if seen.header is None:
            folder.fsync()
        header_len = 0 if new_header is None else len(new_header)
        first = batch.events[0].seq
        st = os.fstat(fd)
        written = seen.appended(st, header, data, header_len, first, batch.texts)
        self._states.remember(session_id, written, st)
        return first + len(batch)

    def _own(self) -> None:
        """In a forked child, forget the parent's states and close the copies of the
        descriptors it kept open (the parent's own stay open, and unlocked)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._states = LogStates()
            self._pool.forked()
            self._lease_files.forked()

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
        """See :meth:`LogStates.read_range`; under a shared lock."""
        fd = self._open_log(session_id, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return self._states.read_range(fd, session_id, from_seq, limit, os.fspath(path))
        finally:
            close_unlocked(fd)

    def _open_log(self, session_id: str, flags: int) -> int:
        """The session's log opened with ``flags`` in the logs folder walked from the
        root; :class:`SessionNotFoundError` when either is missing."""
        with self._opened_logs() as folder:
            return open_log(session_id, folder, _name(session_id), flags)

    # --- leases: an OS file lock, released by the kernel when the process dies -------

    renews_leases = False

    def acquire_lease(self, session_id: str, owner: str, ttl_ms: int) -> int:
        self._own()
        return self._lease_files.acquire(session_id, owner)

    def renew_lease(self, session_id: str, lease: Lease, ttl_ms: int) -> bool:
        self._own()
        return self._lease_files.renew(session_id, lease)

    def release_lease(self, session_id: str, owner: str) -> None:
        self._own()
        self._lease_files.release(session_id, owner)

    def lease_busy(self, session_id: str, owner: str | None = None) -> bool:
        self._own()
        return self._lease_files.busy(session_id, owner)

    # --- metadata: the header line and the last committed line -----------------------

    def info(self, session_id: str) -> SessionInfo:
        """From the header line and the end of the file: the log is not parsed."""
        path = self._file(session_id)
        with os_errors(path):
            fd = self._open_log(session_id, os.O_RDONLY)
            try:
                line = first_line(fd)
                if line is None:
                    raise SessionNotFoundError(session_id)
                header, ttl_ms = parse_header_line(session_id, line, path)
                if header.id != session_id:
                    raise CorruptLogError(
                        session_id, f"the header names session {header.id!r}", line=1
                    )
                start = len(line) + 1
                return log_info(session_id, fd, header, ttl_ms, start, self.lease_busy)
            finally:
                os.close(fd)

    def list_info(self) -> list[SessionInfo]:
        """:meth:`info` of every log :meth:`list` lists."""
        with os_errors(self._dir), self._opened_logs() as folder:
            return [] if folder is None else list_infos(folder, self.lease_busy)

    def list(self) -> list[SessionHeader]:
        """Headers read from the first line of each log; logs without a complete header
        are skipped, and so (with a warning on the ``sessionstore`` logger) are logs
        whose header is damaged, of another format version or names another session,
        and files that cannot be read."""
        with os_errors(self._dir), self._opened_logs() as folder:
            return [] if folder is None else list_headers(folder)

    def prune(self, now_ms: int) -> int:
        """Remove every log whose header has a ``ttl_ms`` and whose mtime is at least
        that long before ``now_ms``; logs without a complete or readable header stay."""
        with os_errors(self._dir), self._opened_logs() as folder:
            return 0 if folder is None else prune_logs(folder, now_ms, self._drop)

    @contextmanager
    def _exclusive(self, session_id: str, path: Path, doing: str) -> Iterator[tuple[int, Folder]]:
        """The log open as a descriptor under the exclusive lock, still named by its
        name in the logs folder (a log replaced meanwhile is opened anew), and that
        folder; ``SessionNotFoundError`` when it has no complete header."""
        name = _name(session_id)
        with os_errors(path), self._opened_logs() as folder:
            for _ in range(_REOPEN_ATTEMPTS):
                fd = open_log(session_id, folder, name, os.O_RDONLY)
                assert folder is not None
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    if still_named(fd, folder, name):
                        if first_line(fd) is None:
                            raise SessionNotFoundError(session_id)
                        yield fd, folder
                        return
                finally:
                    close_unlocked(fd)
        raise StoreUnavailableError(f"{path} kept being replaced during {doing}")

    def delete(self, session_id: str, *, last: SessionEvent | None = None) -> None:
        path = self._path(session_id)
        with self._exclusive(session_id, path, "a delete") as (fd, folder):
            if last is not None:
                self._check_ends_with(fd, session_id, os.fspath(path), last)
            self._drop(session_id)
            folder.unlink(_name(session_id))
            folder.fsync()

    def _check_ends_with(self, fd: int, session_id: str, where: str, last: SessionEvent) -> None:
        """:func:`check_ends_with` of the log open as ``fd`` under its exclusive lock."""
        seen, _ = self._states.catch_up(fd, session_id, os.fstat(fd), where)
        stored = None
        if seen.next_seq == last.seq + 1:
            _, found = self._states.read_range(fd, session_id, last.seq, 1, where)
            stored = event_text(found[0]) if found else None
        check_ends_with(session_id, last, seen.next_seq, stored)

    def stored_bytes(self, session_id: str) -> int:
        with os_errors(self._path(session_id)):
            fd = self._open_log(session_id, os.O_RDONLY)
        try:
            if first_line(fd) is None:
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
        with self._exclusive(session_id, path, "a change of retention") as (fd, folder):
            raw = read_all(fd)
            line = raw[: raw.index(b"\n")]
            header, _ = parse_header_line(session_id, line, os.fspath(path))
            self._drop(session_id)
            # The temp file's name does not end in the log suffix: never listed.
            name = _name(session_id)
            temp = temp_name(name + ".rewrite")
            atomic_write(folder, name, header_line(header, ttl_ms) + raw[len(line) + 1 :], temp)
            mtime_ms = folder.stat(name).st_mtime_ns // 1_000_000
        return None if ttl_ms is None else mtime_ms + ttl_ms

    def _load(self, session_id: str, path: Path, *, repair: bool) -> ParsedLog:
        """Parse the log under a shared lock or, to repair, under the exclusive lock,
        cutting off its torn tail durably; remember its state for the next append."""
        fd = self._open_log(session_id, os.O_RDWR if repair else os.O_RDONLY)
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
            close_unlocked(fd)


def _name(session_id: str) -> str:
    """The file name of the session's log."""
    return encode_name(session_id) + LOG_SUFFIX


def _no_events(first: int, last: int) -> list[bytes]:
    return []
