"""The writer slots of a value backend: what makes each value write on Redis exactly once.

A write call takes a slot (a random id) and the slot's next number, and sends both with
every send of its script, so that the script recognises a resend of a call it applied
(see :mod:`sessionstore.keys` and ``lua/_seq.lua``).
"""

from __future__ import annotations

import secrets
from typing import Any

from .. import forksafe

#: A write call's writer slot and its number in it.
Mark = tuple[str, int]


class WriterSlots:
    """The writer slots of one value backend (see :mod:`sessionstore.keys`): each a random
    id and a counter that only grows. ``with slots.take() as mark:`` takes a free slot
    (or makes one) and counts it up; the slot goes back to the pool only when the block
    ended without an exception, so a slot serves one call at a time (threads and
    coroutines never share one in flight) and one whose call's outcome is unknown is
    never used again. A forked child starts with an empty pool: it never numbers a
    slot of its parent's."""

    __slots__ = ("free", "__weakref__")

    def __init__(self) -> None:
        self.free: list[list[Any]] = []
        forksafe.at_fork(self, "reset")

    def reset(self) -> None:
        """Forget every slot (in a forked child)."""
        self.free = []

    def take(self) -> _Slot:
        try:
            slot = self.free.pop()
        except IndexError:
            slot = [secrets.token_hex(8), 0]
        slot[1] += 1
        return _Slot(self, slot)


class _Slot:
    __slots__ = ("slots", "slot")

    def __init__(self, slots: WriterSlots, slot: list[Any]) -> None:
        self.slots = slots
        self.slot = slot

    def __enter__(self) -> Mark:
        return self.slot[0], self.slot[1]

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        if exc is None:
            self.slots.free.append(self.slot)
