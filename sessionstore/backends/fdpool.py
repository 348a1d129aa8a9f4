"""Files kept open between uses: a :class:`FdPool` keeps the last few a process used open
(one descriptor each, unlocked), so the next use of one skips its ``open``.

A user takes a file's descriptor out of the pool (:meth:`FdPool.take`), so no other
thread of the process uses it meanwhile (``flock`` does not exclude holders of one
descriptor), and gives it back unlocked (:meth:`FdPool.put_back`). Past
:data:`HELD_FILES`, the file given back longest ago is closed. Whoever takes a
descriptor checks that its name still names that file (:meth:`HeldFile.named_stat`)
before relying on it. A forked child never uses its parent's descriptors: it closes its
copies (:meth:`FdPool.forked`), which leaves the parent's open.
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .dirhandle import Folder

#: How many files one :class:`FdPool` keeps open.
HELD_FILES = 32


@dataclass(slots=True)
class HeldFile:
    """A file open as the descriptor ``fd``, and the file (``dev``, ``ino``) it was
    opened as."""

    fd: int
    dev: int
    ino: int

    @classmethod
    def of(cls, fd: int) -> HeldFile:
        """The file open as ``fd``; ``fd`` is closed if its ``fstat`` fails."""
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, st.st_dev, st.st_ino)

    def named_stat(self, folder: Folder | None, name: str) -> os.stat_result | None:
        """The ``stat`` of ``name`` in ``folder`` if it still names this file (not
        unlinked or replaced, its folder not gone), else None. An open descriptor keeps
        its inode from being reused, so equal (``dev``, ``ino``) prove it is the same
        file."""
        if folder is None:
            return None
        try:
            st = folder.stat(name)
        except FileNotFoundError:
            return None
        return st if st.st_ino == self.ino and st.st_dev == self.dev else None

    def discard(self) -> None:
        """Unlock (a forked child may share the descriptor's lock) and close the file."""
        with suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        with suppress(OSError):
            os.close(self.fd)


class FdPool:
    """Open files not in use, by key, oldest first (see the module docstring). Its
    garbage collection closes them."""

    def __init__(self) -> None:
        self._held: dict[str, HeldFile] = {}
        self._lock = threading.Lock()
        self._closer = weakref.finalize(self, _close_all, self._held)

    def take(self, key: str) -> HeldFile | None:
        """``key``'s file, out of the pool until :meth:`put_back`; None when none is open."""
        with self._lock:
            return self._held.pop(key, None)

    def put_back(self, key: str, file: HeldFile) -> None:
        """Unlock ``file`` and keep it open as ``key``'s, closing the file kept open
        longest if there are too many."""
        try:
            fcntl.flock(file.fd, fcntl.LOCK_UN)
        except OSError:
            with suppress(OSError):
                os.close(file.fd)  # closing releases the lock too
            return
        with self._lock:
            held = self._held
            replaced = held.pop(key, None)  # another thread's, opened meanwhile
            held[key] = file
            if replaced is None and len(held) <= HELD_FILES:
                return
            evicted = [held.pop(next(iter(held)))] if len(held) > HELD_FILES else []
        for other in (replaced, *evicted):
            if other is not None:
                with suppress(OSError):  # these were unlocked
                    os.close(other.fd)

    def drop(self, key: str) -> None:
        """Close ``key``'s file if it is kept open."""
        file = self.take(key)
        if file is not None:
            with suppress(OSError):
                os.close(file.fd)

    def close(self) -> None:
        """Close every file kept open; the pool stays usable."""
        with self._lock:
            _close_all(self._held)

    def forked(self) -> None:
        """In a forked child: a new lock, and the copies of the parent's descriptors
        closed (the parent's own stay open, and unlocked)."""
        self._lock = threading.Lock()
        _close_all(self._held)


def _close_all(held: dict[str, HeldFile]) -> None:
    """Close every file of ``held``, kept open and unlocked, and forget them."""
    files = list(held.values())
    held.clear()
    for file in files:
        with suppress(OSError):
            os.close(file.fd)
