"""The demo's invariant check, run by the parent once every worker has ended.

It reads the store back: contiguous and balanced logs (after the repair a load makes of
a killed worker's open turn), no cached answer lost or read from the future, a summary
that adds up (candles processed = model calls + answers reused + answers waited for) and
one model call per distinct (symbol, candle bucket) reached. A crashed worker's report
is rebuilt from its durable logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import sessionstore

from ...errors import SessionBusyError
from ...eventlog import closers
from ...models import SessionEvent
from ...results import LoadedSession
from ...store import Store
from .data import CANDLE_MS, EXCHANGE, FRAME, START_MS, STRATEGY, Job, candles
from .model import SIGNAL_CANDLES, bucket_start, model_answer
from .workers import WRITER_LEASE, WorkerReport


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


def check_run(
    url: str,
    namespace: str,
    reports: list[WorkerReport],
    dealt: list[list[Job]],
    candle_count: int,
    wall: float,
    crash: bool,
) -> DemoResult:
    """Check the invariants of a run whose workers (``reports``, the jobs ``dealt`` to
    them) have ended; every violation is one line of the result's ``problems``."""
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
            lost += check_cache(store, symbol, candle_count, problems, required=buckets)
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


def check_cache(
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
