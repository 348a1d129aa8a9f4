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
* ``pop_item`` appends a ``"pop"`` event, ``data = {"seq": S, "after": D}``: it removes
  the item of event ``S``, if ``D`` names the event just before it (a digest of that
  event, see :func:`_digest`): a pop that landed on a log it did not read (one cleared
  and written again to the same length meanwhile) removes nothing. A pop that names no
  live item (already popped, or not an item) removes nothing; one without ``after``
  (written by an older version) is not checked;
* ``clear_session`` deletes the log.

The items are the ``"item"`` events not removed by a ``"pop"``, oldest first; events of
other types are left out. The last event of each batch carries a random ``id``, so two
batches are never identical (an append at a stale seq cannot pass for an applied replay)
and a reader can tell the log it read before from one deleted and written again.

Concurrency: every write names the seq it continues from and the store refuses it
(``SeqConflictError``) when anything landed first. ``add_items`` then retries at the
stored next seq, so concurrent adds from coroutines, threads and processes all land once.
``pop_item`` appends its pop at the end of the log it read, so it removes the newest item
only if nothing changed since; else it reads again and retries. It then reads on from
the last event it knew: a log cleared and written again meanwhile (before its pop
landed, which then removed nothing, or after, which the clear undid) makes it pop
again. It returns the item it removed, never one another popper got. A store write
whose caller is cancelled runs to its end before the cancellation reaches the caller,
so nothing lands after the call is gone (a cancellation is no rollback: a pop cancelled
then has removed its item); a call cancelled before it writes writes nothing.

Any thread, any event loop: one session object (and its store) may be used from
several threads each running its own event loop, and from one loop after another
(``asyncio.run`` twice, ``Runner.run_sync`` twice). Its lock belongs to no loop
(:class:`~sessionstore.fairwait.AnyLoopLock`) and the store keeps connections per loop.

Each instance keeps the items it has read, as JSON text, and a later ``get_items``
reads only the events appended since (checking the last event it knew is still there: a
log deleted and written again is read again whole). A ``get_items`` whose items all
come from the events it has just read returns the objects the store decoded (no store
keeps the events it returns), without a copy; any other decodes the text kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
from bisect import bisect_left
from collections.abc import Callable, Coroutine
from itertools import groupby, islice
from typing import Any, TypeVar

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
from ..records import StoredRecord, parsed_values
from ..when import now_ms

_T = TypeVar("_T")

#: Event type of one conversation item; ``data = {"item": item}``.
ITEM = "item"
#: Event type of a removal by ``pop_item``; ``data = {"seq": seq of the item event,
#: "after": digest of the event before the pop}``.
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
            read = await self._refresh()
            live = self._log.live
            if session_limit is None:
                chosen = list(live)
            elif session_limit <= 0:
                return []
            else:
                chosen = list(islice(reversed(live), session_limit))
                chosen.reverse()
            # The items read just now are the newest: when they are all that is asked
            # for, they are returned as decoded (this session keeps their text).
            if chosen and chosen[0] in read:
                return [read[seq] for seq in chosen]
            text = self._log.text(chosen)
        found: list[TResponseInputItem] = orjson.loads(text)
        return found

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
                read = self._log
                if not read.live or read.last is None:
                    return None
                seq = next(reversed(read.live))
                popped: TResponseInputItem = read.item(seq)
                data = {"seq": seq, "after": _digest(read.last)}
                pop = _event(read.next_seq, POP, now_ms(), data, _batch_id())
                try:
                    appending = self.store.events.append(self.session_id, [pop])
                    self._append_at = await _to_the_end(appending)
                except (SeqConflictError, SessionNotFoundError):
                    await self._pause(attempt)
                    continue
                await self._refresh()
                if self._log is read and seq not in read.live:
                    return popped
                # The log was cleared and written again, before the pop landed (which
                # then removed nothing) or after it (which undid it): pop again.
        raise ConcurrentModificationError(
            f"pop_item of session {self.session_id!r} lost {WRITE_ATTEMPTS} races in a row"
        )

    async def clear_session(self) -> None:
        """Delete the session's log (nothing happens when there is none)."""
        async with self._lock:
            with contextlib.suppress(SessionNotFoundError):
                await _to_the_end(self.store.events.delete(self.session_id))
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
                appending = self.store.events.append(self.session_id, events(first))
                self._append_at = await _to_the_end(appending)
                return
            except NotJSONSerializableError as exc:
                raise _item_error(self.session_id, exc, first) from None
            except SeqConflictError as exc:
                first = exc.expected
            except SessionNotFoundError:
                await self._create()
                first = 0
            except SessionExistsError:
                # Created meanwhile by another process, with its own creation time: the
                # store forgot this one's header, the next try appends to that session.
                pass
            await self._pause(attempt)
        raise ConcurrentModificationError(
            f"add_items to session {self.session_id!r} lost {WRITE_ATTEMPTS} races in a row"
        )

    async def _create(self) -> None:
        # Exists already: created meanwhile by another process or another session of
        # this store.
        with contextlib.suppress(SessionExistsError):
            await self.store.events.create(SessionHeader(id=self.session_id))

    @staticmethod
    async def _pause(attempt: int) -> None:
        if attempt > _EAGER_RETRIES:
            await asyncio.sleep(LOST_RACE.delay(attempt - _EAGER_RETRIES))

    async def _refresh(self) -> dict[int, Any]:
        """Bring the folded items up to date with the stored log; return the items this
        read added that are still there (seq -> item, as decoded)."""
        log = self._log
        added: dict[int, Any] = {}
        try:
            if log.last is None:
                added = log.fold(*await self._read(0))
            else:
                read, values = await self._read(log.last[0])
                if read and _identity(read[0]) == log.last:
                    added = log.fold(read, values, 1)
                else:  # deleted and written again since the last read
                    self._log = log = _Folded()
                    added = log.fold(*await self._read(0))
        except SessionNotFoundError:
            self._log = _Folded()
        self._append_at = max(self._append_at, self._log.next_seq)
        return added

    async def _read(self, seq: int) -> tuple[list[StoredRecord], list[Any]]:
        """The stored records from ``seq`` and every value of their data, parsed (which
        finds damage within them as an event read does)."""
        records = await self.store.events.read_records_from(self.session_id, seq)
        return records, parsed_values(records, self.session_id)


