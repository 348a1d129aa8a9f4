"""Questions about a whole store rather than one namespace (an operator's, mostly).

:func:`namespaces` lists the namespaces of a store, whatever its backend;
:func:`namespace_bytes` and :func:`value_usage` say what a namespace and a value take.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

from .connection import REDIS_SCHEMES, file_root, resolve_url, scheme_of
from .errors import CorruptDataError, SessionNotFoundError
from .results import NamespaceUsage, ValueRef, namespace_usages

if TYPE_CHECKING:
    from .store import Store


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


class ValueUsage(NamedTuple):
    """What one listed value holds, as :func:`value_usage` finds it."""

    #: Bytes of its stored payloads (the plain record, or every version of a history).
    bytes: int
    #: How many records a read of it sees (1 for a plain value, the versions of a history).
    records: int
    #: When it expires (epoch ms of the backend's clock), None: never.
    expires_at: int | None


def value_usage(store: Store, ref: ValueRef) -> ValueUsage:
    """The size, record count and expiry of the value ``ref`` names (as
    ``store.list_values()`` lists it): its records read as a copy reads them
    (:func:`~sessionstore.transfer.records.value_item`), a history's every version
    included."""
    from .transfer.records import value_item

    item = value_item(store, ref)
    kept = item.versions if ref.history else [item.plain] if item.plain else []
    return ValueUsage(
        sum(len(stored.payload or b"") for stored in kept), len(kept), item.expires_at
    )


def namespace_bytes(store: Store) -> int:
    """What the namespace of ``store`` takes where it is stored: every session's
    ``events.stored_bytes`` (see it for what each backend counts) and every value's
    payloads (:func:`value_usage`). Reads every value's records and each session's size:
    an inspection, not a hot path. A session or value removed meanwhile, or a value
    whose records are damaged, counts 0."""
    total = 0
    for info in store.events.list_info():
        try:
            total += store.events.stored_bytes(info.header.id)
        except SessionNotFoundError:
            continue
    for ref in store.list_values():
        try:
            total += value_usage(store, ref).bytes
        except CorruptDataError:
            continue
    return total
