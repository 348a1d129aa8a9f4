"""A thread as its log folds (no I/O).

A checkpoint put again replaces the one of the same id (as in ``InMemorySaver``); a
write of a task at a given index is kept once (the first), except the special channels
(errors, interrupts), whose last write counts. The latest checkpoint of a namespace is
the one with the greatest id (LangGraph's ids grow with time), so a checkpoint put late
never replaces a newer one as the latest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from immutables import Map

from sessionstore import SessionEvent, SessionHeader

from .errors import ThreadDeletedError
from .layout import AFTER, BLOBS, CHECKPOINT, DELETED, OPEN, REMOVE, SEAL, WRITES

#: A packed serde output: ``[type, base64 of the bytes]`` (see :mod:`.codec`).
Packed = list[str]


@dataclass
class Saved:
    """A stored checkpoint: its packed checkpoint and metadata and its parent's id."""

    checkpoint: Packed
    metadata: Packed
    parent: str | None


class Tables(NamedTuple):
    """A thread's tables as plain dicts (:meth:`Thread.plain`): many lookups cost less
    in a dict than in an immutable map, so what reads many entries (a list of a
    thread's checkpoints) reads them from these."""

    checkpoints: Mapping[str, Mapping[str, Saved]]
    blobs: Mapping[tuple[str, str, Any], Packed | None]
    writes: Mapping[tuple[str, str], Mapping[tuple[str, int], tuple[str, Packed, str]]]


