"""A thread as its log folds (no I/O).

A checkpoint put again replaces the one of the same id (as in ``InMemorySaver``); a
write of a task at a given index is kept once (the first), except the special channels
(errors, interrupts), whose last write counts. The latest checkpoint of a namespace is
the one with the greatest id (LangGraph's ids grow with time), so a checkpoint put late
never replaces a newer one as the latest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sessionstore import SessionEvent

from .errors import ThreadDeletedError
from .layout import AFTER, BLOBS, CHECKPOINT, DELETED, REMOVE, SEAL, WRITES

#: A packed serde output: ``[type, base64 of the bytes]`` (see :mod:`.codec`).
Packed = list[str]


@dataclass
class Saved:
    """A stored checkpoint: its packed checkpoint and metadata and its parent's id."""

    checkpoint: Packed
    metadata: Packed
    parent: str | None


@dataclass
class Thread:
    """A thread as its log folds, up to ``next_seq``: checkpoints by namespace and id,
    channel values by (namespace, channel, version), writes by (namespace, checkpoint
    id) then (task, idx) as (channel, value, task path). ``last`` tells the last event
    folded from any other (its seq and random id)."""

    checkpoints: dict[str, dict[str, Saved]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, Any], Packed | None] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, Packed, str]]] = field(
        default_factory=dict
    )
    next_seq: int = 0
    last_time: int = 0
    last: tuple[int, str | None] | None = None
    #: The id of the last event that counts (see :data:`.layout.AFTER`).
    valid_id: str | None = None
    #: The mark of the last deletion: checkpoints made before it are of the deleted thread.
    deleted_before: str | None = None
    #: Whether the last event that counts is a ``seal``: a compaction is under way.
    sealed: bool = False

    def check_not_deleted(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """Raise :class:`ThreadDeletedError` when ``checkpoint_id`` was made before the
        thread was last deleted."""
        if self.deleted_before is not None and checkpoint_id <= self.deleted_before:
            raise ThreadDeletedError(thread_id, ns, checkpoint_id)

    def continued_by(self, event: SessionEvent) -> bool:
        """Whether ``event`` is the last event folded here (so the log read on from it
        is the one folded)."""
        return event.id is not None and (event.seq, event.id) == self.last

    def extended(self, events: list[SessionEvent]) -> Thread:
        """This thread with ``events`` (the next ones of its log) folded in; this one
        stays as it was (other readers may hold it)."""
        if not events:
            return self
        thread = Thread(
            {ns: dict(saved) for ns, saved in self.checkpoints.items()},
            dict(self.blobs),
            {key: dict(stored) for key, stored in self.writes.items()},
            deleted_before=self.deleted_before,
        )
        thread.valid_id, thread.sealed = self.valid_id, self.sealed
        for event in events:
            if event.data.get(AFTER) == thread.valid_id:
                thread._fold(event)
                thread.valid_id, thread.sealed = event.id, event.type == SEAL
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
            for channel, version, value in data["blobs"]:
                self.blobs[(ns, channel, version)] = value
            if event.type == CHECKPOINT:
                saved = Saved(data["checkpoint"], data["metadata"], data["parent"])
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
