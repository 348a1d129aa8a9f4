"""Sessions of the OpenAI Agents SDK on sessionstore event logs.

    from sessionstore.integrations.openai_agents import SessionStoreSession

    session = SessionStoreSession.from_url("user-123", "redis://localhost:6379/0")
    await Runner.run(agent, "Hello", session=session)
    await session.close()

:class:`SessionStoreSession` implements the SDK's ``Session`` protocol on one event log
of a :mod:`sessionstore.aio` store, so any URL sessionstore takes works: memory, files,
SQLite, Redis and Redis Cluster.

Layout of the log (its id is the ``session_id``):

* every item is one ``"item"`` event, ``data = {"item": item}``, in the order added;
  ``add_items`` appends a whole list as one batch (all or nothing);
* ``pop_item`` appends a ``"pop"`` event, ``data = {"seq": S}``: it removes the item of
  event ``S``. A pop that names no live item (already popped, or not an item) removes
  nothing;
* ``clear_session`` deletes the log.

The items are the ``"item"`` events not removed by a ``"pop"``, oldest first; events of
other types are left out. The last event of each batch carries a random ``id``, so two
batches are never identical (an append at a stale seq cannot pass for an applied replay)
and a reader can tell the log it read before from one deleted and written again.

Concurrency: every write names the seq it continues from and the store refuses it
(``SeqConflictError``) when anything landed first. ``add_items`` then retries at the
stored next seq, so concurrent adds from coroutines, threads and processes all land once.
``pop_item`` appends its pop at the end of the log it read, so it removes the newest item
only if nothing changed since; else it reads again and retries. It returns the item it
removed, never one another popper got.

Any thread, any event loop: one session object (and its store) may be used from
several threads each running its own event loop, and from one loop after another
(``asyncio.run`` twice, ``Runner.run_sync`` twice). Its lock belongs to no loop
(:class:`~sessionstore.fairwait.AnyLoopLock`) and the store keeps connections per loop.

Each instance keeps the items it has read, and a later ``get_items`` reads only the
events appended since (checking the last event it knew is still there: a log deleted
and written again is read again whole).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Callable
from itertools import islice
from typing import Any

import orjson
from agents.items import TResponseInputItem
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from .. import aio
from ..backoff import LOST_RACE
from ..errors import (
    ConcurrentModificationError,
    InvalidArgumentError,
    NotJSONSerializableError,
    SeqConflictError,
    SessionExistsError,
    SessionNotFoundError,
)
from ..eventlog import check_session_id
from ..fairwait import AnyLoopLock
from ..models import SessionEvent, SessionHeader
from ..when import now_ms

#: Event type of one conversation item; ``data = {"item": item}``.
ITEM = "item"
#: Event type of a removal by ``pop_item``; ``data = {"seq": seq of the item event}``.
POP = "pop"
#: How often a write retries after losing the race to another writer.
WRITE_ATTEMPTS = 1000
#: Losses in a row before the retries start to wait a little (jittered).
_EAGER_RETRIES = 3
#: The prefix of the JSON path of an item inside its event's data.
_ITEM_PATH = "$.item"


class NotJSONSerializableItemError(NotJSONSerializableError):
    """An item given to ``add_items`` would not survive a JSON round trip unchanged;
    nothing of that call was written. ``index`` is its place in the list, ``path`` the
    JSON path inside the item (``$`` is the item itself)."""

    def __init__(self, session_id: str, index: int, seq: int, path: str, reason: str) -> None:
        super().__init__(ITEM, seq, path, reason)
        self.session_id = session_id
        self.index = index
        self.args = (
            f"session {session_id!r}: item {index} of add_items is not lossless JSON "
            f"at {path}: {reason}",
        )


class SessionStoreSession:
    """The SDK's ``Session`` protocol on the event log ``session_id`` of an async store.

    ``store`` is a :class:`sessionstore.aio.AsyncStore`; several sessions may share it
    and it stays open on :meth:`close`. :meth:`from_url` opens a store of its own.
    ``session_settings`` (a ``SessionSettings`` or a dict of its fields) gives the
    default ``limit`` of :meth:`get_items`, as in the SDK's sessions.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: aio.AsyncStore,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(store, aio.AsyncStore):
            raise InvalidArgumentError(
                f"SessionStoreSession takes a sessionstore.aio store (sessionstore.aio.connect"
                f"(...)), not {type(store).__name__}; or use SessionStoreSession.from_url"
            )
        self.session_id = check_session_id(session_id)
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.store = store
        self._owns_store = False
        # Every adapter creates a log with this same header, so that processes racing to
        # create it agree (the store refuses a second, different header).
        self._header = SessionHeader(id=self.session_id, created_at=0)
        self._lock = AnyLoopLock()
        self._log = _Folded()
        #: Where the next append is tried first: the stored next seq as last seen.
        self._append_at = 0

    @classmethod
    def from_url(
        cls,
        session_id: str,
        url: str | os.PathLike[str] | None = None,
        *,
        namespace: str = aio.DEFAULT_NAMESPACE,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **connect_options: Any,
    ) -> SessionStoreSession:
        """A session on a store of its own, opened with :func:`sessionstore.aio.connect`
        (``url``, ``namespace`` and ``connect_options`` such as ``timeout``,
        ``durability`` and ``ttl`` go there; no I/O until first use). :meth:`close`
        closes that store."""
        store = aio.connect(url, namespace, **connect_options)
        session = cls(session_id, store, session_settings=session_settings)
        session._owns_store = True
        return session

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items, oldest first; with ``limit`` (else ``session_settings.limit``) the
        newest ``limit`` of them in that order, none for ``limit <= 0``. Popped items are
        gone; an empty or never-written session has none. The items are new objects on
        every call."""
        session_limit = resolve_session_limit(limit, self.session_settings)
        async with self._lock:
            await self._refresh()
            live = self._log.items
            if session_limit is None:
                chosen = list(live.values())
            elif session_limit <= 0:
                return []
            else:
                chosen = list(islice(reversed(live.values()), session_limit))
                chosen.reverse()
        # A copy, so that a caller changing an item does not change what this session holds.
        copied: list[TResponseInputItem] = orjson.loads(orjson.dumps(chosen))
        return copied

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order as one durable batch; an empty list writes nothing.

        An item that would not survive a JSON round trip raises
        :class:`NotJSONSerializableItemError` (a ``NotJSONSerializableError``) naming its
        index, and nothing is written. Concurrent adds, from this process or others, all
        land once each.
        """
        batch = list(items)
        if not batch:
            return
        token = _batch_id()
        time = now_ms()

        last = len(batch) - 1

        def events(first: int) -> list[SessionEvent]:
            return [
                _event(first + i, ITEM, time, {"item": item}, token if i == last else None)
                for i, item in enumerate(batch)
            ]

        async with self._lock:
            await self._append(events)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; None when there is none.

        The removal is a ``"pop"`` event appended where the log ended when this call
        read it, so it lands only if no other write came first; else this call reads
        the log again and retries.
        """
        async with self._lock:
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                await self._refresh()
                live = self._log.items
                if not live:
                    return None
                seq = next(reversed(live))
                at = self._log.next_seq
                pop = _event(at, POP, now_ms(), {"seq": seq}, _batch_id())
                try:
                    self._append_at = await self.store.events.append(self.session_id, [pop])
                except (SeqConflictError, SessionNotFoundError):
                    await self._pause(attempt)
                    continue
                popped: TResponseInputItem = orjson.loads(orjson.dumps(live[seq]))
                return popped
        raise ConcurrentModificationError(
            f"pop_item of session {self.session_id!r} lost {WRITE_ATTEMPTS} races in a row"
        )

    async def clear_session(self) -> None:
        """Delete the session's log (nothing happens when there is none)."""
        async with self._lock:
            with contextlib.suppress(SessionNotFoundError):
                await self.store.events.delete(self.session_id)
            self._log = _Folded()
            self._append_at = 0

    async def close(self) -> None:
        """Close the store if :meth:`from_url` opened it; a store given to the
        constructor stays open. Idempotent."""
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> SessionStoreSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"SessionStoreSession({self.session_id!r}, {self.store!r})"

    # --- internals -------------------------------------------------------------------

    async def _append(self, events: Callable[[int], list[SessionEvent]]) -> None:
        """Append the items ``events(first_seq)`` at the stored next seq, retrying on
        conflict."""
        first = self._append_at
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                self._append_at = await self.store.events.append(self.session_id, events(first))
                return
            except NotJSONSerializableError as exc:
                raise _item_error(self.session_id, exc, first) from None
            except SeqConflictError as exc:
                first = exc.expected
            except SessionNotFoundError:
                await self._create()
                first = 0
            await self._pause(attempt)
        raise ConcurrentModificationError(
            f"add_items to session {self.session_id!r} lost {WRITE_ATTEMPTS} races in a row"
        )

    async def _create(self) -> None:
        # Exists already: created meanwhile by another process or another session of
        # this store.
        with contextlib.suppress(SessionExistsError):
            await self.store.events.create(self._header)

    @staticmethod
    async def _pause(attempt: int) -> None:
        if attempt > _EAGER_RETRIES:
            await asyncio.sleep(LOST_RACE.delay(attempt - _EAGER_RETRIES))

    async def _refresh(self) -> None:
        """Bring the folded items up to date with the stored log."""
        log = self._log
        try:
            if log.last is None:
                log.fold(await self.store.events.read_from(self.session_id, 0))
            else:
                read = await self.store.events.read_from(self.session_id, log.last.seq)
                if read and _same(read[0], log.last):
                    log.fold(read, 1)
                else:  # deleted and written again since the last read
                    self._log = log = _Folded()
                    log.fold(await self.store.events.read_from(self.session_id, 0))
        except SessionNotFoundError:
            self._log = _Folded()
        self._append_at = max(self._append_at, self._log.next_seq)


