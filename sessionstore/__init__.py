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

from .connection import open_backends, resolve_url
from .core import LoadedSession, ValueRef, check_namespace, check_ttl
from .errors import (
    AccessDeniedError,
    ConcurrentModificationError,
    CorruptLogError,
    DurabilityError,
    InvalidArgumentError,
    NotJSONSerializableError,
    NotSerializableError,
    SeqConflictError,
    SessionDisposedError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    StoreClosedError,
    StoreUnavailableError,
    UnsupportedVersionError,
)
from .models import FORMAT_VERSION, SessionEvent, SessionHeader
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
) -> Store:
    """Open a store on ``url`` (see :mod:`sessionstore.connection` for the schemes).

    ``timeout`` bounds how long a call waits for an unreachable server before raising
    ``StoreUnavailableError`` (Redis; default 5 s). ``durability`` (Redis event logs):
    ``"fsync"`` (default), ``"replicas:N"`` or ``"none"``; the URL may carry
    ``?durability=...`` instead. ``ttl`` (seconds > 0) is the retention of the event-log
    sessions this store creates (``events.create(..., ttl=...)`` overrides it): each
    expires ``ttl`` after its last append; None (default) keeps them for good. A bad
    ``ttl`` raises ``InvalidArgumentError``. Opening does no I/O; the first call connects.
    """
    resolved = resolve_url(url)
    ttl_ms = check_ttl(ttl)
    options: dict[str, Any] = {"timeout": timeout, "durability": durability}
    return Store(open_backends(resolved, check_namespace(namespace), options), namespace, ttl_ms)


__all__ = [
    "FORMAT_VERSION",
    "AccessDeniedError",
    "ConcurrentModificationError",
    "CorruptLogError",
    "DurabilityError",
    "EventLog",
    "InvalidArgumentError",
    "LoadedSession",
    "NotJSONSerializableError",
    "NotSerializableError",
    "SeqConflictError",
    "Session",
    "SessionDisposedError",
    "SessionEvent",
    "SessionExistsError",
    "SessionHeader",
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
