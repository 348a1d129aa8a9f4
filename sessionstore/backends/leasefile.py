"""The writers' leases of ``file://`` stores: ``<root>/<namespace>/leases/<session id>.lock``,
each ``flock``ed exclusively by the live writer of its session.

A lease is an OS file lock, so the kernel releases it when the process dies: it needs no
renewal and never expires. The files stay, empty. A forked child never holds its
parent's leases: :meth:`LeaseFiles.forked` closes its copies of the descriptors, which
leaves the parent's locks in place.
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from contextlib import suppress
from pathlib import Path

from .fsutil import check_dirs, encode_name, locked_elsewhere, make_dirs, open_file, os_errors

#: The folder of the lease files, in the namespace's folder.
LEASES_DIR = "leases"
LEASE_SUFFIX = ".lock"


class LeaseFiles:
    """The lease files of one namespace's sessions, in ``directory`` below ``root``, and
    the leases this object holds. Its garbage collection releases them."""

    def __init__(self, root: Path, directory: Path) -> None:
        self._root = root
        self._dir = directory
        #: Leases held: session id -> (owner, locked descriptor).
        self._held: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._closer = weakref.finalize(self, _close_all, self._held)

    def _path(self, session_id: str) -> Path:
        return self._dir / (encode_name(session_id) + LEASE_SUFFIX)

    def acquire(self, session_id: str, owner: str) -> bool:
        """Take the session's lease for ``owner``; whether it is ``owner``'s now (False:
        another owner or another process holds it)."""
        path = self._path(session_id)
        with os_errors(path), self._lock:
            held = self._held.get(session_id)
            if held is not None:
                return held[0] == owner
            check_dirs(self._root, self._dir)
            make_dirs(self._dir)
            fd = open_file(path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            self._held[session_id] = (owner, fd)
            return True

    def release(self, session_id: str, owner: str) -> None:
        """Release the session's lease if ``owner`` holds it here."""
        with self._lock:
            held = self._held.get(session_id)
            if held is None or held[0] != owner:
                return
            del self._held[session_id]
        with suppress(OSError):
            os.close(held[1])  # closing releases the lock

    def busy(self, session_id: str, owner: str | None = None) -> bool:
        """Whether another owner than ``owner`` holds the session's lease, here or in
        another process."""
        held = self._held.get(session_id)
        if held is not None:
            return held[0] != owner
        path = self._path(session_id)
        with os_errors(path):
            check_dirs(self._root, self._dir)
            return locked_elsewhere(path)

    def forked(self) -> None:
        """In a forked child: a new lock, and the copies of the parent's lease
        descriptors closed (the parent's leases stay the parent's)."""
        self._lock = threading.Lock()
        _close_all(self._held)


def _close_all(held: dict[str, tuple[str, int]]) -> None:
    """Close the lease descriptors of ``held`` (releasing their locks) and forget them."""
    fds = [fd for _, fd in held.values()]
    held.clear()
    for fd in fds:
        with suppress(OSError):
            os.close(fd)
