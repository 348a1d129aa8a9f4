"""The asyncio API: the same names and arguments as the sync API, every I/O method a coroutine.

    store = sessionstore.aio.connect("redis://localhost:6379/0", namespace="run-42")
    async with store:
        s = store.session("BTCUSDT", strategy="llm-momentum", exchange="binance", frame="1h")
        await s.set_data({"lastLlmSignal": "buy"}, when)
        await s.get_data(when)

``connect`` is a plain call and does no I/O. Each method runs the same flow (see
:mod:`sessionstore.flows`) as the sync API, against ``redis.asyncio`` for Redis; the local
backends (memory, files, SQLite) run their blocking calls in a worker thread. What does
no I/O is the sync API's own code (:mod:`sessionstore.storebase`).

A store may be used from any thread and any event loop: from several threads each
running its own loop, and from one loop after another (``asyncio.run`` twice). On Redis
it keeps a ``redis.asyncio`` client per running loop, and closes the connections of a
closed loop when the store is first used on a new loop, or closed (see
:mod:`sessionstore.redis.client`). A write-behind writer
(:mod:`sessionstore.aio_writer`) stays on the loop that opened it.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from . import event_flows, telemetry, value_flows

# The async writer is part of the async API, as SessionWriter is of the sync one.
from .aio_writer import AsyncSessionWriter as AsyncSessionWriter
from .aio_writer import OpeningWriter, close_from_any_loop, open_writer
from .closing import raise_unclosed
from .connection import open_store
from .contracts import (
    AsyncBackends,
    AsyncEventBackend,
    AsyncValueBackend,
    Backends,
    EventBackend,
    ValueBackend,
)
from .defaults import DEFAULT_LEASE, DEFAULT_NAMESPACE
from .drain import AsyncDrain
from .flows import arun, recording
from .models import SessionEvent, SessionHeader, SessionInfo
from .records import StoredRecord
from .results import LoadedSession, ValueRecords, ValueRef
from .session_state import SessionState
from .storebase import EventLogBase, SessionBase, StoreBase, open_as


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
    return open_as(AsyncStore, open_store(url, namespace, timeout, durability, ttl, cache))


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


class AsyncSession(SessionBase[AsyncValueBackend]):
    """Async twin of :class:`sessionstore.Session` (it pickles the same way)."""

    async def wait_for_init(self, initial: bool = True) -> None:
        """Prepare the backend for this key. Idempotent and optional; ``initial`` changes
        nothing (see :meth:`sessionstore.Session.wait_for_init`)."""
        await arun(value_flows.ready(self._state, self._lifecycle), self._backend)

    async def get_data(self, when: Any) -> Any:
        """The stored value, or None if there is none or it was written for a later time."""
        state = self._state
        if not state.history and state.initialised and not recording():
            # Nothing to record: a plain read needs no flow (as in the sync API).
            ms = value_flows.checked(state, self._lifecycle, when)
            return value_flows.seen(state, await self._backend.read(state.key), ms)
        return await arun(value_flows.get_data(state, self._lifecycle, when), self._backend)

    async def set_data(self, value: Any, when: Any) -> None:
        """Store ``value`` for logical time ``when``; ``None`` clears."""
        state = self._state
        if not state.history and state.initialised and not recording():
            payload, ms = value_flows.plain_write(state, self._lifecycle, value, when)
            await self._backend.write(state.key, payload, ms, ttl_ms=state.ttl_ms)
            value_flows.written(state, payload, ms)
            return
        await arun(value_flows.set_data(state, self._lifecycle, value, when), self._backend)

    async def put(self, value: Any, when: Any) -> None:
        """History: store ``value`` as the version at exactly ``when``, discarding nothing
        else; see :meth:`sessionstore.Session.put`."""
        await arun(value_flows.put(self._state, self._lifecycle, value, when), self._backend)

    async def get_or_compute(
        self,
        when: Any,
        fn: Callable[[], Any],
        *,
        timeout: float | None = None,
        lease: float = value_flows.COMPUTE_LEASE,
    ) -> Any:
        """History: the version at exactly ``when``, computed once among every caller of
        the store when there is none; ``fn`` may be a coroutine function (its result is
        awaited); a plain ``fn`` runs in a worker thread, so the event loop, and the
        renewals of the lease, go on while it runs. See
        :meth:`sessionstore.Session.get_or_compute`."""
        return await arun(self._compute(when, fn, timeout, lease), self._backend)

    async def update(self, fn: Callable[[Any], Any], when: Any) -> Any:
        """Atomically replace the value visible at ``when`` by ``fn(value)`` (which may be
        a coroutine function) and return what was stored; ``fn`` may run more than once,
        as for :meth:`sessionstore.Session.update`."""
        return await arun(value_flows.update(self._state, self._lifecycle, fn, when), self._backend)

    async def set_ttl(self, ttl: float | None) -> bool:
        """Set or remove this value's retention; see :meth:`sessionstore.Session.set_ttl`."""
        flow = value_flows.set_value_retention(self._state, self._lifecycle, ttl)
        return await arun(flow, self._backend)

    async def delete(self) -> bool:
        """Remove every stored record of this key, plain and history alike; True if there
        was one that had not expired. The handle stays usable."""
        return await arun(value_flows.delete_value(self._state, self._lifecycle), self._backend)

    async def records(self) -> ValueRecords:
        """What is stored under this handle's key, plain and history alike, with the
        logical times; see :meth:`sessionstore.Session.records`."""
        return await arun(value_flows.value_records(self._state, self._lifecycle), self._backend)


