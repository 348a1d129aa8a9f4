"""The demo's workers as Dask distributed tasks (``sessionstore demo --scheduler``)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import sessionstore

from ...errors import SessionStoreError
from ...store import Store
from ..common import mask_address, mask_in
from .data import Job
from .workers import EVENTS_PER_CANDLE, WorkerReport, run_jobs


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
                    dashboard_address=":0",  # a free port: clusters of parallel runs never collide
                    silence_logs=logging.ERROR,
                )
            )
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(scheduler, timeout=10))
            except (OSError, ValueError, TypeError) as exc:
                raise SchedulerError(
                    f"cannot reach the Dask scheduler at {mask_address(scheduler)!r}: "
                    f"{mask_in(str(exc), scheduler)}"
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
