"""Questions about a whole store rather than one namespace (an operator's, mostly).

:func:`namespaces` lists the namespaces of a store, whatever its backend.
"""

from __future__ import annotations

import os

from .connection import REDIS_SCHEMES, file_root, resolve_url, scheme_of
from .results import NamespaceUsage, namespace_usages


def namespaces(
    url: str | os.PathLike[str] | None = None, *, timeout: float | None = None
) -> list[NamespaceUsage]:
    """Every namespace of the store ``url`` names that holds data, by name, with how many
    event-log sessions and session values it holds. ``url`` as for
    :func:`sessionstore.connect` (None: ``$SESSIONSTORE_URL``, else ``./.sessionstore``).

    Redis: the namespaces' indexes, found with ``SCAN`` on every primary, so it needs an
    admin (the least-privilege user gets ``AccessDeniedError``); each is then listed as
    ``store.events.list()`` and ``store.list_values()`` list it, so the counts are of
    sessions and values that exist (an entry of one deleted or expired is not counted,
    and a namespace left with none is not listed). Files and SQLite: what is stored
    (unexpired values; log files, database rows), nothing created. ``memory://`` and
    ``dummy://``: none (a memory store belongs to its one ``connect``)."""
    resolved = resolve_url(url)
    scheme = scheme_of(resolved)
    if scheme in REDIS_SCHEMES:
        from .redis.index import namespaces as redis_namespaces

        found = redis_namespaces(resolved, timeout=timeout)
        return namespace_usages(_live_counts(resolved, found, timeout))
    if scheme == "sqlite":
        from .backends.sqlite import namespace_usage

        return namespace_usages(namespace_usage(resolved, timeout=timeout))
    if scheme in ("", "file"):
        from .backends.files import namespace_usage as file_usage

        return namespace_usages(file_usage(file_root(resolved)))
    # memory://, dummy:// and anything else: connect() checks and refuses the URL.
    from .store import connect

    connect(resolved).close()
    return []


def _live_counts(
    url: str, indexed: dict[str, dict[str, int]], timeout: float | None
) -> dict[str, dict[str, int]]:
    """The sessions and values of each namespace that has an index, as its own listings
    find them (what exists, not the index's entries)."""
    from .store import connect

    counts: dict[str, dict[str, int]] = {}
    for namespace in indexed:
        with connect(url, namespace, timeout=timeout) as store:
            counts[namespace] = {
                "sessions": len(store.events.list()),
                "values": len(store.list_values()),
            }
    return counts
