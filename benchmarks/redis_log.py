"""Event logs on Redis: ``append`` and ``load`` against raw redis-py doing the same work.

* append, 1 and 100 events per call: ``store.events.append`` against ``EVALSHA`` of the
  same script, ``lua/log_append.lua``, by redis-py on a session of its own, its
  arguments built directly from the events (one ``orjson.dumps`` per event, no checks).
  Both sides start from the same pre-built :class:`SessionEvent` objects; ours validates
  and encodes the batch as its API does.
* load, 10k and 100k events: ``store.events.load`` against ``XRANGE`` of the same stream
  in chunks of 1000 entries, each entry's events decoded into plain dicts (one
  ``orjson.loads`` of its ``events`` field): the fastest raw read of the layout. The
  same for ``store.events.read_records_from(id, 0)``, the documented read that returns
  records (``StoredRecord``: the fields checked as ``load`` checks them, each value of
  ``data`` kept as its JSON text, parsed when the reader takes it).
* peak memory of loading 100k events (tracemalloc) against the size of the plain decoded
  list of dicts, and the peak of streaming the same log with ``iter_events``.
* 4 processes each appending one event per call to its own session, against 1 process.
"""

from __future__ import annotations

import os
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import redis

import sessionstore
from sessionstore import SessionHeader, keys
from sessionstore.redis import library
from sessionstore.redis.logformat import event_digests

from . import workload
from .harness import Result, Samples, Sizes, Timed, compare, compare_rates, parallel, result

AREA = "Redis event log"
NAMESPACE = "bench"
SETTINGS = "Redis, AOF off; durability='none'"


def connect(url: str) -> sessionstore.Store:
    """The store every Redis scenario uses (no fsync check: the server runs without AOF)."""
    return sessionstore.connect(url, namespace=NAMESPACE, durability="none")


class OurLog:
    """One session of ours, appended to in pre-built batches."""

    #: Builds the batches a side appends (``first``, ``calls``, ``size``).
    make_batches = staticmethod(workload.batches)

    def __init__(self, store: sessionstore.Store, session_id: str | None = None) -> None:
        self.log = store.events
        self.id = session_id or f"ours-{uuid.uuid4().hex[:12]}"
        self.next_seq = 0
        self.log.create(SessionHeader(id=self.id, cwd="/home/bench/project"))

    def fill(self, count: int, batch: int = 1000) -> None:
        """Append ``count`` events (untimed set-up)."""
        end = self.next_seq + count
        for first in range(self.next_seq, end, batch):
            self.log.append(self.id, workload.events(first, min(batch, end - first)))
        self.next_seq = end

    def side(self, calls: int, size: int) -> Timed:
        prepared = self.make_batches(self.next_seq, calls, size)
        self.next_seq += calls * size
        append, session_id = self.log.append, self.id

        def run() -> int:
            for batch in prepared:
                append(session_id, batch)
            return calls * size

        return run


class RawLog:
    """The baseline's session: the same meta hash and stream, appended to by ``EVALSHA``
    of ``lua/log_append.lua`` with arguments built directly from the events."""

    make_batches = staticmethod(workload.batches)

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.sha = client.script_load(library.script("log_append").source)
        self.keys = raw_keys()
        header = ["id", "raw", "version", "1", "created_at", str(workload.T0)]
        first = workload.events(0, 1)
        client.evalsha(self.sha, 3, *self.keys, *raw_args(first, header))
        self.next_seq = 1

    def side(self, calls: int, size: int) -> Timed:
        prepared = self.make_batches(self.next_seq, calls, size)
        self.next_seq += calls * size
        evalsha, sha, (meta, stream, digests) = self.client.evalsha, self.sha, self.keys

        def run() -> int:
            for batch in prepared:
                evalsha(sha, 3, meta, stream, digests, *raw_args(batch))
            return calls * size

        return run


