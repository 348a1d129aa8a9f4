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
  ``delete_for_runs``: those checkpoints and their writes are gone from then on.

Every value, checkpoint and metadata is what the saver's ``serde`` made of it,
``[type, base64 of the bytes]``: stored as made, bytes included, whatever the serde.

Reading a thread folds its log: a checkpoint put again replaces the one of the same id
(as in ``InMemorySaver``); a write of a task at a given index is kept once (the first),
except the special channels (errors, interrupts), whose last write counts. The latest
checkpoint of a namespace is the one with the greatest id (LangGraph's ids grow with
time), so a checkpoint put late never replaces a newer one as the latest.

``delete_thread`` deletes the log; ``copy_thread`` forks it (atomically: the target
gets every event of the source at once) and raises ``SessionExistsError`` when the
target thread exists; ``prune`` and ``delete_for_runs`` append a ``remove`` event (the
space is given back when the thread is deleted). ``delete_for_runs`` and ``list(None)``
read every thread of the namespace.

Concurrency: appends name the seq they continue from; a write that lost the race to
another is retried at the stored next seq, so concurrent writers, in this process or
others, all land once each.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
import threading
import time
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
#: What an operation yields: the name of an event-log method and its arguments.
Call = tuple[Any, ...]
Flow = Generator[Call, Any, _T]


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
            # A memory store is private to its connect: the async methods share the sync one.
            memory = str(url_or_store or "").startswith("memory:")
            self._async = None if memory else aio.connect(url_or_store, ns, **connect_options)
            self._owns = True
        #: Per thread log: (next seq, time of the last event) as last seen; a hint only.
        self._tails: dict[str, tuple[int, int]] = {}
        self._tails_lock = threading.Lock()

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
        channel values of ``new_versions``, durably; return its config."""
        config_out, thread_id, data = self._checkpoint_event(
            config, checkpoint, metadata, new_versions
        )
        self._run(self._append(thread_id, CHECKPOINT, data))
        return config_out

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the pending ``writes`` of task ``task_id`` on ``config``'s checkpoint,
        durably and all at once."""
        thread_id, data = self._writes_event(config, writes, task_id, task_path)
        if data is not None:
            self._run(self._append(thread_id, WRITES, data))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread (nothing when there is none)."""
        self._run(self._delete(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove, in every thread of the namespace, the checkpoints whose metadata
        ``run_id`` is one of ``run_ids``, with their writes."""
        self._run(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of the source thread to the target thread,
        atomically; nothing when the source has none. ``SessionExistsError`` when the
        target thread exists."""
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
        await self._arun(self._append(thread_id, CHECKPOINT, data))
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
            await self._arun(self._append(thread_id, WRITES, data))

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
        events = self._sync.events
        return _drive(flow, lambda call: getattr(events, call[0])(*call[1:]))

    async def _arun(self, flow: Flow[_T]) -> _T:
        run = _Driving(flow)
        while (step := run.next_call()) is not None:
            try:
                run.reply, run.error = await self._acall(step), None
            except SessionStoreError as exc:
                run.reply, run.error = None, exc
        return run.result  # type: ignore[return-value]

    async def _acall(self, step: Call) -> Any:
        if step[0] == _SLEEP:
            await asyncio.sleep(step[1])
            return None
        if self._async is not None:
            return await getattr(self._async.events, step[0])(*step[1:])
        assert self._sync is not None
        return await asyncio.to_thread(getattr(self._sync.events, step[0]), *step[1:])

    # --- operations (no I/O: each yields the event-log calls it makes) ----------------

    def _read(self, thread_id: str) -> Flow[_Thread]:
        sid = session_id(thread_id)
        try:
            events = yield ("read_from", sid, 0)
        except SessionNotFoundError:
            return _Thread()
        thread = _Thread.fold(events)
        if events:
            self._note_tail(sid, events[-1].seq + 1, events[-1].time)
        return thread

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

    def _append(self, thread_id: str, kind: str, data: dict[str, Any]) -> Flow[None]:
        """Append one event at the stored next seq, creating the log if need be and
        retrying at the stored next seq after a lost race."""
        sid = session_id(thread_id)
        at, last = self._tails.get(sid, (0, 0))
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            stamp = max(_now_ms(), last)
            event = SessionEvent(seq=at, type=kind, time=stamp, data=data)
            try:
                next_seq = yield ("append", sid, [event])
            except SeqConflictError as exc:
                at = exc.expected
            except EventTimeOrderError as exc:
                last = exc.previous
            except SessionNotFoundError:
                with contextlib.suppress(SessionExistsError):
                    yield ("create", SessionHeader(id=sid, created_at=0))
                at, last = 0, 0
            else:
                self._note_tail(sid, next_seq, stamp)
                return
            if attempt > _EAGER_RETRIES:
                yield (_SLEEP, random.uniform(0, min(0.001 * 2**attempt, 0.05)))
        raise ConcurrentModificationError(
            f"a write to thread {thread_id!r} lost {WRITE_ATTEMPTS} races in a row"
        )

    def _delete(self, thread_id: str) -> Flow[None]:
        sid = session_id(thread_id)
        with contextlib.suppress(SessionNotFoundError):
            yield ("delete", sid)
        self._forget_tail(sid)

    def _copy(self, source: str, target: str) -> Flow[None]:
        with contextlib.suppress(SessionNotFoundError):
            yield ("fork", session_id(source), session_id(target))

    def _remove(self, thread_id: str, doomed: Doomed) -> Flow[None]:
        if doomed:
            yield from self._append(thread_id, REMOVE, {"checkpoints": doomed})

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

    def _note_tail(self, sid: str, next_seq: int, last_time: int) -> None:
        with self._tails_lock:
            if len(self._tails) >= _TAILS_KEPT:
                self._tails.clear()
            known = self._tails.get(sid, (0, 0))
            self._tails[sid] = (max(known[0], next_seq), max(known[1], last_time))

    def _forget_tail(self, sid: str) -> None:
        with self._tails_lock:
            self._tails.pop(sid, None)


#: The pseudo call that makes a flow wait (seconds), between retries.
_SLEEP = "_sleep"
#: How many threads' tails a saver keeps as hints before it starts afresh.
_TAILS_KEPT = 10_000


@dataclass
class _Saved:
    """A stored checkpoint: its packed checkpoint and metadata and its parent's id."""

    checkpoint: Packed
    metadata: Packed
    parent: str | None


@dataclass
class _Thread:
    """A thread as its log folds: checkpoints by namespace and id, channel values by
    (namespace, channel, version), writes by (namespace, checkpoint id) then (task, idx)
    as (channel, value, task path)."""

    checkpoints: dict[str, dict[str, _Saved]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, Any], Packed | None] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, Packed, str]]] = field(
        default_factory=dict
    )

    @classmethod
    def fold(cls, events: list[SessionEvent]) -> _Thread:
        thread = cls()
        for event in events:
            data = event.data
            if event.type == CHECKPOINT:
                ns = data["ns"]
                for channel, version, value in data["blobs"]:
                    thread.blobs[(ns, channel, version)] = value
                saved = _Saved(data["checkpoint"], data["metadata"], data["parent"])
                thread.checkpoints.setdefault(ns, {})[data["id"]] = saved
            elif event.type == WRITES:
                key = (data["ns"], data["checkpoint"])
                stored = thread.writes.setdefault(key, {})
                task, path = data["task"], data["path"]
                for idx, channel, value in data["writes"]:
                    if idx >= 0 and (task, idx) in stored:
                        continue
                    stored[(task, idx)] = (channel, value, path)
            elif event.type == REMOVE:
                for ns, checkpoint_id in data["checkpoints"]:
                    thread.checkpoints.get(ns, {}).pop(checkpoint_id, None)
                    thread.writes.pop((ns, checkpoint_id), None)
        return thread


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


def _drive(flow: Flow[_T], call: Callable[[Call], Any]) -> _T:
    """Run ``flow`` to its end, making each call it yields with ``call`` (a store
    error goes back into the flow)."""
    run = _Driving(flow)
    while (step := run.next_call()) is not None:
        try:
            run.reply, run.error = _pause(step[1]) if step[0] == _SLEEP else call(step), None
        except SessionStoreError as exc:
            run.reply, run.error = None, exc
    return run.result  # type: ignore[return-value]


def _pause(seconds: float) -> Any:
    time.sleep(seconds)
    return None


def _in_own_loop(coro: Any) -> Any:
    """Run ``coro`` to its end on an event loop of its own, in a thread of its own (the
    caller may be running a loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["PREFIX", "SessionStoreSaver", "session_id"]
