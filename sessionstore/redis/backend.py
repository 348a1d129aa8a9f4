"""``open_redis``: the Redis pair of backends for one URL and namespace."""

from __future__ import annotations

import dataclasses

from ..contracts import AsyncBackends, Backends
from ..errors import InvalidArgumentError
from .boundary import ErrorBoundary
from .client import AsyncClient, SyncClient
from .events import AsyncRedisEvents, RedisEvents
from .firstuse import Topology
from .options import parse_options
from .values import AsyncRedisValues, RedisValues


def open_redis(
    url: str,
    namespace: str,
    *,
    timeout: float | None = None,
    durability: str | None = None,
    cache: bool | None = None,
) -> Backends:
    """Open the Redis backends of ``url`` (``redis://``, ``rediss://``, ``unix://``,
    ``redis+sentinel://``, ``rediss+sentinel://``).

    No I/O: the first call connects, and finds out whether the URL names a node of a
    Redis Cluster (``?cluster=auto``, the default; ``?cluster=yes|no`` decides instead).
    ``timeout`` (seconds, default 5) bounds connecting and each reply; ``durability``
    (``"fsync"``, ``"aof"``, ``"replicas:N"``, ``"none"``) may also be given as
    ``?durability=`` in the URL (a ``redis+sentinel://`` URL without it gets
    ``replicas:1`` when the service has replicas: see :mod:`.durability`). ``?cache=yes``
    (or ``cache=True``) caches value reads in memory (sync client, not on a cluster; see
    :mod:`.tracking`). Raises ``InvalidArgumentError`` for a bad option or
    URL. ``make_async`` builds a native ``redis.asyncio`` pair on its own pool.
    """
    options = parse_options(url, timeout, durability)
    if cache:
        options = dataclasses.replace(options, cache=True)
    boundary = ErrorBoundary(options.display_url, options.timeout)
    topology = Topology(options.cluster, options.durability_choice())
    client = SyncClient(options, topology, boundary, namespace)

    def make_async() -> AsyncBackends:
        if options.cache:
            raise InvalidArgumentError(
                f"?cache=yes is for the sync client only, not sessionstore.aio "
                f"({options.display_url}): leave it out of the async store's URL"
            )
        aclient = AsyncClient(options, topology, boundary)
        return AsyncBackends(
            AsyncRedisValues(aclient, boundary, topology.durability),
            AsyncRedisEvents(aclient, namespace, boundary, topology.durability),
            aclient.aclose,
        )

    return Backends(
        RedisValues(client, boundary, topology.durability),
        RedisEvents(client, namespace, boundary, topology.durability),
        options.display_url,
        make_async=make_async,
        closers=[client.close],
    )
