"""The asyncio API: the same names and arguments as the sync API, every I/O method a coroutine.

    store = sessionstore.aio.connect("redis://localhost:6379/0", namespace="run-42")
    async with store:
        s = store.session("BTCUSDT", strategy="llm-momentum", exchange="binance", frame="1h")
        await s.set_data({"lastLlmSignal": "buy"}, when)
        await s.get_data(when)

``connect`` is a plain call and does no I/O. Each method runs the same flow of
:mod:`sessionstore.flows` as the sync API, against ``redis.asyncio`` for Redis; the local
backends (memory, files, SQLite) run their blocking calls in a worker thread.

A store may be used from any thread and any event loop: from several threads each
running its own loop, and from one loop after another (``asyncio.run`` twice). On Redis
it keeps a ``redis.asyncio`` client per running loop, and closes the connections of a
closed loop when the store is first used on a new loop, or closed (see
:mod:`sessionstore.redis.client`). A write-behind writer stays on the loop that opened
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping
from typing import Any, Generic, TypeVar

from . import flows
from .arguments import check_ttl
from .connection import ConnectArgs, open_store, travel_args
from .contracts import (
    AsyncBackends,
    AsyncEventBackend,
    AsyncValueBackend,
    Backends,
    EventBackend,
    ValueBackend,
)
from .defaults import DEFAULT_LEASE, DEFAULT_NAMESPACE, compute_times
from .drain import AsyncDrain
from .errors import SessionStoreError
from .eventlog import (
    check_header,
    check_lease,
    check_session_id,
    check_window,
)
from .flows import arun
from .models import SessionEvent, SessionHeader, SessionInfo
from .results import LoadedSession, ValueRecords, ValueRef, value_refs
from .session_state import SessionState, session_state
from .store_state import Lifecycle, PendingSessions
from .writer import WriterBuffer, WriterContext, open_buffer


def connect(
    url: str | os.PathLike[str] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    *,
    timeout: float | None = None,
    durability: str | None = None,
    ttl: float | None = None,
    cache: bool | None = None,
) -> AsyncStore:
    """Like :func:`sessionstore.connect`, for asyncio. No I/O until first use."""
    opened = open_store(url, namespace, timeout, durability, ttl, cache)
    return AsyncStore(opened.backends, namespace, opened.ttl_ms, args=opened.args)


_B = TypeVar("_B", bound=ValueBackend | EventBackend)


class _Offload(Generic[_B]):
    """Async view of a blocking backend: each method runs in a worker thread, with the
    backend's names and arguments. Through ``__getattr__`` (``Any`` to the type checker)
    it is an :class:`AsyncValueBackend` or an :class:`AsyncEventBackend`."""

    def __init__(self, target: _B) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)
        if not callable(method):  # a plain attribute (``renews_leases``)
            return method

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


class AsyncSession:
    """Async twin of :class:`sessionstore.Session` (it pickles the same way)."""

    def __init__(
        self,
        backend: AsyncValueBackend,
        state: SessionState,
        lifecycle: Lifecycle,
        owner: AsyncStore | None = None,
    ) -> None:
        self._backend = backend
        self._state = state
        self._lifecycle = lifecycle
        self._owner = owner

    def __reduce__(self) -> tuple[Any, ...]:
        if self._owner is None:
            raise SessionStoreError("this session handle has no store to travel with")
        return (_session_of, (self._owner, self._state))

    async def wait_for_init(self, initial: bool = True) -> None:
        """Prepare the backend for this key. Idempotent and optional; ``initial`` changes
        nothing (see :meth:`sessionstore.Session.wait_for_init`)."""
        await arun(flows.ready(self._state, self._lifecycle), self._backend)

    async def get_data(self, when: Any) -> Any:
        """The stored value, or None if there is none or it was written for a later time."""
        return await arun(flows.get_data(self._state, self._lifecycle, when), self._backend)

    async def set_data(self, value: Any, when: Any) -> None:
        """Store ``value`` for logical time ``when``; ``None`` clears."""
        await arun(flows.set_data(self._state, self._lifecycle, value, when), self._backend)

    async def put(self, value: Any, when: Any) -> None:
        """History: store ``value`` as the version at exactly ``when``, discarding nothing
        else; see :meth:`sessionstore.Session.put`."""
        await arun(flows.put(self._state, self._lifecycle, value, when), self._backend)

    async def get_or_compute(
        self,
        when: Any,
        fn: Callable[[], Any],
        *,
        timeout: float | None = None,
        lease: float = flows.COMPUTE_LEASE,
    ) -> Any:
        """History: the version at exactly ``when``, computed once among every caller of
        the store when there is none; ``fn`` may be a coroutine function (its result is
        awaited). See :meth:`sessionstore.Session.get_or_compute`."""
        wait, held = compute_times(self._owner and self._owner._args, timeout, lease)
        flow = flows.get_or_compute(self._state, self._lifecycle, when, fn, wait, held)
        return await arun(flow, self._backend)

    async def update(self, fn: Callable[[Any], Any], when: Any) -> Any:
        """Atomically replace the value visible at ``when`` by ``fn(value)`` (which may be
        a coroutine function) and return what was stored; ``fn`` may run more than once,
        as for :meth:`sessionstore.Session.update`."""
        return await arun(flows.update(self._state, self._lifecycle, fn, when), self._backend)

    async def set_ttl(self, ttl: float | None) -> bool:
        """Set or remove this value's retention; see :meth:`sessionstore.Session.set_ttl`."""
        flow = flows.set_value_retention(self._state, self._lifecycle, ttl)
        return await arun(flow, self._backend)

    async def delete(self) -> bool:
        """Remove every stored record of this key, plain and history alike; True if there
        was one that had not expired. The handle stays usable."""
        return await arun(flows.delete_value(self._state, self._lifecycle), self._backend)

    async def records(self) -> ValueRecords:
        """What is stored under this handle's key, plain and history alike, with the
        logical times; see :meth:`sessionstore.Session.records`."""
        return await arun(flows.value_records(self._state, self._lifecycle), self._backend)

    def dispose(self) -> None:
        """Release the handle; later use raises ``SessionDisposedError``. Data stays. A
        plain call (no I/O), as on :class:`sessionstore.Session`: not awaited."""
        self._state.disposed = True


