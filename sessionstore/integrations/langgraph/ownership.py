"""Who may write a thread (LangGraph leaves it open; this saver chooses), as flows.

A thread has one chain of checkpoints per namespace, written by one runner at a time.
Every write is checked against the thread as stored at the seq it is appended at (a
write that lost the race to another reads what landed first and is checked again), so:

* a ``put`` of the graph's own checkpoints (namespace ``""``) whose parent is no longer
  the latest checkpoint there raises :class:`.ThreadConflictError`: another runner, in
  this process or another, continued the thread since this one read it. Nothing is
  written; the runner that wrote first goes on. A branch made on purpose is kept:

  - one whose parent is the checkpoint the run's caller named (:func:`caller_named`): a
    replay, a fork or a resume from a ``checkpoint_id`` given (time travel), or from a
    subgraph's checkpoint, whose config names its parent's checkpoint in
    ``checkpoint_map``. Only the branch's first checkpoint is let through: the next
    continues from it and is checked as any, so a run whose branch another runner went
    on with since is refused;
  - one LangGraph marks as a branch: ``source="fork"`` (a replay) and ``"update"``
    (``update_state``) (:data:`BRANCHING`).

  A ``put`` without a parent (a new thread's first checkpoint) of a graph's run is
  checked against what the run found when it started (:class:`RunStarts`: LangGraph's
  run reads the thread first, then puts with the same run object in its config): a
  thread that has a checkpoint of its own by then (another runner started it) raises
  :class:`.ThreadConflictError`, one deleted since raises :class:`.ThreadDeletedError`;
  so a run with ``durability="exit"``, whose only ``put`` comes at its end, neither
  forks a new thread another started nor brings back one deleted while it ran. A
  ``put`` without a parent from outside a run (the saver called directly, a run
  forgotten among :data:`RUNS_KEPT` later ones) is checked against a deletion only. Two
  runs given one ``checkpoint_id`` at once, or a run given the latest checkpoint's id
  and a runner going on from it, each put their branch's first checkpoint, and the one
  whose branch is not the latest is refused at its next ``put``;
* ``delete_thread`` seals the log (waiting for a compaction under way, see
  :mod:`.compaction`), deletes it and writes it anew with a ``deleted`` event; a
  ``put`` whose parent is not stored, and a ``put`` without a parent or a
  ``put_writes`` of a checkpoint made before the deletion, raise
  :class:`.ThreadDeletedError`, and so does every write of a run that started before
  the deletion (:class:`RunStarts`; with ``durability="async"`` LangGraph goes on
  running nodes after a ``put`` of the run was refused, and writes for checkpoints
  made after the deletion): a graph still running never brings the thread back.
  A write that took seq 0 of the new log before the ``deleted`` event is deleted again.
  ``put_writes`` of a checkpoint that ``prune`` or ``delete_for_runs`` removed raises
  :class:`.ThreadDeletedError` too; of a checkpoint not stored yet it is accepted
  otherwise (LangGraph does not wait for the ``put`` of a checkpoint before writing for
  it).

A subgraph's checkpoints (namespaces of their own) are not checked: a stateful
subgraph goes on from an older checkpoint of its own after each tick, replay or fork of
its parent, which LangGraph does not mark as a branch; a second runner is refused at
its next root ``put`` all the same (what it wrote in a subgraph first stays, a branch no
root checkpoint leads to).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from langgraph.checkpoint.base.id import uuid6

from sessionstore import (
    ConcurrentModificationError,
    SeqConflictError,
    SessionEvent,
    SessionExistsError,
    SessionNotFoundError,
)

from .access import WRITE_ATTEMPTS, Call, Flow, Threads, backoff, last_event
from .errors import ThreadConflictError, ThreadDeletedError
from .layout import (
    AFTER,
    CHECKPOINT,
    DELETED,
    SEAL,
    WRITES,
    Entries,
    backup_id,
    chained,
    now_ms,
    session_id,
)
from .thread import Saved, Thread

#: The namespace of a thread's own graph; a subgraph's checkpoints have namespaces of
#: their own (``"child:<task>"``, or ``"child"`` for a stateful subgraph).
ROOT = ""
#: Sources of checkpoints that branch off on purpose: LangGraph's replay from an
#: earlier checkpoint ("fork") and ``update_state`` ("update").
BRANCHING = ("fork", "update")
#: The key of ``configurable`` under which LangGraph passes a graph's run object: the
#: same object in the run's every call of the saver (its first read and its puts).
RUN_KEY = "__pregel_runtime"
#: How many runs that started on a thread without checkpoints a saver remembers.
RUNS_KEPT = 1024
#: A run :class:`RunStarts` has not seen start.
UNSEEN: Final = object()


class RunStarts:
    """What each run of a graph found of its thread when it started (LangGraph's run
    reads the thread's checkpoint first): the thread's deletion mark then, for every
    write of the run, and whether it had no checkpoint of its own, until the run's
    ``put`` without a parent; the last :data:`RUNS_KEPT` runs of each. A run is known by
    its run object's identity, the object not held (it holds the run's context): a later
    run given the same identity reads the thread first too, which replaces what an
    earlier one left."""

    def __init__(self) -> None:
        self._found: OrderedDict[tuple[int, str], Any] = OrderedDict()
        self._marks: OrderedDict[tuple[int, str], Any] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, config: Mapping[str, Any], thread_id: str, thread: Thread) -> None:
        """Note what the run of ``config`` (if a run's) found of the thread's own graph
        when it read its checkpoint (the latest, when no ``checkpoint_id`` was given)."""
        configurable = config.get("configurable", {})
        run = configurable.get(RUN_KEY)
        if run is None or configurable.get("checkpoint_ns", ROOT) != ROOT:
            return
        key = (id(run), thread_id)
        with self._lock:
            _remember(self._marks, key, (thread.deleted_before, thread.next_seq > 0))
            if configurable.get("checkpoint_id"):
                return
            if thread.latest(ROOT) is None:
                _remember(self._found, key, thread.deleted_before)
            else:
                self._found.pop(key, None)

    def wrote(self, config: Mapping[str, Any], thread_id: str) -> None:
        """Note that a ``put`` of the run of ``config`` landed: the thread's log exists
        from then on for it (it did not, when the run started a new thread)."""
        run = config.get("configurable", {}).get(RUN_KEY)
        if run is None:
            return
        key = (id(run), thread_id)
        with self._lock:
            found = self._marks.get(key)
            if found is not None and not found[1]:
                self._marks[key] = (found[0], True)

    def mark(self, config: Mapping[str, Any], thread_id: str) -> object:
        """What the run of ``config`` found when it started on the thread (its deletion
        mark, and whether its log existed); :data:`UNSEEN` when it did not, or is not a
        run."""
        run = config.get("configurable", {}).get(RUN_KEY)
        if run is None:
            return UNSEEN
        with self._lock:
            return self._marks.get((id(run), thread_id), UNSEEN)

    def started(self, config: Mapping[str, Any], thread_id: str) -> object:
        """The deletion mark the run of ``config`` found when it started on the thread
        without checkpoints (forgotten now: a run puts without a parent once);
        :data:`UNSEEN` when it did not, or is not a run."""
        run = config.get("configurable", {}).get(RUN_KEY)
        if run is None:
            return UNSEEN
        with self._lock:
            return self._found.pop((id(run), thread_id), UNSEEN)


def _remember(runs: OrderedDict[tuple[int, str], Any], key: tuple[int, str], mark: Any) -> None:
    runs[key] = mark
    runs.move_to_end(key)
    while len(runs) > RUNS_KEPT:
        runs.popitem(last=False)


def check_run_mark(
    thread: Thread, thread_id: str, ns: str, checkpoint_id: str, mark: object
) -> None:
    """Raise :class:`.ThreadDeletedError` when the thread was deleted since the run
    that writes ``checkpoint_id`` started, or its log, which existed then or which the
    run wrote since, is gone (it expired) (``mark``: see :meth:`RunStarts.mark`)."""
    if not isinstance(mark, tuple) or ns != ROOT:
        return  # UNSEEN; a subgraph's run object may never have read the thread itself
    deleted_before, existed = mark
    if thread.deleted_before != deleted_before or (existed and not thread.next_seq):
        raise ThreadDeletedError(thread_id, ns, checkpoint_id)


def caller_named(config: Mapping[str, Any], ns: str) -> frozenset[str]:
    """The checkpoints of namespace ``ns`` that the caller of the run putting with
    ``config`` named, so that the run starts from them on purpose. LangGraph (1.2.24
    here) passes the caller's config on to ``put``: the ``configurable`` it gives has
    the parent as ``checkpoint_id``, but the run's ``metadata`` keeps the caller's
    ``checkpoint_id`` and ``checkpoint_ns`` (as ``ensure_config`` copies them there);
    and the config of a subgraph's checkpoint (as ``get_state(subgraphs=True)`` returns
    it) names the parent's checkpoint of each namespace above in ``checkpoint_map``.
    ``test_langgraph.py``'s ``named_checkpoint_run`` fails when that changes."""
    found: set[object] = set()
    metadata = config.get("metadata")
    if isinstance(metadata, Mapping) and (metadata.get("checkpoint_ns") or "") == ns:
        found.add(metadata.get("checkpoint_id"))
    mapped = config.get("configurable", {}).get("checkpoint_map")
    if isinstance(mapped, Mapping):
        found.add(mapped.get(ns))
    return frozenset(name for name in found if isinstance(name, str) and name)


