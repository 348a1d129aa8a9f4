"""What ``get_tuple`` and ``list`` find in the threads, as flows: the latest checkpoint
of a namespace is the one with the greatest id, ``list`` gives a thread's checkpoints
newest first, and ``list(None)`` reads every thread of the namespace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_id

from sessionstore.gcdefer import deferred_collection

from .access import Flow, Threads
from .codec import Codec
from .ownership import RunStarts
from .thread import Tables, Thread

#: What ``list`` gives.
Tuples = list[CheckpointTuple]
#: From how many checkpoints of a thread a list reads its tables as dicts (copied once).
PLAIN_FROM = 64


def get_tuple(
    threads: Threads, codec: Codec, config: RunnableConfig, starts: RunStarts | None = None
) -> Flow[CheckpointTuple | None]:
    """The checkpoint of ``config`` (its ``checkpoint_id``, else the latest of its
    thread and ``checkpoint_ns``) with its pending writes; None when there is none. A
    run's first read is noted in ``starts``."""
    configurable = config["configurable"]
    thread_id = configurable["thread_id"]
    ns = configurable.get("checkpoint_ns", "")
    thread = yield from threads.read(thread_id, refresh=True)
    if starts is not None:
        starts.read(config, thread_id, thread)
    saved = thread.checkpoints.get(ns)
    if not saved:
        return None
    checkpoint_id = get_checkpoint_id(config) or thread.latest(ns)
    if checkpoint_id is None or checkpoint_id not in saved:
        return None
    return codec.tuple(thread_id, thread, ns, checkpoint_id)


def list_checkpoints(
    threads: Threads,
    codec: Codec,
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Flow[Tuples]:
    """The checkpoints ``list`` gives, thread by thread, up to ``limit``."""
    found: Tuples = []
    thread_id = config["configurable"]["thread_id"] if config is not None else None
    for name in (yield from threads.names(thread_id)):
        if limit is not None and len(found) >= limit:
            break
        thread = yield from threads.read(name, refresh=True)
        size = sum(map(len, thread.checkpoints.values()))
        tables = thread.plain() if size > PLAIN_FROM else thread
        with deferred_collection(size):  # thousands of tuples built, nothing to collect
            found.extend(_listed(codec, name, tables, config, filter, before))
    return found if limit is None else found[:limit]


def _listed(
    codec: Codec,
    thread_id: str,
    tables: Thread | Tables,
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
) -> Iterator[CheckpointTuple]:
    configurable = config["configurable"] if config else {}
    wanted_ns = configurable.get("checkpoint_ns")
    wanted_id = configurable.get("checkpoint_id")
    before_id = get_checkpoint_id(before) if before else None
    found = [
        (checkpoint_id, ns)
        for ns, saved in tables.checkpoints.items()
        if wanted_ns is None or ns == wanted_ns
        for checkpoint_id in saved
        if (not wanted_id or checkpoint_id == wanted_id)
        and (not before_id or checkpoint_id < before_id)
    ]
    for checkpoint_id, ns in sorted(found, reverse=True):
        if filter:
            metadata = codec.metadata(tables.checkpoints[ns][checkpoint_id])
            if not all(metadata.get(k) == v for k, v in filter.items()):
                continue
        yield codec.tuple(thread_id, tables, ns, checkpoint_id)
