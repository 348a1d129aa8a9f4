"""The parallel backtest behind ``sessionstore demo``, from refusal to verdict.

Worker processes (spawned: :func:`run_processes`, or Dask distributed tasks:
:func:`run_on_dask`) run a toy strategy over seeded synthetic candles (:mod:`.workers`),
caching the model's answers in history session values and logging each decision as a
turn. Afterwards the parent checks the invariants (:func:`check_run`).

The demo deletes only its own leftovers (of any earlier run, whatever its size), never
anything else (:mod:`.ownership`); it refuses to start in a namespace that holds
anything else unless ``reset=True``, and then leaves that data as it is. Before any
write it checks that the store can take the run: a Redis whose persistence does not give
the durability the URL asks for is refused with nothing written.
"""

from __future__ import annotations

from typing import Any

import sessionstore

from ...models import SessionEvent, SessionHeader
from ...results import probe_name
from ...store import Store
from .check import DemoResult, check_run
from .dask import SchedulerError, dask_client, run_on_dask
from .data import default_workers, plan
from .ownership import ForeignDataError, delete_own, survey
from .processes import run_processes

PREFLIGHT_CWD = "/demo/preflight"


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
    workers = workers or default_workers()
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
        delete_own(store, found)
        _preflight(store)
    if scheduler is not None:
        with dask_client(scheduler, len(dealt)) as client:
            if on_start is not None:
                on_start()
            ran, wall = run_on_dask(client, url, namespace, dealt, candle_count, on_progress)
    else:
        if on_start is not None:
            on_start()
        ran, wall = run_processes(url, namespace, dealt, candle_count, crash, on_progress)
    result = check_run(url, namespace, ran, dealt, candle_count, wall, crash)
    result.deleted = (len(found.own_sessions), len(found.own_values))
    return result


def _preflight(store: Store) -> None:
    """Append to (and delete) a scratch log of the demo's own before any worker starts,
    so that a store the workers could not write to (refused credentials, a read-only
    folder) raises its error here, once, instead of in every worker."""
    probe = probe_name("demo")
    store.events.create(SessionHeader(id=probe, cwd=PREFLIGHT_CWD))
    store.events.append(probe, [SessionEvent(seq=0, type="preflight", time=0)])
    store.events.delete(probe)
