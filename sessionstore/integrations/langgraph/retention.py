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

#: What ``prune`` takes as its ``strategy``.
STRATEGIES = ("keep_latest", "delete")


def remove(threads: Threads, codec: Codec, thread_id: str, doomed: Doomed) -> Flow[None]:
    """Remove the checkpoints ``doomed`` ((namespace, id) pairs) from the thread, and
    what only they hold from the store."""
    if doomed:
        yield from compact(threads, codec, thread_id, [(REMOVE, {"checkpoints": doomed})])


def prune(threads: Threads, codec: Codec, thread_ids: Sequence[str], strategy: str) -> Flow[None]:
    """``"keep_latest"``: keep only the latest checkpoint of each namespace of each
    thread (with its writes); ``"delete"``: delete the threads."""
    if strategy not in STRATEGIES:
        raise InvalidArgumentError(
            f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}"
        )
    for thread_id in thread_ids:
        if strategy == "delete":
            yield from delete(threads, thread_id)
            continue
        thread = yield from threads.read(thread_id)
        doomed = [
            [ns, checkpoint_id]
            for ns, saved in thread.checkpoints.items()
            for checkpoint_id in sorted(saved)[:-1]
        ]
        yield from remove(threads, codec, thread_id, doomed)


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
        yield from remove(threads, codec, thread_id, doomed)
