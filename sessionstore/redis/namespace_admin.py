"""Whole-namespace jobs on Redis that the public API has no call for: the remaining
expiry of session values (a copy carries it over) and removing every key of a
namespace (``sessionstore namespaces delete``).

Key names come from :mod:`sessionstore.keys`. :func:`delete_namespace` finds the keys
with ``SCAN`` of :func:`~sessionstore.keys.namespace_pattern` on every primary, so it
needs an admin (the least-privilege user may not ``SCAN``), as
:func:`sessionstore.namespaces` does; every key of the namespace starts with
``ss:<namespace>:`` with the namespace escaped, so no key of another namespace matches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import keys
from .boundary import ErrorBoundary
from .client import SyncClient
from .firstuse import Topology
from .options import parse_options
from .pools import is_cluster
from .replies import text
from .scan import SCAN_COUNT, scan_keys


@contextmanager
def admin_client(url: str, timeout: float | None = None) -> Iterator[tuple[Any, ErrorBoundary]]:
    """A redis-py client on ``url`` (a cluster client on a cluster node, the primary
    behind Sentinel) and the boundary that maps its errors; closed after the block."""
    options = parse_options(url, timeout, None)
    guard = ErrorBoundary(options.display_url, options.timeout)
    handle = SyncClient(options, Topology(options.cluster), guard)
    try:
        with guard("PING"):
            client = handle.get()
        yield client, guard
    finally:
        handle.close()


def namespace_keys(url: str, namespace: str, timeout: float | None = None) -> list[str]:
    """Every key of ``namespace`` on every primary (``SCAN``: an admin's)."""
    pattern = keys.namespace_pattern(namespace)
    with admin_client(url, timeout) as (client, guard), guard("SCAN", pattern):
        return sorted(text(name) for name in scan_keys(client, pattern, SCAN_COUNT))


def delete_namespace(url: str, namespace: str, timeout: float | None = None) -> int:
    """Remove every key of ``namespace`` (found by ``SCAN`` on every primary) and
    return how many were removed. Keys a writer adds meanwhile may stay: stop the
    namespace's writers first."""
    pattern = keys.namespace_pattern(namespace)
    removed = 0
    with admin_client(url, timeout) as (client, guard):
        with guard("SCAN", pattern):
            names = scan_keys(client, pattern, SCAN_COUNT)
        for start in range(0, len(names), SCAN_COUNT):
            chunk = names[start : start + SCAN_COUNT]
            with guard("UNLINK", text(chunk[0])):
                if is_cluster(client):
                    # One key per command: the keys live in many slots.
                    pipe = client.pipeline(transaction=False)
                    for name in chunk:
                        pipe.unlink(name)
                    removed += sum(int(n) for n in pipe.execute())
                else:
                    removed += int(client.unlink(*chunk))
    return removed
