"""The pure half of a value session handle (``store.session(...)``): its checked key,
mode and retention, the record it saw last and whether it was disposed. No I/O: the
sync and async handles keep one each and run the flows of
:mod:`sessionstore.value_flows` with it.
"""

from __future__ import annotations

from typing import Any

from .arguments import check_max_versions, check_ttl, value_key
from .codec import encode_value, load_value
from .contracts import Stored
from .errors import SessionDisposedError
from .keys import ValueKey


def session_state(
    namespace: str,
    parts: tuple[object, object, object, object],
    mode: object,
    history: object,
    max_versions: object,
    ttl: object,
) -> SessionState:
    """Check a ``store.session(...)`` call and build its handle's state. No I/O."""
    key = value_key(namespace, *parts, mode)
    return SessionState(
        key, bool(history), check_max_versions(bool(history), max_versions), check_ttl(ttl)
    )


#: A handle that has not seen its record (or no longer knows it).
_UNKNOWN = object()


class SessionState:
    """The pure half of a session handle: its key, mode, retention and the disposed flag."""

    def __init__(
        self, key: ValueKey, history: bool, max_versions: int | None, ttl_ms: int | None = None
    ) -> None:
        self.key = key
        #: The key as messages name it (built once: every read and write passes it on).
        self.label = key.label()
        self.history = history
        self.max_versions = max_versions
        #: Every write through the handle makes the value expire this long after it.
        self.ttl_ms = ttl_ms
        self.initialised = False
        self.disposed = False
        self._last: Stored | None | object = _UNKNOWN

    def __reduce__(self) -> tuple[Any, ...]:
        """What travels: the key, mode, retention and disposed flag; the remembered
        record stays behind (the receiver reads afresh)."""
        return (_arrived, (self.key, self.history, self.max_versions, self.ttl_ms, self.disposed))

    def remember(self, found: Stored | None) -> None:
        """Note the record a plain handle just read or wrote: where its next ``update``
        starts (a guess, checked by the swap). History handles remember nothing."""
        if not self.history:
            self._last = found

    def forget(self) -> None:
        """Drop the remembered record (before a write whose outcome may stay unknown)."""
        self._last = _UNKNOWN

    def recall(self) -> tuple[Stored | None] | None:
        """``(record,)`` of the record remembered, or None when none is: one read of it,
        so a write from another thread sharing the handle cannot come in between."""
        last = self._last
        return None if last is _UNKNOWN else (last,)  # type: ignore[return-value]

    def check_alive(self) -> None:
        if self.disposed:
            raise SessionDisposedError(f"session {self.label} was disposed")

    def encode(self, value: Any) -> bytes | None:
        return None if value is None else encode_value(value, self.label)

    def visible(self, stored: Stored | None, when: int) -> Any:
        """Look-ahead protection: a record written for a later time reads as None."""
        if stored is None or stored.payload is None or stored.when > when:
            return None
        return load_value(stored.payload, self.label)

    def stored_value(self, payload: bytes | None) -> Any:
        return None if payload is None else load_value(payload, self.label)


def _arrived(
    key: ValueKey, history: bool, max_versions: int | None, ttl_ms: int | None, disposed: bool
) -> SessionState:
    """A :class:`SessionState` unpickled in another process (see its ``__reduce__``)."""
    state = SessionState(key, history, max_versions, ttl_ms)
    state.disposed = disposed
    return state
