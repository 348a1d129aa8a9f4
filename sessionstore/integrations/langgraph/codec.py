"""LangGraph's objects as the data of a thread's events, and back (no I/O).

Every value, checkpoint and metadata is what the saver's ``serde`` made of it, packed as
``[type, base64 of the bytes]``: stored as made, bytes included, whatever the serde.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_metadata,
    writes_sort_key,
)

from .thread import Packed, Saved, Tables, Thread


def checkpoint_config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    """The config naming one checkpoint."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class Codec:
    """Packs what ``put`` and ``put_writes`` take into event data, and a folded thread's
    checkpoints into ``CheckpointTuple`` objects, with ``serde``."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def pack(self, value: Any) -> Packed:
        kind, raw = self.serde.dumps_typed(value)
        return [kind, binascii.b2a_base64(raw, newline=False).decode("ascii")]

    def unpack(self, packed: Packed) -> Any:
        # binascii takes the ASCII text as it is (base64's wrapper re-encodes it first).
        return self.serde.loads_typed((packed[0], binascii.a2b_base64(packed[1])))

    def checkpoint_event(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[RunnableConfig, str, dict[str, Any]]:
        """(the config ``put`` returns, the thread, the data of its ``checkpoint`` event)."""
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        ns = configurable.get("checkpoint_ns", "")
        rest: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = rest.pop("channel_values", {})
        blobs = [
            [channel, version, self.pack(values[channel]) if channel in values else None]
            for channel, version in new_versions.items()
        ]
        data = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": configurable.get("checkpoint_id"),
            "checkpoint": self.pack(rest),
            "metadata": self.pack(get_checkpoint_metadata(config, metadata)),
            "blobs": blobs,
        }
        return checkpoint_config(thread_id, ns, checkpoint["id"]), thread_id, data

    def writes_event(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[str, dict[str, Any] | None]:
        """(the thread, the data of its ``writes`` event; None when there is no write)."""
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        if not writes:
            return thread_id, None
        packed = [
            [WRITES_IDX_MAP.get(channel, idx), channel, self.pack(value)]
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

    def metadata(self, entry: Saved) -> CheckpointMetadata:
        metadata: CheckpointMetadata = self.unpack(entry.metadata)
        return metadata

    def tuple(
        self, thread_id: str, thread: Thread | Tables, ns: str, checkpoint_id: str
    ) -> CheckpointTuple:
        """Checkpoint ``checkpoint_id`` of namespace ``ns`` of the folded ``thread`` (or
        its :class:`.Tables`), with its channel values and pending writes."""
        entry = thread.checkpoints[ns][checkpoint_id]
        # unpack() inlined: a list of many checkpoints makes several of these each.
        loads, text = self.serde.loads_typed, binascii.a2b_base64
        packed = entry.checkpoint
        checkpoint: Checkpoint = loads((packed[0], text(packed[1])))
        values = {}
        blobs = thread.blobs
        for channel, version in checkpoint["channel_versions"].items():
            blob = blobs.get((ns, channel, version))
            if blob is not None:
                values[channel] = loads((blob[0], text(blob[1])))
        checkpoint["channel_values"] = values
        stored = thread.writes.get((ns, checkpoint_id))
        pending = []
        if stored:
            ordered = (
                sorted(stored.items(), key=lambda kv: writes_sort_key(kv[1][2], *kv[0]))
                if len(stored) > 1
                else stored.items()
            )
            pending = [
                (task, channel, loads((value[0], text(value[1]))))
                for (task, _), (channel, value, _) in ordered
            ]
        parent = checkpoint_config(thread_id, ns, entry.parent) if entry.parent else None
        return CheckpointTuple(
            config=checkpoint_config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=self.metadata(entry),
            parent_config=parent,
            pending_writes=pending,
        )