class AsyncEventLog:
    """Async twin of :class:`sessionstore.EventLog` (retention and pickling work the
    same way)."""

    def __init__(
        self,
        backend: AsyncEventBackend,
        lifecycle: Lifecycle,
        ttl_ms: int | None = None,
        owner: AsyncStore | None = None,
    ) -> None:
        self._backend = backend
        self._lifecycle = lifecycle
        self._pending = PendingSessions()
        self._ttl_ms = ttl_ms
        self._drain = AsyncDrain()
        self._owner = owner

    def __reduce__(self) -> tuple[Any, ...]:
        if self._owner is None:
            raise SessionStoreError("this event log has no store to travel with")
        return (getattr, (self._owner, "events"))

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

    async def inspect(self, session_id: str) -> LoadedSession:
        """What :meth:`load` would return, without writing or looking at the lease."""
        return await arun(flows.inspect_session(self._lifecycle, session_id), self._backend)

    async def info(self, session_id: str) -> SessionInfo:
        """The session's metadata (see :meth:`sessionstore.EventLog.info`)."""
        return await arun(flows.info(self._lifecycle, session_id), self._backend)

    async def list_info(self) -> list[SessionInfo]:
        """:meth:`info` of every session :meth:`list` lists, in the same order."""
        return await arun(flows.list_info(self._lifecycle), self._backend)

    async def stored_bytes(self, session_id: str) -> int:
        """See :meth:`sessionstore.EventLog.stored_bytes`."""
        return await arun(flows.stored_bytes(self._lifecycle, session_id), self._backend)

    async def set_ttl(self, session_id: str, ttl: float | None) -> int | None:
        """Set or remove a stored session's retention; see
        :meth:`sessionstore.EventLog.set_ttl`."""
        return await arun(flows.set_retention(self._lifecycle, session_id, ttl), self._backend)

    async def fork(
        self, parent_id: str, child_id: str, *, at_seq: int | None = None
    ) -> SessionHeader:
        """Create ``child_id`` from the parent's first events; see
        :meth:`sessionstore.EventLog.fork`."""
        flow = flows.fork(self._pending, self._lifecycle, parent_id, child_id, at_seq, self._ttl_ms)
        return await arun(flow, self._backend)

    async def read_from(self, session_id: str, seq: int) -> list[SessionEvent]:
        """Committed events with seq >= ``seq``; no repair, no writes."""
        return await arun(flows.read_from(self._lifecycle, session_id, seq), self._backend)

    async def iter_events(self, session_id: str, batch: int = 1000) -> AsyncIterator[SessionEvent]:
        """Stream the committed events ``batch`` at a time, without repair (a bad
        ``batch`` raises ``InvalidArgumentError`` at the first step)."""
        async for event in self._stream(flows.EventPages.paged(self._lifecycle, session_id, batch)):
            yield event

    async def follow(
        self, session_id: str, from_seq: int = 0, *, poll: float = 0.5
    ) -> AsyncIterator[SessionEvent]:
        """Async twin of :meth:`sessionstore.EventLog.follow`."""
        pages = flows.EventPages.following(self._lifecycle, session_id, from_seq, poll)
        async for event in self._stream(pages):
            yield event

    async def _stream(self, pages: flows.EventPages) -> AsyncIterator[SessionEvent]:
        while not pages.done:
            for event in await arun(pages.next(), self._backend):
                yield event

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

    def writer(
        self,
        header: SessionHeader,
        *,
        window: float = 0.2,
        ttl: float | None = None,
        lease: float = DEFAULT_LEASE,
    ) -> OpeningWriter:
        """A write-behind writer holding the session's lease; see
        :meth:`sessionstore.EventLog.writer`.

        A plain call, as :func:`connect` is: its arguments are checked at once, and its
        I/O (the lease, the stored next seq) runs when the result is awaited
        (``w = await log.writer(h)``) or entered (``async with log.writer(h) as w:``,
        which closes the writer on exit).
        """
        self._lifecycle.check_open()
        check_header(header)
        check_window(window)
        ttl_ms = self._ttl_ms if ttl is None else check_ttl(ttl)
        lease_ms = check_lease(lease)
        return OpeningWriter(lambda: self._open_writer(header, window, ttl_ms, lease_ms))

    async def _open_writer(
        self, header: SessionHeader, window: float, ttl_ms: int | None, lease_ms: int
    ) -> AsyncSessionWriter:
        context = WriterContext(self._backend, self._pending, self._lifecycle, self._drain)
        renews = bool(self._backend.renews_leases)
        flow = open_buffer(context, header, window, ttl_ms, lease_ms, renews)
        return AsyncSessionWriter(context, await arun(flow, self._backend))