class AsyncEventLog(EventLogBase[AsyncEventBackend]):
    """Async twin of :class:`sessionstore.EventLog` (retention and pickling work the
    same way)."""

    async def locate(self, header: SessionHeader | str) -> str | None:
        """Absolute path of the session's own file, or None."""
        located: str | None = await self._backend.locate(self._located(header))
        return located

    async def create(self, header: SessionHeader, *, ttl: float | None = None) -> None:
        """Register a new session (see :meth:`sessionstore.EventLog.create`)."""
        flow = event_flows.create(self._pending, self._lifecycle, header, self._retention(ttl))
        await arun(flow, self._backend)

    async def append(
        self,
        session_id: str,
        events: Iterable[SessionEvent | Mapping[str, Any]],
        *,
        header: SessionHeader | None = None,
    ) -> int:
        """Durably append a contiguous batch; see :meth:`sessionstore.EventLog.append`."""
        flow = event_flows.append(self._pending, self._lifecycle, session_id, events, header)
        return await arun(flow, self._backend)

    async def load(self, session_id: str) -> LoadedSession:
        """The header and a balanced log (torn tail cut, interrupted turn closed)."""
        return await arun(event_flows.load(self._lifecycle, session_id), self._backend)

    async def inspect(self, session_id: str) -> LoadedSession:
        """What :meth:`load` would return, without writing or looking at the lease."""
        return await arun(event_flows.inspect_session(self._lifecycle, session_id), self._backend)

    async def info(self, session_id: str) -> SessionInfo:
        """The session's metadata (see :meth:`sessionstore.EventLog.info`)."""
        return await arun(event_flows.info(self._lifecycle, session_id), self._backend)

    async def list_info(self) -> list[SessionInfo]:
        """:meth:`info` of every session :meth:`list` lists, in the same order."""
        return await arun(event_flows.list_info(self._lifecycle), self._backend)

    async def stored_bytes(self, session_id: str) -> int:
        """See :meth:`sessionstore.EventLog.stored_bytes`."""
        return await arun(event_flows.stored_bytes(self._lifecycle, session_id), self._backend)

    async def set_ttl(self, session_id: str, ttl: float | None) -> int | None:
        """Set or remove a stored session's retention; see
        :meth:`sessionstore.EventLog.set_ttl`."""
        return await arun(
            event_flows.set_retention(self._lifecycle, session_id, ttl), self._backend
        )

    async def fork(
        self, parent_id: str, child_id: str, *, at_seq: int | None = None
    ) -> SessionHeader:
        """Create ``child_id`` from the parent's first events; see
        :meth:`sessionstore.EventLog.fork`."""
        flow = event_flows.fork(
            self._pending, self._lifecycle, parent_id, child_id, at_seq, self._ttl_ms
        )
        return await arun(flow, self._backend)

    async def read_from(self, session_id: str, seq: int) -> list[SessionEvent]:
        """Committed events with seq >= ``seq``; no repair, no writes."""
        return await arun(event_flows.read_from(self._lifecycle, session_id, seq), self._backend)

    async def read_records_from(self, session_id: str, seq: int) -> list[StoredRecord]:
        """:meth:`read_from` as :class:`~sessionstore.records.StoredRecord` objects:
        the same checks, but each value of an event's ``data`` is kept as its JSON text
        (``msgspec.Raw``), for a reader that parses only what it uses (and must parse
        it to find damage within it: :func:`~sessionstore.records.parsed_values`)."""
        flow = event_flows.read_records_from(self._lifecycle, session_id, seq)
        return await arun(flow, self._backend)

    async def iter_events(self, session_id: str, batch: int = 1000) -> AsyncIterator[SessionEvent]:
        """Stream the committed events ``batch`` at a time, without repair (a bad
        ``batch`` raises ``InvalidArgumentError`` at the first step)."""
        async for event in self._stream(
            event_flows.EventPages.paged(self._lifecycle, session_id, batch)
        ):
            yield event

    async def follow(
        self, session_id: str, from_seq: int = 0, *, poll: float = 0.5
    ) -> AsyncIterator[SessionEvent]:
        """Async twin of :meth:`sessionstore.EventLog.follow`."""
        pages = event_flows.EventPages.following(self._lifecycle, session_id, from_seq, poll)
        async for event in self._stream(pages):
            yield event

    async def _stream(self, pages: event_flows.EventPages) -> AsyncIterator[SessionEvent]:
        while not pages.done:
            for event in await arun(pages.next(), self._backend):
                yield event

    async def list(self) -> list[SessionHeader]:
        """Headers of the materialised sessions, by ``created_at`` then id."""
        return await arun(event_flows.list_sessions(self._lifecycle), self._backend)

    async def delete(self, session_id: str, *, last: SessionEvent | None = None) -> None:
        """Remove the session entirely; ``SessionNotFoundError`` if it does not exist;
        with ``last``, only if the log still ends with it (see
        :meth:`sessionstore.EventLog.delete`)."""
        flow = event_flows.delete_session(self._pending, self._lifecycle, session_id, last)
        await arun(flow, self._backend)

    async def prune(self) -> int:
        """Remove the expired sessions of the namespace, each whole; how many (0 on Redis)."""
        return await arun(event_flows.prune(self._lifecycle), self._backend)

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
        context, ttl_ms, lease_ms = self._writer_args(header, window, ttl, lease)
        return OpeningWriter(lambda: open_writer(context, header, window, ttl_ms, lease_ms))


