"""Keys on every primary: ``SCAN`` on a single server, or on each primary of a Redis
Cluster (an admin's job: the least-privilege user of :mod:`.acl` may not ``SCAN``)."""

from __future__ import annotations

from typing import Any

from .pools import is_cluster

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
