"""What a thread keeps, as flows: ``prune`` and ``delete_for_runs`` remove checkpoints
(with their writes) and give their space back (:mod:`.compaction`); neither creates a
thread; ``delete_for_runs`` reads every thread of the namespace. The ttl of a thread
(the saver's ``ttl``) is kept by :mod:`.access`: the logs it creates get it, every
append moves their expiry, and so does a read when the saver was made with
``refresh_on_read``."""

from __future__ import annotations

from collections.abc import Sequence

from sessionstore import InvalidArgumentError

from .access import Flow, Threads
from .codec import Codec
from .compaction import compact
from .layout import REMOVE, Doomed
from .ownership import delete
from .thread import Thread

#: What ``prune`` takes as its ``strategy``.
STRATEGIES = ("keep_latest", "delete")


def remove(
    threads: Threads, codec: Codec, thread_id: str, thread: Thread, doomed: Doomed
) -> Flow[None]:
    """Remove the checkpoints ``doomed`` ((namespace, id) pairs) from the ``thread`` as
    read, and what only they hold from the store; with none, still give back the space
    of writes to checkpoints removed before (which older versions took)."""
    if doomed or not thread.removed.isdisjoint(thread.writes):
        yield from compact(threads, codec, thread_id, [(REMOVE, {"checkpoints": doomed})])


def prune(threads: Threads, codec: Codec, thread_ids: Sequence[str], strategy: str) -> Flow[None]:
    """``"keep_latest"``: keep only the latest checkpoint of each namespace of each
    thread (with its writes), and what its ``DeltaChannel`` values are rebuilt from
    (:func:`kept_latest`); ``"delete"``: delete the threads."""
    if strategy not in STRATEGIES:
        raise InvalidArgumentError(
            f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}"
        )
    for thread_id in thread_ids:
        if strategy == "delete":
            yield from delete(threads, thread_id)
            continue
        thread = yield from threads.read(thread_id)
        doomed: Doomed = []
        for ns, saved in thread.checkpoints.items():
            kept = kept_latest(thread, codec, ns)
            doomed.extend(
                [ns, checkpoint_id] for checkpoint_id in sorted(saved) if checkpoint_id not in kept
            )
        yield from remove(threads, codec, thread_id, thread, doomed)


def kept_latest(thread: Thread, codec: Codec, ns: str) -> set[str]:
    """What ``keep_latest`` keeps of namespace ``ns``: its latest checkpoint, and the
    ancestors (with their writes) that LangGraph rebuilds the latest's ``DeltaChannel``
    values from: each delta channel the latest holds no value of (its metadata's
    ``counters_since_delta_snapshot`` names it) is rebuilt from the writes of the
    ancestors back to the nearest one that holds a value of it (a snapshot), so those
    are kept, that one included."""
    saved = thread.checkpoints[ns]
    checkpoint_id = thread.latest(ns)
    if checkpoint_id is None:
        return set()
    kept = {checkpoint_id}
    entry = saved[checkpoint_id]
    counters = codec.metadata(entry).get("counters_since_delta_snapshot") or {}
    unseeded = set(counters)
    while unseeded:
        versions = codec.unpack(entry.checkpoint)["channel_versions"]
        unseeded = {
            channel
            for channel in unseeded
            if channel in versions and thread.blobs.get((ns, channel, versions[channel])) is None
        }
        parent = entry.parent
        if not unseeded or parent is None or parent not in saved or parent in kept:
            break
        kept.add(parent)
        entry = saved[parent]
    return kept


def delete_for_runs(threads: Threads, codec: Codec, run_ids: Sequence[str]) -> Flow[None]:
    """Remove, in every thread of the namespace, the checkpoints whose metadata
    ``run_id`` is one of ``run_ids``, with their writes."""
    runs = set(run_ids)
    if not runs:
        return
    for thread_id in (yield from threads.names(None)):
        thread = yield from threads.read(thread_id)
        doomed = [
            [ns, checkpoint_id]
            for ns, saved in thread.checkpoints.items()
            for checkpoint_id, entry in saved.items()
            if codec.metadata(entry).get("run_id") in runs
        ]
        yield from remove(threads, codec, thread_id, thread, doomed)
