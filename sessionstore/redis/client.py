"""The two redis-py clients of a store, sync and async: built from its options by
:mod:`.pools`, chosen at first use (a plain server or a Redis Cluster: :mod:`.firstuse`),
their errors mapped by :mod:`.boundary`.

Opening does no I/O: redis-py connects on first use. A call that finds every connection
of the pool busy waits for one, first come, first served (:class:`~sessionstore.fairwait.FairQueue`:
a connection given back goes to the caller that has waited longest). It raises
:class:`StoreUnavailableError` only when no connection was given back for a whole
``timeout`` while it waited, never because later callers overtook it (redis-py's plain
pools refuse the call at once; its blocking pools let a newcomer take a connection ahead
of the callers already waiting). After its retries (:mod:`.pools`) a call raises
:class:`StoreUnavailableError`; the pool reconnects by itself on a later call once the
server is back, and is reset in a forked child.

The async client keeps one ``redis.asyncio`` client per running event loop (asyncio
connections belong to the loop that opened them), so one store serves coroutines of
several threads, each with its own loop, and of one loop after another
(``asyncio.run`` twice): the connections of a loop that was closed are closed when the
store is first used on a new loop, and by :meth:`AsyncClient.aclose`. At most N calls of the store
run at once across all its loops, waiting in the same first-come order.

For a ``redis+sentinel://`` URL (see :mod:`.options`) the client asks the sentinels for
the service's primary (``redis.sentinel``) and follows a failover by itself, as the
sentinels announce it (:mod:`.failover`): while they fail over, no call reaches a
primary; a connection to a demoted or dead primary is dropped, and the next attempt asks
the sentinels again. The same blocking pool (``?max_connections=``, waits up to
``timeout``) serves the primary.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis.asyncio.sentinel
import redis.sentinel

from .. import forksafe, keys
from ..drive import Steps, adrive, drive
from ..errors import InvalidArgumentError, StoreUnavailableError
from ..fairwait import AnyLoopLock, FairQueue
from .boundary import ErrorBoundary
from .compat import asyncio_connections, shut_async
from .failover import FailoverWatch
from .firstuse import FirstUse, Topology
from .options import RedisOptions
from .pools import ASYNCIO, BLOCKING, failover_watch, is_cluster, plain_client, sentinel_client

_P = ParamSpec("_P")
_R = TypeVar("_R")


class SyncClient:
    """The redis-py client the sync backends use, chosen at first use.

    :meth:`get` returns a ``redis.Redis``, or a ``redis.cluster.RedisCluster`` when the
    server is a cluster node. Finding out costs one ``INFO cluster`` (``CLUSTER INFO``
    when INFO is refused; a server that refuses both is taken as a plain one); its errors
    are mapped by the boundary, and a failed first use is retried by the next call.
    """

    def __init__(
        self, options: RedisOptions, topology: Topology, guard: ErrorBoundary, namespace: str = ""
    ) -> None:
        self._options = options
        self._namespace = namespace
        self._sentinel: redis.sentinel.Sentinel | None = None
        self._watch: FailoverWatch | None = None
        if options.sentinel is not None:
            self._plain, self._sentinel, self._watch = sentinel_client(options, BLOCKING)
        else:
            self._plain = plain_client(options, BLOCKING)
        self._client: Any = None
        self._cache: Any = None
        self._lock = threading.Lock()
        #: Calls running (:meth:`run`), and whether :meth:`close` waits for them to end.
        self._running = 0
        self._close_pending = False
        self._running_lock = threading.Lock()
        forksafe.renew_locks(self, "_lock", "_running_lock")
        forksafe.at_fork(self, "_forked")
        self._first_use = FirstUse(options, topology, guard, BLOCKING)

    def _forked(self) -> None:
        """In a forked child: the parent's calls running at the fork are not its own."""
        self._running, self._close_pending = 0, False

    def get(self) -> Any:
        """The client to use (see the class doc)."""
        client = self._client
        if client is not None:
            return client
        seen = self._first_use.attempts
        with self._lock:
            if self._client is None:
                choice = self._first_use.choose(seen, self._plain, self._sentinel)
                self._client = drive(choice)
            return self._client

    def cache(self) -> Any:
        """The :class:`~.tracking.ValueCache` of ``?cache=yes``, else None. Raises
        :class:`InvalidArgumentError` on a Redis Cluster (not covered)."""
        if not self._options.cache:
            return None
        client = self.get()
        if self._cache is None:
            if is_cluster(client):
                raise InvalidArgumentError(
                    f"?cache=yes is not supported on a Redis Cluster ({self._options.display_url}):"
                    " leave it out"
                )
            from .tracking import ValueCache

            with self._lock:
                if self._cache is None:
                    self._cache = ValueCache(client.connection_pool, keys.mark_key(self._namespace))
        return self._cache

    def cached(self) -> Any:
        """The :class:`~.tracking.ValueCache` if one was made already (no I/O), else None."""
        return self._cache

    def forget_cached(self, name: str) -> None:
        """Drop ``name`` from the value cache, if there is one (after a write of it)."""
        cache = self._cache
        if cache is not None:
            cache.forget(name)

    def run(
        self, op: Callable[Concatenate[Any, _P], Steps[_R]], /, *args: _P.args, **kw: _P.kwargs
    ) -> _R:
        """Run the operation ``op(client, ...)`` (:mod:`sessionstore.drive`) on :meth:`get`."""
        with self._running_lock:
            self._running += 1
        try:
            return drive(op(self.get(), *args, **kw))
        finally:
            with self._running_lock:
                self._running -= 1
                if self._close_pending and not self._running:
                    self._close_pending = False
                    self._close_now()  # no call starts meanwhile

    def close(self) -> None:
        """Close the client (and its pools) once the calls running now have ended (a
        cluster client closed under a call fails it); a later call reconnects."""
        with self._running_lock:
            if self._running:
                self._close_pending = True
                return
            self._close_now()

    def _close_now(self) -> None:
        if self._cache is not None:
            self._cache.close()
        with self._lock:
            client = self._client
            if client is not None and client is not self._plain:
                # A closed cluster client stays closed: a later call opens another.
                self._client = None
                client.close()
        self._plain.close()
        if self._sentinel is not None:
            self._sentinel.close()
        if self._watch is not None:
            self._watch.close()

    @property
    def sentinel(self) -> redis.sentinel.Sentinel | None:
        """The ``Sentinel`` of a ``redis+sentinel://`` URL; else None."""
        return self._sentinel


