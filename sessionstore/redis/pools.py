"""The redis-py clients of a store and their connection pools, built from its options
(:mod:`.options`) alike for blocking and asyncio I/O (:class:`Flavour`); no I/O.

Every call has a bounded duration: ``timeout`` seconds to connect and to wait for a
reply, and two retries on the schedule of :mod:`.retry` on a connection error or
timeout. A plain server's pool (and a Sentinel service primary's) is a blocking pool of
at most ``?max_connections=N`` connections whose waiting callers are served first come,
first served (:class:`~.compat.FairBlockingPool`); on a Redis Cluster the sync client
has such a pool per node (:class:`~.compat.ClusterNodePool`). The asyncio client of a
plain server waits its turn before it takes a connection (its store's own fair queue of
N places, :mod:`.client`), so its pool never waits (:class:`~.compat.AsyncSlotPool`):
N connections, and briefly one more while the store first learns the server's kind or
while a cancelled call's connection goes back in the background.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.retry import Retry

from ..urls import invalid_url
from .compat import (
    AsyncClusterClient,
    AsyncSentinelBlockingPool,
    AsyncSlotPool,
    ClusterClient,
    ClusterNodePool,
    FairBlockingPool,
    SentinelBlockingPool,
)
from .failover import FailoverWatch
from .fenced import (
    AsyncFencedConnection,
    AsyncFencedSSLConnection,
    FencedConnection,
    FencedSSLConnection,
)
from .options import RedisOptions
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


async def _initialised(cluster: redis.asyncio.cluster.RedisCluster) -> Any:
    await cluster.initialize()
    return cluster


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
    #: The name of a client's method that closes it (a coroutine function on asyncio).
    close: str
    #: ``open_cluster(options)``: a call (:mod:`sessionstore.drive`) that returns a
    #: Redis Cluster client of the URL, its slot map read (``CLUSTER SLOTS``).
    open_cluster: Callable[[RedisOptions], Callable[[], Any]]


def _open_cluster(options: RedisOptions) -> Callable[[], Any]:
    # redis-py's sync cluster client reads the slot map when it is made.
    return lambda: ClusterClient.from_url(
        options.url,
        retry=retry_of(BLOCKING),
        connection_pool_class=ClusterNodePool,
        **_client_kwargs(options),
        **_pool_kwargs(options),
    )


def _open_async_cluster(options: RedisOptions) -> Callable[[], Any]:
    cluster = AsyncClusterClient.from_url(
        options.url,
        retry=retry_of(ASYNCIO),
        max_connections=options.max_connections,
        **_client_kwargs(options),
    )
    return lambda: _initialised(cluster)


BLOCKING = Flavour(
    redis.Redis,
    FairBlockingPool,
    redis.sentinel.Sentinel,
    SentinelBlockingPool,
    Retry,
    FencedConnection,
    FencedSSLConnection,
    "close",
    _open_cluster,
)
ASYNCIO = Flavour(
    redis.asyncio.Redis,
    AsyncSlotPool,
    redis.asyncio.sentinel.Sentinel,
    AsyncSentinelBlockingPool,
    redis.asyncio.retry.Retry,
    AsyncFencedConnection,
    AsyncFencedSSLConnection,
    "aclose",
    _open_async_cluster,
)


def retry_of(flavour: Flavour) -> Any:
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
    sentinel_kwargs = {**_client_kwargs(options), **target.sentinel_kwargs}
    manager = flavour.sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    watch = watch or failover_watch(options)
    node_kwargs = dict(target.node_kwargs)
    tls = bool(node_kwargs.pop("ssl", False))
    client = manager.master_for(
        target.service,
        connection_pool_class=flavour.sentinel_pool,
        connection_class=flavour.fenced_tls if tls else flavour.fenced,
        failover_watch=watch,
        retry=retry_of(flavour),
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
            options.url, retry=retry_of(flavour), **_client_kwargs(options), **_pool_kwargs(options)
        )
    except ValueError as exc:
        raise invalid_url(options.url, exc)  # noqa: B904 - it chains what is safe to show
    return _raw_stream_replies(flavour.redis.from_pool(pool))


_Client = TypeVar("_Client", redis.Redis, redis.asyncio.Redis)


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


def _raw_stream_replies(client: _Client) -> _Client:
    """XRANGE replies stay as the server sent them, ``[id, [name, value, ...]]`` per entry:
    the event-log reader decodes the flat field list itself, in one pass. (Cluster clients
    parse at each node, and so still turn the fields into dicts; the reader takes both.)
    """
    client.set_response_callback("XRANGE", _raw_reply)
    return client


#: :func:`is_cluster` by client class: ``isinstance`` against redis-py's client classes
#: costs about a microsecond, asked on every call.
_CLUSTER_CLASSES: dict[type, bool] = {}


def is_cluster(client: Any) -> bool:
    """True for a ``RedisCluster`` client (sync or async)."""
    kind = type(client)
    found = _CLUSTER_CLASSES.get(kind)
    if found is None:
        found = _CLUSTER_CLASSES[kind] = isinstance(
            client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster
        )
    return found
