"""``prune`` and ``delete_for_runs`` give back the space of what they remove: the
thread's log is rewritten without it (see ``sessionstore.integrations.langgraph
.compaction``), on every backend, while other runners read and write the thread."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Iterator
from itertools import chain
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from conftest import BACKENDS, url_for  # noqa: E402
from langgraph.channels.delta import DeltaChannel  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

import sessionstore  # noqa: E402
from integrations.test_langgraph import assert_one_chain, checkpoint, thread  # noqa: E402
from sessionstore import (  # noqa: E402
    ConcurrentModificationError,
    SeqConflictError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
)
from sessionstore.integrations.langgraph import (  # noqa: E402
    SessionStoreSaver,
    access,
    compaction,
    layout,
    session_id,
)
from sessionstore.integrations.langgraph.access import SLEEP  # noqa: E402
from sessionstore.integrations.langgraph.errors import ThreadDeletedError  # noqa: E402
from sessionstore.integrations.langgraph.layout import (  # noqa: E402
    BLOBS,
    DELETED,
    OPEN,
    REMOVE,
    SEAL,
    VOID,
)
from sessionstore.integrations.langgraph.ownership import delete, put_writes  # noqa: E402
from sessionstore.integrations.langgraph.retention import prune  # noqa: E402

#: The size of each checkpoint's own channel value.
BIG = 3000


def put_big(saver: SessionStoreSaver, parent: str | None, step: int, run: str = "run-1") -> str:
    """Put a checkpoint of thread "t" continuing from ``parent``, with a channel value
    of its own (``BIG`` characters) and the "shared" one written by the first."""
    made, metadata, _ = checkpoint(step=step, run_id=run)
    version = str(step + 2)
    made["channel_values"] = {"big": f"{step}:" + "x" * BIG, "shared": "from the first"}
    made["channel_versions"] = {"big": version, "shared": "1"}
    new_versions = {"big": version} if parent else {"big": version, "shared": "1"}
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent
    stored = saver.put(config, made, metadata, new_versions)
    saver.put_writes(stored, [("big", "w" * 500)], f"task-{step}")
    return str(stored["configurable"]["checkpoint_id"])


def grow(saver: SessionStoreSaver, steps: int, run: str = "run-1") -> list[str]:
    ids: list[str] = []
    for step in range(steps):
        ids.append(put_big(saver, ids[-1] if ids else None, step, run))
    return ids


def assert_reads_as_latest(saver: SessionStoreSaver, latest: str, step: int) -> None:
    found = saver.get_tuple(thread("t"))
    assert found is not None and found.checkpoint["id"] == latest
    assert found.checkpoint["channel_values"] == {
        "big": f"{step}:" + "x" * BIG,
        "shared": "from the first",
    }
    assert [w[1:] for w in found.pending_writes or []] == [("big", "w" * 500)]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[sessionstore.Store]:
    url = url_for(request.param, request, tmp_path)
    with sessionstore.connect(url, f"t-lg-{uuid.uuid4().hex[:8]}") as opened:
        yield opened


def test_prune_gives_the_space_of_removed_checkpoints_back(store: sessionstore.Store) -> None:
    saver = SessionStoreSaver(store)
    ids = grow(saver, 6)
    sid = session_id("t")
    before = store.events.stored_bytes(sid)
    count = len(store.events.read_from(sid, 0))
    saver.prune(["t"])
    assert store.events.stored_bytes(sid) < before / 3
    events = store.events.read_from(sid, 0)
    # Every event keeps its seq; the removed checkpoints and their writes hold nothing.
    assert [e.seq for e in events] == list(range(count + 3))
    assert [e.type for e in events[count:]] == [REMOVE, SEAL, OPEN]
    assert {e.type for e in events[:count]} == {"checkpoint", "writes", BLOBS, VOID}
    assert sum(e.type == "checkpoint" for e in events) == 1
    assert not any("x" * BIG in str(e.data) for e in events[:count])
    assert_reads_as_latest(saver, ids[-1], 5)
    assert [t.checkpoint["id"] for t in saver.list(thread("t"))] == [ids[-1]]
    assert store.events.list() != [] and not any(
        h.id.startswith("langgraph-compacting:") for h in store.events.list()
    )
    put_big(saver, ids[-1], 6)  # the thread goes on
    assert len(list(saver.list(thread("t")))) == 2


def test_delete_for_runs_gives_their_space_back(store: sessionstore.Store) -> None:
    saver = SessionStoreSaver(store)
    kept = grow(saver, 2, run="run-1")
    gone = [put_big(saver, kept[-1], 2, run="run-2")]
    gone.append(put_big(saver, gone[-1], 3, run="run-2"))
    before = store.events.stored_bytes(session_id("t"))
    saver.delete_for_runs(["run-2"])
    assert store.events.stored_bytes(session_id("t")) < before * 0.7
    assert [t.checkpoint["id"] for t in saver.list(thread("t"))] == kept[::-1]
    assert_reads_as_latest(saver, kept[-1], 1)


def test_writes_to_a_removed_checkpoint_are_refused_and_their_space_comes_back(
    store: sessionstore.Store,
) -> None:
    saver = SessionStoreSaver(store)
    ids = grow(saver, 3)
    saver.prune(["t"])
    removed = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": ids[0]}}
    sid = session_id("t")
    count = len(store.events.read_from(sid, 0))
    with pytest.raises(ThreadDeletedError) as caught:
        saver.put_writes(removed, [("late", "y" * BIG)], "late-task")
    assert caught.value.checkpoint_id == ids[0]
    assert len(store.events.read_from(sid, 0)) == count  # nothing written
    # Writes that a version taking them left behind are given back by the next prune.
    late = {"ns": "", "checkpoint": ids[0], "task": "late", "path": ""}
    late["writes"] = [[0, "late", saver._codec.pack("y" * BIG)]]
    pruned = store.events.stored_bytes(sid)
    saver._run(saver._threads.append("t", lambda thread: [("writes", late)]))
    assert store.events.stored_bytes(sid) > pruned + BIG
    saver.prune(["t"])
    assert store.events.stored_bytes(sid) < pruned + BIG / 2
    assert_reads_as_latest(saver, ids[-1], 2)


class Delta(TypedDict):
    log: Annotated[
        list[str],
        DeltaChannel(lambda state, batches: [*state, *chain(*batches)], list, snapshot_frequency=3),
    ]


def test_keep_latest_keeps_what_delta_channels_are_rebuilt_from(store: sessionstore.Store) -> None:
    builder = StateGraph(Delta)
    builder.add_node("node", lambda state: {"log": ["node"]})
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    saver = SessionStoreSaver(store)
    graph = builder.compile(checkpointer=saver)
    expected: list[str] = []
    for run in range(5):
        graph.invoke({"log": [f"in{run}"]}, thread("t"))
        expected += [f"in{run}", "node"]
    count = len(list(saver.list(thread("t"))))
    assert graph.get_state(thread("t")).values["log"] == expected
    saver.prune(["t"])
    kept = len(list(saver.list(thread("t"))))
    assert 1 < kept < count  # back to the last snapshot, no further
    assert graph.get_state(thread("t")).values["log"] == expected
    assert graph.invoke({"log": ["in5"]}, thread("t"))["log"] == [*expected, "in5", "node"]


@pytest.fixture(params=["file", "redis"])
def savers(
    request: pytest.FixtureRequest, tmp_path: Any
) -> Iterator[tuple[SessionStoreSaver, SessionStoreSaver]]:
    url = url_for(request.param, request, tmp_path)
    namespace = f"t-lg-{uuid.uuid4().hex[:8]}"
    with (
        SessionStoreSaver(url, namespace=namespace) as one,
        SessionStoreSaver(url, namespace=namespace) as two,
    ):
        yield one, two


def test_a_runner_that_read_before_a_prune_reads_and_writes_on(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    """The other runner's put is driven step by step: it read the thread before the
    prune and appends after it, to the log the prune wrote anew (another header; the seq
    it expected holds the ``remove``): refused, it reads the thread again and writes on."""
    admin, runner = savers
    ids = grow(admin, 4)
    assert_reads_as_latest(runner, ids[-1], 3)  # the runner has it folded
    made, metadata, _ = checkpoint()
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": ids[-1]}}
    _, flow = runner._put(config, made, metadata, {})
    append = drive(flow, runner._call, lambda s: s.name == "append")
    admin.prune(["t"])
    assert_reads_as_latest(runner, ids[-1], 3)
    with pytest.raises((SessionExistsError, SeqConflictError)) as lost:
        runner._call(append)
    assert isinstance(drive(flow, runner._call, lambda s: False, flow.throw(lost.value)), Done)
    assert [t.checkpoint["id"] for t in admin.list(thread("t"))] == [made["id"], ids[-1]]
    assert_one_chain(admin, "t")


def advance(flow: Any, call: Any, step: Any) -> Any:
    """Make ``step`` (its error thrown back into ``flow``); the next step, or
    ``Done(result)`` once the flow has returned."""
    try:
        try:
            reply = call(step)
        except SessionStoreError as exc:
            return flow.throw(exc)
        return flow.send(reply)
    except StopIteration as stop:
        return Done(stop.value)


class Done:
    def __init__(self, value: Any) -> None:
        self.value = value
        self.name = None


def drive(flow: Any, call: Any, until: Any, step: Any = None) -> Any:
    """Drive ``flow`` from ``step`` (its first when None) to the first step for which
    ``until`` holds, not made; or to its end (``Done``)."""
    step = next(flow) if step is None else step
    while not isinstance(step, Done) and not until(step):
        step = advance(flow, call, step)
    return step


def test_while_the_log_is_rewritten_readers_read_the_copy_and_writers_wait(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    """The prune is driven step by step and held once it has deleted the log."""
    admin, runner = savers
    ids = grow(admin, 3)
    flow = prune(admin._threads, admin._codec, ["t"], "keep_latest")
    main = session_id("t")
    step = drive(flow, admin._call, lambda s: s.name == "delete" and s.args == (main,))
    step = advance(flow, admin._call, step)  # the log is gone; its sealed copy holds it
    found = runner.get_tuple(thread("t"))
    assert found is not None and found.checkpoint["id"] == ids[-1]
    assert [t.config["configurable"]["thread_id"] for t in runner.list(None)] == ["t"]
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": ids[-1]}}
    _, data = runner._codec.writes_event(config, [("big", "late")], "task-9", "")
    assert data is not None
    writer = put_writes(runner._threads, "t", data)
    waiting = drive(writer, runner._call, lambda s: s.name in (SLEEP, "append"))
    assert waiting.name == SLEEP  # sealed: it waits instead of appending
    assert isinstance(drive(flow, admin._call, lambda s: False, step), Done)
    assert isinstance(drive(writer, runner._call, lambda s: False, waiting), Done)
    found = admin.get_tuple(thread("t"))
    assert found is not None and ("task-9", "big", "late") in (found.pending_writes or [])
    assert [t.checkpoint["id"] for t in admin.list(thread("t"))] == [ids[-1]]


def test_delete_thread_waits_for_a_compaction_under_way(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    admin, runner = savers
    grow(admin, 2)
    flow = prune(admin._threads, admin._codec, ["t"], "keep_latest")
    step = drive(flow, admin._call, lambda s: s.name == "fork")
    deleting = delete(runner._threads, "t")
    waiting = drive(deleting, runner._call, lambda s: s.name in (SLEEP, "delete"))
    assert waiting.name == SLEEP
    assert isinstance(drive(flow, admin._call, lambda s: False, step), Done)
    assert isinstance(drive(deleting, runner._call, lambda s: False, waiting), Done)
    assert admin.get_tuple(thread("t")) is None
    assert [h.id for h in admin._sync.events.list()] == [session_id("t")]


def test_copy_thread_copies_a_compacted_thread_as_it_reads(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    admin, _ = savers
    ids = grow(admin, 3)
    admin.prune(["t"])
    admin.copy_thread("t", "copy")
    found = admin.get_tuple({"configurable": {"thread_id": "copy"}})
    assert found is not None and found.checkpoint["id"] == ids[-1]
    assert found.checkpoint["channel_values"]["shared"] == "from the first"
    assert [t.checkpoint["id"] for t in admin.list({"configurable": {"thread_id": "copy"}})] == [
        ids[-1]
    ]


def _killed_at(point: str, sid: str, backup: str) -> Any:
    """Whether a compaction's next call is the one before which the process dies at
    ``point``: once sealed, once copied, once the log is deleted, once written anew."""
    made: list[str] = []

    def due(step: Any) -> bool:
        if step.name == "append" and step.args[1][-1].type == OPEN:
            made.append("rewrite")
        if point == "sealed":
            return bool(step.name == "fork")
        if point == "copied":
            return bool(step.name == "delete" and step.args == (sid,))
        if point == "deleted":
            return made == ["rewrite"]
        return bool(made and step.name == "delete" and step.args == (backup,))

    return due


def dying_prune(url: str, namespace: str, point: str) -> None:
    """Prune thread "t", SIGKILLed before the call that ``point`` names."""
    from sessionstore.integrations.langgraph.driver import run

    with SessionStoreSaver(url, namespace=namespace) as saver:
        due = _killed_at(point, session_id("t"), "langgraph-compacting:t")

        def call(step: Any) -> Any:
            if due(step):
                os.kill(os.getpid(), signal.SIGKILL)
            return saver._call(step)

        run(prune(saver._threads, saver._codec, ["t"], "keep_latest"), call)
    os._exit(0)


@pytest.mark.parametrize(
    ("point", "first"),
    [("sealed", "write"), ("copied", "read"), ("deleted", "write"), ("rewritten", "read")],
)
@pytest.mark.parametrize("backend", ["file", "sqlite", "redis"])
def test_a_compaction_whose_process_was_killed_is_finished_by_the_next_access(
    backend: str,
    point: str,
    first: str,
    request: pytest.FixtureRequest,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The killed prune had appended its ``remove`` with its seal: the next saver to
    read or write the thread finishes the compaction, that ``remove`` applied once, and
    the thread goes on."""
    url = url_for(backend, request, tmp_path)
    namespace = f"t-lg-{uuid.uuid4().hex[:8]}"
    with SessionStoreSaver(url, namespace=namespace) as saver:
        ids = grow(saver, 3)
    child = multiprocessing.get_context("fork").Process(
        target=dying_prune, args=(url, namespace, point)
    )
    child.start()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    with SessionStoreSaver(url, namespace=namespace) as other:
        assert other._sync is not None
        if point != "rewritten":  # sealed: until its seal is stale, it is left alone
            assert other._run(other._threads.read("t")).sealed
        # The other saver's clock is past the staleness of the seal (without a wait).
        monkeypatch.setattr(access, "now_ms", lambda: layout.now_ms() + 3_600_000)
        if first == "write":
            put_big(other, ids[-1], 3)
            assert [t.checkpoint["id"] for t in other.list(thread("t"))][1:] == [ids[-1]]
        else:
            assert_reads_as_latest(other, ids[-1], 2)
            assert [t.checkpoint["id"] for t in other.list(thread("t"))] == [ids[-1]]
            put_big(other, ids[-1], 3)
        events = other._sync.events.read_from(session_id("t"), 0)
        assert [e.seq for e in events] == list(range(len(events)))
        assert sum(e.type == REMOVE for e in events) == 1
        assert sum(e.type == "checkpoint" for e in events) == 2  # the kept and the new
        assert [h.id for h in other._sync.events.list()] == [session_id("t")]
        assert len(list(other.list(thread("t")))) == 2
        assert_one_chain(other, "t")


