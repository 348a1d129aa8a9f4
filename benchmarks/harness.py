"""Timing machinery shared by every scenario: sizes, interleaved repetitions, medians,
forked worker processes, the :class:`Result` of one comparison and the :class:`Growth`
of one cost at scale.

A *side* of a comparison is a callable that prepares one block of work (pre-built
events, keys, anything that is not the operation being measured) and returns the timed
part: a zero-argument callable that performs the operations and returns how many it
performed (calls or events). Only the timed part is inside the clock.

The machine these run on is shared and its speed shifts within seconds, so the two sides
are interleaved finely: a repetition runs ``blocks`` blocks of each side, alternating
which goes first, and each side's rate is its operations over its own time in that
repetition. The figure reported is the median over the repetitions.
"""

from __future__ import annotations

import gc
import multiprocessing
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

#: One prepared block: runs the measured operations, returns how many it did.
Timed = Callable[[], int]
#: Prepares a block (untimed) and returns its timed part.
Side = Callable[[], Timed]
#: Runs one whole repetition by itself and returns its operations per second.
Rate = Callable[[], float]
#: Throughput samples of (ours, baseline), one per repetition.
Samples = tuple[list[float], list[float]]


@dataclass(frozen=True)
class Sizes:
    """How much work each scenario does; ``quick`` shrinks everything for a smoke test.

    Counts are per block; a repetition runs ``blocks`` blocks of each side.
    """

    reps: int = 5
    blocks: int = 10
    #: One-event appends and single value operations on Redis.
    calls: int = 150
    #: 100-event appends on Redis.
    batch_calls: int = 4
    #: Appends on the local backends (each one fsyncs); 100-event ones do a fifth.
    local_calls: int = 20
    #: Calls against openai-agents (several round trips each); 100-event ones do a tenth.
    peer_calls: int = 50
    #: Updates per block in one process; per process and repetition with four.
    updates: int = 80
    parallel_updates: int = 500
    #: Event-log lengths for the load scenarios (one load per block, one block).
    load_small: int = 10_000
    load_large: int = 100_000
    #: Repetitions of the large load (it is the slowest single operation).
    large_reps: int = 3
    #: Writers open at once in one process, and repetitions of each count.
    writers_small: int = 1_000
    writers_large: int = 10_000
    writer_reps: int = 1
    #: The sizes each cost at scale is measured at (``benchmarks/scale.py``); event
    #: counts are multiples of 8, balanced turns (see ``workload``).
    scale_events: tuple[int, ...] = (1_000, 10_000, 100_000)
    scale_sessions: tuple[int, ...] = (100, 1_000, 10_000)
    scale_values: tuple[int, ...] = (100, 1_000, 10_000)
    scale_workers: tuple[int, ...] = (1, 2, 4, 8)
    #: What the attacking tenant plants (``benchmarks/tenant_attack.py``): records of a
    #: seq hash and versions of a history, the megabytes of each planted field (an event
    #: entry, a meta hash's field, a writer lease's owner); and the rounds of the
    #: victim's three calls.
    planted: int = 1_000_000
    planted_field_mb: int = 48
    victim_rounds: int = 200

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            reps=2,
            blocks=2,
            calls=30,
            batch_calls=2,
            local_calls=5,
            peer_calls=10,
            updates=20,
            parallel_updates=40,
            load_small=800,
            load_large=2_000,
            large_reps=2,
            writers_small=100,
            writers_large=1_000,
            scale_events=(200, 1_000, 2_000),
            scale_sessions=(10, 100, 300),
            scale_values=(10, 100, 300),
            scale_workers=(1, 2),
            planted=20_000,
            planted_field_mb=1,
            victim_rounds=30,
        )


@dataclass
class Result:
    """One row of the report: ours against the baseline, and the target on their ratio.

    For throughput (``lower_is_better`` False) the ratio must reach ``target``; for
    memory (``lower_is_better`` True) it must stay at or below it.
    """

    area: str
    scenario: str
    baseline_name: str
    ours: float
    baseline: float
    unit: str
    target: float
    settings: str
    lower_is_better: bool = False
    samples: dict[str, list[float]] = field(default_factory=dict)
    #: The row's ratio in each run of ``python -m benchmarks --runs N`` (this one's
    #: included), in run order; empty for a single run.
    run_ratios: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        """``area: scenario``, unique within a run."""
        return f"{self.area}: {self.scenario}"

    @property
    def ratio(self) -> float:
        """ours / baseline: the median of the per-repetition ratios when there are
        samples (each repetition ran both sides interleaved, so its ratio is paired),
        else the ratio of the two figures."""
        ours, theirs = self.samples.get("ours"), self.samples.get("baseline")
        if ours and theirs and len(ours) == len(theirs):
            return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
        return self.ours / self.baseline if self.baseline else float("inf")

    @property
    def passed(self) -> bool:
        if self.lower_is_better:
            return self.ratio <= self.target
        return self.ratio >= self.target

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    @property
    def target_text(self) -> str:
        return f"{'<=' if self.lower_is_better else '>='} {self.target:g}"

    @property
    def spread_text(self) -> str:
        """The lowest and highest ratio over the runs ("" for a single run)."""
        if not self.run_ratios:
            return ""
        return f"{min(self.run_ratios):.2f}-{max(self.run_ratios):.2f}"

    @property
    def passed_every_run(self) -> bool:
        """Whether the target was met in each run (in this one, for a single run)."""
        if not self.run_ratios:
            return self.passed
        if self.lower_is_better:
            return max(self.run_ratios) <= self.target
        return min(self.run_ratios) >= self.target


