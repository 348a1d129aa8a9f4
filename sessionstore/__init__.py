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

from .errors import (
    AccessDeniedError,
    ConcurrentModificationError,
    CorruptLogError,
    DurabilityError,
    HarnessFieldError,
    InvalidArgumentError,
    NotJSONSerializableError,
    NotReplicatedError,
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
from .store import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE
from .store import EventLog, Session, Store, connect
from .writer import SessionWriter

__version__ = "0.1.0"


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
    "NotReplicatedError",
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