@dataclass
class Thread:
    """A thread as its log folds, up to ``next_seq``: checkpoints by namespace and id,
    channel values by (namespace, channel, version), writes by (namespace, checkpoint
    id) then (task, idx) as (channel, value, task path). ``last`` tells the last event
    folded from any other (its seq and random id)."""

    checkpoints: Map[str, Map[str, Saved]] = field(default_factory=Map)
    blobs: Map[tuple[str, str, Any], Packed | None] = field(default_factory=Map)
    writes: Map[tuple[str, str], Map[tuple[str, int], tuple[str, Packed, str]]] = field(
        default_factory=Map
    )
    next_seq: int = 0
    last_time: int = 0
    last: tuple[int, str | None] | None = None
    #: The id of the last event that counts (see :data:`.layout.AFTER`).
    valid_id: str | None = None
    #: The mark of the last deletion: checkpoints made before it are of the deleted thread.
    deleted_before: str | None = None
    #: The checkpoints (namespace, id) that ``prune`` or ``delete_for_runs`` removed since.
    removed: frozenset[tuple[str, str]] = frozenset()
    #: Whether the last event that counts is a ``seal``: a compaction is under way.
    sealed: bool = False
    #: The time (epoch ms) of the last ``seal`` that counts.
    sealed_at: int = 0
    #: The id of the ``seal`` that the last ``open`` counted after, when no ``seal``
    #: counted since: the compaction it ended may have left its copy behind.
    reopened: str | None = None
    #: The header of the log, read before any of the events folded here (so a header
    #: of a log since deleted and made again, never a newer one); None when not read.
    header: SessionHeader | None = None
    #: The latest checkpoint id of each namespace (kept as the log folds).
    _latest: dict[str, str] = field(default_factory=dict)
    #: :meth:`plain`, made at its first call (a thread is never changed once made).
    _plain: Tables | None = field(default=None, init=False, repr=False, compare=False)

    def check_not_deleted(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """Raise :class:`ThreadDeletedError` when ``checkpoint_id`` was made before the
        thread was last deleted."""
        if self.deleted_before is not None and checkpoint_id <= self.deleted_before:
            raise ThreadDeletedError(thread_id, ns, checkpoint_id)

    def check_not_removed(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """Raise :class:`ThreadDeletedError` when ``checkpoint_id`` was removed (by
        ``prune`` or ``delete_for_runs``) or made before the thread was last deleted."""
        if (ns, checkpoint_id) in self.removed:
            raise ThreadDeletedError(thread_id, ns, checkpoint_id)
        self.check_not_deleted(thread_id, ns, checkpoint_id)

    def continued_by(self, event: SessionEvent) -> bool:
        """Whether ``event`` is the last event folded here (so the log read on from it
        is the one folded)."""
        return event.id is not None and (event.seq, event.id) == self.last

    def plain(self) -> Tables:
        """The tables as dicts (a copy of each, made once)."""
        if self._plain is None:
            self._plain = Tables(
                {ns: dict(saved) for ns, saved in self.checkpoints.items()},
                dict(self.blobs),
                dict(self.writes),
            )
        return self._plain

    def latest(self, ns: str) -> str | None:
        """The id of the latest checkpoint of namespace ``ns``; None when it has none."""
        return self._latest.get(ns)

    def extended(self, events: list[SessionEvent]) -> Thread:
        """This thread with ``events`` (the next ones of its log) folded in; this one
        stays as it was (other readers may hold it): the new thread's tables share what
        the events leave unchanged."""
        if not events:
            return self
        thread = Thread(
            self.checkpoints,
            self.blobs,
            self.writes,
            deleted_before=self.deleted_before,
            removed=self.removed,
            header=self.header,
        )
        thread.valid_id, thread.sealed = self.valid_id, self.sealed
        thread.sealed_at, thread.reopened = self.sealed_at, self.reopened
        thread._latest = dict(self._latest)
        for event in events:
            if event.data.get(AFTER) == thread.valid_id:
                thread._fold(event)
                thread.valid_id, thread.sealed = event.id, event.type == SEAL
                if event.type == SEAL:
                    thread.sealed_at, thread.reopened = event.time, None
                elif event.type == OPEN:
                    thread.reopened = event.data[AFTER]
        last = events[-1]
        thread.next_seq, thread.last_time, thread.last = (
            last.seq + 1,
            last.time,
            (last.seq, last.id),
        )
        return thread

    def _fold(self, event: SessionEvent) -> None:
        data = event.data
        if event.type in (CHECKPOINT, BLOBS):
            ns = data["ns"]
            if data["blobs"]:
                with self.blobs.mutate() as blobs:
                    for channel, version, value in data["blobs"]:
                        blobs[(ns, channel, version)] = value
                    self.blobs = blobs.finish()
            if event.type == CHECKPOINT:
                saved = Saved(data["checkpoint"], data["metadata"], data["parent"])
                inner = self.checkpoints.get(ns, _EMPTY).set(data["id"], saved)
                self.checkpoints = self.checkpoints.set(ns, inner)
                if (ns, data["id"]) in self.removed:  # put again since
                    self.removed = self.removed - {(ns, data["id"])}
                self._latest[ns] = max(self._latest.get(ns, ""), data["id"])
        elif event.type == WRITES:
            key = (data["ns"], data["checkpoint"])
            task, path = data["task"], data["path"]
            with self.writes.get(key, _EMPTY).mutate() as stored:
                for idx, channel, value in data["writes"]:
                    if idx < 0 or (task, idx) not in stored:
                        stored[(task, idx)] = (channel, value, path)
                self.writes = self.writes.set(key, stored.finish())
        elif event.type == REMOVE:
            # A compaction leaves no checkpoint event of those: each listed counts.
            self.removed = self.removed | {
                (ns, checkpoint_id) for ns, checkpoint_id in data["checkpoints"]
            }
            for ns, checkpoint_id in data["checkpoints"]:
                saved_ns = self.checkpoints.get(ns)
                if saved_ns is not None and checkpoint_id in saved_ns:
                    saved_ns = saved_ns.delete(checkpoint_id)
                    self.checkpoints = self.checkpoints.set(ns, saved_ns)
                    if self._latest.get(ns) == checkpoint_id:
                        self._latest.pop(ns)
                        if saved_ns:
                            self._latest[ns] = max(saved_ns)
                if (ns, checkpoint_id) in self.writes:
                    self.writes = self.writes.delete((ns, checkpoint_id))
        elif event.type == DELETED:
            self.checkpoints, self.blobs, self.writes, self._latest = _EMPTY, _EMPTY, _EMPTY, {}
            self.removed = frozenset()
            self.deleted_before = max(self.deleted_before or "", data["before"])


#: The empty table every new one starts from.
_EMPTY: Map[Any, Any] = Map()