class _Run:
    """The items one read added: their seqs and, in the same order, the JSON of each."""

    __slots__ = ("seqs", "pieces", "live", "_joined")

    def __init__(self, seqs: list[int], pieces: list[bytes]) -> None:
        self.seqs = seqs
        self.pieces = pieces
        #: How many of ``seqs`` are not popped.
        self.live = len(seqs)
        self._joined: bytes | None = None

    def keep(self, seqs: list[int], pieces: list[bytes]) -> None:
        """Hold only ``seqs`` (the others were popped for good)."""
        self.seqs, self.pieces = seqs, pieces
        self._joined = None

    def joined(self) -> bytes:
        """The items of the whole run, without the brackets of a JSON array."""
        if self._joined is None:
            self._joined = b",".join(self.pieces)
        return self._joined

    def pieces_of(self, seqs: list[int]) -> list[bytes]:
        """The JSON of the items ``seqs`` (some of this run's, in order; ``self.seqs``
        ascend)."""
        start = bisect_left(self.seqs, seqs[0])
        if self.seqs[start : start + len(seqs)] == seqs:  # the usual case: a newest run
            return self.pieces[start : start + len(seqs)]
        mine, pieces = self.seqs, self.pieces
        return [pieces[bisect_left(mine, seq)] for seq in seqs]


class _Folded:
    """The items of a log as far as it was read, in seq order, kept as JSON text: one
    :class:`_Run` per read that added items.

    Text rather than the objects read: a long history holds nothing the garbage
    collector walks, and what a caller does to the items it was given changes nothing
    kept here.
    """

    def __init__(self) -> None:
        #: Item seq -> the run holding it, in seq order.
        self.live: dict[int, _Run] = {}
        self.next_seq = 0
        #: :func:`_identity` of the last event read.
        self.last: tuple[Any, ...] | None = None

    def fold(
        self, records: list[StoredRecord], values: list[Any], start: int = 0
    ) -> dict[int, Any]:
        """Take in ``records[start:]`` (``values``: every data value of ``records``, as
        :func:`~sessionstore.records.parsed_values` gives them); return the items they
        added and did not pop (seq -> item, as decoded). The text kept of each item is
        the text stored."""
        added: dict[int, Any] = {}
        texts: dict[int, Any] = {}
        at = 0  # where the values of the next record start
        for index, record in enumerate(records):
            data = record.data
            if index >= start and (record.type == ITEM or record.type == POP):
                name = "item" if record.type == ITEM else "seq"
                if name in data:
                    value = values[at if len(data) == 1 else at + list(data).index(name)]
                    if name == "item":
                        added[record.seq] = value
                        texts[record.seq] = data[name]
                    elif "after" in data and not _follows(data["after"], records, index):
                        pass  # a pop that landed on a log it did not read
                    elif type(value) is int:
                        if value in added:
                            del added[value]
                        elif value in self.live:
                            self.live.pop(value).live -= 1
            at += len(data)
        if added:
            run = _Run(list(added), [bytes(texts[seq]) for seq in added])
            self.live.update(dict.fromkeys(added, run))
        if len(records) > start:
            self.last = _identity(records[-1])
            self.next_seq = records[-1].seq + 1
        return added

    def text(self, seqs: list[int]) -> bytes:
        """The JSON array of the live items ``seqs`` (a run of the newest, in order)."""
        pieces = []
        for run, group in groupby(seqs, self.live.__getitem__):
            wanted = list(group)
            if len(wanted) < len(run.seqs):
                part = run.pieces_of(wanted)
                if len(wanted) == run.live:  # popped items are gone for good: drop them
                    run.keep(wanted, part)
                pieces.append(b",".join(part))
            else:
                pieces.append(run.joined())
        return b"[" + b",".join(pieces) + b"]"

    def item(self, seq: int) -> Any:
        """The live item ``seq``, decoded."""
        [piece] = self.live[seq].pieces_of([seq])
        return orjson.loads(piece)


def _identity(record: StoredRecord) -> tuple[Any, ...]:
    """What tells an event from another written at the same seq: (seq, type, time, id,
    the JSON of its data)."""
    data = tuple((name, bytes(value)) for name, value in record.data.items())
    return (record.seq, record.type, record.time, record.id, data)


def _digest(identity: tuple[Any, ...]) -> str:
    """What a pop names the event before it by: a digest of that event's
    :func:`_identity`."""
    return hashlib.blake2b(repr(identity).encode(), digest_size=8).hexdigest()


def _follows(after: Any, records: list[StoredRecord], index: int) -> bool:
    """Whether the pop ``records[index]``, whose ``after`` is the JSON text ``after``,
    comes just after the event it names (a pop first in a log follows none)."""
    return index > 0 and orjson.loads(bytes(after)) == _digest(_identity(records[index - 1]))


async def _to_the_end(operation: Coroutine[Any, Any, _T]) -> _T:
    """Await the store write ``operation`` to its end even when the caller is cancelled
    meanwhile, then raise that cancellation: a write the caller gave up on has landed or
    failed by then, never later (a store call running in a worker thread is not stopped
    by it)."""
    task = asyncio.ensure_future(operation)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller gets
        raise cancelled
    return task.result()


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
