"""What a store keeps besides its backends, shared with its writers: whether it was
closed (:class:`Lifecycle`) and the event-log sessions it created that no append has
materialised yet (:class:`PendingSessions`). No I/O.
"""

from __future__ import annotations

import threading

from . import forksafe
from .errors import SessionExistsError, StoreClosedError
from .eventlog import check_header, check_session_id
from .models import SessionHeader


class PendingSessions:
    """Headers (and retentions) of sessions created by this store but not yet
    materialised by an append. A forked child gets a new lock; a header is stored last
    and removed first, so a child never sees one without its retention."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        forksafe.renew_locks(self, "_lock")
        self._headers: dict[str, SessionHeader] = {}
        self._ttls: dict[str, int] = {}

    def check_new(self, header: object) -> SessionHeader:
        checked = check_header(header)
        with self._lock:
            if checked.id in self._headers:
                raise SessionExistsError(checked.id)
        return checked

    def add(self, header: SessionHeader, ttl_ms: int | None = None) -> None:
        with self._lock:
            if header.id in self._headers:
                raise SessionExistsError(header.id)
            # The retention first: a header is pending (for ``lookup``) once it is stored.
            if ttl_ms is not None:
                self._ttls[header.id] = ttl_ms
            self._headers[header.id] = header

    def lookup(self, session_id: object) -> tuple[SessionHeader | None, int | None]:
        """The pending header of ``session_id`` and the retention it was created with
        (None, None when it is not pending)."""
        key = check_session_id(session_id)
        if key not in self._headers:  # the common case needs no lock: a dict read is atomic
            return None, None
        with self._lock:
            return self._headers.get(key), self._ttls.get(key)

    def materialised(self, header: SessionHeader) -> None:
        with self._lock:
            if self._headers.get(header.id) == header:
                del self._headers[header.id]
                self._ttls.pop(header.id, None)

    def discard(self, session_id: str) -> bool:
        with self._lock:
            found = self._headers.pop(session_id, None)
            self._ttls.pop(session_id, None)
            return found is not None


class Lifecycle:
    """The closed flag of a store."""

    def __init__(self) -> None:
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise StoreClosedError("the store was closed")
