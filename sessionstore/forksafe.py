"""Fork safety: objects that hold locks, threads or sockets reset them in a forked child.

A lock that another thread of the parent held at ``os.fork`` stays held forever in the
child (that thread does not exist there), and a background thread does not exist there
at all. Three registrations deal with that, each for as long as the object lives (a weak
reference: registering never keeps an object alive):

- ``renew_locks(obj, "_lock")``: in the child ``obj._lock`` is a new, free
  ``threading.Lock``. The data such a lock guards must never be torn by a fork in the
  middle of an operation: each change is published by one store (a dict item, an
  attribute), so the child sees it made or not made.
- ``at_fork(obj, "method")``: ``obj.method()`` runs in the child right after the fork,
  after the locks were renewed and before any other code of the child; it resets what
  else the object holds (events, a background thread's bookkeeping).
- ``before_fork(obj, "method")``: ``obj.method()`` runs in the parent right before the
  fork, so the child does not inherit what it lets go of (an idle connection), or
  what it waits for (a transaction another thread is in).
- ``after_fork_in_parent(obj, "method")``: ``obj.method()`` runs in the parent right
  after the fork (to let go of what its ``before_fork`` method took).

Objects are handled in the order they registered. A call that raises does not stop
the others; the first error is raised at the end (Python reports it and the fork and
the child go on). The registry itself is locked across the fork, so a registration running in
another thread is never half made in the child.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any


class _Entry:
    __slots__ = ("locks", "methods", "before", "after")

    def __init__(self) -> None:
        self.locks: list[str] = []
        self.methods: list[str] = []
        self.before: list[str] = []
        self.after: list[str] = []


_entries: weakref.WeakKeyDictionary[Any, _Entry] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def at_fork(obj: Any, method: str) -> None:
    """Call ``obj.<method>()`` in every forked child while ``obj`` lives."""
    with _guard:
        _entry(obj).methods.append(method)


def before_fork(obj: Any, method: str) -> None:
    """Call ``obj.<method>()`` in the parent right before every fork while ``obj`` lives."""
    with _guard:
        _entry(obj).before.append(method)


def after_fork_in_parent(obj: Any, method: str) -> None:
    """Call ``obj.<method>()`` in the parent right after every fork while ``obj`` lives."""
    with _guard:
        _entry(obj).after.append(method)


def renew_locks(obj: Any, *locks: str) -> None:
    """Give the ``threading.Lock`` attributes ``locks`` of ``obj`` new, free locks in
    every forked child while ``obj`` lives."""
    with _guard:
        _entry(obj).locks.extend(locks)


def _entry(obj: Any) -> _Entry:
    found = _entries.get(obj)
    if found is None:
        found = _entries[obj] = _Entry()
    return found


def _call(calls: list[tuple[Any, str]]) -> BaseException | None:
    """Call ``obj.<method>()`` for each of ``calls``; the first error, if any."""
    first: BaseException | None = None
    for obj, method in calls:
        try:
            getattr(obj, method)()
        except Exception as exc:  # noqa: BLE001 - every object gets its call
            first = first or exc
    return first


def _before_fork() -> None:
    with _guard:
        calls = [(obj, name) for obj, entry in list(_entries.items()) for name in entry.before]
    # Called without the guard held: a call may take locks of its own object.
    first = _call(calls)
    _guard.acquire()
    if first is not None:
        raise first


def _after_fork_in_parent() -> None:
    calls = [(obj, name) for obj, entry in list(_entries.items()) for name in entry.after]
    _guard.release()
    first = _call(calls)
    if first is not None:
        raise first


def _after_fork_in_child() -> None:
    global _guard
    _guard = threading.Lock()
    first: BaseException | None = None
    for obj, entry in list(_entries.items()):
        for name in entry.locks:
            setattr(obj, name, threading.Lock())
        failed = _call([(obj, method) for method in entry.methods])
        first = first or failed
    if first is not None:
        raise first


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
