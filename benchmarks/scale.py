"""Cost at scale: how each cost grows with the size of what it works on, on Redis.

Each dimension grows one store step by step (the sizes of ``Sizes.scale_*``) and
measures at every step; no baseline and no target, the figures are the points:

* events per session: ``load`` of one session log of 1k, 10k and 100k events (median
  time, time per event, and the peak memory of one load by tracemalloc);
* sessions per namespace: ``list`` and ``list_info`` of a namespace holding 100, 1k and
  10k sessions (median time, time per session);
* values per worker: one process (one store) reading N session values in turn,
  ``get_data`` of each once per pass (time per read), and the memory held per value
  added (its handle and what the store keeps for it, by tracemalloc);
* workers per server: 1, 2, 4 and 8 forked processes each appending 1 event per call to
  a session of its own (total and per-worker events per second);
* cluster shards: the same 4 processes, each appending 1 event per call in turn to 6
  sessions of its own, against a Redis Cluster of 1, 2 and 3 primaries (one
  :class:`~benchmarks.servers.RedisCluster` each, reached by a plain URL of one node);
  each process has one session in every sixth of the slot space, so every primary
  serves an equal share (total and per-primary events per second, and the busiest
  primary's share of the ``FCALL`` commands, read from each node's statistics). The
  clients and every primary share the machine's cores.
"""

from __future__ import annotations

import gc
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

import sessionstore
from sessionstore import SessionEvent, SessionHeader, keys

from . import workload
from .harness import Growth, Sizes, Timed, parallel
from .redis_log import NAMESPACE, SETTINGS, OurLog, connect, traced
from .servers import RedisCluster

MIB = 1024 * 1024


def _seconds(action: Callable[[], Any], reps: int) -> float:
    """The median time of ``reps`` runs of ``action`` (a collection before each)."""
    times = []
    for _ in range(reps):
        gc.collect()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _growth_note(unit: str, first: float, last: float, low: int, high: int) -> str:
    """How the cost per unit at the largest size compares with that at the smallest."""
    return f"{unit} at {high:,} / at {low:,}: {last / first:.2f}x"


def events_per_session(url: str, sizes: Sizes) -> Growth:
    counts = sizes.scale_events
    points: list[tuple[str, ...]] = []
    per_event: list[float] = []
    with connect(url) as store:
        log = OurLog(store)
        for count in counts:
            log.fill(count - log.next_seq)
            reps = sizes.reps if count < max(counts) else sizes.large_reps
            seconds = _seconds(lambda: store.events.load(log.id), reps)
            peak, _, loaded = traced(lambda: store.events.load(log.id))
            assert len(loaded.events) == count
            per_event.append(seconds / count * 1e6)
            points.append(
                (
                    f"{count:,}",
                    f"{seconds * 1000:,.1f}",
                    f"{per_event[-1]:.2f}",
                    f"{peak / MIB:,.1f}",
                    f"{peak / count:,.0f}",
                )
            )
    return Growth(
        "Events per session",
        f"`load` of one session log; {SETTINGS}; median of {sizes.reps} loads "
        f"({sizes.large_reps} at the largest), peak memory of one more by tracemalloc",
        ("events", "load ms", "µs per event", "peak MiB", "peak bytes per event"),
        points,
        f"{max(counts):,} events in one session",
        _growth_note("µs per event", per_event[0], per_event[-1], counts[0], counts[-1]),
    )