def put(
    threads: Threads,
    thread_id: str,
    data: dict[str, Any],
    source: object,
    named: frozenset[str] = frozenset(),
    started: object = UNSEEN,
    mark: object = UNSEEN,
) -> Flow[None]:
    """Append the ``checkpoint`` event ``data``, refused as the module says (``source``
    is its metadata's, ``named`` what the run's caller named, see :func:`caller_named`,
    ``started`` what its run found when it started on a thread without checkpoints and
    ``mark`` the deletion mark it found, see :class:`RunStarts`)."""
    ns, checkpoint_id, parent = data["ns"], data["id"], data["parent"]
    on_purpose = source in BRANCHING or parent in named

    def entries(thread: Thread) -> Entries:
        saved: Mapping[str, Saved] = thread.checkpoints.get(ns, {})
        check_run_mark(thread, thread_id, ns, checkpoint_id, mark)
        if checkpoint_id in saved:  # put again: it replaces itself
            pass
        elif parent is None:
            if started is not UNSEEN and ns == ROOT and not on_purpose:
                if thread.deleted_before != started:
                    raise ThreadDeletedError(thread_id, ns, checkpoint_id)
                if (latest := thread.latest(ns)) is not None:
                    raise ThreadConflictError(thread_id, ns, None, latest)
            thread.check_not_deleted(thread_id, ns, checkpoint_id)
        elif parent not in saved:
            raise ThreadDeletedError(thread_id, ns, parent)
        elif ns == ROOT and (latest := thread.latest(ns)) != parent and not on_purpose:
            raise ThreadConflictError(thread_id, ns, parent, str(latest))
        return [(CHECKPOINT, data)]

    yield from threads.append(thread_id, entries)