def raw_keys() -> tuple[str, str, str]:
    """Meta hash, stream and digest hash of a new session of the baseline's."""
    session_id = f"raw-{uuid.uuid4().hex[:12]}"
    return (*keys.log_keys(NAMESPACE, session_id), keys.log_digest_key(NAMESPACE, session_id))


def raw_args(batch: list[Any], header: list[str] | None = None) -> list[Any]:
    """ARGV of ``log_append.lua`` for ``batch`` (at most 1000 events), serialised with one
    ``orjson.dumps`` per event and no checks."""
    dumps = orjson.dumps
    first, last = batch[0], batch[-1]
    texts = [dumps({"seq": e.seq, "type": e.type, "time": e.time, "data": e.data}) for e in batch]
    pairs = header or []
    return [
        first.seq,
        "1",
        "0",
        f"{first.seq - 1}-18446744073709551615" if first.seq else "0-0",
        len(pairs) // 2 if header else -1,
        *pairs,
        last.time,
        event_digests(texts),
        len(batch),
        b"[" + b",\n".join(texts) + b"]",
        "",  # no owner token: a plain append
    ]


def raw_load(client: redis.Redis, stream: str, chunk: int = 1000) -> list[dict[str, Any]]:
    """The baseline's load: XRANGE in chunks, each entry's events decoded into plain dicts
    (one ``orjson.loads`` per entry)."""
    loads = orjson.loads
    found: list[dict[str, Any]] = []
    start = "-"
    while True:
        entries = client.xrange(stream, start, "+", count=chunk)
        for _, fields in entries:
            found += loads(fields[b"events"])
        if len(entries) < chunk:
            return found
        start = "(" + entries[-1][0].decode()


def append_results(
    url: str,
    sizes: Sizes,
    sides: tuple[type[OurLog], type[RawLog]] = (OurLog, RawLog),
    what: str = "event",
    baseline: str = "raw EVALSHA of log_append.lua",
) -> list[Result]:
    """Appends of 1 and 100 events per call (``what`` names them in the rows), ours
    against the raw script call; the ``sides`` build the batches each appends."""
    our_side, raw_side = sides
    with connect(url) as store:
        client = redis.Redis.from_url(url)
        try:
            rows = []
            for size, calls, target in ((1, sizes.calls, 0.90), (100, sizes.batch_calls, 0.90)):
                ours, raw = our_side(store), raw_side(client)
                samples = compare(
                    lambda ours=ours, calls=calls, size=size: ours.side(calls, size),
                    lambda raw=raw, calls=calls, size=size: raw.side(calls, size),
                    sizes.reps,
                    sizes.blocks,
                )
                rows.append(
                    result(
                        AREA,
                        f"append {size} {what}{'s' if size > 1 else ''} per call",
                        baseline,
                        samples,
                        "events/s",
                        target,
                        SETTINGS,
                    )
                )
            return rows
        finally:
            client.close()


def load_results(url: str, sizes: Sizes) -> list[Result]:
    with connect(url) as store:
        client = redis.Redis.from_url(url)
        try:
            rows = []
            cases = ((sizes.load_small, sizes.reps, 4), (sizes.load_large, sizes.large_reps, 2))
            for count, reps, blocks in cases:
                ours = OurLog(store)
                ours.fill(count)
                stream = keys.log_keys(NAMESPACE, ours.id)[1]
                samples = compare(
                    lambda ours=ours, count=count: load_side(ours, count),
                    lambda stream=stream, count=count: _rawload_side(client, stream, count),
                    reps,
                    blocks,
                    settle=True,
                )
                rows.append(load_result(AREA, count, samples, SETTINGS))
                samples = compare(
                    lambda ours=ours, count=count: records_side(ours, count),
                    lambda stream=stream, count=count: _rawload_side(client, stream, count),
                    reps,
                    blocks,
                    settle=True,
                )
                rows.append(
                    result(
                        AREA,
                        f"read_records_from of {thousands(count)} events (records)",
                        "raw XRANGE chunks + orjson.loads",
                        samples,
                        "events/s",
                        0.90,
                        SETTINGS,
                    )
                )
            rows += memory_results(ours, client, sizes.load_large)
            return rows
        finally:
            client.close()


