"""LangGraph checkpoints on sessionstore event logs.

    from sessionstore.integrations.langgraph import SessionStoreSaver

    saver = SessionStoreSaver("redis://localhost:6379/0", namespace="graphs")
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})

:class:`SessionStoreSaver` is a ``langgraph.checkpoint.base.BaseCheckpointSaver`` with
the sync and the async methods in one object (as LangGraph's ``InMemorySaver``), on any
URL sessionstore takes: memory, files, SQLite, Redis, Redis Cluster and Sentinel. It uses
the store's public API only (event logs), no Redis module.

Layout: a thread is one event log, ``langgraph:<thread_id>``, so all of a thread lives
under one key hash slot on Redis Cluster and every write to it is one durable,
seq-checked, all-or-nothing append. Its events:

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
  ``id`` (a checkpoint id made at the deletion) belongs to the deleted thread.

Every event's data also names (``"after"``) the last event that counted when it was
written; an event naming another counts for nothing (see :data:`AFTER`). Every value,
checkpoint and metadata is what the saver's ``serde`` made of it, ``[type, base64 of
the bytes]``: stored as made, bytes included, whatever the serde.

Reading a thread folds its log: a checkpoint put again replaces the one of the same id
(as in ``InMemorySaver``); a write of a task at a given index is kept once (the first),
except the special channels (errors, interrupts), whose last write counts. The latest
checkpoint of a namespace is the one with the greatest id (LangGraph's ids grow with
time), so a checkpoint put late never replaces a newer one as the latest. A saver keeps
the last 64 threads it read, as folded, and reads only the events appended since.

Ownership of a thread (LangGraph leaves it open; this saver chooses): a thread has one
chain of checkpoints per namespace, written by one runner at a time. Every write is
checked against the thread as stored at the seq it is appended at (a write that lost
the race to another reads what landed first and is checked again), so:

* a ``put`` whose parent is no longer the latest checkpoint of its namespace raises
  :class:`ThreadConflictError`: another runner, in this process or another, continued
  the thread since this one read it. Nothing is written; the runner that wrote first
  goes on. A branch made on purpose is kept: LangGraph marks a replay from an earlier
  checkpoint ``source="fork"`` and ``update_state`` ``"update"`` (:data:`BRANCHING`). A
  ``put`` without a parent (a new thread's first checkpoint) is checked only against a
  deletion: two runners starting one new thread at once each put one, and the one that
  continues from the older finds it is not the latest at its next ``put``;
* ``delete_thread`` deletes the log and writes it anew with a ``deleted`` event; a
  ``put`` whose parent is not stored, and a ``put`` without a parent or a
  ``put_writes`` of a checkpoint made before the deletion, raise
  :class:`ThreadDeletedError`: a graph still running never brings the thread back.
  A write that took seq 0 of the new log before the ``deleted`` event is deleted again.
  ``put_writes`` of a checkpoint not stored yet is accepted otherwise (LangGraph does
  not wait for the ``put`` of a checkpoint before writing for it).

``copy_thread`` appends what counts of the source (since its last deletion) to the
target, as one batch: the target gets it all at once, after what it holds.
``prune`` and ``delete_for_runs`` append a ``remove`` event (the space is given back
when the thread is deleted); neither creates a thread. ``delete_for_runs`` and
``list(None)`` read every thread of the namespace.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.base.id import uuid6

import sessionstore
from sessionstore import (
    ConcurrentModificationError,
    EventTimeOrderError,
    InvalidArgumentError,
    SeqConflictError,
    SessionEvent,
    SessionExistsError,
    SessionHeader,
    SessionNotFoundError,
    SessionStoreError,
    Store,
    aio,
)

#: The event log of thread ``T`` is ``PREFIX + T``.
PREFIX = "langgraph:"
#: Event types of a thread's log.
CHECKPOINT = "checkpoint"
WRITES = "writes"
REMOVE = "remove"
DELETED = "deleted"
#: The field of every event's data naming the id of the last event that counted when it
#: was written (None for the first). Only an event naming the last event that counts
#: before it counts: one written by a writer that read a log since deleted (and landed on
#: the log written anew, at the seq it expected) counts for nothing, nor does any event
#: written after it by that writer.
AFTER = "after"
#: How often a write retries after losing the race to another writer.
WRITE_ATTEMPTS = 1000
#: Losses in a row before the retries start to wait a little (jittered).
_EAGER_RETRIES = 3

_T = TypeVar("_T")
#: A packed serde output: ``[type, base64 of the bytes]``.
Packed = list[str]
#: Thread ids; (namespace, checkpoint id) pairs to remove.
Names = list[str]
Doomed = list[list[str]]
Tuples = list[CheckpointTuple]
#: Events to append, as (type, data) pairs.
Entries = list[tuple[str, dict[str, Any]]]
#: What an operation yields: the name of an event-log method and its arguments.
Call = tuple[Any, ...]
Flow = Generator[Call, Any, _T]


class ThreadConflictError(SessionStoreError):
    """A checkpoint was refused because its parent is no longer the latest checkpoint
    of its thread and namespace: another runner of the thread (in this process or
    another) wrote a newer one since this one read the thread. Nothing was written; the
    thread keeps one chain. ``parent`` is the checkpoint this write continued from,
    ``latest`` the newer one stored."""

    def __init__(self, thread_id: str, checkpoint_ns: str, parent: str, latest: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.parent = parent
        self.latest = latest
        super().__init__(
            f"thread {thread_id!r} (namespace {checkpoint_ns!r}): another runner wrote "
            f"checkpoint {latest} after {parent}, which this checkpoint continues from; "
            "nothing was written"
        )


class ThreadDeletedError(SessionStoreError):
    """A write was refused because the checkpoint it belongs to or continues from
    (``checkpoint_id``) is gone: the thread was deleted after it was made (or the
    checkpoint was removed by ``prune`` or ``delete_for_runs``). Nothing was written:
    a late write of a graph still running never brings a deleted thread back."""

    def __init__(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        super().__init__(
            f"thread {thread_id!r} (namespace {checkpoint_ns!r}): checkpoint "
            f"{checkpoint_id} is gone (the thread was deleted after it was made); "
            "nothing was written"
        )


def session_id(thread_id: Any) -> str:
    """The event log of ``thread_id`` (LangGraph's thread ids are strings; others are
    taken as their ``str``)."""
    return PREFIX + str(thread_id)


class SessionStoreSaver(BaseCheckpointSaver[str]):
    """LangGraph's checkpointer on a sessionstore store; see the module docstring.

    ``SessionStoreSaver(url, namespace=..., serde=None, **connect_options)`` opens its
    own stores (:func:`sessionstore.connect` and :func:`sessionstore.aio.connect`, no
    I/O until first use; ``connect_options`` such as ``timeout``, ``durability`` and
    ``ttl`` go there), closed by :meth:`close`. ``SessionStoreSaver(store)`` works on a
    store given (a :class:`sessionstore.Store` or a :class:`sessionstore.aio.AsyncStore`),
    which stays open. On ``memory://``, and with a sync store given, the async methods
    run the sync ones in a worker thread (one memory store serves both); with an async
    store given, the sync methods run the async ones on an event loop of their own.
    """

    def __init__(
        self,
        url_or_store: str | os.PathLike[str] | Store | aio.AsyncStore | None = None,
        *,
        namespace: str | None = None,
        serde: SerializerProtocol | None = None,
        **connect_options: Any,
    ) -> None:
        super().__init__(serde=serde)
        self._sync: Store | None
        self._async: aio.AsyncStore | None
        if isinstance(url_or_store, (Store, aio.AsyncStore)):
            if namespace is not None or connect_options:
                raise InvalidArgumentError(
                    "SessionStoreSaver takes namespace and connect options with a URL, "
                    "not with a store (the store has its own)"
                )
            self._sync = url_or_store if isinstance(url_or_store, Store) else None
            self._async = url_or_store if isinstance(url_or_store, aio.AsyncStore) else None
            self._owns = False
        else:
            ns = sessionstore.DEFAULT_NAMESPACE if namespace is None else namespace
            self._sync = sessionstore.connect(url_or_store, ns, **connect_options)
            # A memory store is private to its connect: the async methods share the sync
            # one (its URL is the one resolved, $SESSIONSTORE_URL included).
            memory = self._sync.url.startswith("memory:")
            self._async = None if memory else aio.connect(url_or_store, ns, **connect_options)
            self._owns = True
        #: The threads read last, as folded (log id -> thread), the least recent first.
        self._known: OrderedDict[str, _Thread] = OrderedDict()
        self._known_lock = threading.Lock()

    # --- the sync API ---------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (its ``checkpoint_id``, else the latest of its
        thread and ``checkpoint_ns``) with its pending writes; None when there is none."""
        return self._run(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints of ``config``'s thread (every thread of the namespace when
        ``config`` is None), newest first within a thread; ``checkpoint_ns`` and
        ``checkpoint_id`` of ``config`` narrow them, ``filter`` keeps those whose
        metadata has each of its items, ``before`` those older than its checkpoint, and
        ``limit`` the first that many."""
        yield from self._run(self._list(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (its parent is ``config``'s ``checkpoint_id``) with the
        channel values of ``new_versions``, durably; return its config.
        :class:`ThreadConflictError` when the parent is no longer the latest checkpoint
        (another runner went on), :class:`ThreadDeletedError` when it is gone; nothing
        is written then."""
        config_out, thread_id, data = self._checkpoint_event(
            config, checkpoint, metadata, new_versions
        )
        self._run(self._put(thread_id, data, metadata.get("source")))
        return config_out

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the pending ``writes`` of task ``task_id`` on ``config``'s checkpoint,
        durably and all at once; :class:`ThreadDeletedError` (nothing written) when that
        checkpoint was made before the thread was deleted."""
        thread_id, data = self._writes_event(config, writes, task_id, task_path)
        if data is not None:
            self._run(self._put_writes(thread_id, data))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread. From then on a write of a
        checkpoint made before raises :class:`ThreadDeletedError`; a new run of the
        thread starts it afresh."""
        self._run(self._delete(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove, in every thread of the namespace, the checkpoints whose metadata
        ``run_id`` is one of ``run_ids``, with their writes."""
        self._run(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Add every checkpoint and write of the source thread to the target thread,
        all at once, after what the target holds; nothing when the source has none."""
        self._run(self._copy(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep only the latest checkpoint of each namespace of each
        thread (with its writes); ``"delete"``: delete the threads."""
        self._run(self._prune(thread_ids, strategy))

    def get_next_version(self, current: str | int | float | None, channel: None = None) -> str:
        """A version greater than ``current``: the next integer, zero-padded, with a
        random fraction, so that two branches of a thread never share a version."""
        if current is None:
            number = 0
        elif isinstance(current, str):
            number = int(current.split(".")[0])
        else:
            number = int(current)
        return f"{number + 1:032}.{random.random():016}"

    def close(self) -> None:
        """Close the stores this saver opened; a store given stays open. Idempotent."""
        if not self._owns:
            return
        if self._sync is not None:
            self._sync.close()
        if self._async is not None:
            _in_own_loop(self._async.close())

    def __enter__(self) -> SessionStoreSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the async API --------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`, awaited."""
        return await self._arun(self._get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, awaited."""
        for item in await self._arun(self._list(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, awaited."""
        config_out, thread_id, data = self._checkpoint_event(
            config, checkpoint, metadata, new_versions
        )
        await self._arun(self._put(thread_id, data, metadata.get("source")))
        return config_out

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, awaited."""
        thread_id, data = self._writes_event(config, writes, task_id, task_path)
        if data is not None:
            await self._arun(self._put_writes(thread_id, data))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, awaited."""
        await self._arun(self._delete(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`, awaited."""
        await self._arun(self._delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, awaited."""
        await self._arun(self._copy(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, awaited."""
        await self._arun(self._prune(thread_ids, strategy))

    async def aclose(self) -> None:
        """:meth:`close`, awaited."""
        if not self._owns:
            return
        if self._sync is not None:
            await asyncio.to_thread(self._sync.close)
        if self._async is not None:
            await self._async.close()

    async def __aenter__(self) -> SessionStoreSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"SessionStoreSaver({self._sync or self._async!r})"

    # --- drivers: one flow, run against the sync or the async event log ---------------

    def _run(self, flow: Flow[_T]) -> _T:
        if self._sync is None:
            return _in_own_loop(self._arun(flow))
        run = _Driving(flow)
        while (step := run.next_call()) is not None:
            try:
                run.reply, run.error = self._call(step), None
            except SessionStoreError as exc:
                run.reply, run.error = None, exc
        return run.result  # type: ignore[return-value]

    def _call(self, step: Call) -> Any:
        assert self._sync is not None
        name = step[0]
        if name == _SLEEP:
            time.sleep(step[1])
            return None
        return getattr(self._sync.events, name)(*step[1:])

    async def _arun(self, flow: Flow[_T]) -> _T:
        run = _Driving(flow)
        while (step := run.next_call()) is not None:
            try:
                run.reply, run.error = await self._acall(step), None
            except SessionStoreError as exc:
                run.reply, run.error = None, exc
        return run.result  # type: ignore[return-value]

    async def _acall(self, step: Call) -> Any:
        name = step[0]
        if name == _SLEEP:
            await asyncio.sleep(step[1])
            return None
        if self._async is None:
            return await asyncio.to_thread(self._call, step)
        return await getattr(self._async.events, name)(*step[1:])

    # --- operations (no I/O: each yields the event-log calls it makes) ----------------

    def _read(self, thread_id: str) -> Flow[_Thread]:
        """The thread as stored now. A thread read before is brought up to date with
        the events appended since, once its last known event is found where it was (the
        log was not deleted and written again meanwhile); else it is read whole."""
        sid = session_id(thread_id)
        with self._known_lock:
            known = self._known.get(sid)
        try:
            if known is not None and known.next_seq > 0:
                events = yield ("read_from", sid, known.next_seq - 1)
                if events and known.continued_by(events[0]):
                    return self._keep(sid, known.extended(events[1:]))
            events = yield ("read_from", sid, 0)
        except SessionNotFoundError:
            events = []
        return self._keep(sid, _Thread().extended(events))

    def _threads(self, config: RunnableConfig | None) -> Flow[Names]:
        if config is not None:
            return [config["configurable"]["thread_id"]]
        headers = yield ("list",)
        return [h.id[len(PREFIX) :] for h in headers if h.id.startswith(PREFIX)]

    def _get_tuple(self, config: RunnableConfig) -> Flow[CheckpointTuple | None]:
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        ns = configurable.get("checkpoint_ns", "")
        thread = yield from self._read(thread_id)
        saved = thread.checkpoints.get(ns)
        if not saved:
            return None
        checkpoint_id = get_checkpoint_id(config) or max(saved)
        if checkpoint_id not in saved:
            return None
        return self._tuple(thread_id, thread, ns, checkpoint_id)

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Flow[Tuples]:
        found: Tuples = []
        for thread_id in (yield from self._threads(config)):
            if limit is not None and len(found) >= limit:
                break
            thread = yield from self._read(thread_id)
            found.extend(self._listed(thread_id, thread, config, filter, before))
        return found if limit is None else found[:limit]

    def _append(
        self,
        thread_id: str,
        entries: Callable[[_Thread], Entries],
        *,
        create: bool = True,
    ) -> Flow[None]:
        """Append the events ``entries(thread)`` ((type, data) pairs, made from the
        thread as stored; it raises to refuse the write) where the log ends, as one
        batch; after a lost race, read what landed first and make them again. A log
        that does not exist is created when ``create``, else nothing is written."""
        sid = session_id(thread_id)
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            thread = yield from self._read(thread_id)
            made = entries(thread)
            if not made:
                return
            stamp = max(_now_ms(), thread.last_time)
            batch = _chained(made, thread.next_seq, thread.valid_id, stamp)
            try:
                yield ("append", sid, batch)
            except (SeqConflictError, EventTimeOrderError):
                pass
            except SessionNotFoundError:
                if not create:
                    return
                with contextlib.suppress(SessionExistsError):
                    yield ("create", SessionHeader(id=sid, created_at=0))
            else:
                # What is kept is the thread as read: the next read starts from the
                # last event read, so it finds the log deleted meanwhile, if it was.
                return
            if attempt > _EAGER_RETRIES:
                yield (_SLEEP, random.uniform(0, min(0.001 * 2**attempt, 0.05)))
        raise ConcurrentModificationError(
            f"a write to thread {thread_id!r} lost {WRITE_ATTEMPTS} races in a row"
        )

    def _put(self, thread_id: str, data: dict[str, Any], source: object) -> Flow[None]:
        ns, checkpoint_id, parent = data["ns"], data["id"], data["parent"]

        def entries(thread: _Thread) -> Entries:
            saved = thread.checkpoints.get(ns, {})
            if checkpoint_id in saved:  # put again: it replaces itself
                pass
            elif parent is None:
                thread.check_not_deleted(thread_id, ns, checkpoint_id)
            elif parent not in saved:
                raise ThreadDeletedError(thread_id, ns, parent)
            elif (latest := max(saved)) != parent and source not in BRANCHING:
                raise ThreadConflictError(thread_id, ns, parent, latest)
            return [(CHECKPOINT, data)]

        yield from self._append(thread_id, entries)

    def _put_writes(self, thread_id: str, data: dict[str, Any]) -> Flow[None]:
        ns, checkpoint_id = data["ns"], data["checkpoint"]

        def entries(thread: _Thread) -> Entries:
            # Writes may land before the put of their checkpoint (LangGraph does not
            # wait for it): only a checkpoint of a deleted thread is refused.
            if checkpoint_id not in thread.checkpoints.get(ns, {}):
                thread.check_not_deleted(thread_id, ns, checkpoint_id)
            return [(WRITES, data)]

        yield from self._append(thread_id, entries)

    def _delete(self, thread_id: str) -> Flow[None]:
        """Delete the log, then start it again with a ``deleted`` event at seq 0, which
        refuses every write of a checkpoint made before it. A write that took seq 0
        first (a late one, or one as concurrent as this call) is deleted again."""
        sid = session_id(thread_id)
        mark = {"before": str(uuid6())}
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            with contextlib.suppress(SessionNotFoundError):
                yield ("delete", sid)
            with contextlib.suppress(SessionExistsError):
                yield ("create", SessionHeader(id=sid, created_at=0))
            [tombstone] = _chained([(DELETED, mark)], 0, None, _now_ms())
            try:
                yield ("append", sid, [tombstone])
            except (SeqConflictError, SessionNotFoundError):
                if attempt > _EAGER_RETRIES:
                    yield (_SLEEP, random.uniform(0, min(0.001 * 2**attempt, 0.05)))
                continue
            self._keep(sid, _Thread().extended([tombstone]))
            return
        raise ConcurrentModificationError(
            f"delete_thread of {thread_id!r} lost {WRITE_ATTEMPTS} races in a row"
        )

    def _copy(self, source: str, target: str) -> Flow[None]:
        try:
            events = yield ("read_from", session_id(source), 0)
        except SessionNotFoundError:
            return
        valid = _valid(events)
        starts = [i + 1 for i, event in enumerate(valid) if event.type == DELETED]
        copied = [
            (e.type, {k: v for k, v in e.data.items() if k != AFTER})
            for e in valid[starts[-1] if starts else 0 :]
        ]
        yield from self._append(target, lambda thread: copied)

    def _remove(self, thread_id: str, doomed: Doomed) -> Flow[None]:
        if doomed:
            data = {"checkpoints": doomed}
            yield from self._append(thread_id, lambda thread: [(REMOVE, data)], create=False)

    def _prune(self, thread_ids: Sequence[str], strategy: str) -> Flow[None]:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgumentError(
                f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}"
            )
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self._delete(thread_id)
                continue
            thread = yield from self._read(thread_id)
            doomed = [
                [ns, checkpoint_id]
                for ns, saved in thread.checkpoints.items()
                for checkpoint_id in sorted(saved)[:-1]
            ]
            yield from self._remove(thread_id, doomed)

    def _delete_for_runs(self, run_ids: Sequence[str]) -> Flow[None]:
        runs = set(run_ids)
        if not runs:
            return
        for thread_id in (yield from self._threads(None)):
            thread = yield from self._read(thread_id)
            doomed = [
                [ns, checkpoint_id]
                for ns, saved in thread.checkpoints.items()
                for checkpoint_id, entry in saved.items()
                if self._metadata(entry).get("run_id") in runs
            ]
            yield from self._remove(thread_id, doomed)

    # --- translation --------------------------------------------------------------------

    def _checkpoint_event(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[RunnableConfig, str, dict[str, Any]]:
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        ns = configurable.get("checkpoint_ns", "")
        rest: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = rest.pop("channel_values", {})
        blobs = [
            [channel, version, self._pack(values[channel]) if channel in values else None]
            for channel, version in new_versions.items()
        ]
        data = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": configurable.get("checkpoint_id"),
            "checkpoint": self._pack(rest),
            "metadata": self._pack(get_checkpoint_metadata(config, metadata)),
            "blobs": blobs,
        }
        stored: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
        return stored, thread_id, data

    def _writes_event(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[str, dict[str, Any] | None]:
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        if not writes:
            return thread_id, None
        packed = [
            [WRITES_IDX_MAP.get(channel, idx), channel, self._pack(value)]
            for idx, (channel, value) in enumerate(writes)
        ]
        data = {
            "ns": configurable.get("checkpoint_ns", ""),
            "checkpoint": configurable["checkpoint_id"],
            "task": task_id,
            "path": task_path,
            "writes": packed,
        }
        return thread_id, data

    def _listed(
        self,
        thread_id: str,
        thread: _Thread,
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
            for ns, saved in thread.checkpoints.items()
            if wanted_ns is None or ns == wanted_ns
            for checkpoint_id in saved
            if (not wanted_id or checkpoint_id == wanted_id)
            and (not before_id or checkpoint_id < before_id)
        ]
        for checkpoint_id, ns in sorted(found, reverse=True):
            if filter:
                metadata = self._metadata(thread.checkpoints[ns][checkpoint_id])
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            yield self._tuple(thread_id, thread, ns, checkpoint_id)

    def _tuple(
        self, thread_id: str, thread: _Thread, ns: str, checkpoint_id: str
    ) -> CheckpointTuple:
        entry = thread.checkpoints[ns][checkpoint_id]
        checkpoint: Checkpoint = self._unpack(entry.checkpoint)
        values = {}
        for channel, version in checkpoint["channel_versions"].items():
            blob = thread.blobs.get((ns, channel, version))
            if blob is not None:
                values[channel] = self._unpack(blob)
        checkpoint["channel_values"] = values
        stored = thread.writes.get((ns, checkpoint_id), {})
        ordered = sorted(stored.items(), key=lambda kv: writes_sort_key(kv[1][2], *kv[0]))
        pending = [
            (task, channel, self._unpack(value)) for (task, _), (channel, value, _) in ordered
        ]
        parent = (
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": entry.parent,
                }
            }
            if entry.parent
            else None
        )
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=checkpoint,
            metadata=self._metadata(entry),
            parent_config=parent,  # type: ignore[arg-type]
            pending_writes=pending,
        )

    def _metadata(self, entry: _Saved) -> CheckpointMetadata:
        metadata: CheckpointMetadata = self._unpack(entry.metadata)
        return metadata

    def _pack(self, value: Any) -> Packed:
        kind, raw = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(raw).decode("ascii")]

    def _unpack(self, packed: Packed) -> Any:
        return self.serde.loads_typed((packed[0], base64.b64decode(packed[1])))

    def _keep(self, sid: str, thread: _Thread) -> _Thread:
        with self._known_lock:
            self._known[sid] = thread
            self._known.move_to_end(sid)
            while len(self._known) > _THREADS_KEPT:
                self._known.popitem(last=False)
        return thread


#: The pseudo call that makes a flow wait (seconds), between retries.
_SLEEP = "_sleep"
#: How many threads a saver keeps as last read (each read then reads only what is new).
_THREADS_KEPT = 64
#: Sources of checkpoints that branch off on purpose: LangGraph's replay from an
#: earlier checkpoint ("fork") and ``update_state`` ("update").
BRANCHING = ("fork", "update")


@dataclass
class _Saved:
    """A stored checkpoint: its packed checkpoint and metadata and its parent's id."""

    checkpoint: Packed
    metadata: Packed
    parent: str | None


@dataclass
class _Thread:
    """A thread as its log folds, up to ``next_seq``: checkpoints by namespace and id,
    channel values by (namespace, channel, version), writes by (namespace, checkpoint
    id) then (task, idx) as (channel, value, task path). ``last`` tells the last event
    folded from any other (its seq and random id)."""

    checkpoints: dict[str, dict[str, _Saved]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, Any], Packed | None] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, Packed, str]]] = field(
        default_factory=dict
    )
    next_seq: int = 0
    last_time: int = 0
    last: tuple[int, str | None] | None = None
    #: The id of the last event that counts (see :data:`AFTER`).
    valid_id: str | None = None
    #: The mark of the last deletion: checkpoints made before it are of the deleted thread.
    deleted_before: str | None = None

    def check_not_deleted(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """Raise :class:`ThreadDeletedError` when ``checkpoint_id`` was made before the
        thread was last deleted."""
        if self.deleted_before is not None and checkpoint_id <= self.deleted_before:
            raise ThreadDeletedError(thread_id, ns, checkpoint_id)

    def continued_by(self, event: SessionEvent) -> bool:
        """Whether ``event`` is the last event folded here (so the log read on from it
        is the one folded)."""
        return event.id is not None and (event.seq, event.id) == self.last

    def extended(self, events: list[SessionEvent]) -> _Thread:
        """This thread with ``events`` (the next ones of its log) folded in; this one
        stays as it was (other readers may hold it)."""
        if not events:
            return self
        thread = _Thread(
            {ns: dict(saved) for ns, saved in self.checkpoints.items()},
            dict(self.blobs),
            {key: dict(stored) for key, stored in self.writes.items()},
            deleted_before=self.deleted_before,
        )
        thread.valid_id = self.valid_id
        for event in events:
            if event.data.get(AFTER) == thread.valid_id:
                thread._fold(event)
                thread.valid_id = event.id
        last = events[-1]
        thread.next_seq, thread.last_time, thread.last = (
            last.seq + 1,
            last.time,
            (last.seq, last.id),
        )
        return thread

    def _fold(self, event: SessionEvent) -> None:
        data = event.data
        if event.type == CHECKPOINT:
            ns = data["ns"]
            for channel, version, value in data["blobs"]:
                self.blobs[(ns, channel, version)] = value
            saved = _Saved(data["checkpoint"], data["metadata"], data["parent"])
            self.checkpoints.setdefault(ns, {})[data["id"]] = saved
        elif event.type == WRITES:
            stored = self.writes.setdefault((data["ns"], data["checkpoint"]), {})
            task, path = data["task"], data["path"]
            for idx, channel, value in data["writes"]:
                if idx < 0 or (task, idx) not in stored:
                    stored[(task, idx)] = (channel, value, path)
        elif event.type == REMOVE:
            for ns, checkpoint_id in data["checkpoints"]:
                self.checkpoints.get(ns, {}).pop(checkpoint_id, None)
                self.writes.pop((ns, checkpoint_id), None)
        elif event.type == DELETED:
            self.checkpoints, self.blobs, self.writes = {}, {}, {}
            self.deleted_before = max(self.deleted_before or "", data["before"])


class _Driving(Generic[_T]):
    """A flow being run: the call it makes next, given the answer to the one before
    (``reply``, or the store error ``error`` thrown back into it); ``result`` once done."""

    def __init__(self, flow: Flow[_T]) -> None:
        self.flow = flow
        self.reply: Any = None
        self.error: SessionStoreError | None = None
        self.result: _T | None = None

    def next_call(self) -> Call | None:
        """The next call, or None when the flow has returned (its value in ``result``)."""
        try:
            if self.error is None:
                return self.flow.send(self.reply)
            return self.flow.throw(self.error)
        except StopIteration as stop:
            self.result = stop.value
            return None


def _in_own_loop(coro: Any) -> Any:
    """Run ``coro`` to its end on an event loop of its own, in a thread of its own (the
    caller may be running a loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _chained(made: Entries, first: int, after: str | None, stamp: int) -> list[SessionEvent]:
    """The events of ``made`` from seq ``first``, each naming in ``data["after"]`` the
    id of the event before it (``after`` for the first)."""
    batch = []
    for i, (kind, data) in enumerate(made):
        event = SessionEvent(
            seq=first + i, type=kind, time=stamp, data={**data, AFTER: after}, id=_event_id()
        )
        batch.append(event)
        after = event.id
    return batch


def _valid(events: list[SessionEvent]) -> list[SessionEvent]:
    """The events of a whole log that count (see :data:`AFTER`)."""
    counted: list[SessionEvent] = []
    for event in events:
        if event.data.get(AFTER) == (counted[-1].id if counted else None):
            counted.append(event)
    return counted


def _event_id() -> str:
    """A random id for each event: an event read again is known by it."""
    return secrets.token_hex(8)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = [
    "PREFIX",
    "SessionStoreSaver",
    "ThreadConflictError",
    "ThreadDeletedError",
    "session_id",
]
