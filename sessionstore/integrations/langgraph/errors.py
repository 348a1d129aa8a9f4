"""The errors a thread's owner meets: both are :class:`sessionstore.SessionStoreError`
and both mean that the write refused wrote nothing."""

from __future__ import annotations

from sessionstore import SessionStoreError


class ThreadConflictError(SessionStoreError):
    """A checkpoint was refused because its parent is no longer the latest checkpoint
    of its thread and namespace: another runner of the thread (in this process or
    another) wrote a newer one since this one read the thread. This checkpoint was not
    written; the thread keeps one chain. What the run wrote before it stays in the
    thread, and the other runner may have gone on from it. ``parent`` is the checkpoint
    this write continued from (None for the first of a run that found the thread
    without checkpoints, which another runner started since), ``latest`` the newer one
    stored."""

    def __init__(self, thread_id: str, checkpoint_ns: str, parent: str | None, latest: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.parent = parent
        self.latest = latest
        if parent is None:
            found = "this run found the thread without checkpoints, and another runner wrote "
            found += f"checkpoint {latest} since"
        else:
            found = f"another runner wrote checkpoint {latest} after {parent}, which this "
            found += "checkpoint continues from"
        super().__init__(
            f"thread {thread_id!r} (namespace {checkpoint_ns!r}): {found}; this checkpoint "
            "was not written (what the run wrote before it stays in the thread)"
        )


class ThreadDeletedError(SessionStoreError):
    """A write was refused because the checkpoint it belongs to or continues from
    (``checkpoint_id``) is gone: the thread was deleted (or expired) after it was
    made, or after its run began, or the checkpoint was removed by ``prune`` or
    ``delete_for_runs``. Nothing was written: a late write of a graph still running
    never brings a deleted thread back."""

    def __init__(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        super().__init__(
            f"thread {thread_id!r} (namespace {checkpoint_ns!r}): checkpoint "
            f"{checkpoint_id} is gone (the thread was deleted or expired after it was "
            "made or its run began, or it was pruned); nothing was written"
        )