def load_result(area: str, count: int, samples: Samples, settings: str) -> Result:
    """The row of a load of ``count`` events against the raw chunked ``XRANGE``."""
    return result(
        area,
        f"load {thousands(count)} events",
        "raw XRANGE chunks + orjson.loads",
        samples,
        "events/s",
        0.90,
        settings,
    )


def load_side(ours: OurLog, count: int) -> Timed:
    def run() -> int:
        loaded = ours.log.load(ours.id)
        assert len(loaded.events) == count
        return count

    return run


def records_side(ours: OurLog, count: int) -> Timed:
    """The documented read that returns records: ``read_records_from(id, 0)``, every
    field checked as ``load`` checks it, each value of ``data`` kept as its JSON text."""

    def run() -> int:
        assert len(ours.log.read_records_from(ours.id, 0)) == count
        return count

    return run


def _rawload_side(client: redis.Redis, stream: str, count: int) -> Timed:
    def run() -> int:
        assert len(raw_load(client, stream)) == count
        return count

    return run


def thousands(count: int) -> str:
    return f"{count // 1000}k" if count % 1000 == 0 else str(count)


# Memory ------------------------------------------------------------------------------------


def traced(action: Callable[[], Any]) -> tuple[int, int, Any]:
    """(peak, retained) bytes allocated while running ``action``, and what it returned."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        kept = action()
        current, peak = tracemalloc.get_traced_memory()
        return peak - before, current - before, kept
    finally:
        tracemalloc.stop()


def memory_results(ours: OurLog, client: redis.Redis, count: int) -> list[Result]:
    """Peak memory of ``load`` and of streaming with ``iter_events`` over the ``count``
    events of ``ours``, against the memory the plain decoded events occupy (a list of
    dicts, measured while held)."""
    stream = keys.log_keys(NAMESPACE, ours.id)[1]
    _, plain, _ = traced(lambda: raw_load(client, stream))
    loaded_peak, _, _ = traced(lambda: ours.log.load(ours.id))

    def stream_all() -> None:
        seen = 0
        for _ in ours.log.iter_events(ours.id, batch=1000):
            seen += 1
        assert seen == count

    streamed_peak, _, _ = traced(stream_all)
    label = thousands(count)
    mib = 1024 * 1024
    return [
        Result(
            AREA,
            f"load {label} events: peak memory",
            "size of the decoded list of dicts",
            loaded_peak / mib,
            plain / mib,
            "MiB",
            2.0,
            SETTINGS + "; tracemalloc",
            lower_is_better=True,
        ),
        Result(
            AREA,
            f"iter_events(batch=1000) over {label}: peak memory",
            "size of the decoded list of dicts",
            streamed_peak / mib,
            plain / mib,
            "MiB",
            0.1,
            SETTINGS + "; tracemalloc",
            lower_is_better=True,
        ),
    ]


# Processes ---------------------------------------------------------------------------------


def scaling_results(url: str, sizes: Sizes) -> list[Result]:
    """Total append throughput of 4 processes, each on its own session, against 1."""

    def job(index: int) -> Timed:
        store = connect(url)
        ours = OurLog(store)
        ours.side(1, 1)()  # materialise the session and warm the connection
        return ours.side(sizes.calls * sizes.blocks, 1)

    samples = compare_rates(lambda: parallel(job, 4), lambda: parallel(job, 1), sizes.reps)
    return [
        result(
            AREA,
            "4 processes appending 1 event per call to 4 sessions",
            "the same in 1 process",
            samples,
            "events/s",
            1.5,
            SETTINGS + f"; {os.cpu_count()} cores shared by clients and server",
        )
    ]
