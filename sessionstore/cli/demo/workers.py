"""One worker of the demo: its jobs run candle by candle against the store.

For each candle the strategy "asks the model" (:func:`ask_model`) for a signal,
cached in a history session value keyed by the symbol, one version per candle bucket: a
candle whose bucket's answer is stored reuses it; otherwise ``get_or_compute`` lets
exactly one worker of all those running that symbol ask the model while the others wait
for its answer, and ``put`` stores it at the bucket's time without discarding what other
workers stored. A read at candle time never sees an answer written for a later candle.
Each decision is logged as a turn (turn, step, tool call, tool result), stamped with the
candle's time, through the write-behind writer.

The functions a worker process or a Dask task runs are module-level, so they pickle by
name.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any

import sessionstore

from ...models import SessionHeader
from ...store import Store
from .data import CANDLE_MS, EXCHANGE, FRAME, START_MS, STRATEGY, Job, candles
from .model import ask_model, bucket_start

#: Seconds a worker's writer holds its session's lease past its last renewal: how long
#: the repair of a killed worker's session waits on a store whose leases expire (Redis).
WRITER_LEASE = 2.0
#: Reading here shows the newest answer of any time: what look-ahead protection withholds.
FAR_FUTURE_MS = START_MS + 10**12
#: The events of one candle's turn: turn, step, tool call, tool result, step end, turn end.
EVENTS_PER_CANDLE = 6
#: Where a candle's answer came from (see :func:`_signal`).
COMPUTED, REUSED, WAITED = "computed", "reused", "waited"


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
                if progress is not None:
                    # Killed while its feeder thread writes, the queue's lock, shared with
                    # the other workers, would stay held: their exit would wait forever.
                    progress.close()
                    progress.join_thread()
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
