"""The demo's workers as spawned processes: one per dealt list of jobs, progress and
reports sent back through queues."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from .data import Job
from .workers import WorkerReport, run_worker


def run_processes(
    url: str,
    namespace: str,
    dealt: list[list[Job]],
    candle_count: int,
    crash: bool,
    on_progress: Any,
) -> tuple[list[WorkerReport], float]:
    """Run each worker's jobs in its own spawned process; return the reports (by worker)
    and the wall time. ``on_progress(worker, candles)`` is called as candles are done.
    With ``crash``, worker 0 kills itself halfway through; a worker that sent no report
    is reported as crashed: the check counts its work from its logs."""
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
    return [reports[n] for n in sorted(reports)], wall


def _worker_main(args: tuple[Any, ...]) -> None:
    worker, jobs, url, namespace, candle_count, crash_at, progress, results = args
    report = run_worker(worker, jobs, url, namespace, candle_count, crash_at, progress)
    results.put(report)


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
