"""The redis-py clients of a store: built from its options (:mod:`.options`), chosen at
first use (a plain server or a Redis Cluster), their errors mapped by :mod:`.boundary`.

Opening does no I/O: redis-py connects on first use. Every call has a bounded
duration: ``timeout`` seconds to connect and to wait for a reply, and two retries with
a short back-off on a connection error or timeout, after which the call raises
:class:`StoreUnavailableError`. The pool reconnects by itself on a later call once the
server is back, and is reset in a forked child.

Connections come from a pool of at most ``?max_connections=N`` (default
:data:`.options.DEFAULT_MAX_CONNECTIONS`) per server: a call that finds every connection
busy waits for one, first come, first served (:class:`~sessionstore.fairwait.FairQueue`:
a connection given back goes to the caller that has waited longest). It raises
:class:`StoreUnavailableError` only when no connection was given back for a whole
``timeout`` while it waited, never because later callers overtook it (redis-py's plain
pools refuse the call at once; its blocking pools let a newcomer take a connection ahead
of the callers already waiting). On a Redis Cluster the sync client has such a pool per
node.

The async client keeps one ``redis.asyncio`` client per running event loop (asyncio
connections belong to the loop that opened them), so one store serves coroutines of
several threads, each with its own loop, and of one loop after another
(``asyncio.run`` twice): the connections of a loop that was closed are closed when the
store is first used on a new loop, and by :meth:`AsyncClient.aclose`. At most N calls of the store
run at once across all its loops, waiting in the same first-come order.

A URL may name any node of a Redis Cluster. ``?cluster=auto`` (the default) asks the
server at first use (``INFO cluster``) and then talks to the whole cluster with
``redis.cluster.RedisCluster`` (or its ``redis.asyncio`` twin), built from the same URL
and options; ``?cluster=yes`` / ``?cluster=no`` skip the question.

For a ``redis+sentinel://`` URL (see :mod:`.options`) the client asks the sentinels for
the service's primary (``redis.sentinel``) and follows a failover by itself, as the
sentinels announce it (:mod:`.failover`): while they fail over, no call reaches a
primary; a connection to a demoted or dead primary is dropped, and the next attempt asks
the sentinels again. The same blocking pool (``?max_connections=``, waits up to
``timeout``) serves the primary. Such a URL is never a cluster: no detection is made; a
URL that names no durability gets ``replicas:1`` when the sentinels list replicas of
the service (:class:`~.durability.DurabilityChoice`), settled at first use.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.exceptions import (
    NoPermissionError,
    ResponseError,
)
from redis.retry import Retry

from .. import forksafe
from ..drive import Steps, adrive, drive
from ..errors import (
    InvalidArgumentError,
    SessionStoreError,
    StoreUnavailableError,
)
from ..fairwait import AnyLoopLock, FairQueue
from ..urls import invalid_url
from .boundary import ErrorBoundary
from .compat import (
    AsyncClusterClient,
    AsyncSentinelBlockingPool,
    ClusterClient,
    ClusterNodePool,
    FairBlockingPool,
    SentinelBlockingPool,
    asyncio_connections,
    shut_async,
)
from .durability import DurabilityChoice
from .failover import (
    AsyncFencedConnection,
    AsyncFencedSSLConnection,
    FailoverWatch,
    FencedConnection,
    FencedSSLConnection,
    acount_replicas,
    count_replicas,
)
from .options import RedisOptions, SentinelTarget, check_cluster_url
from .retry import RETRIES, DriverBackoff


def _client_kwargs(options: RedisOptions) -> dict[str, Any]:
    return {
        "socket_connect_timeout": options.timeout,
        "socket_timeout": options.timeout,
        "decode_responses": False,
    }


def _pool_kwargs(options: RedisOptions) -> dict[str, Any]:
    """A blocking pool's size and how long a call waits in it for a connection."""
    return {"max_connections": options.max_connections, "timeout": options.timeout}


def _sentinel_socket_kwargs(options: RedisOptions, target: SentinelTarget) -> dict[str, Any]:
    return {**_client_kwargs(options), **target.sentinel_kwargs}


@dataclass(frozen=True)
class Flavour:
    """redis-py's classes for one kind of I/O, blocking or asyncio: the clients are built
    alike from them."""

    redis: Any
    pool: Any
    sentinel: Any
    sentinel_pool: Any
    retry: Any
    #: The connection classes of a Sentinel service's primary: plain and TLS.
    fenced: Any
    fenced_tls: Any


BLOCKING = Flavour(
    redis.Redis,
    FairBlockingPool,
    redis.sentinel.Sentinel,
    SentinelBlockingPool,
    Retry,
    FencedConnection,
    FencedSSLConnection,
)
ASYNCIO = Flavour(
    redis.asyncio.Redis,
    redis.asyncio.BlockingConnectionPool,
    redis.asyncio.sentinel.Sentinel,
    AsyncSentinelBlockingPool,
    redis.asyncio.retry.Retry,
    AsyncFencedConnection,
    AsyncFencedSSLConnection,
)


