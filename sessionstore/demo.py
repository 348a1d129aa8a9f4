"""The parallel backtest behind ``sessionstore demo``.

Worker processes run a toy strategy over seeded synthetic candles. For each candle the
strategy "asks a model" (deterministic and deliberately slow) for a signal and caches the
answer in a history session value keyed by the symbol, so every other callback and every
other worker running that symbol reuses it; a read at candle time never sees an answer
written for a later candle. Each decision is logged as a turn (turn, step, tool call,
tool result) through the write-behind writer. Afterwards the parent checks the invariants:
contiguous and balanced logs, no cached answer lost or read from the future.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import sessionstore

from .errors import SessionNotFoundError
from .eventlog import closers
from .models import SessionEvent, SessionHeader

START_MS = 1_718_000_000_000
CANDLE_MS = 3_600_000
#: A model answer stays valid for this many candles, so callbacks in between reuse it.
SIGNAL_CANDLES = 4
VARIANTS = ("momentum", "contrarian")
EXCHANGE = "synthetic"
FRAME = "1h"
MODEL_SECONDS = 0.004
#: Reading here shows the newest answer of any time: what look-ahead protection withholds.
FAR_FUTURE_MS = START_MS + 10**12


@dataclass(frozen=True)
class Job:
    """One strategy variant over one symbol."""

    symbol: str
    variant: str

    @property
    def session_id(self) -> str:
        return f"{self.variant}-{self.symbol}"


@dataclass
class WorkerReport:
    worker: int
    candles: int = 0
    model_calls: int = 0
    reused: int = 0
    lookahead_refusals: int = 0
    future_reads: int = 0
    events: int = 0
    crashed: bool = False


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

    def total(self, name: str) -> int:
        return sum(getattr(w, name) for w in self.workers)

    @property
    def ok(self) -> bool:
        return not self.problems


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
    report = WorkerReport(worker)
    with sessionstore.connect(url, namespace) as store:
        for job in jobs:
            closes = candles(job.symbol, candle_count)
            cache = store.session(job.symbol, "llm-signal", EXCHANGE, FRAME, history=True)
            writer = store.events.writer(
                SessionHeader(id=job.session_id, cwd=f"/demo/{job.variant}")
            )
            position = 0
            for index in range(candle_count):
                when = START_MS + index * CANDLE_MS
                writer.emit("turn/start", {"turn": index + 1})
                writer.emit("step/start", {"turn": index + 1, "step": 1})
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
                )
                if crash_at is not None and report.candles == crash_at:
                    writer.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
                answer, reused = _signal(cache, closes, index, when, report)
                writer.emit(
                    "tool/result",
                    {
                        "turn": index + 1,
                        "step": 1,
                        "call_id": call_id,
                        "is_error": False,
                        "content": answer["signal"],
                        "cached": reused,
                    },
                )
                position = _trade(job.variant, answer["signal"], position)
                writer.emit("step/end", {"turn": index + 1, "step": 1})
                writer.emit(
                    "turn/end",
                    {"turn": index + 1, "reason": {"kind": "done"}, "position": position},
                )
                report.events += 6
                report.candles += 1
                if progress is not None:
                    progress.put((worker, 1))
            writer.close()
    return report


def _signal(
    cache: Any, closes: list[float], index: int, when: int, report: WorkerReport
) -> tuple[dict[str, Any], bool]:
    bucket = bucket_start(index)
    cached = cache.get_data(when)
    newest = cache.get_data(FAR_FUTURE_MS)
    if newest is not None and newest["confirmedAt"] > when:
        report.lookahead_refusals += 1
    if cached is not None and cached["confirmedAt"] > when:
        report.future_reads += 1
    if cached is not None and cached["bucket"] == bucket:
        report.reused += 1
        return cached, True
    answer = ask_model(closes, bucket)
    report.model_calls += 1
    if newest is None or newest["bucket"] < bucket:
        cache.set_data(answer, START_MS + bucket * CANDLE_MS)
    return answer, False


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
    on_progress: Any = None,
) -> DemoResult:
    """Run the whole demo and check its invariants."""
    workers = workers or os.cpu_count() or 2
    with sessionstore.connect(url, namespace) as store:
        _reset(store, symbol_count)
        _preflight(store)
    dealt = [jobs for jobs in plan(symbol_count, workers) if jobs]
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
            reports[n] = WorkerReport(n, candles=done.get(n, 0), crashed=True)
    return _check(
        url, namespace, [reports[n] for n in sorted(reports)], dealt, candle_count, wall, crash
    )


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


def _reset(store: Any, symbol_count: int) -> None:
    """A demo run starts clean: drop the logs and cached answers of a previous run."""
    for header in store.events.list():
        store.events.delete(header.id)
    for symbol in symbols(symbol_count):
        store.session(symbol, "llm-signal", EXCHANGE, FRAME, history=True).set_data(None, -1)


def _preflight(store: Any) -> None:
    """Append to (and delete) a scratch log before any worker starts, so that a store the
    workers could not write to (a Redis without durable AOF, refused credentials, a
    read-only folder) raises its error here, once, instead of in every worker."""
    probe = "demo-preflight"
    with contextlib.suppress(SessionNotFoundError):
        store.events.delete(probe)
    store.events.create(SessionHeader(id=probe))
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
    balanced = gaps = lost = 0
    jobs = [job for jobs in dealt for job in jobs]
    sessions = 0
    with sessionstore.connect(url, namespace) as store:
        for job in jobs:
            try:
                before = store.events.read_from(job.session_id, 0)
            except sessionstore.SessionNotFoundError:
                if not crash:
                    problems.append(f"session {job.session_id} was never written")
                continue
            sessions += 1
            loaded = store.events.load(job.session_id)
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
                codes += [e.data["error"]["code"] for e in added if e.type == "tool/result"]
        for symbol in sorted({job.symbol for job in jobs}):
            lost += _check_cache(store, symbol, candle_count, problems, require_final=not crash)
    future = sum(r.future_reads for r in reports)
    if future:
        problems.append(f"{future} reads returned a value from the future")
    if crash and not repaired:
        problems.append("the crashed worker's interrupted turn was not repaired")
    if not crash and any(r.crashed for r in reports):
        problems.append("a worker died")
    return DemoResult(reports, sessions, balanced, repaired, codes, lost, gaps, wall, problems)


def _check_cache(
    store: Any, symbol: str, candle_count: int, problems: list[str], *, require_final: bool
) -> int:
    """Every cached answer still stored is the model's answer for its own candle, and the
    answer for the final candle bucket survived. Returns the number of violations."""
    closes = candles(symbol, candle_count)
    cache = store.session(symbol, "llm-signal", EXCHANGE, FRAME, history=True)
    final = bucket_start(candle_count - 1)
    bad = 0
    for bucket in range(0, candle_count, SIGNAL_CANDLES):
        stored = cache.get_data(START_MS + bucket * CANDLE_MS)
        if stored is not None and stored["bucket"] == bucket:
            if stored != model_answer(closes, bucket):
                bad += 1
                problems.append(f"cached answer for {symbol} at candle {bucket} is wrong")
        elif bucket == final and require_final:
            bad += 1
            problems.append(f"cached answer for {symbol} at the final candle {bucket} was lost")
    return bad
