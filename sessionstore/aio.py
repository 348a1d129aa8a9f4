"""The asyncio API: the same names and arguments as the sync API, every I/O method a coroutine.

    store = sessionstore.aio.connect("redis://localhost:6379/0", namespace="run-42")
    async with store:
        s = store.session("BTCUSDT", strategy="llm-momentum", exchange="binance", frame="1h")
        await s.set_data({"lastLlmSignal": "buy"}, when)
        await s.get_data(when)

``connect`` is a plain call and does no I/O. Each method runs the same flow of
:mod:`sessionstore.flows` as the sync API, against ``redis.asyncio`` for Redis; the local
backends (memory, files, SQLite) run their blocking calls in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping
from typing import Any

from . import flows
from .connection import AsyncBackends, Backends, open_backends, resolve_url
from .core import (
    Lifecycle,
    LoadedSession,
    PendingSessions,
    SessionState,
    ValueRef,
    check_from_seq,
    check_namespace,
    check_poll,
    check_ttl,
    session_state,
    value_refs,
)
from .errors import SessionNotFoundError, StoreClosedError
from .eventlog import check_session_id
from .flows import arun
from .models import SessionEvent, SessionHeader
from .writer import WriterBuffer

DEFAULT_NAMESPACE = "default"


def connect(
    url: str | os.PathLike[str] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    *,
    timeout: float | None = None,
    durability: str | None = None,
    ttl: float | None = None,
) -> AsyncStore:
    """Like :func:`sessionstore.connect`, for asyncio. No I/O until first use."""
    resolved = resolve_url(url)
    ttl_ms = check_ttl(ttl)
    options: dict[str, Any] = {"timeout": timeout, "durability": durability}
    backends = open_backends(resolved, check_namespace(namespace), options)
    return AsyncStore(backends, namespace, ttl_ms)


class _Offload:
    """Async view of a blocking backend: each method runs in a worker thread."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self._target, name)

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return call


def _async_backends(backends: Backends) -> AsyncBackends:
    if backends.make_async is not None:
        return backends.make_async()

    async def aclose() -> None:
        await asyncio.to_thread(backends.close)

    return AsyncBackends(_Offload(backends.values), _Offload(backends.events), aclose)


class _Done:
    """An already-finished awaitable, so ``dispose()`` works with or without ``await``."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


class AsyncSession:
    """Async twin of :class:`sessionstore.Session`."""

    def __init__(self, backend: Any, state: SessionState, lifecycle: Lifecycle) -> None:
        self._backend = backend
        self._state = state
        self._lifecycle = lifecycle

    async def wait_for_init(self, initial: bool = True) -> None:
        """Prepare the backend for this key. Idempotent and optional."""
        await arun(flows.ready(self._state, self._lifecycle), self._backend)

    async def get_data(self, when: Any) -> Any:
        """The stored value, or None if there is none or it was written for a later time."""
        return await arun(flows.get_data(self._state, self._lifecycle, when), self._backend)

    async def set_data(self, value: Any, when: Any) -> None:
        """Store ``value`` for logical time ``when``; ``None`` clears."""
        await arun(flows.set_data(self._state, self._lifecycle, value, when), self._backend)

    async def update(self, fn: Callable[[Any], Any], when: Any) -> Any:
        """Atomically replace the value visible at ``when`` by ``fn(value)`` (which may be
        a coroutine function) and return what was stored; ``fn`` may run more than once,
        as for :meth:`sessionstore.Session.update`."""
        return await arun(flows.update(self._state, self._lifecycle, fn, when), self._backend)

    async def delete(self) -> bool:
        """Remove every stored record of this key, plain and history alike; True if there
        was one that had not expired. The handle stays usable."""
        return await arun(flows.delete_value(self._state, self._lifecycle), self._backend)

    def dispose(self) -> _Done:
        """Release the handle (at once; awaiting the result is optional). Data stays."""
        self._state.disposed = True
        return _Done()


class AsyncEventLog:
    """Async twin of :class:`sessionstore.EventLog` (retention works the same way)."""

    def __init__(self, backend: Any, lifecycle: Lifecycle, ttl_ms: int | None = None) -> None:
        self._backend = backend
        self._lifecycle = lifecycle
        self._pending = PendingSessions()
        self._ttl_ms = ttl_ms

    async def locate(self, header: SessionHeader | str) -> str | None:
        """Absolute path of the session's own file, or None."""
        self._lifecycle.check_open()
        session_id = header.id if isinstance(header, SessionHeader) else header
        located: str | None = await self._backend.locate(check_session_id(session_id))
        return located

    async def create(self, header: SessionHeader, *, ttl: float | None = None) -> None:
        """Register a new session (see :meth:`sessionstore.EventLog.create`)."""
        ttl_ms = self._ttl_ms if ttl is None else check_ttl(ttl)
        flow = flows.create(self._pending, self._lifecycle, header, ttl_ms)
        await arun(flow, self._backend)

    async def append(
        self, session_id: str, events: Iterable[SessionEvent | Mapping[str, Any]]
    ) -> int:
        """Durably append a contiguous batch; see :meth:`sessionstore.EventLog.append`."""
        flow = flows.append(self._pending, self._lifecycle, session_id, events)
        return await arun(flow, self._backend)

    async def load(self, session_id: str) -> LoadedSession:
        """The header and a balanced log (torn tail cut, interrupted turn closed)."""
        return await arun(flows.load(self._lifecycle, session_id), self._backend)

    async def read_from(self, session_id: str, seq: int) -> list[SessionEvent]:
        """Committed events with seq >= ``seq``; no repair, no writes."""
        return await arun(flows.read_from(self._lifecycle, session_id, seq), self._backend)

    async def iter_events(self, session_id: str, batch: int = 1000) -> AsyncIterator[SessionEvent]:
        """Stream the committed events ``batch`` at a time, without repair."""
        check_from_seq(batch - 1)
        seq = 0
        while True:
            flow = flows.read_from(self._lifecycle, session_id, seq, batch)
            chunk = await arun(flow, self._backend)
            for event in chunk:
                yield event
            if len(chunk) < batch:
                return
            seq = chunk[-1].seq + 1

    async def follow(
        self, session_id: str, from_seq: int = 0, *, poll: float = 0.5
    ) -> AsyncIterator[SessionEvent]:
        """Async twin of :meth:`sessionstore.EventLog.follow`."""
        seq, wait = check_from_seq(from_seq), check_poll(poll)
        while True:
            chunk = await arun(flows.read_from(self._lifecycle, session_id, seq), self._backend)
            for event in chunk:
                yield event
            if chunk:
                seq = chunk[-1].seq + 1
            else:
                await self._backend.wait_for_events(session_id, seq, wait)

    async def list(self) -> list[SessionHeader]:
        """Headers of the materialised sessions, by ``created_at`` then id."""
        return await arun(flows.list_sessions(self._lifecycle), self._backend)

    async def delete(self, session_id: str) -> None:
        """Remove the session entirely; ``SessionNotFoundError`` if it does not exist."""
        flow = flows.delete_session(self._pending, self._lifecycle, session_id)
        await arun(flow, self._backend)

    async def prune(self) -> int:
        """Remove the expired sessions of the namespace, each whole; how many (0 on Redis)."""
        return await arun(flows.prune(self._lifecycle), self._backend)

    async def writer(
        self, header: SessionHeader, *, window: float = 0.2, ttl: float | None = None
    ) -> AsyncSessionWriter:
        """A write-behind writer for ``header``'s session (created here, with ``ttl``,
        if new)."""
        check_ttl(ttl)
        try:
            start = flows.next_position(await self.load(header.id))
        except SessionNotFoundError:
            await self.create(header, ttl=ttl)
            start = (0, 0)
        return AsyncSessionWriter(self, WriterBuffer(header.id, *start), window)