class AsyncClient:
    """:class:`SyncClient` for ``redis.asyncio``: :meth:`get` is a coroutine and returns a
    ``redis.asyncio.Redis`` or an initialised ``redis.asyncio.cluster.RedisCluster`` of
    the running event loop, made at the first call on that loop (see the module doc).
    Every call of a backend runs in :meth:`use`, among the ``max_connections`` calls
    that may run at once across all loops."""

    def __init__(self, options: RedisOptions, topology: Topology, guard: ErrorBoundary) -> None:
        self._options = options
        #: One fence for the clients of every loop (its thread belongs to no loop).
        self._watch: FailoverWatch | None = None
        if options.sentinel is not None:
            self._watch = failover_watch(options)
        self._first_use = FirstUse(options, topology, guard, ASYNCIO)
        self._renew()
        forksafe.at_fork(self, "_renew")

    def _renew(self) -> None:
        """No client yet on any loop, and every place free (also in a forked child: the
        parent's connections are left to the parent)."""
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self._loops_lock = threading.Lock()
        self._choosing = AnyLoopLock()
        self._slots = FairQueue()
        for _ in range(self._options.max_connections):
            self._slots.put_nowait(None)

    def cache(self) -> None:
        """The async client caches nothing (see :meth:`SyncClient.cache`)."""
        return None

    async def run(
        self, op: Callable[Concatenate[Any, _P], Steps[_R]], /, *args: _P.args, **kw: _P.kwargs
    ) -> _R:
        """Run the operation ``op(client, ...)`` (:mod:`sessionstore.drive`) in :meth:`use`."""
        async with self.use() as client:
            return await adrive(op(client, *args, **kw))

    def use(self) -> _Use:
        """``async with client.use() as redis_client:`` around one call of a backend: the
        client (as :meth:`get`) and a place among the ``max_connections`` calls that may
        run at once (see the module doc)."""
        return _Use(self)

    async def get(self) -> Any:
        """The client of the running event loop (see :class:`SyncClient`)."""
        loop = asyncio.get_running_loop()
        entry = self._loops.get(loop)
        if entry is not None and entry.client is not None:
            return entry.client
        return await self._first_use_on(loop)

    async def _first_use_on(self, loop: asyncio.AbstractEventLoop) -> Any:
        self._drop_closed_loops()
        with self._loops_lock:
            entry = self._loops.get(loop)
            if entry is None:
                entry = self._loops[loop] = _LoopClient(self._options, self._watch)
        seen = self._first_use.attempts
        async with self._choosing:
            if entry.client is None:
                choice = self._first_use.choose(seen, entry.plain, entry.sentinel)
                entry.client = await adrive(choice)
        return entry.client

    def _drop_closed_loops(self) -> None:
        """Forget the clients of event loops that are closed, closing their sockets."""
        with self._loops_lock:
            gone = [loop for loop in self._loops if loop.is_closed()]
            entries = [self._loops.pop(loop) for loop in gone]
        for entry in entries:
            entry.abandon()

    async def _wait_for_slot(self) -> None:
        """A place among the calls that may run at once (see the module doc)."""
        try:
            await self._slots.aget(self._options.timeout)
        except queue.Empty:
            raise StoreUnavailableError(
                f"no connection to {self._options.display_url} became free within "
                f"{self._options.timeout:g} s: {self._options.max_connections} calls of this "
                "store were running and none ended (raise ?max_connections= or the timeout)"
            ) from None

    async def aclose(self) -> None:
        """Close the clients of every loop: the running loop's in turn, the others'
        sockets at once (a loop cannot be made to run from here)."""
        loop = asyncio.get_running_loop()
        with self._loops_lock:
            entries = list(self._loops.items())
            self._loops.clear()
        for owner, entry in entries:
            if owner is loop:
                await entry.aclose()
            else:
                entry.abandon()
        if self._watch is not None:
            self._watch.close()