def sessions_per_namespace(url: str, sizes: Sizes) -> Growth:
    counts = sizes.scale_sessions
    points: list[tuple[str, ...]] = []
    per_session: list[float] = []
    namespace = f"scale-{uuid.uuid4().hex[:8]}"
    first = [SessionEvent(seq=0, type="note", time=1, data={})]
    with sessionstore.connect(url, namespace=namespace, durability="none") as store:
        made = 0
        for count in counts:
            for index in range(made, count):
                session_id = f"s{index:06d}"
                store.events.create(SessionHeader(id=session_id, created_at=index))
                store.events.append(session_id, first)  # a session is stored from then on
            made = count
            reps = sizes.reps if count < max(counts) else sizes.large_reps
            listed = _seconds(lambda: store.events.list(), reps)
            infos = _seconds(lambda: store.events.list_info(), reps)
            assert len(store.events.list()) == count
            per_session.append(listed / count * 1e6)
            points.append(
                (
                    f"{count:,}",
                    f"{listed * 1000:,.1f}",
                    f"{per_session[-1]:.1f}",
                    f"{infos * 1000:,.1f}",
                    f"{infos / count * 1e6:.1f}",
                )
            )
    return Growth(
        "Sessions per namespace",
        f"`list` and `list_info` of one namespace; {SETTINGS}; median of {sizes.reps} each "
        f"({sizes.large_reps} at the largest)",
        ("sessions", "list ms", "µs per session", "list_info ms", "µs per session (info)"),
        points,
        f"{max(counts):,} sessions in one namespace",
        _growth_note("list µs per session", per_session[0], per_session[-1], counts[0], counts[-1]),
    )


def values_per_worker(url: str, sizes: Sizes) -> Growth:
    counts = sizes.scale_values
    points: list[tuple[str, ...]] = []
    per_read: list[float] = []
    value = {"counter": 0, "note": "breakout confirmed on rising volume"}
    with sessionstore.connect(url, namespace=f"scale-{uuid.uuid4().hex[:8]}") as store:
        handles: list[sessionstore.Session] = []

        def add(count: int) -> None:
            for index in range(len(handles), count):
                handle = store.session(f"SYM{index:06d}", "scale", "binance", "1h")
                handle.set_data(value, 1)
                handle.get_data(1)
                handles.append(handle)

        def read_all() -> None:
            for handle in handles:
                handle.get_data(1)

        for count in counts:
            before = len(handles)
            _, held, _ = traced(lambda count=count: add(count))
            read_all()  # warm-up, untimed
            seconds = _seconds(read_all, sizes.large_reps)
            per_read.append(seconds / count * 1e6)
            points.append(
                (
                    f"{count:,}",
                    f"{seconds * 1000:,.1f}",
                    f"{per_read[-1]:.1f}",
                    f"{held / (count - before):,.0f}",
                )
            )
    return Growth(
        "Values per worker",
        f"one store reading each of its N values once per pass (`get_data`); {SETTINGS}; "
        f"median of {sizes.large_reps} passes after one more; memory the store holds per "
        "value added "
        "(its handle and caches, tracemalloc)",
        ("values", "pass ms", "µs per read", "bytes held per value"),
        points,
        f"{max(counts):,} values in one worker",
        _growth_note("µs per read", per_read[0], per_read[-1], counts[0], counts[-1]),
    )


def workers_per_server(url: str, sizes: Sizes) -> Growth:
    counts = sizes.scale_workers
    calls = sizes.calls * sizes.blocks // 2

    def job(index: int) -> Timed:
        ours = OurLog(connect(url))
        ours.side(1, 1)()  # materialise the session and warm the connection
        return ours.side(calls, 1)

    points: list[tuple[str, ...]] = []
    rates: list[float] = []
    for count in counts:
        rate = statistics.median(parallel(job, count) for _ in range(sizes.large_reps))
        rates.append(rate)
        points.append(
            (
                f"{count}",
                f"{rate:,.0f}",
                f"{rate / count:,.0f}",
                f"{rate / rates[0]:.2f}",
            )
        )
    return Growth(
        "Workers per server",
        f"N forked processes, each appending {calls:,} events, 1 per call, to a session of "
        f"its own; {SETTINGS}; median of {sizes.large_reps} runs; the clients and the "
        "server share the machine's cores",
        ("processes", "events/s in all", "events/s per process", "total vs 1 process"),
        points,
        f"{max(counts)} processes on one server",
        f"total events/s with {counts[-1]} processes / with {counts[0]}: "
        f"{rates[-1] / rates[0]:.2f}x",
    )