def _retry(flavour: Flavour) -> Any:
    """redis-py's ``Retry`` of ``flavour`` on the schedule of :mod:`.retry`."""
    return flavour.retry(DriverBackoff(), RETRIES)


def sentinel_client(
    options: RedisOptions, flavour: Flavour, watch: FailoverWatch | None = None
) -> tuple[Any, Any, FailoverWatch]:
    """(the client of the service's primary, the ``Sentinel`` it asks, the
    :class:`~.failover.FailoverWatch` its connections obey: ``watch``, else a new one of
    its own); no I/O."""
    target = options.sentinel
    assert target is not None
    sentinel_kwargs = _sentinel_socket_kwargs(options, target)
    manager = flavour.sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    watch = watch or failover_watch(options)
    node_kwargs = dict(target.node_kwargs)
    tls = bool(node_kwargs.pop("ssl", False))
    client = manager.master_for(
        target.service,
        connection_pool_class=flavour.sentinel_pool,
        connection_class=flavour.fenced_tls if tls else flavour.fenced,
        failover_watch=watch,
        retry=_retry(flavour),
        **node_kwargs,
        **_client_kwargs(options),
        **_pool_kwargs(options),
    )
    return _raw_stream_replies(client), manager, watch


def failover_watch(options: RedisOptions) -> FailoverWatch:
    """The fence of the Sentinel service ``options`` names (see :mod:`.failover`); no I/O."""
    target = options.sentinel
    assert target is not None
    return FailoverWatch(
        list(target.sentinels), target.service, dict(target.sentinel_kwargs), options.timeout
    )


def plain_client(options: RedisOptions, flavour: Flavour) -> Any:
    """A plain redis-py client for ``options`` on a blocking pool (see the module doc and
    :func:`_raw_stream_replies`); no I/O."""
    try:
        pool = flavour.pool.from_url(
            options.url, retry=_retry(flavour), **_client_kwargs(options), **_pool_kwargs(options)
        )
    except ValueError as exc:
        raise invalid_url(options.url, exc)  # noqa: B904 - it chains what is safe to show
    return _raw_stream_replies(flavour.redis.from_pool(pool))


_Client = TypeVar("_Client", redis.Redis, redis.asyncio.Redis)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


def _raw_stream_replies(client: _Client) -> _Client:
    """XRANGE replies stay as the server sent them, ``[id, [name, value, ...]]`` per entry:
    the event-log reader decodes the flat field list itself, in one pass. (Cluster clients
    parse at each node, and so still turn the fields into dicts; the reader takes both.)
    """
    client.set_response_callback("XRANGE", _raw_reply)
    return client


def is_cluster(client: Any) -> bool:
    """True for a ``RedisCluster`` client (sync or async)."""
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


def _cluster_enabled(info: Any) -> bool:
    return str(info.get("cluster_enabled", 0)) == "1"


def _cluster_refusal(exc: ResponseError) -> bool:
    """A cluster node refused what a plain server allows (``SELECT`` of a database
    other than 0, sent by redis-py when it connects)."""
    return "not allowed in cluster mode" in str(exc)


def _refused(exc: ResponseError) -> bool:
    """The command is not allowed for this user, or renamed away (managed services)."""
    return isinstance(exc, NoPermissionError) or "unknown command" in str(exc).lower()


def _detect(plain: Any, guard: ErrorBoundary) -> Steps[bool]:
    """Whether the server behind ``plain`` is a Redis Cluster node: ``INFO cluster``, else
    ``CLUSTER INFO``; a server that refuses both is taken as a plain one."""
    with guard("INFO cluster"):
        try:
            return _cluster_enabled((yield functools.partial(plain.info, "cluster")))
        except ResponseError as exc:
            if _cluster_refusal(exc):
                return True
            if not _refused(exc):
                raise
        try:
            yield functools.partial(plain.execute_command, "CLUSTER INFO")
        except ResponseError as exc:
            if "cluster support disabled" in str(exc) or _refused(exc):
                return False
            raise
        return True


class Topology:
    """Whether the URL names a Redis Cluster: fixed by ``?cluster=yes|no``, else learnt
    at the first call of either client (sync or async) and shared by both."""

    def __init__(self, mode: str, durability: DurabilityChoice | None = None) -> None:
        self.cluster: bool | None = {"yes": True, "no": False}.get(mode)
        #: The store's durability (settled at first use on a Sentinel URL naming none).
        self.durability = durability if durability is not None else DurabilityChoice(None, False)


