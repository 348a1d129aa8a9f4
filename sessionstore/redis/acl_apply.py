"""``sessionstore acl --apply``: the least-privilege user of :mod:`.acl` made on every node
of a deployment, as an admin.

ACL users are kept per Redis server: a user made on one node of a cluster, or on the
primary of a Sentinel service, is unknown to the others (a failover, a redirection or a
read from a replica then refuses it). :func:`apply_user` therefore runs the
``ACL SETUSER`` line on each node the admin URL reaches: the one server, every node of a
cluster (primaries and replicas, as ``CLUSTER NODES`` lists them), or the primary and
every replica of a Sentinel service (as the sentinels report them). The sentinels keep
users of their own, which this does not touch (they need none: the URL's user info
authenticates to the data nodes only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from ..errors import SessionStoreError
from .boundary import ErrorBoundary
from .client import SyncClient
from .firstuse import Topology
from .options import parse_options
from .pools import is_cluster


def apply_user(url: str, args: list[str]) -> list[str]:
    """Run the ``ACL SETUSER`` command ``args`` on every node of the deployment ``url``
    names (an admin's URL, allowed ``ACL``); return ``host:port`` of each node, in the
    order applied. A node that refuses, or cannot be reached, raises the store error it
    maps to, naming the node; the nodes before it keep the user."""
    options = parse_options(url, None, None)
    boundary = ErrorBoundary(options.display_url, options.timeout)
    handle = SyncClient(options, Topology(options.cluster, options.durability_choice()), boundary)
    try:
        with boundary("ACL SETUSER"):
            client = handle.get()
            if handle.sentinel is not None:
                nodes = _service_nodes(handle.sentinel, options)
            elif is_cluster(client):
                nodes = _cluster_nodes(client)
            else:
                kwargs = client.connection_pool.connection_kwargs
                nodes = [(_address(kwargs), client.execute_command)]
        applied: list[str] = []
        for address, execute in nodes:
            try:
                execute(*args)
            except redis.exceptions.RedisError as exc:
                raise SessionStoreError(
                    f"ACL SETUSER on {address} failed ({type(exc).__name__}: {exc}); the"
                    f" user was made on {', '.join(applied) or 'no node'} before it"
                ) from None
            applied.append(address)
        return applied
    finally:
        handle.close()


def _address(kwargs: dict[str, Any]) -> str:
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _cluster_nodes(client: Any) -> list[tuple[str, Callable[..., Any]]]:
    """Every node of the cluster, replicas included, as ``CLUSTER NODES`` on a primary
    lists them (the client itself knows only the nodes it routes to), each reached with
    the URL's credentials and options."""
    primary = client.get_primaries()[0]
    pool = client.get_redis_connection(primary).connection_pool
    # redis-py parses the reply: {"host:port": {"flags": "master,myself", ...}, ...}
    listed = client.get_redis_connection(primary).execute_command("CLUSTER NODES")
    found = []
    for address, state in sorted(listed.items()):
        flags = str(state.get("flags", ""))
        if "fail" in flags or "noaddr" in flags:
            continue  # not reachable to be given the user
        host, _, port = str(address).rpartition(":")
        kwargs = {**pool.connection_kwargs, "host": host, "port": int(port)}
        node = redis.Redis(
            connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )
        found.append((f"{host}:{port}", _closing(node)))
    return found


def _service_nodes(manager: Any, options: Any) -> list[tuple[str, Callable[..., Any]]]:
    """The primary and every replica of the Sentinel service, as the sentinels see them,
    each reached with the URL's credentials and options."""
    service = options.sentinel.service
    primary = manager.discover_master(service)
    replicas = manager.discover_slaves(service)
    found = []
    for host, port in [primary, *replicas]:
        node = redis.Redis(host=host, port=port, **options.sentinel.node_kwargs)
        found.append((f"{host}:{port}", _closing(node)))
    return found


def _closing(node: redis.Redis) -> Callable[..., Any]:
    def execute(*args: Any) -> Any:
        try:
            return node.execute_command(*args)
        finally:
            node.close()

    return execute
