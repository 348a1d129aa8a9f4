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

from .admin import namespaces
from .contracts import Stored
from .defaults import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE
from .errors import (
    AccessDeniedError,
    ComputeTimeoutError,
    ConcurrentModificationError,
    CorruptDataError,
    CorruptLogError,
    DurabilityError,
    EventTimeOrderError,
    HarnessFieldError,
    InvalidArgumentError,
    LibraryMissingError,
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
    StoreNotFoundError,
    StoreUnavailableError,
    UnsafePathError,
    UnsupportedVersionError,
)
from .jsontext import JSONText
from .models import FORMAT_VERSION, SessionEvent, SessionHeader, SessionInfo
from .records import StoredRecord
from .results import LoadedSession, NamespaceUsage, ValueRecords, ValueRef
from .store import EventLog, Session, Store, connect
from .transfer import CopyReport, NamespaceNotEmptyError, copy
from .version import __version__ as __version__
from .writer import SessionWriter

__all__ = [
    "FORMAT_VERSION",
    "AccessDeniedError",
    "ComputeTimeoutError",
    "ConcurrentModificationError",
    "CopyReport",
    "CorruptDataError",
    "CorruptLogError",
    "DurabilityError",
    "EventLog",
    "EventTimeOrderError",
    "InvalidArgumentError",
    "JSONText",
    "LibraryMissingError",
    "LoadedSession",
    "NamespaceNotEmptyError",
    "NamespaceUsage",
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
    "StoreNotFoundError",
    "StoreUnavailableError",
    "Stored",
    "StoredRecord",
    "UnsafePathError",
    "UnsupportedVersionError",
    "ValueRecords",
    "ValueRef",
    "connect",
    "copy",
    "namespaces",
]
