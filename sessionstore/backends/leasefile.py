"""The writers' leases of ``file://`` stores: ``<root>/<namespace>/leases/<session id>.lock``,
each ``flock``ed exclusively by the live writer of its session.

A lease is an OS file lock, so the kernel releases it when the process dies: it needs no
renewal and never expires, so no live holder's lease is ever taken over here. Each file
holds the newest lease's epoch (decimal digits), written by the taker under its lock,
and stays when the lease ends; a release writes it negated (``-`` before the digits),
so a lease found unlocked with a positive epoch was held when its process died: the
taker's epoch is then a :class:`~sessionstore.leases.TakenOver`. A forked child never
holds its parent's leases: :meth:`LeaseFiles.forked` closes its copies of the descriptors, which
leaves the parent's locks in place.
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from contextlib import suppress
from pathlib import Path

from .. import forksafe
from ..leases import Lease, next_epoch, taken
from ..when import now_ms
from .dirhandle import StoreRoot
from .fsutil import close_unlocked, encode_name, locked_elsewhere, os_errors

#: The folder of the lease files, in the namespace's folder.
LEASES_DIR = "leases"
LEASE_SUFFIX = ".lock"


class LeaseFiles:
    """The lease files of ``namespace``'s sessions below the store's ``root``, and the
    leases this object holds; the folder is walked from the root on every call (see
    :mod:`.dirhandle`). Its garbage collection releases them."""

    def __init__(self, root: StoreRoot, namespace: str) -> None:
        self._root = root
        self._namespace = namespace
        self._dir = root.path / encode_name(namespace) / LEASES_DIR
        #: Leases held: session id -> (owner, locked descriptor, epoch).
        self._held: dict[str, tuple[str, int, int]] = {}
        self._lock = threading.Lock()
        self._closer = weakref.finalize(self, _close_all, self._held)
        # At the fork itself, not at the child's first call: a child that never calls
        # (a pool's worker) would hold the parent's leases for as long as it lives.
        forksafe.at_fork(self, "forked")

    def _path(self, session_id: str) -> Path:
        return self._dir / _name(session_id)

    def acquire(self, session_id: str, owner: str) -> int:
        """Take the session's lease for ``owner``: its epoch once it is ``owner``'s, 0
        when another owner or another process holds it."""
        path = self._path(session_id)
        with os_errors(path), self._lock:
            held = self._held.get(session_id)
            if held is not None:
                return held[2] if held[0] == owner else 0
            folder = self._root.namespace(self._namespace, (LEASES_DIR,), create=True)
            assert folder is not None
            with folder:
                fd = folder.open(_name(session_id), os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                stored = _stored(fd)
                epoch = next_epoch(abs(stored), now_ms())
                text = str(epoch).encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, text, 0)
            except BlockingIOError:
                os.close(fd)
                return 0
            except BaseException:
                os.close(fd)
                raise
            self._held[session_id] = (owner, fd, epoch)
            return taken(epoch, stored > 0)

    def renew(self, session_id: str, lease: Lease) -> bool:
        """Whether ``lease`` is still held here (a lock needs no renewal)."""
        held = self._held.get(session_id)
        return held is not None and (held[0], held[2]) == lease

    def fences_off(self, session_id: str, lease: Lease) -> bool:
        """Whether an append fenced by ``lease`` is refused: another owner or process
        holds the lease, or the file holds a newer epoch."""
        held = self._held.get(session_id)
        if held is not None:
            return (held[0], held[2]) != lease
        with os_errors(self._path(session_id)):
            folder = self._root.namespace(self._namespace, (LEASES_DIR,))
            if folder is None:
                return False
            with folder:
                name = _name(session_id)
                if locked_elsewhere(folder, name):
                    return True
                try:
                    fd = folder.open(name, os.O_RDONLY)
                except FileNotFoundError:
                    return False
            try:
                return _epoch_of(fd) > lease.epoch
            finally:
                os.close(fd)

    def release(self, session_id: str, owner: str) -> None:
        """Release the session's lease if ``owner`` holds it here."""
        with self._lock:
            held = self._held.get(session_id)
            if held is None or held[0] != owner:
                return
            del self._held[session_id]
        with suppress(OSError):
            os.pwrite(held[1], b"-%d" % held[2], 0)  # released: its epoch negated
        with suppress(OSError):
            close_unlocked(held[1])

    def busy(self, session_id: str, owner: str | None = None) -> bool:
        """Whether another owner than ``owner`` holds the session's lease, here or in
        another process."""
        held = self._held.get(session_id)
        if held is not None:
            return held[0] != owner
        with os_errors(self._path(session_id)):
            folder = self._root.namespace(self._namespace, (LEASES_DIR,))
            if folder is None:
                return False
            with folder:
                return locked_elsewhere(folder, _name(session_id))

    def forked(self) -> None:
        """In a forked child: a new lock, and the copies of the parent's lease
        descriptors closed (the parent's leases stay the parent's)."""
        self._lock = threading.Lock()
        _close_all(self._held)


def _name(session_id: str) -> str:
    return encode_name(session_id) + LEASE_SUFFIX


def _epoch_of(fd: int) -> int:
    """The epoch a lease file holds, released or not."""
    return abs(_stored(fd))


def _stored(fd: int) -> int:
    """The number a lease file holds: its epoch, negated once released; 0 for an empty
    file (one of an older version) or one that holds no number."""
    text = os.pread(fd, 32, 0)
    digits = text[1:] if text[:1] == b"-" else text
    return int(text) if digits.isdigit() else 0


def _close_all(held: dict[str, tuple[str, int, int]]) -> None:
    """Close the lease descriptors of ``held`` (releasing their locks) and forget them."""
    fds = [fd for _, fd, _ in held.values()]
    held.clear()
    for fd in fds:
        with suppress(OSError):
            os.close(fd)