@dataclass
class Growth:
    """How one cost grows with one dimension (events per session, sessions per
    namespace, ...): a row of ``columns`` per size measured, smallest first, the
    ``largest`` configuration run in words, and a ``summary`` of the growth."""

    dimension: str
    settings: str
    columns: tuple[str, ...]
    points: list[tuple[str, ...]]
    largest: str
    summary: str


def compare(
    ours: Side, baseline: Side, reps: int, blocks: int = 2, settle: bool = False
) -> Samples:
    """Throughput samples of both sides, one per repetition.

    One untimed block of each side warms up; then each repetition prepares ``blocks``
    blocks of each side and runs them interleaved (ours, baseline, baseline, ours, ...),
    each timed on its own, so that a change of the machine's pace weighs on both alike.
    ``blocks`` is even, so that in every repetition each side runs first equally often:
    which side runs first shifts the figures (by when the garbage collector runs, for
    one), by up to a third for the 10k-event loads.

    ``settle``: the collector runs (untimed) before every block, not only before each
    repetition, so that no block pays for collections the objects of the block before
    it started (the reads, which build their events with collection deferred and leave
    the promotion of what they built to whatever runs next: see ``sessionstore.gcdefer``);
    each block pays for the collections it starts itself.
    """
    if blocks % 2:
        raise ValueError(f"blocks must be even, not {blocks}")
    ours()()
    baseline()()
    mine: list[float] = []
    theirs: list[float] = []
    for rep in range(reps):
        prepared = [(ours(), baseline()) for _ in range(blocks)]
        totals = {"ours": [0, 0.0], "baseline": [0, 0.0]}
        gc.collect()
        for index, (our_block, their_block) in enumerate(prepared):
            pair = [("ours", our_block), ("baseline", their_block)]
            if (rep * blocks + index) % 2:
                pair.reverse()
            for name, block in pair:
                if settle:
                    gc.collect()
                start = time.perf_counter()
                count = block()
                totals[name][0] += count
                totals[name][1] += time.perf_counter() - start
        mine.append(totals["ours"][0] / totals["ours"][1])
        theirs.append(totals["baseline"][0] / totals["baseline"][1])
    return mine, theirs


def compare_rates(ours: Rate, baseline: Rate, reps: int) -> Samples:
    """Like :func:`compare` for sides that run and time a whole repetition themselves
    (worker processes): one warm-up each, then ``reps`` of each in ABBA order."""
    ours()
    baseline()
    mine: list[float] = []
    theirs: list[float] = []
    for index in range(reps):
        if index % 2 == 0:
            mine.append(ours())
            theirs.append(baseline())
        else:
            theirs.append(baseline())
            mine.append(ours())
    return mine, theirs


def result(
    area: str,
    scenario: str,
    baseline_name: str,
    samples: Samples,
    unit: str,
    target: float,
    settings: str,
) -> Result:
    """A throughput :class:`Result` from the samples of :func:`compare` (medians)."""
    mine, theirs = samples
    return Result(
        area,
        scenario,
        baseline_name,
        statistics.median(mine),
        statistics.median(theirs),
        unit,
        target,
        settings,
        samples={"ours": mine, "baseline": theirs},
    )


# Worker processes --------------------------------------------------------------------------

#: A job for :func:`parallel`: given the worker's index, prepare (untimed) in the child
#: and return the timed part.
Job = Callable[[int], Timed]


def parallel(job: Job, processes: int) -> float:
    """Total operations per second of ``processes`` forked workers running ``job``.

    Each worker prepares, waits at a barrier, then runs its timed part; the rate is
    every worker's operations over the span from the first start to the last finish.
    """
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes)
    replies = context.SimpleQueue()

    def work(index: int) -> None:
        try:
            run = job(index)
            gc.collect()
            barrier.wait()
            start = time.perf_counter()
            count = run()
            replies.put((start, time.perf_counter(), count, None))
        except BaseException:
            barrier.abort()
            replies.put((0.0, 0.0, 0, traceback.format_exc()))

    workers = [context.Process(target=work, args=(index,)) for index in range(processes)]
    for worker in workers:
        worker.start()
    outcomes = [replies.get() for _ in workers]
    for worker in workers:
        worker.join()
    errors = [error for *_, error in outcomes if error]
    if errors:
        raise RuntimeError("a benchmark worker failed:\n" + errors[0])
    first = min(start for start, *_ in outcomes)
    last = max(end for _, end, *_ in outcomes)
    return sum(count for _, _, count, _ in outcomes) / (last - first)
