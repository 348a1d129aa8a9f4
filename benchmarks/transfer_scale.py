"""``python -m benchmarks.transfer_scale``: a namespace copy's time and memory as the
namespace grows.

For each ``--events`` count, a store (``--from sqlite`` or ``files``) is seeded with one
namespace of ``--sessions`` sessions sharing those events (``{"n": i, "text": ...}``
data, about 80 bytes each) and 100 values; then a fresh process copies it to a SQLite
database (``--to sqlite``) or to a redis-server started here without persistence
(``--to redis``, ``?durability=none``) and reports its wall time, events per second and
peak resident memory (``ru_maxrss``). A copy streams events a page (1,000) at a time,
so the peak does not grow with the events, only with the number of sessions and values,
whose listings it holds (the file store validates a log it has not read yet a chunk at
a time, so from files too).

Example: ``python -m benchmarks.transfer_scale --events 100000 1000000 --from sqlite``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sessionstore
from sessionstore import SessionEvent, SessionHeader

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAMESPACE = "scale"
BATCH = 1000


def seed(url: str, events: int, sessions: int) -> None:
    per = events // sessions
    with sessionstore.connect(url, NAMESPACE) as store:
        for s in range(sessions):
            sid = f"s-{s:05}"
            store.events.create(SessionHeader(id=sid, created_at=s))
            for start in range(0, per, BATCH):
                store.events.append(
                    sid,
                    [
                        SessionEvent(seq=i, type="note", time=i, data={"n": i, "text": "x" * 40})
                        for i in range(start, min(start + BATCH, per))
                    ],
                )
        for v in range(100):
            store.session(f"SYM{v}", "s", "e", "1h").set_data({"v": v}, 0)


def _copy(source: str, target: str, out: Any) -> None:
    started = time.perf_counter()
    report = sessionstore.copy(source, target, NAMESPACE)
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.put((report.counts.events, report.ok, seconds, peak_kib))


def measure(
    events: int, sessions: int, origin: str, to: str, folder: Path
) -> tuple[int, bool, float, int]:
    if origin == "files":
        source = (folder / f"files-{events}").as_uri()
    else:
        source = f"sqlite:///{folder / f'source-{events}.db'}"
    seed(source, events, sessions)
    if to == "sqlite":
        target = f"sqlite:///{folder / f'copy-{events}.db'}"
        return _in_process(source, target)
    from benchmarks.servers import RedisServer

    with RedisServer() as server:
        return _in_process(source, server.url + "?durability=none")


def _in_process(source: str, target: str) -> tuple[int, bool, float, int]:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    worker = context.Process(target=_copy, args=(source, target, out))
    worker.start()
    result = out.get()
    worker.join()
    return result  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--from", dest="origin", choices=("sqlite", "files"), default="sqlite")
    parser.add_argument("--to", choices=("sqlite", "redis"), default="redis")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for events in args.events:
            copied, ok, seconds, peak_kib = measure(
                events, args.sessions, args.origin, args.to, Path(folder)
            )
            print(
                f"{events:>9} events, {args.sessions} sessions, {args.origin} -> {args.to}: "
                f"copied {copied} "
                f"({'ok' if ok else 'PROBLEMS'}) in {seconds:.1f} s, "
                f"{copied / seconds:,.0f} events/s, peak RSS {peak_kib / 1024:.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
