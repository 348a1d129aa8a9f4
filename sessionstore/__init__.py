"""sessionstore: one shared, durable, look-ahead-safe session store for parallel workers.

    import sessionstore
    with sessionstore.connect("redis://localhost:6379/0", namespace="run-42") as store:
        s = store.session("BTCUSDT", strategy="llm-momentum", exchange="binance", frame="1h")
        s.set_data({"lastLlmSignal": "buy"}, when)
        s.get_data(when)          # never a value written for a later time
        store.events.append(...)  # durable session event logs

``sessionstore.aio.connect`` gives the same API with coroutines.
"""

from __future__ import annotations

import os
from typing import Any

from .arguments import check_namespace, check_ttl
from .connection import ConnectArgs, open_backends, resolve_url
from .errors import (
    AccessDeniedError,
    ConcurrentModificationError,
    CorruptLogError,
    DurabilityError,
    HarnessFieldError,
    InvalidArgumentError,
    NotJSONSerializableError,
    NotSerializableError,
    SeqConflictError,
    SessionBusyError,
    SessionDisposedError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    StoreClosedError,
    StoreUnavailableError,
    UnsupportedVersionError,
)
from .models import FORMAT_VERSION, SessionEvent, SessionHeader, SessionInfo
from .results import LoadedSession, ValueRef
from .store import EventLog, Session, Store
from .writer import SessionWriter

__version__ = "0.1.0"

DEFAULT_NAMESPACE = "default"


def connect(
    url: str | os.PathLike[str] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    *,
    timeout: float | None = None,
    durability: str | None = None,
    ttl: float | None = None,
    cache: bool | None = None,
) -> Store:
    """Open a store on ``url`` (see :mod:`sessionstore.connection` for the schemes).

    ``timeout`` bounds how long a call waits for an unreachable server before raising
    ``StoreUnavailableError`` (Redis; default 5 s). ``durability`` (Redis event logs):
    ``"fsync"`` (default), ``"replicas:N"`` or ``"none"``; the URL may carry
    ``?durability=...`` instead. ``ttl`` (seconds > 0) is the retention of the event-log
    sessions this store creates (``events.create(..., ttl=...)`` overrides it): each
    expires ``ttl`` after its last append; None (default) keeps them for good. A bad
    ``ttl`` raises ``InvalidArgumentError``. ``cache=True`` (or ``?cache=yes``) answers
    repeated reads of unchanged plain values from process memory, invalidated by the
    server (Redis, sync client, single server or Sentinel). Opening does no I/O; the first
    call connects.

    The store pickles, and so do its handles and ``store.events``: another process gets
    the URL (password included), namespace and these options, and connects on first use
    (see :meth:`Store.__reduce__`). A ``memory://`` store cannot travel: pickling it
    raises ``SessionStoreError``.
    """
    resolved = resolve_url(url)
    ttl_ms = check_ttl(ttl)
    options: dict[str, Any] = {"timeout": timeout, "durability": durability, "cache": cache}
    backends = open_backends(resolved, check_namespace(namespace), options)
    args = ConnectArgs.of(resolved, namespace, timeout, durability, ttl, cache)
    return Store(backends, namespace, ttl_ms, args=args)


__all__ = [
    "FORMAT_VERSION",
    "AccessDeniedError",
    "ConcurrentModificationError",
    "CorruptLogError",
    "DurabilityError",
    "EventLog",
    "InvalidArgumentError",
    "LoadedSession",
    "HarnessFieldError",
    "NotJSONSerializableError",
    "NotSerializableError",
    "SeqConflictError",
    "Session",
    "SessionBusyError",
    "SessionDisposedError",
    "SessionEvent",
    "SessionExistsError",
    "SessionHeader",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStoreError",
    "SessionWriter",
    "Store",
    "StoreClosedError",
    "StoreUnavailableError",
    "UnsupportedVersionError",
    "ValueRef",
    "connect",
]
