"""Part 1 of the fault suite: a writer process SIGKILLed mid-stream (file, SQLite, Redis).

A spawned child appends batches of 1-20 events of an agent harness (turns of steps of tool
calls) as fast as it can and, after each ``append`` returns, reports the batch and the
acknowledged next seq through a pipe. The parent SIGKILLs it at a random moment, many
times, on one log. After each kill:

* every acknowledged event is there, in the batch it was acknowledged with;
* no batch is partly visible (each event carries its batch id, the batch size and its
  index in the batch);
* ``load`` returns a balanced log: the committed events, then closers when the kill hit
  mid-turn (``TOOL_OUTCOME_UNKNOWN`` for a started call, ``TOOL_NOT_STARTED`` for one only
  requested, ``step/end``, ``turn/end`` with reason ``interrupted``);
* a new writer continues at the right seq (and the next child after it).

The workload and the balance checker here are shared with the other fault tests.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import url_for
from support.redis_server import RedisServer

import sessionstore
from sessionstore import SessionEvent, SessionHeader, SessionNotFoundError
from sessionstore.eventlog import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN

from . import figures
from .conftest import iterations
from .figures import figures_run  # noqa: F401 - used by pytestmark

T0 = 1_718_000_000_000
SESSION = "killed-writer"
#: Seconds the parent waits for a child to start, and for anything else to happen.
PATIENCE = 60.0

pytestmark = pytest.mark.usefixtures("figures_run")


# --- the workload, shared by the fault tests ---------------------------------------------


class Workload:
    """An endless event stream of an agent harness, cut into batches of any size.

    Turns hold 1-3 steps; a step is ``step/start``, an ``assistant/message`` requesting
    0-2 tool calls, a ``tool/call`` and a ``tool/result`` per call, ``step/end``. Every
    event's data names its ``batch``, the ``batch_size`` and its ``index`` in the batch.
    """

    def __init__(self, tag: str, rng: random.Random) -> None:
        self.tag = tag
        self.rng = rng
        self.turns = 0
        self.pending: deque[tuple[str, dict[str, Any]]] = deque()

    def _turn(self) -> list[tuple[str, dict[str, Any]]]:
        self.turns += 1
        turn = f"{self.tag}-t{self.turns}"
        out: list[tuple[str, dict[str, Any]]] = [("turn/start", {"turn": turn})]
        for step in range(self.rng.randint(1, 3)):
            calls = [f"{turn}-s{step}-c{n}" for n in range(self.rng.randint(0, 2))]
            out.append(("step/start", {"turn": turn, "step": step}))
            out.append(
                (
                    "assistant/message",
                    {
                        "turn": turn,
                        "step": step,
                        "text": "thinking",
                        "tool_calls": [{"id": c, "name": "shell"} for c in calls],
                    },
                )
            )
            for call in calls:
                out.append(("tool/call", {"turn": turn, "step": step, "call_id": call}))
                out.append(
                    ("tool/result", {"turn": turn, "step": step, "call_id": call, "content": "ok"})
                )
            out.append(("step/end", {"turn": turn, "step": step}))
        out.append(("turn/end", {"turn": turn, "reason": {"kind": "completed"}}))
        return out

    def batch(self, next_seq: int, size: int, batch_id: str) -> list[SessionEvent]:
        """The next ``size`` events, numbered from ``next_seq``, as batch ``batch_id``."""
        while len(self.pending) < size:
            self.pending.extend(self._turn())
        events = []
        for index in range(size):
            kind, data = self.pending.popleft()
            seq = next_seq + index
            marked = {**data, "batch": batch_id, "batch_size": size, "index": index}
            events.append(SessionEvent(seq=seq, type=kind, time=T0 + seq, data=marked))
        return events


def note(seq: int, batch_id: str) -> SessionEvent:
    """A one-event batch outside any turn."""
    data = {"batch": batch_id, "batch_size": 1, "index": 0}
    return SessionEvent(seq=seq, type="note", time=T0 + seq, data=data)


def check_batches(events: Sequence[SessionEvent]) -> int:
    """Every batch-marked event belongs to a whole batch, contiguous and in order; events
    without a batch mark (closers) stand alone. Returns the number of batches seen."""
    count = 0
    position = 0
    while position < len(events):
        first = events[position]
        data = first.data if isinstance(first.data, dict) else {}
        if "batch" not in data:
            position += 1
            continue
        size = data["batch_size"]
        chunk = events[position : position + size]
        assert [e.data.get("batch") for e in chunk] == [data["batch"]] * size, (
            f"batch {data['batch']} (size {size}) at seq {first.seq} is not whole: "
            f"{[(e.seq, e.data.get('batch'), e.data.get('index')) for e in chunk]}"
        )
        assert [e.data["index"] for e in chunk] == list(range(size))
        assert [e.seq for e in chunk] == list(range(first.seq, first.seq + size))
        count += 1
        position += size
    return count


def check_acknowledged(events: Sequence[SessionEvent], acks: Iterable[tuple[str, int, int]]) -> int:
    """Each acknowledged batch ``(batch id, size, next seq)`` is stored at the seqs it was
    acknowledged for. Returns how many acknowledged events are missing (must be 0)."""
    missing = 0
    for batch_id, size, next_seq in acks:
        for seq in range(next_seq - size, next_seq):
            if seq >= len(events) or events[seq].data.get("batch") != batch_id:
                missing += 1
    return missing


def check_balanced(events: Sequence[SessionEvent]) -> None:
    """An independent check that the log is balanced: turns, steps and tool calls nest and
    close, and the closers of an interrupted turn say what happened to each call."""
    turn: Any = None
    step: Any = None
    calls: dict[str, str] = {}  # call id -> "requested" | "started"
    for event in events:
        data = event.data
        where = f"seq {event.seq} ({event.type})"
        if event.type == "turn/start":
            assert turn is None, f"{where}: a turn starts inside turn {turn}"
            turn, step, calls = data["turn"], None, {}
        elif event.type == "turn/end":
            assert turn is not None and data["turn"] == turn, f"{where}: no such open turn"
            assert step is None and not calls, f"{where}: step {step} or calls {calls} open"
            turn = None
        elif event.type == "step/start":
            assert turn is not None and step is None, f"{where}: misplaced step"
            step = data["step"]
        elif event.type == "step/end":
            assert step is not None and data["step"] == step, f"{where}: no such open step"
            assert not calls, f"{where}: calls {calls} still open"
            step = None
        elif event.type == "assistant/message":
            for call in data.get("tool_calls") or ():
                calls[call["id"]] = "requested"
        elif event.type == "tool/call":
            assert calls.get(data["call_id"]) == "requested", f"{where}: call not requested"
            calls[data["call_id"]] = "started"
        elif event.type == "tool/result":
            state = calls.pop(data["call_id"], None)
            assert state is not None, f"{where}: result of no open call"
            if data.get("is_error"):
                expected = TOOL_OUTCOME_UNKNOWN if state == "started" else TOOL_NOT_STARTED
                assert data["error"]["code"] == expected, f"{where}: {data['error']}"
        else:
            assert turn is None, f"{where}: unexpected inside turn {turn}"
    assert turn is None, f"the log ends inside turn {turn}"


def ends_mid_turn(events: Sequence[SessionEvent]) -> bool:
    open_turn = False
    for event in events:
        if event.type == "turn/start":
            open_turn = True
        elif event.type == "turn/end":
            open_turn = False
    return open_turn


def check_closers(committed: Sequence[SessionEvent], loaded: Sequence[SessionEvent]) -> int:
    """``loaded`` is ``committed`` then closers (none unless it ended mid-turn), balanced.
    Returns the number of closers."""
    assert list(loaded[: len(committed)]) == list(committed)
    extra = loaded[len(committed) :]
    assert all("batch" not in e.data for e in extra), "load added something not a closer"
    if ends_mid_turn(committed):
        assert extra and extra[-1].type == "turn/end"
        assert extra[-1].data["reason"] == {"kind": "interrupted"}
    else:
        assert not extra
    assert [e.seq for e in extra] == list(range(len(committed), len(loaded)))
    check_balanced(loaded)
    return len(extra)


# --- the child ---------------------------------------------------------------------------


def append_until_killed(url: str, namespace: str, seed: int, conn: Any) -> None:
    """Child: resume the log, then append random batches forever, reporting each
    acknowledged ``(batch id, size, next seq)`` once ``append`` has returned."""
    rng = random.Random(seed)
    with sessionstore.connect(url, namespace) as store:
        try:
            next_seq = len(store.events.load(SESSION).events)
        except SessionNotFoundError:
            store.events.create(SessionHeader(id=SESSION, created_at=T0))
            next_seq = 0
        conn.send(("ready", 0, next_seq))
        work = Workload(f"w{seed}", rng)
        number = 0
        while True:
            size = rng.randint(1, 20)
            batch_id = f"{seed}-{number}"
            next_seq = store.events.append(SESSION, work.batch(next_seq, size, batch_id))
            conn.send((batch_id, size, next_seq))
            number += 1


def run_and_kill(url: str, namespace: str, seed: int, rng: random.Random) -> tuple[int, list]:
    """Start a child, let it append for a random while, SIGKILL it; return the seq it
    resumed at and every acknowledgement it sent."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=append_until_killed, args=(url, namespace, seed, sender))
    child.daemon = True
    child.start()
    sender.close()
    acks: list[tuple[str, int, int]] = []
    try:
        if not receiver.poll(PATIENCE):
            raise AssertionError(f"the writer child did not start within {PATIENCE} s")
        ready, _, resumed = receiver.recv()
        assert ready == "ready"
        # A random moment: anywhere in the first few dozen appends.
        deadline = time.monotonic() + rng.uniform(0.0, 0.25)
        while (left := deadline - time.monotonic()) > 0:
            if receiver.poll(left):
                acks.append(receiver.recv())
    finally:
        if child.pid is not None:
            os.kill(child.pid, signal.SIGKILL)
        child.join(PATIENCE)
    assert child.exitcode == -signal.SIGKILL, f"the child ended on its own: {child.exitcode}"
    while receiver.poll():
        try:
            acks.append(receiver.recv())
        except EOFError:
            break
    receiver.close()
    return resumed, acks