class AsyncStore(StoreBase[AsyncSession, AsyncEventLog]):
    """Async twin of :class:`sessionstore.Store`; it pickles as
    :meth:`sessionstore.Store.__reduce__` says, and arrives as an ``AsyncStore``."""

    def _handle(self, state: SessionState) -> AsyncSession:
        return AsyncSession(self._async.values, state, self._lifecycle, self)

    def _start(self, ttl_ms: int | None) -> AsyncEventLog:
        self._async = _async_backends(self._backends)
        telemetry.bind(self._scope, self._async.values, self._async.events)
        self._drain = AsyncDrain()
        return AsyncEventLog(self._async.events, self._lifecycle, self._drain, ttl_ms, self)

    async def list_values(self) -> list[ValueRef]:
        """Every stored session value of this namespace (plain and history) that has not
        expired, sorted."""
        return await arun(
            value_flows.list_values(self._lifecycle, self.namespace), self._async.values
        )

    async def check_durable(self) -> None:
        """Raise ``DurabilityError``, writing nothing, when event-log appends cannot be as
        durable as the URL asks; see :meth:`sessionstore.Store.check_durable`."""
        await arun(event_flows.check_durable(self._lifecycle), self._async.events)

    async def close(self) -> None:
        """Close every writer still open, then release connections; idempotent (see
        :meth:`sessionstore.Store.close`)."""
        if self._lifecycle.closed:
            return
        failed: list[tuple[str, BaseException]] = []
        for writer in self._drain.open_writers():
            try:
                await close_from_any_loop(writer)
            except Exception as exc:  # noqa: BLE001 - raised once everything is closed
                failed.append((writer.session_id, exc))
        self._lifecycle.closed = True
        await self._drain.close()
        await self._async.aclose()
        if self._backends.make_async is not None:
            await asyncio.to_thread(self._backends.close)
        raise_unclosed(failed)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