class OpeningWriter:
    """What :meth:`AsyncEventLog.writer` returns: awaiting it opens the writer (and
    returns it); ``async with`` opens it and closes it on exit. Nothing is done until
    then."""

    __slots__ = ("_open", "_writer")

    def __init__(self, open_writer: Callable[[], Awaitable[AsyncSessionWriter]]) -> None:
        self._open = open_writer
        self._writer: AsyncSessionWriter | None = None

    def __await__(self) -> Generator[Any, None, AsyncSessionWriter]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSessionWriter:
        self._writer = await self._open()
        return self._writer

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is not None:
            await self._writer.close()


class AsyncSessionWriter:
    """Async twin of :class:`sessionstore.SessionWriter`; ``emit`` does no I/O. The
    writers of one log share one drain task."""

    def __init__(self, context: WriterContext, buffer: WriterBuffer) -> None:
        self._context = context
        self._buffer = buffer
        self._drain_lock = asyncio.Lock()
        self._drain: AsyncDrain = context.drain
        due = buffer.next_due()
        if due is not None:
            self._drain.schedule(self, due)

    @property
    def session_id(self) -> str:
        return self._buffer.session_id

    @property
    def next_seq(self) -> int:
        return self._buffer.next_seq

    def emit(
        self, type: str, data: dict[str, Any] | None = None, time: object = None
    ) -> SessionEvent:
        """Snapshot, check and queue one event (seq assigned here, time the logical
        ``time`` given, else the wall clock); return it. See
        :meth:`sessionstore.SessionWriter.emit`."""
        self._buffer.check_owner("emit")
        event, due = self._buffer.make(type, data, time)
        if due is not None:
            self._drain.schedule(self, due)
        return event

    async def flush(self) -> None:
        """Return once every event emitted before this call is durable (a failed append
        is retried first; the error of this attempt is raised)."""
        self._buffer.check_owner("flush")
        await self._write(self._buffer.flush_target())

    async def close(self) -> None:
        """Flush (retrying a failed append), then give the session's lease up."""
        self._buffer.check_owner("close")
        self._buffer.close()
        try:
            await self.flush()
        finally:
            async with self._drain_lock:
                await arun(self._buffer.release(), self._context.backend)

    async def __aenter__(self) -> AsyncSessionWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self) -> float | None:
        """Run by the drain when due (see :meth:`sessionstore.SessionWriter._serve`)."""
        buffer = self._buffer
        if os.getpid() != buffer.owner:
            return None
        with contextlib.suppress(Exception):  # noted by the buffer, raised by flush or close
            await self._write(None)
        return buffer.next_due()

    async def _write(self, target: int | None) -> None:
        async with self._drain_lock:
            await arun(self._buffer.write(self._context, target), self._context.backend)