# --- the test ----------------------------------------------------------------------------


@pytest.fixture(params=["file", "sqlite", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def disk_path() -> Iterator[Path]:
    """A dir in the system temp dir, on disk even where the other tests keep their files
    on a RAM disk: a writer is killed after a random while of up to 0.25 s, a window
    sized for appends that wait for a disk's fsync (a few dozen of them)."""
    path = Path(tempfile.mkdtemp(prefix="sessionstore-killed-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """This module's own server, its AOF on disk for the same reason as :func:`disk_path`."""
    data = Path(tempfile.mkdtemp(prefix="sessionstore-redis-"))
    try:
        with RedisServer(data_dir=data) as server:
            yield server
    finally:
        shutil.rmtree(data, ignore_errors=True)


@pytest.mark.slow
def test_a_writer_killed_mid_stream_loses_no_acknowledged_event_and_tears_no_batch(
    backend, request, disk_path
):
    url = url_for(backend, request, disk_path)
    namespace = f"kill-{uuid.uuid4().hex[:10]}"
    kills = iterations(normal=5, ci=3, soak=60)
    rng = random.Random()
    seed_base = rng.randrange(1 << 30)
    header = SessionHeader(id=SESSION, created_at=T0)
    expected_next = 0
    every_ack: list[tuple[str, int, int]] = []
    for kill in range(kills):
        resumed, acks = run_and_kill(url, namespace, seed_base + kill, rng)
        assert resumed == expected_next, "the child resumed at the wrong seq"
        every_ack += acks
        with sessionstore.connect(url, namespace) as store:
            try:
                committed = store.events.read_from(SESSION, 0)
            except SessionNotFoundError:
                committed = []  # killed before its first append ever landed
            # Every batch acknowledged so far, by this child and the earlier ones.
            lost = check_acknowledged(committed, every_ack)
            acked = sum(size for _, size, _ in acks)
            figures.record(
                "writer_killed",
                backend,
                kills=1,
                faults=1,
                acked_events=acked,
                lost=lost,
                batches=len(acks),
                mid_turn=int(ends_mid_turn(committed)),
            )
            assert lost == 0, f"{lost} acknowledged events are missing after kill {kill}"
            if acks:
                assert len(committed) >= acks[-1][2]
                assert [n for _, _, n in acks] == sorted(n for _, _, n in acks)
            check_batches(committed)
            if not committed:
                expected_next = 0
                continue
            loaded = store.events.load(SESSION)
            closers = check_closers(committed, loaded.events)
            figures.record("writer_killed", backend, closers=closers)
            # A new writer continues right after the closers, and durably.
            with store.events.writer(header) as writer:
                assert writer.next_seq == len(loaded.events)
                writer.emit("note", {"batch": f"parent-{kill}", "batch_size": 1, "index": 0})
            expected_next = len(loaded.events) + 1
        with sessionstore.connect(url, namespace) as again:
            final = again.events.read_from(SESSION, 0)
            assert len(final) == expected_next
            check_batches(final)
            check_balanced(final)


# --- leases: a live writer's session is busy until its lease ends -------------------------

LEASE = 1.5
LIVE = "live-writer"


def hold_a_turn_open(url: str, namespace: str, conn: Any) -> None:
    """Child: open a writer (holding the session's lease), write half a turn, report
    the acknowledged next seq, then wait for orders: ``"emit"`` emits and flushes one
    more event and reports what happened."""
    with sessionstore.connect(url, namespace) as store:
        writer = store.events.writer(SessionHeader(id=LIVE, created_at=T0), lease=LEASE)
        writer.emit("turn/start", {"turn": 1})
        writer.emit("step/start", {"turn": 1, "step": 1})
        writer.emit("assistant/message", {"turn": 1, "step": 1, "tool_calls": [{"id": "c-1"}]})
        writer.emit("tool/call", {"turn": 1, "step": 1, "call_id": "c-1"})
        writer.flush()
        conn.send(("ready", writer.next_seq))
        while conn.recv() == "emit":
            writer.emit("note", {"late": True})
            try:
                writer.flush()
                conn.send("written")
            except sessionstore.SessionStoreError as exc:
                conn.send(type(exc).__name__)


def start_holder(url: str, namespace: str) -> tuple[Any, Any, int]:
    ctx = multiprocessing.get_context("spawn")
    parent_end, child_end = ctx.Pipe()
    child = ctx.Process(target=hold_a_turn_open, args=(url, namespace, child_end))
    child.daemon = True
    child.start()
    child_end.close()
    if not parent_end.poll(PATIENCE):
        raise AssertionError(f"the writer child did not start within {PATIENCE} s")
    ready, acked = parent_end.recv()
    assert ready == "ready"
    return child, parent_end, acked


def load_when_free(store: Any, session_id: str) -> tuple[Any, float, list[float]]:
    """``load`` retried while the session is busy; (the loaded session, seconds waited,
    the ``time.monotonic()`` at which each refused attempt started)."""
    began = time.monotonic()
    refused: list[float] = []
    while True:
        started = time.monotonic()
        try:
            return store.events.load(session_id), started - began, refused
        except sessionstore.SessionBusyError:
            refused.append(started)
            assert time.monotonic() - began < PATIENCE, "the session stayed busy"
            time.sleep(0.05)


@pytest.mark.slow
def test_a_killed_writers_session_is_busy_until_its_lease_ends_then_load_closes_the_turn(
    backend, request, tmp_path
):
    url = url_for(backend, request, tmp_path)
    namespace = f"lease-{uuid.uuid4().hex[:10]}"
    child, conn, acked = start_holder(url, namespace)
    with sessionstore.connect(url, namespace) as store:
        with pytest.raises(sessionstore.SessionBusyError):
            store.events.load(LIVE)
        assert store.events.info(LIVE).busy
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(PATIENCE)
        killed = time.monotonic()  # past the lease's last renewal
        conn.close()
        committed = store.events.read_from(LIVE, 0)
        loaded, waited, refused = load_when_free(store, LIVE)
        if backend == "file":
            assert refused == [], "a file lock ends with its process"
        else:
            late = [round(at - killed, 3) for at in refused if at - killed > LEASE]
            assert late == [], f"busy past the lease, at +{late} s"
        figures.record("writer_killed", backend, lease_waited_ms=int(waited * 1000))
        assert len(committed) == acked, "an acknowledged event is missing"
        assert [e.type for e in loaded.events[acked:]] == ["tool/result", "step/end", "turn/end"]
        assert loaded.events[acked].data["error"]["code"] == TOOL_OUTCOME_UNKNOWN
        check_closers(committed, loaded.events)
        assert not store.events.info(LIVE).busy


@pytest.mark.slow
def test_a_paused_writer_whose_lease_was_taken_over_never_writes_again(backend, request, tmp_path):
    if backend == "file":
        pytest.skip("a file lock lasts as long as its process, paused or not")
    url = url_for(backend, request, tmp_path)
    namespace = f"lease-{uuid.uuid4().hex[:10]}"
    child, conn, acked = start_holder(url, namespace)
    assert child.pid is not None
    try:
        os.kill(child.pid, signal.SIGSTOP)
        with sessionstore.connect(url, namespace) as store:
            loaded, _, _ = load_when_free(store, LIVE)
            with store.events.writer(SessionHeader(id=LIVE, created_at=T0)) as owner:
                owner.emit("turn/start", {"turn": 2})
                owner.flush()
                os.kill(child.pid, signal.SIGCONT)
                conn.send("emit")
                assert conn.poll(PATIENCE)
                outcome = conn.recv()
                owner.emit("turn/end", {"turn": 2, "reason": {"kind": "done"}})
            assert outcome == "SessionBusyError"  # its append is fenced by the lease
            final = store.events.read_from(LIVE, 0)
            assert not any(e.data.get("late") for e in final)
            assert [e.type for e in final[len(loaded.events) :]] == ["turn/start", "turn/end"]
            check_balanced(final)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(PATIENCE)
        conn.close()
