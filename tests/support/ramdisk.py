"""Where the tests keep their files: ``/dev/shm`` when it is a writable RAM disk with
room, else the system temp dir.

The stores and servers under test keep their own durability settings (fsync of every
file write, ``appendfsync always``), and the tests stop a writer or a server by killing
its process, never the machine: what a process wrote stays in the kernel's hands either
way, so a restart or a reader finds the same bytes on a RAM disk as on a real one, and
only the fsync of every write gets cheaper.
"""

from __future__ import annotations

import os

#: The RAM disk, and the free space it needs before the tests use it.
SHM = "/dev/shm"
ROOM = 1 << 30


def ram_root() -> str | None:
    """``/dev/shm`` when it is a writable RAM disk with :data:`ROOM` free; else None
    (the system temp dir)."""
    try:
        stats = os.statvfs(SHM)
    except OSError:
        return None
    if os.access(SHM, os.W_OK) and stats.f_bavail * stats.f_frsize >= ROOM:
        return SHM
    return None
