"""Decisions shared by the sync and async facades: argument checks, look-ahead,
encoding, and the bookkeeping of lazily created event-log sessions. No I/O here.
"""

from __future__ import annotations

import random
import threading
from typing import Any, NamedTuple

from .codec import decode_value, encode_value
from .contracts import Stored
from .errors import (
    InvalidArgumentError,
    SessionDisposedError,
    SessionExistsError,
    StoreClosedError,
)
from .eventlog import check_header, check_session_id
from .keys import ValueKey
from .models import SessionEvent, SessionHeader

MODES = ("backtest", "live")
#: How often ``update`` re-reads after losing a race before giving up.
UPDATE_ATTEMPTS = 1000
#: How often ``load`` re-reads when a concurrent append overtook its repair.
REPAIR_ATTEMPTS = 50


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
        raise InvalidArgumentError(f"mode must be one of {MODES}, not {mode!r:.40}")
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


class SessionState:
    """The pure half of a session handle: its key, mode and the disposed flag."""

    def __init__(self, key: ValueKey, history: bool, max_versions: int | None) -> None:
        self.key = key
        self.history = history
        self.max_versions = max_versions
        self.initialised = False
        self.disposed = False

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


def backoff(attempt: int) -> float:
    """Seconds to wait after losing ``attempt`` races in a row (jittered, capped)."""
    return random.uniform(0, min(0.0005 * 2**attempt, 0.02))


class PendingSessions:
    """Headers of sessions created by this store but not yet materialised by an append."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._headers: dict[str, SessionHeader] = {}

    def check_new(self, header: object) -> SessionHeader:
        checked = check_header(header)
        with self._lock:
            if checked.id in self._headers:
                raise SessionExistsError(checked.id)
        return checked

    def add(self, header: SessionHeader) -> None:
        with self._lock:
            if header.id in self._headers:
                raise SessionExistsError(header.id)
            self._headers[header.id] = header

    def get(self, session_id: object) -> SessionHeader | None:
        with self._lock:
            return self._headers.get(check_session_id(session_id))

    def materialised(self, header: SessionHeader) -> None:
        with self._lock:
            if self._headers.get(header.id) == header:
                del self._headers[header.id]

    def discard(self, session_id: str) -> bool:
        with self._lock:
            return self._headers.pop(session_id, None) is not None


class Lifecycle:
    """The closed flag of a store."""

    def __init__(self) -> None:
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise StoreClosedError("the store was closed")


def check_from_seq(seq: object) -> int:
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise InvalidArgumentError(f"seq must be an int >= 0, not {seq!r:.40}")
    return seq
