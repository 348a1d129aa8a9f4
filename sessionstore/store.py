"""The synchronous API: :class:`Store`, :class:`Session` and :class:`EventLog`.

Each method is check, call the backend, decode; the decisions live in
:mod:`sessionstore.core` and :mod:`sessionstore.eventlog`, shared with :mod:`sessionstore.aio`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .connection import Backends
from .contracts import EventBackend, ValueBackend
from .core import (
    REPAIR_ATTEMPTS,
    UPDATE_ATTEMPTS,
    Lifecycle,
    LoadedSession,
    PendingSessions,
    SessionState,
    backoff,
    check_from_seq,
    check_max_versions,
    value_key,
)
from .errors import ConcurrentModificationError, SeqConflictError, SessionExistsError
from .eventlog import check_session_id, closers, decode_events, encode_batch
from .models import SessionEvent, SessionHeader
from .when import to_epoch_ms
from .writer import SessionWriter


class Session:
    """A handle on one session value: (symbol, strategy, exchange, frame, mode) in a namespace.

    Reads never see the future: ``get_data(when)`` returns None when the stored value was
    written for a time later than ``when``. Safe to share between threads.
    """

    def __init__(self, backend: ValueBackend, state: SessionState, lifecycle: Lifecycle) -> None:
        self._backend = backend
        self._state = state
        self._lifecycle = lifecycle

    def _ready(self) -> SessionState:
        self._state.check_alive()
        self._lifecycle.check_open()
        if not self._state.initialised:
            self._backend.prepare(self._state.key)
            self._state.initialised = True
        return self._state

    def wait_for_init(self, initial: bool = True) -> None:
        """Prepare the backend for this key. Idempotent and optional: first use does it too."""
        self._ready()

    def get_data(self, when: Any) -> Any:
        """The stored value, or None if there is none or it was written for a later time.

        With ``history=True``: the newest value written for a time at or before ``when``.
        """
        ms = to_epoch_ms(when)
        state = self._ready()
        if state.history:
            found = self._backend.read_as_of(state.key, ms)
        else:
            found = self._backend.read(state.key)
        return state.visible(found, ms)

    def set_data(self, value: Any, when: Any) -> None:
        """Store ``value`` for logical time ``when``, replacing whatever was stored.

        ``None`` clears. With ``history=True`` every version at or after ``when`` is
        discarded first. An unserialisable value raises ``NotSerializableError`` and
        leaves the stored record as it was.
        """
        ms = to_epoch_ms(when)
        state = self._ready()
        payload = state.encode(value)
        if state.history:
            self._backend.write_version(state.key, payload, ms, state.max_versions)
        else:
            self._backend.write(state.key, payload, ms)

    def update(self, fn: Callable[[Any], Any], when: Any) -> Any:
        """Atomically replace the value visible at ``when`` by ``fn(value)`` and return
        what was stored. ``fn`` may run more than once when other writers race."""
        ms = to_epoch_ms(when)
        state = self._ready()
        backend = self._backend
        for attempt in range(UPDATE_ATTEMPTS):
            time.sleep(backoff(attempt))
            found = backend.read_as_of(state.key, ms) if state.history else backend.read(state.key)
            payload = state.encode(fn(state.visible(found, ms)))
            if state.history:
                swapped = backend.swap_version(state.key, found, payload, ms, state.max_versions)
            else:
                swapped = backend.swap(state.key, found, payload, ms)
            if swapped:
                return state.stored_value(payload)
        raise ConcurrentModificationError(
            f"update of {state.key.label()} lost {UPDATE_ATTEMPTS} races in a row"
        )

    def dispose(self) -> None:
        """Release the handle; later use raises ``SessionDisposedError``. Data stays."""
        self._state.disposed = True


class EventLog:
    """Durable, append-only session event logs (see the package README for the contract)."""

    def __init__(self, backend: EventBackend, lifecycle: Lifecycle) -> None:
        self._backend = backend
        self._lifecycle = lifecycle
        self._pending = PendingSessions()

    def _open(self) -> EventBackend:
        self._lifecycle.check_open()
        return self._backend

    def locate(self, header: SessionHeader | str) -> str | None:
        """Absolute path of the session's own file, or None (SQLite, Redis, memory). No I/O."""
        session_id = header.id if isinstance(header, SessionHeader) else header
        return self._open().locate(check_session_id(session_id))

    def create(self, header: SessionHeader) -> None:
        """Register a new session. Nothing is written until its first append."""
        checked = self._pending.check_new(header)
        if self._open().exists(checked.id):
            raise SessionExistsError(checked.id)
        self._pending.add(checked)

    def append(self, session_id: str, events: Iterable[SessionEvent | Mapping[str, Any]]) -> int:
        """Durably append a contiguous batch starting at the stored next seq; return the
        new next seq. A batch identical to what is stored at those seqs is an applied
        replay and writes nothing; anything else raises ``SeqConflictError``."""
        backend = self._open()
        header = self._pending.get(session_id)
        batch = encode_batch(session_id, events)
        if not batch:
            return self._next_seq(session_id, header)
        next_seq = backend.append(session_id, batch, header)
        if header is not None:
            self._pending.materialised(header)
        return next_seq

    def _next_seq(self, session_id: str, header: SessionHeader | None) -> int:
        if header is not None:
            return 0
        _, events = self._backend.read(session_id, 0)
        return len(events)

    def load(self, session_id: str) -> LoadedSession:
        """The header and a balanced log: a torn tail is cut off, an interrupted final
        turn is closed by durably appended closers."""
        backend = self._open()
        check_session_id(session_id)
        for _ in range(REPAIR_ATTEMPTS):
            header, stored = backend.read(session_id, 0, repair=True)
            events = decode_events(stored)
            extra = closers(events)
            if not extra:
                return LoadedSession(header, events)
            try:
                backend.append(session_id, encode_batch(session_id, extra), None)
            except SeqConflictError:
                continue
            return LoadedSession(header, events + extra)
        raise ConcurrentModificationError(f"session {session_id!r} kept changing during load")

    def read_from(self, session_id: str, seq: int) -> list[SessionEvent]:
        """Committed events with seq >= ``seq``; no repair, no writes."""
        check_from_seq(seq)
        _, stored = self._open().read(check_session_id(session_id), seq)
        return decode_events(stored)

    def iter_events(self, session_id: str, batch: int = 1000) -> Iterator[SessionEvent]:
        """Stream the committed events ``batch`` at a time, without repair."""
        check_from_seq(batch - 1)
        backend = self._open()
        seq = 0
        while True:
            _, stored = backend.read(check_session_id(session_id), seq, limit=batch)
            yield from decode_events(stored)
            if len(stored) < batch:
                return
            seq = stored[-1].seq + 1

    def list(self) -> list[SessionHeader]:
        """Headers of the materialised sessions, by ``created_at`` then id; metadata only."""
        return sorted(self._open().list(), key=lambda h: (h.created_at, h.id))

    def delete(self, session_id: str) -> None:
        """Remove the session entirely; ``SessionNotFoundError`` if it does not exist."""
        backend = self._open()
        check_session_id(session_id)
        if self._pending.discard(session_id) and not backend.exists(session_id):
            return
        backend.delete(session_id)

    def writer(self, header: SessionHeader, *, window: float = 0.2) -> SessionWriter:
        """A write-behind writer for ``header``'s session (created here if new)."""
        return SessionWriter(self, header, window=window)


class Store:
    """A connection to one backend, scoped to one namespace.

    ``store.session(...)`` gives value sessions, ``store.events`` the event logs.
    Usable as a context manager; ``close()`` releases connections.
    """

    def __init__(self, backends: Backends, namespace: str) -> None:
        self._backends = backends
        self.namespace = namespace
        self._lifecycle = Lifecycle()
        self.events = EventLog(backends.events, self._lifecycle)

    @property
    def url(self) -> str:
        """The store's URL with any password masked."""
        return self._backends.display_url

    def session(
        self,
        symbol: str,
        strategy: str,
        exchange: str,
        frame: str,
        *,
        mode: str = "backtest",
        history: bool = False,
        max_versions: int | None = None,
    ) -> Session:
        """A handle on the value of (symbol, strategy, exchange, frame, mode). No I/O."""
        self._lifecycle.check_open()
        key = value_key(self.namespace, symbol, strategy, exchange, frame, mode)
        state = SessionState(key, bool(history), check_max_versions(history, max_versions))
        return Session(self._backends.values, state, self._lifecycle)

    def close(self) -> None:
        """Release connections; idempotent."""
        if not self._lifecycle.closed:
            self._lifecycle.closed = True
            self._backends.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r}, namespace={self.namespace!r})"