class _Folded:
    """The items of a log as far as it was read: item seq -> item, in seq order."""

    def __init__(self) -> None:
        self.items: dict[int, Any] = {}
        self.next_seq = 0
        self.last: SessionEvent | None = None

    def fold(self, events: list[SessionEvent], start: int = 0) -> None:
        items = self.items
        for index in range(start, len(events)):
            event = events[index]
            kind, data = event.type, event.data
            if kind == ITEM and type(data) is dict and "item" in data:
                items[event.seq] = data["item"]
            elif kind == POP and type(data) is dict and type(data.get("seq")) is int:
                items.pop(data["seq"], None)
        if len(events) > start:
            self.last = events[-1]
            self.next_seq = self.last.seq + 1


def _same(a: SessionEvent, b: SessionEvent) -> bool:
    return (a.seq, a.type, a.time, a.id, a.data) == (b.seq, b.type, b.time, b.id, b.data)


def _batch_id() -> str:
    return secrets.token_hex(8)


def _event(
    seq: int, kind: str, time: int, data: dict[str, Any], id: str | None = None
) -> SessionEvent:
    return SessionEvent(seq=seq, type=kind, time=time, data=data, id=id)


def _item_error(
    session_id: str, exc: NotJSONSerializableError, first: int
) -> NotJSONSerializableItemError:
    """Name the offending item by its index in the ``add_items`` list (not its seq)."""
    path = exc.path
    inner = "$" + path[len(_ITEM_PATH) :] if path.startswith(_ITEM_PATH) else path
    return NotJSONSerializableItemError(session_id, exc.seq - first, exc.seq, inner, exc.reason)


__all__ = ["NotJSONSerializableItemError", "SessionStoreSession"]