class AsyncSessionWriter:
    """Async twin of :class:`sessionstore.SessionWriter`; ``emit`` does no I/O."""

    def __init__(self, log: AsyncEventLog, buffer: WriterBuffer, window: float) -> None:
        self._log = log
        self._buffer = buffer
        self._window = window
        self._drain_lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None

    @property
    def session_id(self) -> str:
        return self._buffer.session_id

    @property
    def next_seq(self) -> int:
        return self._buffer.next_seq

    def emit(self, type: str, data: dict[str, Any] | None = None) -> SessionEvent:
        """Queue one event (seq and time assigned here) and return it."""
        if self._buffer.closed:
            raise StoreClosedError(f"writer of session {self.session_id!r} is closed")
        event = self._buffer.make(type, data)
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._drain_later())
        return event

    async def flush(self) -> None:
        """Return once every event emitted before this call is durable."""
        error = self._buffer.take_error()
        if error is not None:
            raise error
        await self._drain()

    async def close(self) -> None:
        """Flush and stop."""
        self._buffer.closed = True
        if self._timer is not None:
            self._timer.cancel()
        await self.flush()

    async def __aenter__(self) -> AsyncSessionWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _drain(self) -> None:
        async with self._drain_lock:
            batch = list(self._buffer.pending)
            if not batch:
                return
            await self._log.append(self.session_id, batch)
            del self._buffer.pending[: len(batch)]

    async def _drain_later(self) -> None:
        await asyncio.sleep(self._window)
        if self._buffer.error is not None:
            return
        try:
            await self._drain()
        except Exception as exc:  # noqa: BLE001 - surfaced by the next flush
            self._buffer.error = exc


class AsyncStore:
    """Async twin of :class:`sessionstore.Store`."""

    def __init__(self, backends: Backends, namespace: str, ttl_ms: int | None = None) -> None:
        self._backends = backends
        self._async = _async_backends(backends)
        self.namespace = namespace
        self._lifecycle = Lifecycle()
        self.events = AsyncEventLog(self._async.events, self._lifecycle, ttl_ms)

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
        ttl: float | None = None,
    ) -> AsyncSession:
        """A handle on the value of (symbol, strategy, exchange, frame, mode), whose
        writes expire after ``ttl`` seconds when given. No I/O."""
        self._lifecycle.check_open()
        parts = (symbol, strategy, exchange, frame)
        state = session_state(self.namespace, parts, mode, history, max_versions, ttl)
        return AsyncSession(self._async.values, state, self._lifecycle)

    async def list_values(self) -> list[ValueRef]:
        """Every stored session value of this namespace (plain and history) that has not
        expired, sorted."""
        self._lifecycle.check_open()
        return value_refs(await self._async.values.scan(self.namespace))

    async def close(self) -> None:
        """Release connections; idempotent."""
        if not self._lifecycle.closed:
            self._lifecycle.closed = True
            await self._async.aclose()
            if self._backends.make_async is not None:
                await asyncio.to_thread(self._backends.close)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncStore({self.url!r}, namespace={self.namespace!r})"
