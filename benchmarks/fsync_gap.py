"""``python -m benchmarks.fsync_gap``: how long a durable SQLite commit takes on this
disk after the process has worked for a while since the previous one.

A durable commit (WAL, ``synchronous=FULL``) waits for ``fdatasync`` of the write-ahead
log. On this machine that wait depends on what came before it: a commit made right after
the previous one finishes in tens of microseconds, one made after even 50 us of work in
between takes several times as long (the virtual disk's flush is slower when it is not
kept busy). A saver that does more work between its commits so pays more for each
commit, not only for the work: that is most of what separates ``SessionStoreSaver`` on
SQLite from ``SqliteSaver`` in the LangGraph rows (``SqliteSaver`` does almost nothing
between its two commits of a step).

For each gap (us of CPU work between commits, spun in Python) the median commit time of
``--commits`` one-row commits is printed, the gaps taking turns over ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

GAPS_US = (0, 20, 50, 100, 200, 500)
ROW = "x" * 1400


def spin(us: float) -> None:
    """Keep the CPU busy for ``us`` microseconds."""
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def commits(conn: sqlite3.Connection, gap_us: float, count: int, first: int) -> list[float]:
    """The time (us) of each of ``count`` durable commits of one row, each after
    ``gap_us`` of work."""
    taken = []
    for i in range(first, first + count):
        spin(gap_us)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?, ?)", (i, ROW))
        began = time.perf_counter()
        conn.execute("COMMIT")
        taken.append((time.perf_counter() - began) * 1e6)
    return taken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fsync_gap")
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        conn = sqlite3.connect(Path(folder) / "gap.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, data TEXT)")
        taken: dict[float, list[float]] = {gap: [] for gap in GAPS_US}
        first = 0
        for _ in range(args.rounds):
            for gap in GAPS_US:
                taken[gap] += commits(conn, gap, args.commits, first)
                first += args.commits
        conn.close()
    print("work between commits (us)  median commit (us)  p90 commit (us)")
    for gap, found in taken.items():
        p90 = statistics.quantiles(found, n=10)[-1]
        print(f"{gap:>26}  {statistics.median(found):>18.0f}  {p90:>15.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
