"""The JSONL event logs of one folder as a whole: their headers (``list``), their
metadata (``list_info``, and ``info`` of one) and the removal of the expired ones
(``prune``), all read from each log's header line and the end of its file, never by
parsing the log (see :mod:`.jsonl` for the layout and the locking).

A log without a complete header line is left out (a crash during its first append);
so, with a warning on the ``sessionstore`` logger, is a log whose header is damaged, of
another format version or names another session than its file name, and a file that
cannot be read. The folder is a :class:`~.dirhandle.Folder`, walked and checked by the
caller.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import CorruptLogError, UnsafePathError, UnsupportedVersionError
from ..jsondata import short_repr
from ..models import SessionHeader, SessionInfo
from .fsutil import close_unlocked, encode_name
from .jsonl_format import LOG_SUFFIX, parse_header_line
from .jsonl_io import first_line, last_committed, open_existing, still_named

if TYPE_CHECKING:
    from .dirhandle import Folder

logger = logging.getLogger("sessionstore")


def log_info(
    session_id: str,
    fd: int,
    header: SessionHeader,
    ttl_ms: int | None,
    start: int,
    busy: Callable[[str], bool],
) -> SessionInfo:
    """The metadata of the log open as ``fd``, whose ``header`` line ends at ``start``;
    ``busy`` tells whether a writer holds a session's lease."""
    st = os.fstat(fd)
    next_seq, last_time = last_committed(fd, start, st.st_size)
    expires_at = None if ttl_ms is None else st.st_mtime_ns // 1_000_000 + ttl_ms
    return SessionInfo(header, next_seq, last_time, expires_at, busy(session_id))


def list_infos(folder: Folder, busy: Callable[[str], bool]) -> list[SessionInfo]:
    """:func:`log_info` of every log :func:`list_headers` lists."""
    found: list[SessionInfo] = []
    for name in _log_names(folder):
        try:
            fd = folder.open(name, os.O_RDONLY)
        except (FileNotFoundError, PermissionError):
            continue
        except UnsafePathError as exc:
            logger.warning("sessionstore: list skips %s: %s", folder.join(name), exc)
            continue
        try:
            listed = _listed_header(folder, name, fd)
            if listed is not None:
                start = len(first_line(fd) or b"") + 1
                found.append(log_info(listed[0].id, fd, *listed, start, busy))
        finally:
            os.close(fd)
    return found


def list_headers(folder: Folder) -> list[SessionHeader]:
    """The header of every log in ``folder`` (see the module docstring for the logs
    left out)."""
    headers = []
    for name in _log_names(folder):
        try:
            found = _read_listed_header(folder, name)
        except (PermissionError, UnsafePathError) as exc:
            logger.warning("sessionstore: list skips %s: %s", folder.join(name), exc)
            continue
        if found is not None:
            headers.append(found[0])
    return headers


def prune_logs(folder: Folder, now_ms: int, forget: Callable[[str], None]) -> int:
    """Remove every log of ``folder`` whose header has a ``ttl_ms`` and whose mtime is
    at least that long before ``now_ms``, each under its exclusive lock, calling
    ``forget`` with its session id first; logs without a complete or readable header
    stay. How many were removed."""
    return sum(_prune_one(folder, name, now_ms, forget) for name in _log_names(folder))


def _prune_one(folder: Folder, name: str, now_ms: int, forget: Callable[[str], None]) -> bool:
    """Remove the log ``name`` if it has expired by ``now_ms``; whether it was."""
    try:
        fd = open_existing(folder, name)
    except UnsafePathError:
        return False  # never pruned: it is not a log the store made
    if fd is None:
        return False
    try:
        # Under the lock no append is half done, and the mtime is the last one's.
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not still_named(fd, folder, name):
            return False
        found = _listed_header(folder, name, fd)
        if found is None:
            return False
        header, ttl_ms = found
        if ttl_ms is None or os.fstat(fd).st_mtime_ns // 1_000_000 + ttl_ms > now_ms:
            return False
        forget(header.id)
        folder.unlink(name)
        folder.fsync()
        return True
    finally:
        close_unlocked(fd)


def _log_names(folder: Folder) -> list[str]:
    """The names of the logs in ``folder``."""
    return [entry.name for entry in folder.entries() if entry.name.endswith(LOG_SUFFIX)]


def _read_listed_header(folder: Folder, name: str) -> tuple[SessionHeader, int | None] | None:
    fd = open_existing(folder, name)
    if fd is None:
        return None
    try:
        return _listed_header(folder, name, fd)
    finally:
        os.close(fd)


def _listed_header(folder: Folder, name: str, fd: int) -> tuple[SessionHeader, int | None] | None:
    """The header and ``ttl_ms`` of the log open as ``fd``; None without a complete
    header line, and (with a warning logged) for an unreadable one or one that names
    another session than the file does."""
    line = first_line(fd)
    if line is None:
        return None
    path = folder.join(name)
    try:
        header, ttl_ms = parse_header_line(name, line, os.fspath(path))
    except (CorruptLogError, UnsupportedVersionError) as exc:
        logger.warning("sessionstore: skipping the log %s: %s", path, exc)
        return None
    if encode_name(header.id) + LOG_SUFFIX != name:
        logger.warning(
            "sessionstore: skipping the log %s: its header names session %s",
            path,
            short_repr(header.id),
        )
        return None
    return header, ttl_ms