#: The cluster sizes measured, and the fixed workload run against each.
SHARDS = (1, 2, 3)
SHARD_PROCESSES = 4
SHARD_SPLIT = 6  # sessions per process, one in each sixth of the slots: even for 1, 2, 3


def _spread_ids(prefix: str) -> list[str]:
    """New session ids starting with ``prefix``, the n-th in the n-th of ``SHARD_SPLIT``
    equal slot ranges (the primaries of :data:`SHARDS` split the slots at their
    boundaries)."""
    ids = []
    for part in range(SHARD_SPLIT):
        low = part * RedisCluster.SLOTS // SHARD_SPLIT
        high = (part + 1) * RedisCluster.SLOTS // SHARD_SPLIT
        candidate = 0
        while True:
            session_id = f"{prefix}-{part}-{candidate}"
            meta, _ = keys.log_keys(NAMESPACE, session_id)
            if low <= redis.cluster.key_slot(meta.encode()) < high:
                ids.append(session_id)
                break
            candidate += 1
    return ids


def _fcalls(client: redis.Redis) -> int:
    """``FCALL`` commands the node of ``client`` has served since its statistics were
    last reset."""
    return int(client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))


def cluster_shards(sizes: Sizes) -> Growth:
    calls = sizes.calls * sizes.blocks // 2 // SHARD_SPLIT * SHARD_SPLIT

    def job_on(url: str) -> Callable[[int], Timed]:
        def job(index: int) -> Timed:
            store = connect(url)
            logs = [
                OurLog(store, session_id)
                for session_id in _spread_ids(f"shard-{index}-{uuid.uuid4().hex[:8]}")
            ]
            for log in logs:
                log.side(1, 1)()  # materialise the session and warm the connection
            per_session = [workload.batches(log.next_seq, calls // SHARD_SPLIT, 1) for log in logs]
            turns = [
                (log.id, batch)
                for batches in zip(*per_session, strict=True)
                for log, batch in zip(logs, batches, strict=True)
            ]
            append = store.events.append

            def run() -> int:
                for session_id, batch in turns:
                    append(session_id, batch)
                return len(turns)

            return run

        return job

    points: list[tuple[str, ...]] = []
    rates: list[float] = []
    for primaries in SHARDS:
        with RedisCluster(primaries) as cluster:
            samples, shares = [], []
            for _ in range(sizes.large_reps):
                cluster.on_each(lambda client: client.config_resetstat())
                samples.append(parallel(job_on(cluster.url), SHARD_PROCESSES))
                served = cluster.on_each(_fcalls)
                shares.append(max(served) / sum(served))
        rate = statistics.median(samples)
        rates.append(rate)
        points.append(
            (
                f"{primaries}",
                f"{rate:,.0f}",
                f"{rate / primaries:,.0f}",
                f"{statistics.median(shares):.0%}",
                f"{rate / rates[0]:.2f}",
            )
        )
    return Growth(
        "Cluster shards",
        f"{SHARD_PROCESSES} forked processes, each appending {calls:,} events, 1 per call, "
        f"in turn to {SHARD_SPLIT} sessions of its own spread evenly over the slots; "
        f"{SETTINGS}; a Redis Cluster of N primaries, no replicas; median of "
        f"{sizes.large_reps} runs; the clients and every primary share the machine's cores",
        (
            "primaries",
            "events/s in all",
            "events/s per primary",
            "busiest primary's share of FCALLs",
            "total vs 1 primary",
        ),
        points,
        f"a cluster of {max(SHARDS)} primaries",
        f"total events/s with {SHARDS[-1]} primaries / with {SHARDS[0]}: "
        f"{rates[-1] / rates[0]:.2f}x",
    )


def scale_results(url: str, sizes: Sizes) -> list[Growth]:
    """Every dimension of the module docstring, in its order."""
    return [
        events_per_session(url, sizes),
        sessions_per_namespace(url, sizes),
        values_per_worker(url, sizes),
        workers_per_server(url, sizes),
        cluster_shards(sizes),
    ]
