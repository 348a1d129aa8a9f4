"""The checkpointer: LangGraph's protocol, each method a thin shell (sync, and its
``a`` twin) that builds one flow of :mod:`.listing`, :mod:`.ownership` or
:mod:`.retention` and runs it with :mod:`.driver`."""

from __future__ import annotations

import asyncio
import os
import random
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
)

import sessionstore
from sessionstore import InvalidArgumentError, Store, aio
from sessionstore.arguments import check_ttl
from sessionstore.connection import REDIS_SCHEMES, scheme_of

from . import compaction, listing, ownership, retention
from .access import Call, Flow, Threads
from .codec import Codec
from .driver import acall_on, arun, call_on, in_own_loop, run
from .ownership import UNSEEN, RunStarts

_T = TypeVar("_T")
#: How many locks the sync writes of a saver's threads share (by thread id).
WRITE_LOCKS = 64


class SessionStoreSaver(BaseCheckpointSaver[str]):
    """LangGraph's checkpointer on a sessionstore store; see the package docstring.

    ``SessionStoreSaver(url, namespace=..., serde=None, ttl=None, refresh_on_read=False,
    **connect_options)`` opens its own stores (:func:`sessionstore.connect` and
    :func:`sessionstore.aio.connect`, no I/O until first use; ``connect_options`` such
    as ``timeout`` and ``durability`` go there), closed by :meth:`close`.
    ``SessionStoreSaver(store)`` works on a store given (a :class:`sessionstore.Store`
    or a :class:`sessionstore.aio.AsyncStore`), which stays open. On ``memory://``, and
    with a sync store given, the async methods run the sync ones in a worker thread
    (one memory store serves both); with an async store given, the sync methods run the
    async ones on an event loop of their own.

    ``ttl`` (seconds > 0, with a URL or a store): every thread this saver creates is
    kept that long after its last write, all of it (its log, and so every checkpoint,
    value and pending write, and its listing entry); each write moves the expiry, and
    so does each ``get_tuple`` and ``list`` of it with ``refresh_on_read=True``. None
    (default): the store's own retention. A bad ``ttl`` raises
    :class:`~sessionstore.InvalidArgumentError`.
    """

    def __init__(
        self,
        url_or_store: str | os.PathLike[str] | Store | aio.AsyncStore | None = None,
        *,
        namespace: str | None = None,
        serde: SerializerProtocol | None = None,
        ttl: float | None = None,
        refresh_on_read: bool = False,
        **connect_options: Any,
    ) -> None:
        super().__init__(serde=serde)
        check_ttl(ttl)
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
        self._codec = Codec(self.serde)
        self._locks = [threading.Lock() for _ in range(WRITE_LOCKS)]
        self._alocks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[asyncio.Lock]]
        self._alocks = weakref.WeakKeyDictionary()
        self._alocks_lock = threading.Lock()
        codec = self._codec
        self._starts = RunStarts()
        self._threads = Threads(
            ttl,
            bool(refresh_on_read),
            lambda threads, thread_id: compaction.recover(threads, codec, thread_id),
        )
        store = self._sync or self._async
        assert store is not None
        self._threads.prunes = scheme_of(store.url) not in REDIS_SCHEMES

    # --- the flows each method runs -----------------------------------------------------

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Flow[list[CheckpointTuple]]:
        return listing.list_checkpoints(self._threads, self._codec, config, filter, before, limit)

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[RunnableConfig, Flow[None]]:
        stored, thread_id, data = self._codec.checkpoint_event(
            config, checkpoint, metadata, new_versions
        )
        named = ownership.caller_named(config, data["ns"])
        source = metadata.get("source")
        started = self._starts.started(config, thread_id) if data["parent"] is None else UNSEEN
        mark = self._starts.mark(config, thread_id)
        flow = ownership.put(self._threads, thread_id, data, source, named, started, mark)
        return stored, _then(flow, lambda: self._starts.wrote(config, thread_id))

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Flow[None]:
        thread_id, data = self._codec.writes_event(config, writes, task_id, task_path)
        if data is None:
            return _nothing()
        mark = self._starts.mark(config, thread_id)
        return ownership.put_writes(self._threads, thread_id, data, mark)

    # --- the sync API ---------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (its ``checkpoint_id``, else the latest of its
        thread and ``checkpoint_ns``) with its pending writes; None when there is none."""
        return self._run(listing.get_tuple(self._threads, self._codec, config, self._starts))

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
        :class:`.ThreadConflictError` when the parent is no longer the latest checkpoint
        (another runner went on) and the run was not given it (time travel, see
        :mod:`.ownership`), :class:`.ThreadDeletedError` when it is gone; nothing is
        written then."""
        stored, flow = self._put(config, checkpoint, metadata, new_versions)
        with self._writing(config):
            self._run(flow)
        return stored

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the pending ``writes`` of task ``task_id`` on ``config``'s checkpoint,
        durably and all at once; :class:`.ThreadDeletedError` (nothing written) when that
        checkpoint was made before the thread was deleted."""
        with self._writing(config):
            self._run(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread. From then on a write of a
        checkpoint made before raises :class:`.ThreadDeletedError`; a new run of the
        thread starts it afresh."""
        self._run(ownership.delete(self._threads, thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove, in every thread of the namespace, the checkpoints whose metadata
        ``run_id`` is one of ``run_ids``, with their writes."""
        self._run(retention.delete_for_runs(self._threads, self._codec, run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Add every checkpoint and write of the source thread to the target thread,
        all at once, after what the target holds; nothing when the source has none."""
        self._run(self._threads.copy(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep only the latest checkpoint of each namespace of each
        thread (with its writes); ``"delete"``: delete the threads."""
        self._run(retention.prune(self._threads, self._codec, thread_ids, strategy))

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
            in_own_loop(self._async.close())

    def __enter__(self) -> SessionStoreSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the async API --------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`, awaited."""
        return await self._arun(listing.get_tuple(self._threads, self._codec, config, self._starts))

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
        stored, flow = self._put(config, checkpoint, metadata, new_versions)
        async with self._awriting(config):
            await self._arun(flow)
        return stored

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, awaited."""
        async with self._awriting(config):
            await self._arun(self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, awaited."""
        await self._arun(ownership.delete(self._threads, thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`, awaited."""
        await self._arun(retention.delete_for_runs(self._threads, self._codec, run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, awaited."""
        await self._arun(self._threads.copy(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, awaited."""
        await self._arun(retention.prune(self._threads, self._codec, thread_ids, strategy))

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

    def _writing(self, config: RunnableConfig) -> threading.Lock:
        """The lock that this saver's sync writes to ``config``'s thread take in turn: a
        graph writes from several threads at once (``put_writes`` of its tasks, the
        ``put`` of the step before in the background), and a write that waits here
        does not lose the race to the other and write again (their order is kept all
        the same: each appends where the log ends). One of :data:`WRITE_LOCKS`."""
        key = str(config["configurable"]["thread_id"])
        return self._locks[hash(key) % WRITE_LOCKS]

    def _awriting(self, config: RunnableConfig) -> asyncio.Lock:
        """:meth:`_writing` for the async writes, on the running event loop (the tasks
        of an async graph write its thread at once, as the threads of a sync one do)."""
        loop = asyncio.get_running_loop()
        with self._alocks_lock:
            locks = self._alocks.get(loop)
            if locks is None:
                locks = self._alocks[loop] = [asyncio.Lock() for _ in range(WRITE_LOCKS)]
        key = str(config["configurable"]["thread_id"])
        return locks[hash(key) % WRITE_LOCKS]

    def _run(self, flow: Flow[_T]) -> _T:
        if self._sync is None:
            return in_own_loop(self._arun(flow))  # type: ignore[no-any-return]
        return run(flow, self._call)

    def _call(self, step: Call) -> Any:
        """Make one call of a flow on the sync event log."""
        assert self._sync is not None
        return call_on(self._sync.events, step)

    async def _arun(self, flow: Flow[_T]) -> _T:
        return await arun(flow, self._acall)

    async def _acall(self, step: Call) -> Any:
        if self._async is None:
            return await asyncio.to_thread(self._call, step)
        return await acall_on(self._async.events, step)


def _nothing() -> Flow[None]:
    """A flow that makes no call."""
    return
    yield  # a generator


def _then(flow: Flow[None], after: Callable[[], None]) -> Flow[None]:
    """``flow``, then ``after()`` once it has ended without raising."""
    yield from flow
    after()
