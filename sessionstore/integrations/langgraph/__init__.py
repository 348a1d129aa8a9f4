"""LangGraph checkpoints on sessionstore event logs.

    from sessionstore.integrations.langgraph import SessionStoreSaver

    saver = SessionStoreSaver("redis://localhost:6379/0", namespace="graphs")
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})

:class:`SessionStoreSaver` is a ``langgraph.checkpoint.base.BaseCheckpointSaver`` with
the sync and the async methods in one object (as LangGraph's ``InMemorySaver``), on any
URL sessionstore takes: memory, files, SQLite, Redis, Redis Cluster and Sentinel. It uses
the store's public API only (event logs), no Redis module.

The modules, in the order a call goes through them:

* :mod:`.saver`: the protocol's methods, each sync one and its ``a`` twin a thin shell
  over one flow;
* :mod:`.listing`, :mod:`.ownership`, :mod:`.retention`: the flows (no I/O) of
  ``get_tuple``/``list``; ``put``/``put_writes``/``delete_thread`` and who may write a
  thread; ``prune``/``delete_for_runs`` and the ttl of a thread;
* :mod:`.compaction`: how ``prune`` and ``delete_for_runs`` give back the space of what
  they remove, with nothing lost while other runners read and write;
* :mod:`.access`: reading a thread (folded, kept, brought up to date) and appending to
  it, seq-checked and retried after a lost race; ``copy_thread``;
* :mod:`.thread` (a log folded), :mod:`.layout` (a thread's log and its events, and how
  they chain), :mod:`.codec` (LangGraph's objects as event data);
* :mod:`.driver`: a flow run against the sync or the async event log;
* :mod:`.errors`: :class:`ThreadConflictError` and :class:`ThreadDeletedError`.
"""

from __future__ import annotations

from .access import WRITE_ATTEMPTS, Call, Flow
from .errors import ThreadConflictError, ThreadDeletedError
from .layout import (
    AFTER,
    CHECKPOINT,
    DELETED,
    PREFIX,
    REMOVE,
    WRITES,
    Doomed,
    Entries,
    Names,
    session_id,
)
from .listing import Tuples
from .ownership import BRANCHING
from .saver import SessionStoreSaver
from .thread import Packed

__all__ = [
    "AFTER",
    "BRANCHING",
    "CHECKPOINT",
    "DELETED",
    "PREFIX",
    "REMOVE",
    "WRITES",
    "WRITE_ATTEMPTS",
    "Call",
    "Doomed",
    "Entries",
    "Flow",
    "Names",
    "Packed",
    "SessionStoreSaver",
    "ThreadConflictError",
    "ThreadDeletedError",
    "Tuples",
    "session_id",
]
