"""Giving back the space of removed checkpoints: a compaction rewrites a thread's log
without what no longer counts (flows, and :func:`compacted`, which does no I/O).

The store's logs are append-only, so a compaction writes the log anew, and must do so
without losing a write that another runner has been told is stored, and without losing
the thread if its process dies midway:

1. it appends a ``seal`` (with the ``remove`` event that makes it, in one seq-checked
   batch). While the seal is the last event that counts, writers wait (reads go on),
   and a writer that read the log before finds the seal where it meant to append;
2. it copies the sealed log to ``langgraph-compacting:<thread_id>`` (``fork``: one
   atomic write). From then on the thread is in the store twice; while the log itself is
   missing, readers read the copy;
3. it deletes the log and writes it anew in one append: every event at its seq, with its
   id and :data:`~.layout.AFTER`, so the new log chains exactly as the old one (a reader
   that had folded part of it reads on from where it was, and a write chained to it
   counts as it would have), but a removed checkpoint's event keeps only the channel
   values that a kept checkpoint uses (``blobs``), and the writes of a removed
   checkpoint and the events that counted for nothing keep nothing (``void``). It ends
   with an ``open`` event: writers go on;
4. it deletes the copy.

Nobody else deletes or writes the log meanwhile: ``delete_thread`` seals it too (so it
waits for a compaction under way, as a writer does), and a second compaction waits for
the first. A compaction whose process dies between 1 and 4 leaves the thread readable
but sealed: writers wait, then raise :class:`~sessionstore.ConcurrentModificationError`
naming the copy. Nothing is lost: the log (or, after 3 began, the copy) holds it all.
What stays of a removed checkpoint is its events' seqs, ids and types, and its ``remove``
entry: a few dozen bytes each. The log written anew has the retention of the saver that
compacts (its ``ttl``, else the store's).
"""

from __future__ import annotations

import contextlib

from sessionstore import (
    ConcurrentModificationError,
    SeqConflictError,
    SessionEvent,
    SessionNotFoundError,
)

from .access import Call, Flow, Threads
from .codec import Codec
from .layout import (
    AFTER,
    BLOBS,
    CHECKPOINT,
    OPEN,
    REMOVE,
    SEAL,
    VOID,
    WRITES,
    Entries,
    backup_id,
    chained,
    now_ms,
    session_id,
    valid,
)
from .thread import Thread


def compact(threads: Threads, codec: Codec, thread_id: str, entries: Entries) -> Flow[None]:
    """Append ``entries`` to the thread with a ``seal``, then rewrite its log without
    what no longer counts; nothing when the thread has no log."""
    sealed = yield from threads.append(
        thread_id, lambda thread: [*entries, (SEAL, {})], create=False
    )
    if not sealed:
        return
    sid, backup = session_id(thread_id), backup_id(thread_id)
    events: list[SessionEvent] = yield Call("read_from", (sid, 0))
    rewritten = compacted(events, codec)
    # A copy left by a compaction that died after its rewrite: the seal this one holds
    # says no other is under way.
    with contextlib.suppress(SessionNotFoundError):
        yield Call("delete", (backup,))
    yield Call("fork", (sid, backup))
    yield Call("delete", (sid,))
    yield from threads.create(sid)
    try:
        yield Call("append", (sid, rewritten))
    except SeqConflictError:
        raise ConcurrentModificationError(
            f"thread {thread_id!r} was written while it was compacted, by something that "
            f"does not wait for its seal; what it held is kept in {backup!r}"
        ) from None
    threads.keep(sid, Thread().extended(rewritten))
    with contextlib.suppress(SessionNotFoundError):
        yield Call("delete", (backup,))


def compacted(events: list[SessionEvent], codec: Codec) -> list[SessionEvent]:
    """The log ``events`` (sealed: a ``seal`` is the last event that counts) as a
    compaction writes it anew, ``open`` at its end: the same seqs, ids and chain, what
    no longer counts left out (see the module docstring)."""
    counted = {event.id for event in valid(events)}
    final = Thread().extended(events)
    used = {
        (ns, channel, version)
        for ns, saved in final.checkpoints.items()
        for entry in saved.values()
        for channel, version in codec.unpack(entry.checkpoint)["channel_versions"].items()
    }
    # The writes of a checkpoint that a later ``remove`` took away count for nothing.
    removed_later: set[tuple[str, str]] = set()
    kept: list[SessionEvent] = []
    for event in reversed(events):
        data, kind = event.data, event.type
        if event.id not in counted:
            kept.append(_left(event, VOID, {}))
        elif kind == REMOVE:
            removed_later.update((ns, checkpoint_id) for ns, checkpoint_id in data["checkpoints"])
            kept.append(event)
        elif kind == WRITES and (data["ns"], data["checkpoint"]) in removed_later:
            kept.append(_left(event, VOID, {}))
        elif kind == CHECKPOINT and data["id"] not in final.checkpoints.get(data["ns"], {}):
            ns = data["ns"]
            blobs = [blob for blob in data["blobs"] if (ns, blob[0], blob[1]) in used]
            kept.append(
                _left(event, BLOBS, {"ns": ns, "blobs": blobs}) if blobs else _left(event, VOID, {})
            )
        else:
            kept.append(event)
    kept.reverse()
    stamp = max(now_ms(), final.last_time)
    return kept + chained([(OPEN, {})], final.next_seq, final.valid_id, stamp)


def _left(event: SessionEvent, kind: str, data: dict[str, object]) -> SessionEvent:
    """What is left of ``event``: its seq, time, id and chain, with ``kind`` and ``data``."""
    return SessionEvent(
        seq=event.seq,
        type=kind,
        time=event.time,
        data={**data, AFTER: event.data.get(AFTER)},
        id=event.id,
    )
