"""The writer slots of a value backend: what makes each value write on Redis exactly once.

A write call takes a slot (a random id) and the slot's next number, and sends both with
every send of its script, so that the script recognises a resend of a call it applied
(see :mod:`sessionstore.keys` and ``lua/_seq.lua``).
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from .. import forksafe
from ..errors import NotReplicatedError, SessionStoreError, StoreUnavailableError

#: A write call's writer slot (its id as the scripts get it) and its number in it.
Mark = tuple[str | bytes, int]


class WriterSlots:
    """The writer slots of one value backend (see :mod:`sessionstore.keys`): each a random
    id and a counter that only grows. ``with slots.take() as mark:`` takes a free slot
    (or makes one) and counts it up; the slot goes back to the pool when the block ended
    with its outcome known (no exception, or a :class:`SessionStoreError` other than a
    :class:`StoreUnavailableError`; a :class:`NotReplicatedError` was applied), so a slot
    serves one call at a time (threads and coroutines never share one in flight) and one
    whose call's outcome is unknown (unavailable, cancelled, interrupted) is never used
    again. A forked child starts with an empty pool, by the fork hook and again by its
    own process id (a fork that skipped the hooks), and a slot taken before a fork never
    comes back into the child's pool: it never numbers a slot of its parent's."""

    __slots__ = ("free", "pid", "__weakref__")

    def __init__(self) -> None:
        self.free: list[list[Any]] = []
        self.pid = os.getpid()
        forksafe.at_fork(self, "reset")

    def reset(self) -> None:
        """Forget every slot (in a forked child)."""
        self.free = []
        self.pid = os.getpid()

    def take(self) -> _Slot:
        if self.pid != os.getpid():
            self.reset()
        pool = self.free
        try:
            slot = pool.pop()
        except IndexError:
            slot = [secrets.token_hex(8).encode(), 0]
        slot[1] += 1
        return _Slot(self, pool, slot)


class _Slot:
    __slots__ = ("slots", "pool", "slot")

    def __init__(self, slots: WriterSlots, pool: list[list[Any]], slot: list[Any]) -> None:
        self.slots = slots
        self.pool = pool
        self.slot = slot

    def __enter__(self) -> Mark:
        return self.slot[0], self.slot[1]

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        if self.slots.free is self.pool and _outcome_known(exc):
            self.pool.append(self.slot)


def _outcome_known(exc: BaseException | None) -> bool:
    """Whether a call that ended with ``exc`` can have no send of it still on its way."""
    if exc is None or isinstance(exc, NotReplicatedError):
        return True
    return isinstance(exc, SessionStoreError) and not isinstance(exc, StoreUnavailableError)
