"""Event logs on the local backends: ``append`` against the bare durable write.

1 and 100 events per call, each side with the same durability, in a fresh temporary
directory.

* SQLite (``sqlite:///...``, WAL, ``synchronous=FULL``) against ``sqlite3`` inserting the
  same rows into a table keyed by (session, seq), also WAL and ``synchronous=FULL``, one
  transaction per batch (``BEGIN``, ``executemany``, ``COMMIT``).
* JSONL (``file://...``) against one ``os.write`` and one ``os.fsync`` per batch of the
  same bytes on an ``O_APPEND`` file; after the run the two files are compared byte for
  byte (ours has its header line first).

Both sides start from the same pre-built events and encode ``data`` themselves.

Reading a long JSONL log (``sizes.load_large`` events, balanced turns):

* ``iter_events(batch=1000)`` through a store that has not read the log yet (so it
  validates it once) against one ``load`` of it through another fresh store; the target
  is at least 0.8x the load's rate.
* ``follow`` picking up one new event appended by another store: the time from resuming
  the caught-up follower to the event, on the long log against a 1k-event log; equal
  rates mean a poll does not depend on the length of the log.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

import sessionstore
from sessionstore import SessionEvent

from . import workload
from .harness import Result, Sizes, Timed, compare, compare_rates, result
from .redis_log import NAMESPACE, OurLog, thousands

AREA_SQLITE = "SQLite event log"
AREA_JSONL = "JSONL event log"


def _calls(sizes: Sizes, size: int) -> int:
    return sizes.local_calls if size == 1 else max(1, sizes.local_calls // 5)


class RawSqlite:
    """The baseline's table and connection, with the durability our backend uses."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        assert self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(
            "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT,"
            " time INTEGER, data TEXT, event_id TEXT, PRIMARY KEY (session_id, seq))"
        )
        self.next_seq = 0

    def side(self, calls: int, size: int) -> Timed:
        prepared = workload.batches(self.next_seq, calls, size)
        self.next_seq += calls * size
        conn, dumps = self.conn, orjson.dumps

        def run() -> int:
            for batch in prepared:
                rows = [("raw", e.seq, e.type, e.time, dumps(e.data).decode(), e.id) for e in batch]
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
            return calls * size

        return run


def jsonl_lines(batch: list[SessionEvent]) -> bytes:
    """The bytes our JSONL backend writes for ``batch`` (see ``backends/jsonl.py``)."""
    end = batch[-1].seq
    lines = []
    for e in batch:
        record: dict[str, Any] = {"seq": e.seq, "type": e.type, "time": e.time, "data": e.data}
        if e.id is not None:
            record["id"] = e.id
        record["batch_end"] = end
        lines.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
    return b"".join(lines)


