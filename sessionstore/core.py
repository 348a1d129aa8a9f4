"""Decisions shared by the sync and async facades: argument checks, look-ahead,
encoding, and the bookkeeping of lazily created event-log sessions. No I/O here.
"""

from __future__ import annotations

import math
import threading
from typing import Any, NamedTuple

from . import forksafe
from .codec import decode_value, encode_value
from .contracts import Stored
from .errors import (
    InvalidArgumentError,
    SessionDisposedError,
    SessionExistsError,
    StoreClosedError,
)
from .eventlog import check_header, check_session_id
from .jsondata import short_repr
from .keys import ValueKey
from .models import SessionEvent, SessionHeader

MODES = ("backtest", "live")
#: How often ``update`` re-reads after losing a race before giving up.
UPDATE_ATTEMPTS = 1000
#: How often ``load`` re-reads when a concurrent append overtook its repair.
REPAIR_ATTEMPTS = 50
#: The longest retention accepted, in ms (about 285,000 years): an expiry time stays
#: exact as a double and far inside every backend's 64-bit range.
MAX_TTL_MS = 2**53 - 1


class ValueRef(NamedTuple):
    """One stored session value, as ``Store.list_values`` reports it."""

    symbol: str
    strategy: str
    exchange: str
    frame: str
    mode: str
    history: bool


def value_refs(found: list[tuple[ValueKey, bool]]) -> list[ValueRef]:
    return sorted(ValueRef(*key.parts, history) for key, history in found)


class LoadedSession(NamedTuple):
    """What ``load`` returns: the header and the balanced list of events."""

    header: SessionHeader
    events: list[SessionEvent]


def check_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{name} {value!r:.80} is not valid Unicode") from exc
    return value


def check_namespace(namespace: object) -> str:
    check_text("namespace", namespace)
    if not namespace:
        raise InvalidArgumentError("namespace must not be empty")
    return namespace  # type: ignore[return-value]


def value_key(
    namespace: str, symbol: object, strategy: object, exchange: object, frame: object, mode: object
) -> ValueKey:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, not {short_repr(mode)}")
    return ValueKey(
        namespace,
        check_text("symbol", symbol),
        check_text("strategy", strategy),
        check_text("exchange", exchange),
        check_text("frame", frame),
        mode,  # type: ignore[arg-type]
    )


def check_max_versions(history: bool, max_versions: object) -> int | None:
    if max_versions is None:
        return None
    if not history:
        raise InvalidArgumentError("max_versions only applies to history=True sessions")
    if not isinstance(max_versions, int) or isinstance(max_versions, bool) or max_versions < 1:
        raise InvalidArgumentError(f"max_versions must be a positive int, not {max_versions!r}")
    return max_versions


def check_ttl(ttl: object) -> int | None:
    """A retention of ``ttl`` seconds (an int or a float > 0) in milliseconds, rounded
    up to a whole one (at least 1); None stays None (no expiry). Anything else raises
    :class:`InvalidArgumentError`."""
    if ttl is None:
        return None
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or ttl <= 0
    ):
        raise InvalidArgumentError(
            f"ttl must be a positive number of seconds or None, not {short_repr(ttl)}"
        )
    if ttl > MAX_TTL_MS / 1000:
        raise InvalidArgumentError(f"ttl {short_repr(ttl)} is too long (at most {MAX_TTL_MS} ms)")
    # Rounded to the microsecond first, so that 0.3 s is 300 ms, not 301.
    return max(1, math.ceil(round(ttl * 1000, 3)))


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

    def remembers(self) -> bool:
        return self._last is not _UNKNOWN

    def remembered(self) -> Stored | None:
        assert self._last is not _UNKNOWN
        return self._last  # type: ignore[return-value]

    def check_alive(self) -> None:
        if self.disposed:
            raise SessionDisposedError(f"session {self.key.label()} was disposed")

    def encode(self, value: Any) -> bytes | None:
        return None if value is None else encode_value(value, self.key.label())

    def visible(self, stored: Stored | None, when: int) -> Any:
        """Look-ahead protection: a record written for a later time reads as None."""
        if stored is None or stored.payload is None or stored.when > when:
            return None
        return decode_value(stored.payload)

    @staticmethod
    def stored_value(payload: bytes | None) -> Any:
        return None if payload is None else decode_value(payload)


def _arrived(
    key: ValueKey, history: bool, max_versions: int | None, ttl_ms: int | None, disposed: bool
) -> SessionState:
    """A :class:`SessionState` unpickled in another process (see its ``__reduce__``)."""
    state = SessionState(key, history, max_versions, ttl_ms)
    state.disposed = disposed
    return state


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


def check_from_seq(seq: object) -> int:
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise InvalidArgumentError(f"seq must be an int >= 0, not {short_repr(seq)}")
    return seq


def check_poll(poll: object) -> float:
    if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll < 3600:
        raise InvalidArgumentError(f"poll must be seconds in (0, 3600), not {short_repr(poll)}")
    return float(poll)