class _LoopClient:
    """The ``redis.asyncio`` clients of one event loop: the plain (or Sentinel) client
    made at once (no I/O), and ``client``, the one chosen at first use."""

    def __init__(self, options: RedisOptions, watch: FailoverWatch | None) -> None:
        self.sentinel: redis.asyncio.sentinel.Sentinel | None = None
        if options.sentinel is not None:
            self.plain, self.sentinel, _ = sentinel_client(options, ASYNCIO, watch)
        else:
            self.plain = plain_client(options, ASYNCIO)
        self.client: Any = None

    def _clients(self) -> list[Any]:
        clients = [self.plain]
        if self.client is not None and self.client is not self.plain:
            clients.append(self.client)
        if self.sentinel is not None:
            clients.extend(self.sentinel.sentinels)
        return clients

    async def aclose(self) -> None:
        if self.client is not None and self.client is not self.plain:
            await self.client.aclose()
        await self.plain.aclose()
        if self.sentinel is not None:
            await self.sentinel.aclose()

    def abandon(self) -> None:
        """Close the sockets from outside their event loop (closed, or run by another
        thread): the server sees each connection end at once; what is left of it is
        garbage."""
        for client in self._clients():
            for connection in asyncio_connections(client):
                shut_async(connection)


class _Use:
    """What :meth:`AsyncClient.use` returns (a plain class: it sits on every call's path)."""

    __slots__ = ("_client", "_held")

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._held = False

    async def __aenter__(self) -> Any:
        found = await self._client.get()
        await self._client._wait_for_slot()
        self._held = True
        return found

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._held:
            self._held = False
            self._client._slots.put_nowait(None)
