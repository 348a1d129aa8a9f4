"""Garbage collection deferred while a read builds a large batch of events.

Every event a read builds is an object CPython's collector tracks, and every few hundred
of them start a collection: a 100,000-event load used to run several collections of the
whole heap, more than half of its time (more still in a process with a large heap). The
parse of one batch is bounded work on bytes already read: no I/O, no user code, no lock
another thread waits for. So :class:`deferred_collection` stops automatic collection for
it and starts it again at its end, and the objects built are looked at once, by the next
collection, instead of by each collection the batch would have started.

Collection is deferred by setting the first generation's threshold to 0 (which stops
automatic collection, as ``gc.disable`` does) and putting it back at the end: whether the
collector is enabled stays the application's to say, so a ``gc.disable()`` made while a
batch defers collection stays in force after it, and a collector switched off before is
left alone. Only one batch at a time defers collection: a batch that starts while
another (in another thread) does runs as it would have anyway, and the thresholds are
back as soon as the first ends, so overlapping reads never keep collection off. In a
process forked while a batch deferred collection, the child gets the thresholds back.
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
#: The thresholds to put back (see ``gc.set_threshold``) while a batch defers collection.
_thresholds: tuple[int, ...] = ()


class deferred_collection:  # noqa: N801 - used as a context manager, like contextlib's
    """``with deferred_collection(size):`` builds a batch of ``size`` events with
    automatic collection stopped (see the module's docstring); a no-op below
    :data:`DEFER_FROM`."""

    __slots__ = ("_size", "_mine")

    def __init__(self, size: int) -> None:
        self._size = size
        self._mine = False

    def __enter__(self) -> None:
        global _deferring, _thresholds
        if self._size < DEFER_FROM:
            return
        with _lock:
            if _deferring or not gc.isenabled():
                return
            found = gc.get_threshold()
            if not found[0]:
                return  # automatic collection is off already
            _deferring, _thresholds, self._mine = True, found, True
            gc.set_threshold(0, *found[1:])

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._mine:
            self._mine = False
            with _lock:
                _resume()


def _resume() -> None:
    global _deferring
    _deferring = False
    gc.set_threshold(*_thresholds)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    if _deferring:
        _resume()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
