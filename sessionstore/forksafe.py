"""Fork safety: objects that hold locks, threads or sockets reset them in a forked child.

``at_fork(obj, "method")`` calls ``obj.method()`` in the child right after every
``os.fork`` for as long as ``obj`` is alive (a weak reference: registering never keeps an
object alive). The reset runs before any other code of the child, so a lock that another
thread of the parent held at the fork is never inherited held.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

_registered: weakref.WeakSet[Any] = weakref.WeakSet()
_methods: dict[type, str] = {}
_guard = threading.Lock()


def at_fork(obj: Any, method: str) -> None:
    """Call ``obj.<method>()`` in every forked child while ``obj`` lives."""
    with _guard:
        _methods.setdefault(type(obj), method)
        _registered.add(obj)


def _after_fork_in_child() -> None:
    global _guard
    _guard = threading.Lock()
    for obj in list(_registered):
        method = _methods.get(type(obj))
        if method is not None:
            getattr(obj, method)()


os.register_at_fork(after_in_child=_after_fork_in_child)
