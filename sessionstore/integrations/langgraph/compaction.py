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
the first.

A compaction whose process dies midway is finished by the next read of the thread, by
any saver in any process (:func:`recover`), once its seal is
:data:`~.access.STALE_SEAL` seconds old (by the seal's own time): until then, readers
read on and writers wait, as while it runs. Its ``remove`` was appended with its seal,
once; what is left to do is what 2 to 4 do, each done so that doing it again, or after
another's, changes nothing:

* the log is there and sealed (it died in 1 or 2): the recovering saver appends a
  ``seal`` of its own after the stale one (seq-checked: of two recovering at once, one
  wins and the other waits for it), then does 2 to 4 under it;
* the log is gone (it died in 3): its copy holds it all, and the log is written anew
  from the copy, as the compaction would have. The log written anew is the same
  whoever writes it (the ``open`` at its end takes its id and time from the ``seal``),
  so a second writing of it is an applied replay of the store;
* the log was written anew (it died in 4): the copy is deleted by the next read that
  folds the ``open`` (:meth:`~.access.Threads.read`).

A compaction whose process was paused past :data:`~.access.STALE_SEAL` does not undo a
recovery: each deletion is guarded by the store (``EventLog.delete(..., last=)``): the
log is deleted only while it still ends with the compaction's seal (a recovering saver
appends a seal of its own first), and a copy only while it still ends with a seal the
deleting saver read in the log before its own, or with no seal (what a compaction that
found the log reopened copied before giving up); a copy made under a seal appended
since stays. A delete of the log whose reply was lost (the store's resend finds no log) is
told from a recoverer's by the copy, which ends with the seal of whoever deleted the log.
The log is written anew only while the copy still ends with the seal it was made under,
as a look at it that took less than half :data:`~.access.STALE_SEAL` found it just
before. What no store call guards is the time between that last look at the copy and
the append of the log written anew: a saver paused there, while the thread is recovered
by another, written to and compacted again up to the deletion of its log, would write
the older thread over it. The newer stays in the copy, which no log of the thread leads
to any more: the compaction that made it raises
:class:`~sessionstore.ConcurrentModificationError` naming it, and so does every later
compaction of the thread, which reopens the log (writers go on) and keeps the copy
until someone reads and deletes it. ``delete_thread`` seals the log as a compaction
does and deletes it only while it ends with that seal: one paused past the seal's
staleness waits for the saver that took the seal for abandoned to finish, then seals
and deletes again.

What stays of a removed checkpoint is its events' seqs, ids and types, and its
``remove`` entry: a few dozen bytes each. The log written anew, and the copy, have the
retention of the saver that writes them (its ``ttl``, else the store's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib

from sessionstore import (
    ConcurrentModificationError,
    SeqConflictError,
    SessionEvent,
    SessionExistsError,
    SessionHeader,
    SessionNotFoundError,
)

from .access import Call, Flow, Threads, last_event
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
    check_writable,
    now_ms,
    session_id,
    valid,
)
from .thread import Thread


def compact(threads: Threads, codec: Codec, thread_id: str, entries: Entries) -> Flow[None]:
    """Append ``entries`` to the thread with a ``seal``, then rewrite its log without
    what no longer counts; nothing when the thread has no log. A thread whose id leaves
    no room for its copy's is refused before anything is written."""
    check_writable(thread_id)
    sealed = yield from threads.append(
        thread_id, lambda thread: [*entries, (SEAL, {})], create=False
    )
    if sealed:
        yield from _rewrite(threads, codec, thread_id, sealed[-1])


def recover(threads: Threads, codec: Codec, thread_id: str) -> Flow[None]:
    """Finish the compaction of the thread whose seal is stale (see the module
    docstring); nothing when it has ended or another saver is at it."""
    sid = session_id(thread_id)
    try:
        events: list[SessionEvent] = yield Call("read_from", (sid, 0))
    except SessionNotFoundError:
        with contextlib.suppress(SessionNotFoundError):
            copy: list[SessionEvent] = yield Call("read_from", (backup_id(thread_id), 0))
            if copy and copy[-1].type == SEAL:  # else no compaction's (see Threads.events)
                yield from _write_anew(threads, codec, thread_id, copy)
        return
    thread = Thread().extended(events)
    if not (thread.sealed and threads.abandoned(thread)):
        return
    [seal] = chained([(SEAL, {})], thread.next_seq, thread.valid_id, _stamp(thread))
    try:
        yield Call("append", (sid, [seal]))
    except (SeqConflictError, SessionNotFoundError):
        return  # another saver took it first
    yield from _rewrite(threads, codec, thread_id, seal)


def _rewrite(threads: Threads, codec: Codec, thread_id: str, seal: SessionEvent) -> Flow[None]:
    """Steps 2 to 4 for the log sealed by ``seal``; nothing once another saver sealed
    it after (it recovers the compaction: this one's process was paused)."""
    sid, backup = session_id(thread_id), backup_id(thread_id)
    events: list[SessionEvent] = yield Call("read_from", (sid, 0))
    if events[-1].id != seal.id:
        return
    # A copy left by a compaction that died after its rewrite, made under a seal this
    # log holds before this one's; never one made under a seal appended since (a
    # recovering saver's, while this process was paused).
    earlier = {event.id for event in events[:-1] if event.type == SEAL}
    yield from _drop_copy_of(backup, earlier)
    try:
        yield Call("fork", (sid, backup))
    except SessionNotFoundError:
        return  # a recovering saver sealed it after this one looked, and took it over
    except SessionExistsError:
        if (yield from _last_id(sid)) != seal.id:
            return  # as above, the log still there
        copied = yield from last_event(backup)
        if copied is not None and copied.id != seal.id:
            yield from _orphan_copy(thread_id, events, copied)
        # Else a compaction paused past its seal's staleness copied this sealed log: the
        # copy holds what this one's would.
    if threads.ttl is not None:  # a copy left behind never outlives the log
        with contextlib.suppress(SessionNotFoundError):
            yield Call("set_ttl", (backup, threads.ttl))
    try:
        # The log written anew is made later than this one (on any host's clock), so a
        # write naming this one's header is refused there (see Threads.append).
        replaced: SessionHeader | None = (yield Call("info", (sid,))).header
    except SessionNotFoundError:
        replaced = None
    try:
        # Only while the log still ends with this seal: a saver that recovered the
        # compaction meanwhile (this process was paused) sealed it after.
        yield Call("delete", (sid,), {"last": seal})
    except SeqConflictError:
        yield from _drop_copy_of(backup, {seal.id})  # the copy this one made, if still
        return
    except SessionNotFoundError:
        # Deleted by this very call, its reply lost (the store's resend found nothing),
        # or by a saver that recovered the compaction: the copy ends with the seal of
        # the one that deleted it.
        if (yield from _last_id(backup)) != seal.id:
            return
    yield from _write_anew(threads, codec, thread_id, events, replaced)


def _orphan_copy(thread_id: str, events: list[SessionEvent], copied: SessionEvent) -> Flow[None]:
    """A copy ending with ``copied``, a seal the thread's log (``events``, sealed by this
    compaction) does not hold: made under a log that was replaced since (a saver paused
    past a seal's staleness wrote an older thread over a newer one, see the module
    docstring), so it may hold writes the log does not. It is kept; the log is reopened
    (writers go on) and the compaction refused, naming the copy."""
    with contextlib.suppress(SeqConflictError, SessionNotFoundError):
        yield Call("append", (session_id(thread_id), [opening(Thread().extended(events))]))
    raise ConcurrentModificationError(
        f"thread {thread_id!r} cannot be compacted: {backup_id(thread_id)!r} holds a copy of "
        f"it (its last event {copied.id!r}, seq {copied.seq}) that its log does not lead "
        f"to, which may hold writes the log lost; read it, and delete it to compact again"
    )


def _last_id(log: str) -> Flow[str | None]:
    last = yield from last_event(log)
    return None if last is None else last.id


def _drop_copy_of(backup: str, seals: set[str | None]) -> Flow[None]:
    """Delete the copy ``backup`` if it ends with one of ``seals`` (ids), or with no
    seal at all (a compaction copies its log right after sealing it: a copy ending
    otherwise was made by one that found the log reopened and gave up), guarded by that
    last event: a copy made under another seal meanwhile stays."""
    last = yield from last_event(backup)
    if last is not None and (last.type != SEAL or last.id in seals):
        with contextlib.suppress(SessionNotFoundError, SeqConflictError):
            yield Call("delete", (backup,), {"last": last})


def _write_anew(
    threads: Threads,
    codec: Codec,
    thread_id: str,
    events: list[SessionEvent],
    replaced: SessionHeader | None = None,
) -> Flow[None]:
    """Step 3's writing and step 4: the log written anew from the sealed ``events``
    (an applied replay when another saver wrote it first), then the copy deleted.
    Nothing is written unless the copy still ends with the seal of ``events``, found so
    by a look that ends within half ``Threads.stale_seal`` (:mod:`.access`) of its start:
    else another saver may have recovered the compaction, and the thread gone on,
    meanwhile (the log is left to the next recovery, which writes it anew from the copy
    if it is still current)."""
    sid, backup = session_id(thread_id), backup_id(thread_id)
    rewritten = compacted(events, codec)
    looked = now_ms()
    if (yield from _last_id(backup)) != events[-1].id:
        return
    if now_ms() > looked + threads.stale_seal * 500:
        return
    yield from threads.create(sid, replaced)
    for attempt in range(2):
        try:
            yield Call("append", (sid, rewritten))
            break
        except SessionExistsError:
            if attempt:
                raise
            # another saver created the log first: append to it
        except SeqConflictError:
            raise ConcurrentModificationError(
                f"thread {thread_id!r} was written while it was compacted, by something "
                f"that does not wait for its seal; what it held is kept in {backup!r}"
            ) from None
    threads.keep(sid, dataclasses.replace(Thread().extended(rewritten), reopened=None))
    # The copy, while it is the one of this seal (a later compaction's ends with its own).
    with contextlib.suppress(SessionNotFoundError, SeqConflictError):
        yield Call("delete", (backup,), {"last": events[-1]})


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
    # The writes of a checkpoint that a later ``remove`` took away count for nothing, nor
    # do those of a checkpoint removed for good that came after it (older versions took them).
    removed_later: set[tuple[str, str]] = set(final.removed)
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
    return [*kept, opening(final)]


def opening(sealed: Thread) -> SessionEvent:
    """The ``open`` that ends the compaction of the ``sealed`` thread: its id and time
    are the seal's (hashed), so every saver that writes it writes the same event."""
    seal = sealed.valid_id or ""
    return SessionEvent(
        seq=sealed.next_seq,
        type=OPEN,
        time=sealed.sealed_at,
        data={AFTER: sealed.valid_id},
        id=hashlib.blake2b(seal.encode(), digest_size=8).hexdigest(),
    )


def _stamp(thread: Thread) -> int:
    return max(now_ms(), thread.last_time)


def _left(event: SessionEvent, kind: str, data: dict[str, object]) -> SessionEvent:
    """What is left of ``event``: its seq, time, id and chain, with ``kind`` and ``data``."""
    return SessionEvent(
        seq=event.seq,
        type=kind,
        time=event.time,
        data={**data, AFTER: event.data.get(AFTER)},
        id=event.id,
    )