def put_writes(
    threads: Threads, thread_id: str, data: dict[str, Any], mark: object = UNSEEN
) -> Flow[None]:
    """Append the ``writes`` event ``data``; refused for a checkpoint of a deleted thread,
    and for any of a run that started before the thread was deleted (``mark``: see
    :meth:`RunStarts.mark`)."""
    ns, checkpoint_id = data["ns"], data["checkpoint"]

    def entries(thread: Thread) -> Entries:
        check_run_mark(thread, thread_id, ns, checkpoint_id, mark)
        # Writes may land before the put of their checkpoint (LangGraph does not
        # wait for it): only a checkpoint removed, or of a deleted thread, is refused.
        if checkpoint_id not in thread.checkpoints.get(ns, {}):
            thread.check_not_removed(thread_id, ns, checkpoint_id)
        return [(WRITES, data)]

    yield from threads.append(thread_id, entries)


def delete(threads: Threads, thread_id: str) -> Flow[None]:
    """Seal the log (waiting for a compaction under way, see :mod:`.compaction`), delete
    it while it still ends with that seal, then start it again with a ``deleted`` event
    at seq 0, which refuses every write of a checkpoint made before it. A write that
    took seq 0 first (a late one, or one as concurrent as this call) is sealed and
    deleted again. A saver that took the seal for abandoned (this process paused past its
    staleness) recovers the log first: this one seals it again once it has."""
    sid = session_id(thread_id)
    mark = {"before": str(uuid6())}
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        sealed = yield from threads.append(thread_id, lambda thread: [(SEAL, {})], create=False)
        replaced = threads.header_of(sid) if sealed else None
        if sealed and not (yield from _deleted_under(thread_id, sealed[-1])):
            yield from backoff(attempt)
            continue
        yield from threads.create(sid, replaced)
        [tombstone] = chained([(DELETED, mark)], 0, None, now_ms())
        try:
            yield Call("append", (sid, [tombstone]))
        except (SeqConflictError, SessionExistsError, SessionNotFoundError):
            # A late write took seq 0 of the new log (and created it, with its header).
            yield from backoff(attempt)
            continue
        threads.keep(sid, Thread().extended([tombstone]))
        return
    raise ConcurrentModificationError(
        f"delete_thread of {thread_id!r} lost {WRITE_ATTEMPTS} races in a row"
    )


def _deleted_under(thread_id: str, seal: SessionEvent) -> Flow[bool]:
    """Delete the thread's log while it ends with ``seal``: whether it is gone by this
    call; False when a saver that took the seal for abandoned sealed it after (it
    recovers it). A log found gone was deleted by this very call (its reply lost, the
    resend found nothing) unless the copy ends with a recovering saver's seal, chained
    after this one."""
    try:
        yield Call("delete", (session_id(thread_id),), {"last": seal})
    except SeqConflictError:
        return False
    except SessionNotFoundError:
        copied = yield from last_event(backup_id(thread_id))
        if copied is not None and copied.type == SEAL and copied.data.get(AFTER) == seal.id:
            return False
    return True
