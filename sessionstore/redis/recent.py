"""The values index entries a backend added lately: a hot value's writes send the
``ZADD`` of its entry once per :data:`TRUST_S`, not on every write (see :mod:`.index`)."""

from __future__ import annotations

import time

from .. import keys
from ..keys import ValueKey
from . import scripts
from .index import value_entry

#: How long (s) a process trusts an index entry it added itself, and skips adding it again.
#: Half of ``GRACE_MS``: a listing removes an entry only when its score (the time it was
#: added) is older than ``GRACE_MS`` and its data is gone, so a write that skipped the entry
#: lands (within this half plus the call's timeout) long before the entry can be removed;
#: clocks of clients must agree within the other half, less that timeout.
TRUST_S = keys.GRACE_MS / 1000 / 2
#: Entries remembered per backend before the memory is cleared.
RECENT_MAX = 65536


class RecentEntries:
    """The index entries this backend added lately: a hot value's writes send its
    ``ZADD`` once per :data:`TRUST_S`, not on every write. An entry is remembered only
    once the write that carried it succeeded."""

    __slots__ = ("added",)

    def __init__(self) -> None:
        self.added: dict[str, float] = {}

    def entry(self, key: ValueKey, payload: bytes | None, *, history: bool) -> _Entry:
        """``with recent.entry(...) as first:`` -- ``first`` is the index entry the write
        adds before its data, or None (a plain clear creates nothing; a trusted entry)."""
        if payload is None and not history:
            return _Entry(self, None)
        command = value_entry(key, history)
        seen = self.added.get(str(command[3]))
        if seen is not None and time.monotonic() - seen < TRUST_S:
            return _Entry(self, None)
        return _Entry(self, command)


class _Entry:
    __slots__ = ("recent", "command", "started")

    def __init__(self, recent: RecentEntries, command: scripts.Command | None) -> None:
        self.recent = recent
        self.command = command
        self.started = time.monotonic()

    def __enter__(self) -> scripts.Command | None:
        return self.command

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        if exc is None and self.command is not None:
            added = self.recent.added
            if len(added) >= RECENT_MAX:
                added.clear()
            added[str(self.command[3])] = self.started