class AsyncStore:
    """Async twin of :class:`sessionstore.Store`; it pickles as
    :meth:`sessionstore.Store.__reduce__` says, and arrives as an ``AsyncStore``."""

    def __init__(
        self,
        backends: Backends,
        namespace: str,
        ttl_ms: int | None = None,
        *,
        args: ConnectArgs | None = None,
    ) -> None:
        self._backends = backends
        self._async = _async_backends(backends)
        self.namespace = namespace
        self._lifecycle = Lifecycle()
        self._args = args
        self.events = AsyncEventLog(self._async.events, self._lifecycle, ttl_ms, self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (travel_args(self._args, "store"), self._lifecycle.closed))

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
        return AsyncSession(self._async.values, state, self._lifecycle, self)

    async def list_values(self) -> list[ValueRef]:
        """Every stored session value of this namespace (plain and history) that has not
        expired, sorted."""
        self._lifecycle.check_open()
        return value_refs(await self._async.values.scan(self.namespace))

    async def check_durable(self) -> None:
        """Raise ``DurabilityError``, writing nothing, when event-log appends cannot be as
        durable as the URL asks; see :meth:`sessionstore.Store.check_durable`."""
        await arun(flows.check_durable(self._lifecycle), self._async.events)

    async def close(self) -> None:
        """Release connections; idempotent."""
        if not self._lifecycle.closed:
            self._lifecycle.closed = True
            await self.events._drain.close()
            await self._async.aclose()
            if self._backends.make_async is not None:
                await asyncio.to_thread(self._backends.close)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncStore({self.url!r}, namespace={self.namespace!r})"


def _reopen(args: ConnectArgs, closed: bool) -> AsyncStore:
    """An async store unpickled from ``args``. No I/O; a closed store arrives closed
    (nothing was opened, so nothing needs releasing)."""
    store = connect(
        args.url,
        args.namespace,
        timeout=args.timeout,
        durability=args.durability,
        ttl=args.ttl,
        cache=args.cache,
    )
    store._lifecycle.closed = closed
    return store


def _session_of(store: AsyncStore, state: SessionState) -> AsyncSession:
    """A handle unpickled with its store."""
    return AsyncSession(store._async.values, state, store._lifecycle, store)
