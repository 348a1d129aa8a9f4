"""Many open writers in one process, on JSONL files, SQLite and Redis: the shared drain.

Each repetition, in a fresh store (a temporary directory or database, a new Redis
namespace): open N writers (``store.events.writer``, one session each), emit one event
to each, then flush every writer, for N = 1k and 10k; the three phases are timed
together and each on its own. A row compares the cost per writer at 10k (ours) with
the cost per writer at 1k (baseline): linear growth gives a ratio near 1 (the 10k
total about 10x the 1k total; the settings give that total ratio and each phase's cost
per writer). The settings also give the most threads the process ran during a run:
the writers share one drain, so it stays a few whatever N. The JSONL store holds one
descriptor per writer lease: the soft ``RLIMIT_NOFILE`` is raised within the hard
limit, and a row says so when it still does not fit N writers (that row is skipped).
"""

from __future__ import annotations

import resource
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import sessionstore
from sessionstore import SessionHeader

from .harness import Result, Sizes
from .local import _filesystem

AREA = "Open writers"
#: Descriptors kept besides the writers' leases (the store, the interpreter, Redis).
SPARE_FILES = 256
#: The most the cost per writer at 10k may exceed that at 1k.
TARGET = 1.3
#: Opens a fresh store for one repetition.
Opener = Callable[[], AbstractContextManager[sessionstore.Store]]


class Run:
    """One repetition: seconds for each phase and the most threads seen."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.threads = threading.active_count()

    def timed(self, name: str, phase: Callable[[], None]) -> None:
        start = time.perf_counter()
        phase()
        self.phases[name] = time.perf_counter() - start
        self.threads = max(self.threads, threading.active_count())

    @property
    def total(self) -> float:
        return sum(self.phases.values())


def one_run(store: sessionstore.Store, count: int) -> Run:
    """Open ``count`` writers, emit one event to each, flush them all; close them after."""
    run = Run()
    writers: list[sessionstore.SessionWriter] = []
    headers = [SessionHeader(id=f"w{index:05d}", created_at=1) for index in range(count)]

    def open_all() -> None:
        for header in headers:
            writers.append(store.events.writer(header))

    def emit_all() -> None:
        for writer in writers:
            writer.emit("note", {"n": 1})

    def flush_all() -> None:
        for writer in writers:
            writer.flush()

    try:
        run.timed("open", open_all)
        run.timed("emit", emit_all)
        run.timed("flush", flush_all)
    finally:
        for writer in writers:
            writer.close()
    return run


def raise_open_files(needed: int) -> tuple[int, str]:
    """Raise the soft ``RLIMIT_NOFILE`` to ``needed`` within the hard limit; return the
    soft limit now and a note when it is below ``needed``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        wanted = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            return soft, f"cannot raise RLIMIT_NOFILE to {needed}: {exc}"
    if soft != resource.RLIM_INFINITY and soft < needed:
        return soft, f"RLIMIT_NOFILE hard limit {hard} < {needed} needed"
    return soft, ""


@contextmanager
def file_store() -> Iterator[sessionstore.Store]:
    with (
        tempfile.TemporaryDirectory(prefix="sessionstore-bench-") as tmp,
        sessionstore.connect(Path(tmp, "store").as_uri(), namespace="writers") as store,
    ):
        yield store


@contextmanager
def sqlite_store() -> Iterator[sessionstore.Store]:
    with (
        tempfile.TemporaryDirectory(prefix="sessionstore-bench-") as tmp,
        sessionstore.connect(f"sqlite:///{tmp}/store.db", namespace="writers") as store,
    ):
        yield store


def redis_store(url: str) -> Opener:
    @contextmanager
    def opened() -> Iterator[sessionstore.Store]:
        namespace = f"writers-{uuid.uuid4().hex[:8]}"
        with sessionstore.connect(url, namespace=namespace, durability="none") as store:
            yield store

    return opened


def _row(
    backend: str,
    settings: str,
    opener: Opener,
    sizes: Sizes,
) -> Result:
    small, large = sizes.writers_small, sizes.writers_large
    runs: dict[int, list[Run]] = {small: [], large: []}
    for _ in range(sizes.writer_reps):
        for count in (small, large):
            with opener() as store:
                runs[count].append(one_run(store, count))
    per_writer = {
        count: [run.total / count * 1e6 for run in found] for count, found in runs.items()
    }
    phases = ", ".join(
        f"{name} {statistics.median(r.phases[name] / large * 1e6 for r in runs[large]):.0f}"
        for name in ("open", "emit", "flush")
    )
    totals = [b.total / a.total for a, b in zip(runs[small], runs[large], strict=True)]
    threads = {count: max(run.threads for run in found) for count, found in runs.items()}
    return Result(
        f"{AREA} ({backend})",
        f"open {large:,} writers, emit 1 event to each, flush all (per writer)",
        f"the same with {small:,} writers",
        statistics.median(per_writer[large]),
        statistics.median(per_writer[small]),
        "µs/writer",
        TARGET,
        f"{settings}; {large:,}/{small:,} total time {statistics.median(totals):.1f}x; "
        f"per writer at {large:,}: {phases} µs (open, emit, flush); most threads in the "
        f"process: {threads[small]} at {small:,}, {threads[large]} at {large:,}; "
        f"{sizes.writer_reps} repetition(s)",
        lower_is_better=True,
        samples={"ours": per_writer[large], "baseline": per_writer[small]},
    )


def writer_results(url: str, sizes: Sizes) -> list[Result]:
    """One row each for JSONL files, SQLite and Redis (see the module docstring)."""
    rows = []
    limit, problem = raise_open_files(sizes.writers_large + SPARE_FILES)
    files = f"JSONL files, one lease descriptor per writer, RLIMIT_NOFILE {limit}; {_filesystem()}"
    if problem:
        print(f"skipped: {AREA}: JSONL: {problem}", flush=True)
    else:
        rows.append(_row("JSONL", files, file_store, sizes))
    rows.append(
        _row("SQLite", f"SQLite, WAL, synchronous=FULL; {_filesystem()}", sqlite_store, sizes)
    )
    rows.append(_row("Redis", "Redis, AOF off; durability='none'", redis_store(url), sizes))
    return rows