class FirstUse:
    """Bookkeeping of the first-use detection, so that calls queued behind a detection
    that failed fail with it at once instead of each waiting through its own."""

    def __init__(self) -> None:
        self.attempts = 0
        self.error: SessionStoreError | None = None

    def check(self, seen: int) -> None:
        """Raise the error of a detection that ended while the caller waited."""
        if self.attempts != seen and self.error is not None:
            raise self.error
        self.attempts += 1

    def failed(self, error: SessionStoreError) -> None:
        self.error = error

    def succeeded(self) -> None:
        """A later detection (the async client's, on another event loop) is not failed
        by an error an earlier one met."""
        self.error = None

    def run(self, seen: int, choose: Any) -> Any:
        self.check(seen)
        try:
            chosen = choose()
        except SessionStoreError as exc:
            self.failed(exc)
            raise
        self.succeeded()
        return chosen


class SyncClient:
    """The redis-py client the sync backends use, chosen at first use.

    :meth:`get` returns a ``redis.Redis``, or a ``redis.cluster.RedisCluster`` when the
    server is a cluster node. Finding out costs one ``INFO cluster`` (``CLUSTER INFO``
    when INFO is refused; a server that refuses both is taken as a plain one); its errors
    are mapped by the boundary, and a failed first use is retried by the next call.
    """

    def __init__(self, options: RedisOptions, topology: Topology, guard: ErrorBoundary) -> None:
        self._options = options
        self._topology = topology
        self._guard = guard
        self._sentinel: redis.sentinel.Sentinel | None = None
        self._watch: FailoverWatch | None = None
        if options.sentinel is not None:
            self._plain, self._sentinel, self._watch = sentinel_client(options, BLOCKING)
        else:
            self._plain = plain_client(options, BLOCKING)
        self._client: Any = None
        self._cache: Any = None
        self._lock = threading.Lock()
        forksafe.renew_locks(self, "_lock")
        self._first_use = FirstUse()

    def get(self) -> Any:
        """The client to use (see the class doc)."""
        client = self._client
        if client is not None:
            return client
        seen = self._first_use.attempts
        with self._lock:
            if self._client is None:
                self._client = self._first_use.run(seen, self._choose)
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
                    self._cache = ValueCache(client.connection_pool)
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
        return drive(op(self.get(), *args, **kw))

    def _choose(self) -> Any:
        if self._sentinel is not None:
            assert self._options.sentinel is not None
            if self._topology.durability.pending:
                service = self._options.sentinel.service
                self._topology.durability.settle(count_replicas(self._sentinel, service))
            return self._plain
        if self._topology.cluster is None:
            self._topology.cluster = drive(_detect(self._plain, self._guard))
        if not self._topology.cluster:
            return self._plain
        check_cluster_url(self._options)
        with self._guard("CLUSTER SLOTS"):
            cluster = ClusterClient.from_url(
                self._options.url,
                retry=_retry(BLOCKING),
                connection_pool_class=ClusterNodePool,
                **_client_kwargs(self._options),
                **_pool_kwargs(self._options),
            )
        self._plain.close()
        return cluster

    def close(self) -> None:
        """Close the client (and its pools); a later call reconnects."""
        if self._cache is not None:
            self._cache.close()
        if self._client is not None and self._client is not self._plain:
            self._client.close()
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
        self._topology = topology
        self._guard = guard
        #: One fence for the clients of every loop (its thread belongs to no loop).
        self._watch: FailoverWatch | None = None
        if options.sentinel is not None:
            self._watch = failover_watch(options)
        self._first_use = FirstUse()
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
                self._first_use.check(seen)
                try:
                    entry.client = await self._choose(entry)
                except SessionStoreError as exc:
                    self._first_use.failed(exc)
                    raise
                self._first_use.succeeded()
        return entry.client

    async def _choose(self, entry: _LoopClient) -> Any:
        if entry.sentinel is not None:
            assert self._options.sentinel is not None
            if self._topology.durability.pending:
                service = self._options.sentinel.service
                self._topology.durability.settle(await acount_replicas(entry.sentinel, service))
            return entry.plain
        if self._topology.cluster is None:
            self._topology.cluster = await adrive(_detect(entry.plain, self._guard))
        if not self._topology.cluster:
            return entry.plain
        check_cluster_url(self._options)
        cluster = AsyncClusterClient.from_url(
            self._options.url,
            retry=_retry(ASYNCIO),
            max_connections=self._options.max_connections,
            **_client_kwargs(self._options),
        )
        with self._guard("CLUSTER SLOTS"):
            await cluster.initialize()
        await entry.plain.aclose()
        return cluster

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


# Keys on every primary -------------------------------------------------------------------

#: Keys asked for per SCAN call, and commands per pipeline over what a SCAN found.
SCAN_COUNT = 1000


def scan_keys(client: Any, pattern: str, count: int) -> list[Any]:
    """Every key matching ``pattern`` (``SCAN``), on each primary of a cluster; unique."""
    if not is_cluster(client):
        return list(dict.fromkeys(client.scan_iter(match=pattern, count=count)))
    found: list[Any] = []
    for node in client.get_primaries():
        found += client.get_redis_connection(node).scan_iter(match=pattern, count=count)
    return list(dict.fromkeys(found))
