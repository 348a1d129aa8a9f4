"""Live-session leases held within one process (the memory backend's, and the default
of a backend without its own). A lease is (owner token, expiry on the monotonic clock);
one that has expired is free. No I/O.
"""

from __future__ import annotations

import threading
import time

from . import forksafe
from .errors import SessionBusyError


def taken_over(session_id: str) -> SessionBusyError:
    """What a fenced append raises: the writer's lease is held by another writer."""
    return SessionBusyError(session_id, "another writer took its lease over")


class ProcessLeases:
    """The leases of one backend object, guarded by one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        forksafe.renew_locks(self, "_lock")
        self._held: dict[str, tuple[str, float]] = {}

    def acquire(self, session_id: str, owner: str, ttl_ms: int) -> bool:
        """Take or renew the lease for ``owner``; False when another owner holds it."""
        with self._lock:
            now = time.monotonic()
            found = self._held.get(session_id)
            if found is not None and found[0] != owner and found[1] > now:
                return False
            self._held[session_id] = (owner, now + ttl_ms / 1000)
            return True

    def release(self, session_id: str, owner: str) -> None:
        with self._lock:
            found = self._held.get(session_id)
            if found is not None and found[0] == owner:
                del self._held[session_id]

    def busy(self, session_id: str, owner: str | None = None) -> bool:
        """Whether an owner other than ``owner`` holds a live lease on the session."""
        found = self._held.get(session_id)
        return found is not None and found[0] != owner and found[1] > time.monotonic()