def test_a_compaction_paused_past_the_stale_time_never_undoes_its_recovery(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held just before it deletes the log, long enough for another saver to take its
    seal for abandoned: that saver recovers the compaction and writes on; then the
    paused one's delete, guarded by its own seal (the log no longer ends with it),
    deletes nothing, nor the copy of its recoverer."""
    admin, runner = savers
    ids = grow(admin, 3)
    main = session_id("t")
    flow = prune(admin._threads, admin._codec, ["t"], "keep_latest")
    held = drive(flow, admin._call, lambda s: s.name == "delete" and s.args == (main,))
    monkeypatch.setattr(access, "now_ms", lambda: layout.now_ms() + 3_600_000)
    assert_reads_as_latest(runner, ids[-1], 2)  # recovers it
    latest = put_big(runner, ids[-1], 3)
    assert isinstance(drive(flow, admin._call, lambda s: False, held), Done)
    assert_reads_as_latest(runner, latest, 3)
    assert_reads_as_latest(admin, latest, 3)
    assert runner._sync is not None
    events = runner._sync.events.read_from(main, 0)
    assert [e.seq for e in events] == list(range(len(events)))
    assert sum(e.type == REMOVE for e in events) == 1
    assert [e.type for e in events].count(SEAL) == 2
    assert [h.id for h in runner._sync.events.list()] == [main]
    assert [t.checkpoint["id"] for t in runner.list(thread("t"))] == [latest, ids[-1]]
    assert_one_chain(runner, "t")


def paused_after_reading_its_seal(
    admin: SessionStoreSaver, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], Any, Any]:
    """Thread "t" of three checkpoints, and a prune of it held once it has sealed the log
    and read it (before it looks for a copy left behind), paused past the seal's
    staleness by every other saver's clock: the checkpoint ids, the flow, its next step."""
    ids = grow(admin, 3)
    flow = prune(admin._threads, admin._codec, ["t"], "keep_latest")
    backup = layout.backup_id("t")
    held = drive(flow, admin._call, lambda s: s.name == "info" and s.args == (backup,))
    monkeypatch.setattr(access, "now_ms", lambda: layout.now_ms() + 3_600_000)
    return ids, flow, held


def test_a_paused_compaction_never_deletes_the_copy_of_the_saver_that_recovered_it(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held once it has read its sealed log, before it deletes a copy left behind: the
    other saver recovers the compaction (its own seal, its own copy) up to writing the
    log anew. The paused one then finds the copy made under a seal it never read and
    leaves it; its guarded delete of the log finds no log and the copy not its own; the
    recovery ends and every checkpoint kept is there."""
    admin, runner = savers
    ids, flow, held = paused_after_reading_its_seal(admin, monkeypatch)
    main, backup = session_id("t"), layout.backup_id("t")
    late = compaction.recover(runner._threads, runner._codec, "t")
    writing = drive(late, runner._call, lambda s: s.name == "append" and s.args[1][-1].type == OPEN)
    assert isinstance(drive(flow, admin._call, lambda s: False, held), Done)
    assert runner._sync is not None
    assert [h.id for h in runner._sync.events.list()] == [backup]  # the copy, kept
    assert isinstance(drive(late, runner._call, lambda s: False, writing), Done)
    assert [h.id for h in runner._sync.events.list()] == [main]
    assert_reads_as_latest(admin, ids[-1], 2)
    assert [t.checkpoint["id"] for t in admin.list(thread("t"))] == [ids[-1]]
    put_big(admin, ids[-1], 3)
    assert_one_chain(admin, "t")


def test_a_compaction_paused_after_deleting_its_log_never_writes_it_over_a_newer_thread(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held once it has deleted its log: another saver recovers the thread from the
    copy, writes a checkpoint (acknowledged), and a second compaction deletes the log
    again. The first, resumed, writes nothing (its copy is gone, the one there is the
    second's): the second writes the thread anew, the acknowledged checkpoint latest."""
    admin, runner = savers
    ids = grow(admin, 3)
    main = session_id("t")
    first = prune(admin._threads, admin._codec, ["t"], "keep_latest")
    held = drive(first, admin._call, lambda s: s.name == "delete" and s.args == (main,))
    held = advance(first, admin._call, held)  # the log deleted; paused before writing
    monkeypatch.setattr(access, "now_ms", lambda: layout.now_ms() + 3_600_000)
    assert_reads_as_latest(runner, ids[-1], 2)  # recovers it from the copy
    acked = put_big(runner, ids[-1], 3)
    monkeypatch.undo()
    second = prune(runner._threads, runner._codec, ["t"], "keep_latest")
    writing = drive(second, runner._call, lambda s: s.name == "create")
    assert isinstance(drive(first, admin._call, lambda s: False, held), Done)
    assert isinstance(drive(second, runner._call, lambda s: False, writing), Done)
    assert runner._sync is not None
    assert [h.id for h in runner._sync.events.list()] == [main]
    assert_reads_as_latest(admin, acked, 3)
    assert [t.checkpoint["id"] for t in admin.list(thread("t"))] == [acked]
    assert_one_chain(admin, "t")


def test_a_compaction_that_finds_its_log_recovered_and_reopened_leaves_no_copy(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held once it has read its sealed log: another saver recovers the compaction to
    its end. The paused one then copies the reopened log, finds it no longer ends with
    its seal, and deletes the copy it made: nothing is left behind."""
    admin, runner = savers
    ids, flow, held = paused_after_reading_its_seal(admin, monkeypatch)
    main = session_id("t")
    assert_reads_as_latest(runner, ids[-1], 2)  # recovers it to its end
    monkeypatch.undo()
    assert isinstance(drive(flow, admin._call, lambda s: False, held), Done)
    assert runner._sync is not None
    assert [h.id for h in runner._sync.events.list()] == [main]
    assert_reads_as_latest(admin, ids[-1], 2)


def test_a_thread_deletion_paused_past_its_seal_waits_for_the_recovery_then_deletes(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``delete_thread`` sealed the log, then its process was paused past the seal's
    staleness: another saver took the seal for a compaction's and recovers the log (its
    own seal, its copy, the log deleted). The deletion, resumed, finds the log gone by
    that saver's hand (its copy ends with a seal chained after the deletion's): it waits
    for the recovery to end, then seals and deletes again. Nothing is left of the
    thread, no copy, and the recovering reader raises nothing."""
    admin, runner = savers
    ids = grow(admin, 3)
    main = session_id("t")
    deleting = delete(admin._threads, "t")
    held = drive(deleting, admin._call, lambda s: s.name == "delete" and s.args == (main,))
    monkeypatch.setattr(access, "now_ms", lambda: layout.now_ms() + 3_600_000)
    late = compaction.recover(runner._threads, runner._codec, "t")
    gone = drive(late, runner._call, lambda s: s.name == "delete" and s.args == (main,))
    writing = advance(late, runner._call, gone)  # the log deleted, the copy its seal's
    held = drive(deleting, admin._call, lambda s: s.name == SLEEP, held)  # waits
    assert isinstance(drive(late, runner._call, lambda s: False, writing), Done)
    monkeypatch.undo()
    assert isinstance(drive(deleting, admin._call, lambda s: False, held), Done)
    assert admin._sync is not None
    assert [h.id for h in admin._sync.events.list()] == [main]
    assert admin.get_tuple(thread("t")) is None
    assert list(admin.list(thread("t"))) == []
    with pytest.raises(ThreadDeletedError):
        put_big(runner, ids[-1], 3)
    fresh = put_big(runner, None, 0, run="run-2")
    assert [t.checkpoint["id"] for t in admin.list(thread("t"))] == [fresh]


def copied_by_hand(admin: SessionStoreSaver, steps: int) -> tuple[list[str], Any]:
    """Thread "t" of ``steps`` checkpoints, copied as its log is to its compaction copy
    (``fork``: no seal at its end); the checkpoint ids and the saver's event log."""
    ids = grow(admin, steps)
    assert admin._sync is not None
    admin._sync.events.fork(session_id("t"), layout.backup_id("t"))
    return ids, admin._sync.events


def test_a_copy_no_log_of_the_thread_leads_to_is_kept_and_the_compaction_refused(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    """A copy ending with a seal the thread's log does not hold (what a saver paused in
    the window the module docstring leaves open makes): it may hold writes the log does
    not, so it is kept; the compaction raises ``ConcurrentModificationError`` naming it,
    and the log is reopened: writers go on."""
    admin, runner = savers
    ids, events = copied_by_hand(admin, 3)
    backup = layout.backup_id("t")
    copied = events.read_from(backup, 0)
    [orphan] = layout.chained([(SEAL, {})], len(copied), copied[-1].id, copied[-1].time)
    events.append(backup, [orphan])
    with pytest.raises(ConcurrentModificationError, match="langgraph-compacting:t"):
        admin.prune(["t"])
    assert events.read_from(backup, 0)[-1] == orphan
    assert not runner._run(runner._threads.read("t")).sealed
    latest = put_big(runner, ids[-1], 3)
    assert_reads_as_latest(admin, latest, 3)


def test_a_copy_of_its_own_sealed_log_made_by_a_paused_compaction_serves_the_next(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction paused past its seal's staleness after reading its log; the log is
    recovered and reopened, and a second compaction seals it. The paused one resumes and
    copies the log as it is, sealed by the second: that copy is the second's own log, so
    the second goes on with it instead of waiting for its seal to go stale."""
    admin, runner = savers
    ids, flow, held = paused_after_reading_its_seal(admin, monkeypatch)
    main = session_id("t")
    assert_reads_as_latest(runner, ids[-1], 2)  # recovered and reopened
    monkeypatch.undo()
    latest = put_big(runner, ids[-1], 3)
    second = prune(runner._threads, runner._codec, ["t"], "keep_latest")
    forking = drive(second, runner._call, lambda s: s.name == "fork")  # sealed
    assert isinstance(drive(flow, admin._call, lambda s: False, held), Done)
    assert runner._sync is not None
    assert [h.id for h in runner._sync.events.list()] == [main, layout.backup_id("t")]
    assert isinstance(drive(second, runner._call, lambda s: False, forking), Done)
    assert [h.id for h in runner._sync.events.list()] == [main]
    assert runner._sync.events.read_from(main, 0)[-1].type == OPEN
    assert_reads_as_latest(admin, latest, 3)
    assert [t.checkpoint["id"] for t in admin.list(thread("t"))] == [latest]
    put_big(admin, latest, 4)
    assert_one_chain(admin, "t")


def test_a_copy_that_does_not_end_with_a_seal_is_never_served_nor_written_back(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction copies its log sealed; a copy ending otherwise (what a compaction
    paused past its staleness copies from a log reopened since, left behind if the log
    is then deleted) is no thread: with no log, the thread reads as empty, no recovery
    writes the copy back, and the next compaction of the thread removes it."""
    admin, runner = savers
    ids, events = copied_by_hand(admin, 2)
    main = session_id("t")
    events.delete(main)
    monkeypatch.setattr(access, "now_ms", lambda: layout.now_ms() + 3_600_000)
    assert runner.get_tuple(thread("t")) is None
    assert list(runner.list(thread("t"))) == []
    with pytest.raises(SessionNotFoundError):
        events.info(main)
    monkeypatch.undo()
    fresh = grow(runner, 2)
    runner.prune(["t"])
    assert [h.id for h in events.list()] == [main]
    assert [t.checkpoint["id"] for t in admin.list(thread("t"))] == [fresh[-1]]
    assert ids[-1] not in {t.checkpoint["id"] for t in admin.list(thread("t"))}


def test_a_write_that_makes_the_log_anew_before_a_deletion_marks_it_is_deleted_again(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    """``delete_thread`` deleted the log and is about to start it again with its
    ``deleted`` event; a late write of a runner that read nothing of the deletion makes
    the log first (with a header of its own). The deletion's append is refused as of
    another's log: it seals that log, deletes it and starts it again; the late write is
    gone and the thread is deleted."""
    admin, runner = savers
    ids = grow(admin, 2)
    main = session_id("t")
    deleting = delete(admin._threads, "t")
    held = drive(
        deleting, admin._call, lambda s: s.name == "append" and s.args[1][0].type == DELETED
    )
    late = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": ids[-1]}}
    runner.put_writes(late, [("big", "late")], "task-late")
    assert isinstance(drive(deleting, admin._call, lambda s: False, held), Done)
    assert admin._sync is not None
    assert [e.type for e in admin._sync.events.read_from(main, 0)] == [DELETED]
    assert admin.get_tuple(thread("t")) is None
    with pytest.raises(ThreadDeletedError):
        runner.put_writes(late, [("big", "later")], "task-later")


def test_of_two_savers_recovering_one_compaction_one_does_it(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compaction died once sealed; both savers find its seal stale, one claims it
    first (its own seal), and the other's claim finds the log moved on."""
    one, two = savers
    ids = grow(one, 3)
    dead = prune(one._threads, one._codec, ["t"], "keep_latest")
    drive(dead, one._call, lambda s: s.name == "fork")  # sealed, then its process died
    monkeypatch.setattr(access, "now_ms", lambda: layout.now_ms() + 3_600_000)
    late = compaction.recover(two._threads, two._codec, "t")
    claim = drive(late, two._call, lambda s: s.name == "append")
    assert_reads_as_latest(one, ids[-1], 2)  # recovers it
    assert isinstance(drive(late, two._call, lambda s: False, claim), Done)
    assert_reads_as_latest(two, ids[-1], 2)
    assert two._sync is not None
    events = two._sync.events.read_from(session_id("t"), 0)
    assert [e.type for e in events].count(SEAL) == 2 and events[-1].type == OPEN
    assert [h.id for h in two._sync.events.list()] == [session_id("t")]
    put_big(two, ids[-1], 3)
    assert_one_chain(one, "t")


def test_a_log_written_anew_on_a_clock_behind_never_takes_a_deleted_logs_header(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner holds the thread as it was before another deleted it; the other writes
    the thread again and prunes it on a clock behind by the thread's age, writing its log
    anew. The runner's next write names the deleted log's header and the seq that log
    had, which the log written anew also has: it is refused all the same."""
    runner, other = savers
    main = session_id("t")
    ids = grow(runner, 6)
    assert runner._sync is not None
    deleted = runner._sync.events.info(main).header
    other.delete_thread("t")
    again = grow(other, 2)
    behind = deleted.created_at * 1_000_000
    monkeypatch.setattr(time, "time_ns", lambda: behind)
    other.prune(["t"])
    monkeypatch.undo()
    assert runner._sync.events.info(main).header != deleted
    with pytest.raises(ThreadDeletedError):
        put_big(runner, ids[-1], 6)
    assert_reads_as_latest(other, again[-1], 1)
