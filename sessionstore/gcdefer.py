"""Garbage collection deferred while a read builds a large batch of events.

Every event a read builds is an object CPython's collector tracks, and every few hundred
of them start a collection: a 100,000-event load used to run several collections of the
whole heap, more than half of its time (more still in a process with a large heap). The
parse of one batch is bounded work on bytes already read: no I/O, no user code, no lock
another thread waits for. So :class:`deferred_collection` switches the collector off for
it and on again at its end, and the objects built are looked at once, by the next
collection, instead of by each collection the batch would have started.

The collector is only ever switched off by one batch at a time: a batch that starts
while another (in another thread) defers collection runs as it would have anyway, and
the collector is on again as soon as the first ends, so overlapping reads never keep it
off. A collector the application switched off is left off. In a process forked while a
batch deferred collection, the collector is switched on again in the child.
"""

from __future__ import annotations

import gc
import os
import threading
from types import TracebackType

#: Batches of fewer events are built with the collector as it is: they start at most a
#: few young-generation collections, which cost less than the switch.
DEFER_FROM = 256

_lock = threading.Lock()
_deferring = False


class deferred_collection:  # noqa: N801 - used as a context manager, like contextlib's
    """``with deferred_collection(size):`` builds a batch of ``size`` events with the
    collector off (see the module's docstring); a no-op below :data:`DEFER_FROM`."""

    __slots__ = ("_size", "_mine")

    def __init__(self, size: int) -> None:
        self._size = size
        self._mine = False

    def __enter__(self) -> None:
        global _deferring
        if self._size < DEFER_FROM:
            return
        with _lock:
            if _deferring or not gc.isenabled():
                return
            _deferring = self._mine = True
            gc.disable()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        global _deferring
        if self._mine:
            with _lock:
                _deferring = self._mine = False
                gc.enable()


def _after_fork_in_child() -> None:
    global _lock, _deferring
    _lock = threading.Lock()
    if _deferring:
        _deferring = False
        gc.enable()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
