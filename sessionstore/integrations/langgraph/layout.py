"""Where a thread is stored and how its events chain: a thread is one event log,
``langgraph:<thread_id>``, so all of it lives under one key hash slot on Redis Cluster
and every write to it is one durable, seq-checked, all-or-nothing append. Its events:

* ``checkpoint``: ``data = {"ns", "id", "parent", "checkpoint", "metadata", "blobs"}``,
  one ``put``: the checkpoint without its channel values, its metadata, and the
  channels of ``new_versions`` as ``[channel, version, value]`` (``value`` None when
  the channel is empty);
* ``writes``: ``data = {"ns", "checkpoint", "task", "path", "writes"}``, one
  ``put_writes``: ``writes`` is ``[[idx, channel, value], ...]``;
* ``remove``: ``data = {"checkpoints": [[ns, id], ...]}``, appended by ``prune`` and
  ``delete_for_runs``: those checkpoints and their writes are gone from then on;
* ``deleted``: ``data = {"before": id}``, the first event of a log written anew by
  ``delete_thread``: nothing of the thread before it, and every checkpoint made before
  ``id`` (a checkpoint id made at the deletion) belongs to the deleted thread;
* ``seal``: ``data = {}``, appended by a compaction (and by ``delete_thread``) before it
  rewrites the log: while it is the last event that counts, nobody else writes;
* ``open``: ``data = {}``, the end of a compaction's rewrite: writes go on after it;
* ``blobs``: ``data = {"ns", "blobs"}``, what a compaction leaves of a ``checkpoint``
  event whose checkpoint was removed: the channel values a kept checkpoint still uses;
* ``void``: ``data = {}``, what a compaction leaves of an event that no longer holds
  anything (a removed checkpoint, its writes, an event that counted for nothing).

A compaction (see :mod:`.compaction`) keeps every event's seq, id and :data:`AFTER`, so
the log it writes chains as the one it replaces; while it runs, the sealed log is also
kept as ``langgraph-compacting:<thread_id>`` (:data:`BACKUP_PREFIX`).

Every event's data also names (:data:`AFTER`) the last event that counted when it was
written; an event naming another counts for nothing. Values, checkpoints and metadata
are packed by :mod:`.codec`.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from sessionstore import InvalidArgumentError, SessionEvent
from sessionstore.eventlog import HEADER_FIELD_BYTES
from sessionstore.jsondata import short_repr

#: The event log of thread ``T`` is ``PREFIX + T``.
PREFIX = "langgraph:"
#: Event types of a thread's log.
CHECKPOINT = "checkpoint"
WRITES = "writes"
REMOVE = "remove"
DELETED = "deleted"
SEAL = "seal"
OPEN = "open"
BLOBS = "blobs"
VOID = "void"
#: What ``copy_thread`` copies: the events that hold the thread, not those of its log.
HOLDING = (CHECKPOINT, WRITES, REMOVE, BLOBS)
#: While a compaction of thread ``T`` runs, its sealed log is kept as ``BACKUP_PREFIX + T``.
BACKUP_PREFIX = "langgraph-compacting:"
#: The most bytes (UTF-8) of a thread id: its compaction copy's log id must fit in a
#: session id.
THREAD_ID_BYTES = HEADER_FIELD_BYTES - len(BACKUP_PREFIX)
#: The field of every event's data naming the id of the last event that counted when it
#: was written (None for the first). Only an event naming the last event that counts
#: before it counts: one written by a writer that read a log since deleted (and landed on
#: the log written anew, at the seq it expected) counts for nothing, nor does any event
#: written after it by that writer.
AFTER = "after"

#: Thread ids; (namespace, checkpoint id) pairs to remove.
Names = list[str]
Doomed = list[list[str]]
#: Events to append, as (type, data) pairs.
Entries = list[tuple[str, dict[str, Any]]]


def session_id(thread_id: Any) -> str:
    """The event log of ``thread_id`` (LangGraph's thread ids are strings; others are
    taken as their ``str``)."""
    return PREFIX + str(thread_id)


def backup_id(thread_id: Any) -> str:
    """Where a compaction keeps the sealed log of ``thread_id`` while it runs (none can
    for a thread whose id :func:`check_writable` refuses)."""
    return BACKUP_PREFIX + str(thread_id)


def check_writable(thread_id: Any) -> str:
    """``str(thread_id)``, or :class:`~sessionstore.InvalidArgumentError` when it is
    longer than :data:`THREAD_ID_BYTES`: a new thread is refused such an id before
    anything is written, and so is a compaction of one (an older version stored such
    threads: they are read, listed and deleted as any)."""
    text = str(thread_id)
    if len(text) * 4 > THREAD_ID_BYTES and len(text.encode("utf-8", "replace")) > THREAD_ID_BYTES:
        raise InvalidArgumentError(
            f"thread id {short_repr(text)} is longer than {THREAD_ID_BYTES} bytes (UTF-8), the"
            " most a thread id holds (its log's id and its compaction copy's must fit)"
        )
    return text


def thread_ids(session_ids: list[str]) -> Names:
    """The threads among the event logs ``session_ids``, in their order, each once (a
    thread being compacted may have two logs for a moment)."""
    found: dict[str, None] = {}
    for sid in session_ids:
        for prefix in (PREFIX, BACKUP_PREFIX):
            if sid.startswith(prefix):
                found.setdefault(sid[len(prefix) :])
    return list(found)


def chained(made: Entries, first: int, after: str | None, stamp: int) -> list[SessionEvent]:
    """The events of ``made`` from seq ``first``, each naming in ``data["after"]`` the
    id of the event before it (``after`` for the first)."""
    batch = []
    for i, (kind, data) in enumerate(made):
        event = SessionEvent(
            seq=first + i, type=kind, time=stamp, data={**data, AFTER: after}, id=event_id()
        )
        batch.append(event)
        after = event.id
    return batch


def valid(events: list[SessionEvent]) -> list[SessionEvent]:
    """The events of a whole log that count (see :data:`AFTER`)."""
    counted: list[SessionEvent] = []
    for event in events:
        if event.data.get(AFTER) == (counted[-1].id if counted else None):
            counted.append(event)
    return counted


def event_id() -> str:
    """A random id for each event: an event read again is known by it."""
    return secrets.token_hex(8)


def now_ms() -> int:
    return time.time_ns() // 1_000_000
