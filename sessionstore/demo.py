"""The parallel backtest behind ``sessionstore demo``.

Worker processes (spawned, or Dask distributed tasks: :func:`run_on_dask`) run a toy
strategy over seeded synthetic candles. For each candle the
strategy "asks a model" (deterministic and deliberately slow) for a signal, cached in a
history session value keyed by the symbol, one version per candle bucket: a candle whose
bucket's answer is stored reuses it; otherwise ``get_or_compute`` lets exactly one
worker of all those running that symbol ask the model while the others wait for its
answer, and ``put`` stores it at the bucket's time without discarding what other workers
stored. A read at candle time never sees an answer written for a later candle. Each
decision is logged as a turn (turn, step, tool call, tool result), stamped with the
candle's time, through the write-behind writer. Afterwards the parent checks the
invariants: contiguous and balanced logs, no cached answer lost or read from the future,
a summary that adds up (candles processed = model calls + answers reused + answers
waited for) and one model call per distinct (symbol, candle bucket) reached.

What is the demo's own (:func:`owns_session`, :func:`owns_value`): it marks what it
writes by names no other use is likely to pick, the same in every run:

- event-log sessions ``momentum-SYMnnnUSDT`` and ``contrarian-SYMnnnUSDT`` whose header
  has ``cwd="/demo/momentum"`` (or ``"/demo/contrarian"``); its first write, a check
  that the store takes writes, is a session under a reserved name
  (:data:`~sessionstore.results.PROBE_PREFIX`) deleted at once, which no listing shows;
- history values (``SYMnnnUSDT``, ``llm-signal``, ``synthetic``, ``1h``, ``backtest``).

Anything else in the namespace is not the demo's own. The demo deletes only its own
leftovers (of any earlier run, whatever its size), never anything else; it refuses to
start in a namespace that holds anything else unless ``reset=True``, and then leaves
that data as it is. Before any write it checks that the store can take the run: a
Redis whose persistence does not give the durability the URL asks for is refused with
nothing written.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import multiprocessing
import os
import random
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sessionstore

from .errors import SessionBusyError, SessionStoreError
from .eventlog import closers
from .models import SessionEvent, SessionHeader
from .results import LoadedSession, ValueRef, probe_name
from .store import Store
from .when import MAX_ABS_EPOCH_MS

START_MS = 1_718_000_000_000
CANDLE_MS = 3_600_000
#: A model answer stays valid for this many candles, so callbacks in between reuse it.
SIGNAL_CANDLES = 4
VARIANTS = ("momentum", "contrarian")
STRATEGY = "llm-signal"
EXCHANGE = "synthetic"
FRAME = "1h"
MODE = "backtest"
#: The demo's symbols: ``SYM000USDT``, ``SYM001USDT``, ...
SYMBOL = re.compile(r"SYM[0-9]{3,}USDT")
#: Its session ids: a variant and a symbol, or a scratch session of the preflight.
SESSION_ID = re.compile(rf"({'|'.join(VARIANTS)})-({SYMBOL.pattern})")
MODEL_SECONDS = 0.004
#: Seconds a worker's writer holds its session's lease past its last renewal: how long
#: the repair of a killed worker's session waits on a store whose leases expire (Redis).
WRITER_LEASE = 2.0
#: Reading here shows the newest answer of any time: what look-ahead protection withholds.
FAR_FUTURE_MS = START_MS + 10**12
#: The events of one candle's turn: turn, step, tool call, tool result, step end, turn end.
EVENTS_PER_CANDLE = 6


@dataclass(frozen=True)
class Job:
    """One strategy variant over one symbol."""

    symbol: str
    variant: str

    @property
    def session_id(self) -> str:
        return f"{self.variant}-{self.symbol}"

    @property
    def cwd(self) -> str:
        return f"/demo/{self.variant}"


PREFLIGHT_CWD = "/demo/preflight"


def owns_session(header: SessionHeader) -> bool:
    """True for an event-log session the demo writes (see the module docstring)."""
    match = SESSION_ID.fullmatch(header.id)
    if match is None:
        return False
    return header.cwd == f"/demo/{match.group(1)}"


def owns_value(ref: ValueRef) -> bool:
    """True for a session value the demo writes (see the module docstring)."""
    return (
        ref.history
        and SYMBOL.fullmatch(ref.symbol) is not None
        and (ref.strategy, ref.exchange, ref.frame, ref.mode) == (STRATEGY, EXCHANGE, FRAME, MODE)
    )


@dataclass
class WorkerReport:
    """What one worker did; for a worker that died, what its logs show it did."""

    worker: int
    candles: int = 0
    model_calls: int = 0
    reused: int = 0
    #: Answers another worker was computing (or had just stored) when this one asked.
    waited: int = 0
    lookahead_refusals: int = 0
    future_reads: int = 0
    events: int = 0
    crashed: bool = False
    #: Where a crashed worker died: ``"<session id> turn N"`` (its open turn).
    interrupted: str | None = None


@dataclass
class DemoResult:
    workers: list[WorkerReport]
    sessions: int
    balanced: int
    repaired: list[str]
    repair_codes: list[str]
    lost_values: int
    gaps: int
    wall_seconds: float
    problems: list[str] = field(default_factory=list)
    namespace: str = "demo"
    #: Events the repair on load appended (closers of interrupted turns).
    repair_events: int = 0
    #: The demo's own leftovers of an earlier run deleted before this one: (sessions, values).
    deleted: tuple[int, int] = (0, 0)
    #: The distinct (symbol, candle bucket) answers the processed candles needed: the
    #: model calls exactly-once computing makes.
    distinct_answers: int = 0

    def total(self, name: str) -> int:
        return sum(getattr(w, name) for w in self.workers)

    @property
    def crashed(self) -> list[WorkerReport]:
        return [w for w in self.workers if w.crashed]

    @property
    def events_written(self) -> int:
        """Every event written: by the workers (a crashed one's up to its death), and the
        closers the repair appended."""
        return self.total("events") + self.repair_events

    @property
    def ok(self) -> bool:
        return not self.problems


class ForeignDataError(SessionStoreError):
    """The namespace holds sessions or values that are not the demo's own: the demo
    refuses to start there without ``reset=True``, and even with it when such a session
    has an id the demo must write (``taken``). Nothing is written."""

    def __init__(
        self,
        namespace: str,
        sessions: list[str],
        values: list[ValueRef],
        taken: list[str] | None = None,
    ) -> None:
        self.namespace, self.sessions, self.values = namespace, sessions, values
        self.taken = taken or []
        named = [f"session {sid!r}" for sid in sessions[:3]]
        named += [f"value {'/'.join(ref[:5])!r}" for ref in values[: max(0, 3 - len(named))]]
        more = len(sessions) + len(values) - len(named)
        message = (
            f"namespace {namespace!r} holds {len(sessions)} session(s) and {len(values)} "
            f"value(s) that are not the demo's own ({', '.join(named)}"
            f"{f' and {more} more' if more else ''})"
        )
        if self.taken:
            message += (
                f"; session(s) {', '.join(map(repr, self.taken[:3]))} have ids the demo "
                "writes, so it cannot run there even with --reset"
            )
        super().__init__(message)


@dataclass
class Survey:
    """What a namespace holds, split into the demo's own and the rest."""

    own_sessions: list[str]
    own_values: list[ValueRef]
    foreign_sessions: list[str]
    foreign_values: list[ValueRef]


def survey(store: Store) -> Survey:
    """Read (never write) what the namespace holds."""
    headers, refs = store.events.list(), store.list_values()
    return Survey(
        [h.id for h in headers if owns_session(h)],
        [r for r in refs if owns_value(r)],
        [h.id for h in headers if not owns_session(h)],
        [r for r in refs if not owns_value(r)],
    )


def candles(symbol: str, count: int) -> list[float]:
    """Seeded random-walk closes: the same symbol always gives the same candles."""
    seed = int.from_bytes(hashlib.sha256(symbol.encode()).digest()[:8], "big")
    rng = random.Random(seed)
    price, out = 100.0, []
    for _ in range(count):
        price *= 1 + rng.gauss(0, 0.01)
        out.append(round(price, 4))
    return out


def bucket_start(index: int) -> int:
    return index - index % SIGNAL_CANDLES


def ask_model(closes: list[float], index: int) -> dict[str, Any]:
    """The slow model: a signal from the candles up to ``index`` only (never later ones)."""
    time.sleep(MODEL_SECONDS)
    return model_answer(closes, index)


def model_answer(closes: list[float], index: int) -> dict[str, Any]:
    window = closes[max(0, index - 8) : index + 1]
    trend = window[-1] - window[0]
    return {
        "signal": "buy" if trend > 0 else "sell",
        "bucket": index,
        "confirmedAt": START_MS + index * CANDLE_MS,
        "basis": round(trend, 4),
    }


def symbols(count: int) -> list[str]:
    return [f"SYM{n:03d}USDT" for n in range(count)]


def plan(symbol_count: int, workers: int) -> list[list[Job]]:
    """Deal the (symbol, variant) jobs to workers so both variants of a symbol run in
    different processes, where possible, and share the cached answers."""
    dealt: list[list[Job]] = [[] for _ in range(workers)]
    for offset, variant in enumerate(VARIANTS):
        for index, symbol in enumerate(symbols(symbol_count)):
            dealt[(index + offset) % workers].append(Job(symbol, variant))
    return dealt


def run_worker(
    worker: int,
    jobs: list[Job],
    url: str,
    namespace: str,
    candle_count: int,
    crash_at: int | None,
    progress: Any,
) -> WorkerReport:
    """Run ``jobs``; with ``crash_at``, SIGKILL this process in the middle of that turn."""
    with sessionstore.connect(url, namespace) as store:
        return run_jobs(store, worker, jobs, candle_count, crash_at, progress)


def run_jobs(
    store: Store,
    worker: int,
    jobs: list[Job],
    candle_count: int,
    crash_at: int | None,
    progress: Any,
) -> WorkerReport:
    """Run ``jobs`` on ``store`` (see :func:`run_worker`); ``progress`` (a queue, or None)
    gets ``(worker, 1)`` per candle done."""
    report = WorkerReport(worker)
    for job in jobs:
        closes = candles(job.symbol, candle_count)
        cache = store.session(job.symbol, STRATEGY, EXCHANGE, FRAME, history=True)
        writer = store.events.writer(
            SessionHeader(id=job.session_id, cwd=job.cwd), lease=WRITER_LEASE
        )
        position = 0
        for index in range(candle_count):
            when = START_MS + index * CANDLE_MS
            writer.emit("turn/start", {"turn": index + 1}, when)
            writer.emit("step/start", {"turn": index + 1, "step": 1}, when)
            call_id = f"{job.session_id}-{index}"
            writer.emit(
                "tool/call",
                {
                    "turn": index + 1,
                    "step": 1,
                    "call_id": call_id,
                    "name": "ask_model",
                    "arguments": {"symbol": job.symbol},
                },
                when,
            )
            if crash_at is not None and report.candles == crash_at:
                writer.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            answer, source, withheld = _signal(cache, closes, index, when, report)
            writer.emit(
                "tool/result",
                {
                    "turn": index + 1,
                    "step": 1,
                    "call_id": call_id,
                    "is_error": False,
                    "content": answer["signal"],
                    "cached": source == REUSED,
                    "waited": source == WAITED,
                    "withheld": withheld,
                },
                when,
            )
            position = _trade(job.variant, answer["signal"], position)
            writer.emit("step/end", {"turn": index + 1, "step": 1}, when)
            writer.emit(
                "turn/end",
                {"turn": index + 1, "reason": {"kind": "done"}, "position": position},
                when,
            )
            report.events += EVENTS_PER_CANDLE
            report.candles += 1
            if progress is not None:
                progress.put((worker, 1))
        writer.close()
    return report


#: Where a candle's answer came from (see :func:`_signal`).
COMPUTED, REUSED, WAITED = "computed", "reused", "waited"


def _signal(
    cache: Any, closes: list[float], index: int, when: int, report: WorkerReport
) -> tuple[dict[str, Any], str, bool]:
    """(answer, where it came from, a later answer was withheld by look-ahead): the
    cached answer of the candle's bucket when it is stored (:data:`REUSED`), else
    ``get_or_compute`` at the bucket's time: this worker asked the model
    (:data:`COMPUTED`) or another one did (:data:`WAITED`)."""
    bucket = bucket_start(index)
    cached = cache.get_data(when)
    newest = cache.get_data(FAR_FUTURE_MS)
    withheld = newest is not None and newest["confirmedAt"] > when
    report.lookahead_refusals += withheld
    if cached is not None and cached["confirmedAt"] > when:
        report.future_reads += 1
    if cached is not None and cached["bucket"] == bucket:
        report.reused += 1
        return cached, REUSED, withheld
    asked: list[bool] = []

    def model() -> dict[str, Any]:
        asked.append(True)
        return ask_model(closes, bucket)

    answer: dict[str, Any] = cache.get_or_compute(START_MS + bucket * CANDLE_MS, model)
    if asked:
        report.model_calls += 1
        return answer, COMPUTED, withheld
    report.waited += 1
    return answer, WAITED, withheld


def _trade(variant: str, signal_name: str, position: int) -> int:
    wants = 1 if signal_name == "buy" else -1
    return wants if variant == "momentum" else -wants


def _worker_main(args: tuple[Any, ...]) -> None:
    worker, jobs, url, namespace, candle_count, crash_at, progress, results = args
    report = run_worker(worker, jobs, url, namespace, candle_count, crash_at, progress)
    results.put(report)


def run(
    url: str,
    *,
    namespace: str = "demo",
    workers: int | None = None,
    symbol_count: int = 8,
    candle_count: int = 48,
    crash: bool = False,
    reset: bool = False,
    on_start: Any = None,
    on_progress: Any = None,
    scheduler: str | None = None,
) -> DemoResult:
    """Run the whole demo and check its invariants.

    Before any write: ``DurabilityError`` when the store cannot take the run,
    :class:`ForeignDataError` when the namespace holds data that is not the demo's own
    and ``reset`` is False. Then the demo's own leftovers are deleted (nothing else is),
    ``on_start()`` is called and the workers start: ``workers`` spawned processes, or
    with ``scheduler`` (see :func:`run_on_dask`) ``workers`` Dask tasks.
    """
    workers = workers or os.cpu_count() or 2
    if scheduler is not None and crash:
        raise SchedulerError(
            "--crash kills a worker process, which a Dask cluster would restart and run "
            "again: it runs with the local process pool only"
        )
    with sessionstore.connect(url, namespace) as store:
        store.check_durable()
        found = survey(store)
        dealt = [jobs for jobs in plan(symbol_count, workers) if jobs]
        writes = {job.session_id for jobs in dealt for job in jobs}
        taken = sorted(writes.intersection(found.foreign_sessions))
        if (found.foreign_sessions or found.foreign_values) and (taken or not reset):
            raise ForeignDataError(namespace, found.foreign_sessions, found.foreign_values, taken)
        _delete_own(store, found)
        _preflight(store)
    if scheduler is not None:
        with dask_client(scheduler, len(dealt)) as client:
            if on_start is not None:
                on_start()
            ran, wall = run_on_dask(client, url, namespace, dealt, candle_count, on_progress)
        result = _check(url, namespace, ran, dealt, candle_count, wall, crash)
        result.deleted = (len(found.own_sessions), len(found.own_values))
        return result
    if on_start is not None:
        on_start()
    context = multiprocessing.get_context("spawn")
    progress, results = context.Queue(), context.Queue()
    crash_worker = 0 if crash else None
    started = time.monotonic()
    processes = [
        context.Process(
            target=_worker_main,
            args=(
                (
                    n,
                    jobs,
                    url,
                    namespace,
                    candle_count,
                    candle_count // 2 if n == crash_worker else None,
                    progress,
                    results,
                ),
            ),
        )
        for n, jobs in enumerate(dealt)
    ]
    for process in processes:
        process.start()
    reports: dict[int, WorkerReport] = {}
    done: dict[int, int] = {}
    while any(p.is_alive() for p in processes):
        _pump(progress, on_progress, done)
        _collect(results, reports)
        time.sleep(0.05)
    for process in processes:
        process.join()
    _pump(progress, on_progress, done)
    _collect(results, reports)
    wall = time.monotonic() - started
    for n in range(len(processes)):
        if n not in reports:
            reports[n] = WorkerReport(n, crashed=True)
    result = _check(
        url, namespace, [reports[n] for n in sorted(reports)], dealt, candle_count, wall, crash
    )
    result.deleted = (len(found.own_sessions), len(found.own_values))
    return result


class SchedulerError(SessionStoreError):
    """The Dask scheduler cannot run the demo: ``distributed`` is not installed, the
    address cannot be reached, or the options do not apply to it. Nothing is written."""


@contextlib.contextmanager
def dask_client(scheduler: str, workers: int) -> Iterator[Any]:
    """A Dask ``Client``: on a ``LocalCluster`` of ``workers`` worker processes (one
    thread each) for ``"local"``, else on the scheduler at the address ``scheduler``
    (``tcp://host:8786``), whose workers need sessionstore installed and must reach
    the store's URL."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise SchedulerError(
            "--scheduler needs Dask distributed: pip install 'sessionstore[dask]'"
        ) from exc
    with contextlib.ExitStack() as stack:
        if scheduler == "local":
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=workers,
                    processes=True,
                    threads_per_worker=1,
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                )
            )
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(scheduler, timeout=10))
            except (OSError, ValueError, TypeError) as exc:
                raise SchedulerError(
                    f"cannot reach the Dask scheduler at {scheduler!r}: {exc}"
                ) from None
        yield client


def run_on_dask(
    client: Any,
    url: str,
    namespace: str,
    dealt: list[list[Job]],
    candle_count: int,
    on_progress: Any,
) -> tuple[list[WorkerReport], float]:
    """Run each worker's jobs as one Dask task (``client.submit``); return the reports
    and the wall time. The store travels as the task argument (pickled: the URL,
    namespace and options; each task connects on first use). Progress is what the
    store holds: every poll reads each job's ``next_seq`` (six events per candle), so
    it counts the candles whose turn is durable."""
    progress_step = 0.25
    started = time.monotonic()
    with sessionstore.connect(url, namespace) as store:
        futures = [
            client.submit(_dask_worker, store, n, jobs, candle_count, pure=False)
            for n, jobs in enumerate(dealt)
        ]
        done: dict[int, int] = {}
        while not all(future.done() for future in futures):
            _poll_progress(store, dealt, on_progress, done)
            time.sleep(progress_step)
        reports: list[WorkerReport] = client.gather(futures)
        wall = time.monotonic() - started
        _poll_progress(store, dealt, on_progress, done)
    return sorted(reports, key=lambda r: r.worker), wall


def _dask_worker(store: Store, worker: int, jobs: list[Job], candle_count: int) -> WorkerReport:
    with store:
        return run_jobs(store, worker, jobs, candle_count, None, None)


def _poll_progress(
    store: Store, dealt: list[list[Job]], on_progress: Any, done: dict[int, int]
) -> None:
    for worker, jobs in enumerate(dealt):
        candles_done = 0
        for job in jobs:
            try:
                candles_done += store.events.info(job.session_id).next_seq // EVENTS_PER_CANDLE
            except sessionstore.SessionNotFoundError:
                continue
        if candles_done > done.get(worker, 0):
            if on_progress is not None:
                on_progress(worker, candles_done - done.get(worker, 0))
            done[worker] = candles_done


def _collect(results: Any, reports: dict[int, WorkerReport]) -> None:
    while not results.empty():
        report = results.get()
        reports[report.worker] = report


def _pump(progress: Any, on_progress: Any, done: dict[int, int]) -> None:
    while not progress.empty():
        worker, count = progress.get()
        done[worker] = done.get(worker, 0) + count
        if on_progress is not None:
            on_progress(worker, count)


def _delete_own(store: Store, found: Survey) -> None:
    """Delete the demo's own leftovers (of any earlier run); nothing else. The demo's
    values are history values: a plain value stored under the same key is not its own
    and stays (only the history is cleared then)."""
    for session_id in found.own_sessions:
        store.events.delete(session_id)
    foreign = {ref[:5] for ref in found.foreign_values}
    for ref in found.own_values:
        history = store.session(*ref[:4], mode=ref.mode, history=True)
        if ref[:5] in foreign:
            history.set_data(None, -MAX_ABS_EPOCH_MS)  # drops every version, keeps the plain one
        else:
            history.delete()


def _preflight(store: Store) -> None:
    """Append to (and delete) a scratch log of the demo's own before any worker starts,
    so that a store the workers could not write to (refused credentials, a read-only
    folder) raises its error here, once, instead of in every worker."""
    probe = probe_name("demo")
    store.events.create(SessionHeader(id=probe, cwd=PREFLIGHT_CWD))
    store.events.append(probe, [SessionEvent(seq=0, type="preflight", time=0)])
    store.events.delete(probe)


def _check(
    url: str,
    namespace: str,
    reports: list[WorkerReport],
    dealt: list[list[Job]],
    candle_count: int,
    wall: float,
    crash: bool,
) -> DemoResult:
    problems: list[str] = []
    repaired: list[str] = []
    codes: list[str] = []
    balanced = gaps = lost = repair_events = 0
    sessions = 0
    #: The candle buckets each symbol's processed candles needed an answer for.
    needed: dict[str, set[int]] = {}
    with sessionstore.connect(url, namespace) as store:
        for report in reports:
            for job in dealt[report.worker]:
                try:
                    before = store.events.read_from(job.session_id, 0)
                except sessionstore.SessionNotFoundError:
                    if not report.crashed:
                        problems.append(f"session {job.session_id} was never written")
                    continue
                if report.crashed:
                    _count_from_log(report, job, before)
                needed.setdefault(job.symbol, set()).update(_buckets_answered(before))
                sessions += 1
                loaded = _load_when_free(store, job.session_id)
                if [e.seq for e in loaded.events] != list(range(len(loaded.events))):
                    gaps += 1
                    problems.append(f"session {job.session_id} has a seq gap")
                if closers(loaded.events):
                    problems.append(f"session {job.session_id} is unbalanced after load")
                else:
                    balanced += 1
                added = loaded.events[len(before) :]
                if added:
                    repaired.append(job.session_id)
                    repair_events += len(added)
                    codes += [e.data["error"]["code"] for e in added if e.type == "tool/result"]
        jobs = [job for jobs in dealt for job in jobs]
        for symbol in sorted({job.symbol for job in jobs}):
            buckets = needed.get(symbol, set())
            lost += _check_cache(store, symbol, candle_count, problems, required=buckets)
    future = sum(r.future_reads for r in reports)
    if future:
        problems.append(f"{future} reads returned a value from the future")
    candles_done = sum(r.candles for r in reports)
    answers = sum(r.model_calls + r.reused + r.waited for r in reports)
    if candles_done != answers:
        problems.append(
            f"{candles_done} candles processed but {answers} model answers made, reused or"
            " waited for"
        )
    distinct = sum(len(buckets) for buckets in needed.values())
    calls = sum(r.model_calls for r in reports)
    if calls != distinct:
        problems.append(
            f"{calls} model calls made for {distinct} distinct (symbol, candle) answers"
        )
    if crash and not repaired:
        problems.append("the crashed worker's interrupted turn was not repaired")
    if not crash and any(r.crashed for r in reports):
        problems.append("a worker died")
    return DemoResult(
        reports,
        sessions,
        balanced,
        repaired,
        codes,
        lost,
        gaps,
        wall,
        problems,
        namespace=namespace,
        repair_events=repair_events,
        distinct_answers=distinct,
    )


def _load_when_free(store: Store, session_id: str) -> LoadedSession:
    """``load`` (which repairs), once the lease of a killed worker's writer has ended."""
    deadline = time.monotonic() + 2 * WRITER_LEASE
    while True:
        try:
            return store.events.load(session_id)
        except SessionBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _count_from_log(report: WorkerReport, job: Job, events: list[SessionEvent]) -> None:
    """Add to a crashed worker's report what the durable log of ``job`` shows it did: a
    candle per finished turn, its model calls and reuses, every event it wrote."""
    report.events += len(events)
    turn = None
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == "turn/end":
            report.candles += 1
        elif event.type == "tool/result":
            reused, waited = bool(data.get("cached")), bool(data.get("waited"))
            report.reused += reused
            report.waited += waited
            report.model_calls += not (reused or waited)
            report.lookahead_refusals += bool(data.get("withheld"))
        elif event.type == "turn/start":
            turn = data.get("turn")
    if closers(events):
        report.interrupted = f"{job.session_id} turn {turn}"


def _buckets_answered(events: list[SessionEvent]) -> set[int]:
    """The candle buckets whose answers the tool results of a log carry."""
    return {
        bucket_start(event.data["turn"] - 1)
        for event in events
        if event.type == "tool/result" and isinstance(event.data.get("turn"), int)
    }


def _check_cache(
    store: Any, symbol: str, candle_count: int, problems: list[str], *, required: set[int]
) -> int:
    """Every cached answer still stored is the model's answer for its own candle, and the
    answer of every bucket in ``required`` (those the workers' candles needed) survived,
    whichever worker stored it when. Returns the number of violations."""
    closes = candles(symbol, candle_count)
    cache = store.session(symbol, STRATEGY, EXCHANGE, FRAME, history=True)
    bad = 0
    for bucket in range(0, candle_count, SIGNAL_CANDLES):
        stored = cache.get_data(START_MS + bucket * CANDLE_MS)
        if stored is not None and stored["bucket"] == bucket:
            if stored != model_answer(closes, bucket):
                bad += 1
                problems.append(f"cached answer for {symbol} at candle {bucket} is wrong")
        elif bucket in required:
            bad += 1
            problems.append(f"cached answer for {symbol} at candle {bucket} was lost")
    return bad