class RawJsonl:
    """The baseline's log: one ``O_APPEND`` file, one write and one fsync per batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.next_seq = 0

    def side(self, calls: int, size: int) -> Timed:
        prepared = workload.batches(self.next_seq, calls, size)
        self.next_seq += calls * size
        fd = self.fd

        def run() -> int:
            for batch in prepared:
                os.write(fd, jsonl_lines(batch))
                os.fsync(fd)
            return calls * size

        return run


def sqlite_results(sizes: Sizes) -> list[Result]:
    settings = "WAL, synchronous=FULL, one transaction per call; " + _filesystem()
    with (
        tempfile.TemporaryDirectory(prefix="sessionstore-bench-") as tmp,
        sessionstore.connect(f"sqlite:///{tmp}/ours.db", namespace=NAMESPACE) as store,
    ):

        def make_raw(size: int) -> RawSqlite:
            return RawSqlite(Path(tmp) / f"raw-{size}.db")

        def done(ours: OurLog, raw: RawSqlite) -> None:
            raw.conn.close()

        return _append_rows(
            AREA_SQLITE,
            "raw sqlite3 INSERT, same durability",
            settings,
            store,
            make_raw,
            done,
            sizes,
        )


def jsonl_results(sizes: Sizes) -> list[Result]:
    settings = "one write + fsync per call on an O_APPEND file; " + _filesystem()
    with (
        tempfile.TemporaryDirectory(prefix="sessionstore-bench-") as tmp,
        sessionstore.connect(Path(tmp, "ours").as_uri(), namespace=NAMESPACE) as store,
    ):

        def make_raw(size: int) -> RawJsonl:
            return RawJsonl(Path(tmp) / f"raw-{size}.jsonl")

        def done(ours: OurLog, raw: RawJsonl) -> None:
            os.close(raw.fd)
            _check_same_bytes(store, ours, raw)

        rows = _append_rows(
            AREA_JSONL,
            "raw os.write + os.fsync, same bytes",
            settings,
            store,
            make_raw,
            done,
            sizes,
        )
        return rows + _jsonl_read_rows(Path(tmp, "ours").as_uri(), sizes)


def _jsonl_read_rows(url: str, sizes: Sizes) -> list[Result]:
    """``iter_events`` against ``load``, and ``follow`` on a long log against a short one."""
    settings = "a fresh store per block (it validates the log once); " + _filesystem()
    count = sizes.load_large
    with sessionstore.connect(url, namespace=NAMESPACE) as store:
        long_log = OurLog(store)
        long_log.fill(count)
        short_log = OurLog(store)
        short_log.fill(1000)

    def fresh() -> sessionstore.Store:
        return sessionstore.connect(url, namespace=NAMESPACE)

    def iter_side() -> Timed:
        events = fresh().events

        def run() -> int:
            return sum(1 for _ in events.iter_events(long_log.id, batch=1000))

        return run

    def load_side() -> Timed:
        events = fresh().events

        def run() -> int:
            return len(events.load(long_log.id).events)

        return run

    samples = compare(iter_side, load_side, sizes.large_reps, 2, settle=True)
    rows = [
        result(
            AREA_JSONL,
            f"iter_events(batch=1000) of {thousands(count)} events",
            f"one load of the {thousands(count)} events",
            samples,
            "events/s",
            0.8,
            settings,
        )
    ]
    follow_samples = compare_rates(
        lambda: _follow_rate(url, long_log), lambda: _follow_rate(url, short_log), sizes.reps
    )
    rows.append(
        result(
            AREA_JSONL,
            f"follow picks up 1 new event, {thousands(count)}-event log",
            "the same on a 1k-event log",
            follow_samples,
            "pickups/s",
            0.5,
            "poll=0.5 s, the event appended by another store before the follower resumes; "
            + _filesystem(),
        )
    )
    return rows


def _follow_rate(url: str, log: OurLog, pickups: int = 20) -> float:
    """New events per second a caught-up ``follow`` of ``log`` picks up: each appended
    (untimed) by another store, then timed from resuming the follower to the event."""
    with (
        sessionstore.connect(url, namespace=NAMESPACE) as reader,
        sessionstore.connect(url, namespace=NAMESPACE) as writer,
    ):
        followed = reader.events.follow(log.id, log.next_seq - 1, poll=0.5)
        next(followed)
        spent = 0.0
        for _ in range(pickups):
            writer.events.append(log.id, workload.events(log.next_seq, 1))
            log.next_seq += 1
            start = time.perf_counter()
            picked = next(followed)
            spent += time.perf_counter() - start
            assert picked.seq == log.next_seq - 1
    return pickups / spent


def _append_rows(
    area: str,
    baseline_name: str,
    settings: str,
    store: sessionstore.Store,
    make_raw: Callable[[int], Any],
    done: Callable[[OurLog, Any], None],
    sizes: Sizes,
) -> list[Result]:
    """Append 1 and 100 events per call, ours against ``make_raw(size)``; ``done`` closes
    (and checks) each pair afterwards."""
    rows = []
    for size in (1, 100):
        ours, raw = OurLog(store), make_raw(size)
        calls = _calls(sizes, size)
        samples = compare(
            lambda ours=ours, calls=calls, size=size: ours.side(calls, size),
            lambda raw=raw, calls=calls, size=size: raw.side(calls, size),
            sizes.reps,
            sizes.blocks,
        )
        done(ours, raw)
        plural = "s" if size > 1 else ""
        scenario = f"append {size} event{plural} per call"
        rows.append(result(area, scenario, baseline_name, samples, "events/s", 0.85, settings))
    return rows


def _check_same_bytes(store: sessionstore.Store, ours: OurLog, raw: RawJsonl) -> None:
    """Both sides appended the same batches: the files must match after our header."""
    path = store.events.locate(ours.id)
    assert path is not None
    mine = Path(path).read_bytes()
    theirs = raw.path.read_bytes()
    assert mine[mine.index(b"\n") + 1 :] == theirs, "the JSONL baseline wrote other bytes"


def _filesystem() -> str:
    """The file system the temporary files live on, as ``mount`` reports it."""
    target = Path(tempfile.gettempdir()).resolve()
    best = ("?", "")
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                _, point, kind, *_ = line.split()
                if str(target).startswith(point) and len(point) >= len(best[1]):
                    best = (kind, point)
    except OSError:
        pass
    return f"{best[0]} at {target}"
