"""``open_redis``: the Redis pair of backends for one URL and namespace."""

from __future__ import annotations

from ..connection import AsyncBackends, Backends
from .client import AsyncClient, ErrorBoundary, SyncClient, Topology, parse_options
from .events import AsyncRedisEvents, RedisEvents
from .values import AsyncRedisValues, RedisValues


def open_redis(
    url: str,
    namespace: str,
    *,
    timeout: float | None = None,
    durability: str | None = None,
) -> Backends:
    """Open the Redis backends of ``url`` (``redis://``, ``rediss://``, ``unix://``).

    No I/O: the first call connects, and finds out whether the URL names a node of a
    Redis Cluster (``?cluster=auto``, the default; ``?cluster=yes|no`` decides instead).
    ``timeout`` (seconds, default 5) bounds connecting and each reply; ``durability``
    (``"fsync"``, ``"replicas:N"``, ``"none"``) may also be given as ``?durability=`` in
    the URL. Raises ``InvalidArgumentError`` for a bad option or URL. ``make_async``
    builds a native ``redis.asyncio`` pair on its own pool.
    """
    options = parse_options(url, timeout, durability)
    boundary = ErrorBoundary(options.display_url, options.timeout)
    topology = Topology(options.cluster)
    client = SyncClient(options, topology, boundary)

    def make_async() -> AsyncBackends:
        aclient = AsyncClient(options, topology, boundary)
        return AsyncBackends(
            AsyncRedisValues(aclient, boundary),
            AsyncRedisEvents(aclient, namespace, boundary, options.durability),
            aclient.aclose,
        )

    return Backends(
        RedisValues(client, boundary),
        RedisEvents(client, namespace, boundary, options.durability),
        options.display_url,
        make_async=make_async,
        closers=[client.close],
    )
