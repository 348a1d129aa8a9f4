"""``python -m benchmarks.layouts``: the Redis stream layouts an event log could use,
measured raw (redis-py and orjson only, no library code), so that the layout is chosen
on figures: per-field entries (the first layout: ``seq type time data`` per event), one
JSON field per event, and one entry per appended batch holding the batch as one JSON
array (the layout in use). For each: append of 1 and of 100 events per ``EVALSHA`` of a
minimal script (``XADD`` and ``HSET next_seq``, no checks), and the read of 10k events
(appended 1000 at a time, and 1 at a time) decoded into dicts."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import redis

from . import workload

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.servers import RedisServer  # noqa: E402

#: ARGV: first seq, then the layout's values; each script writes like log_append.lua.
SCRIPTS = {
    "per-field entries": """
local n = (#ARGV - 1) / 4
for i = 0, n - 1 do
  local at = 2 + 4 * i
  redis.call('XADD', KEYS[2], ARGV[at] .. '-1', 'seq', ARGV[at], 'type', ARGV[at + 1],
    'time', ARGV[at + 2], 'data', ARGV[at + 3])
end
redis.call('HSET', KEYS[1], 'next_seq', tonumber(ARGV[1]) + n)
""",
    "one JSON field per event": """
local n = #ARGV - 1
for i = 0, n - 1 do
  redis.call('XADD', KEYS[2], (tonumber(ARGV[1]) + i) .. '-1', 'event', ARGV[2 + i])
end
redis.call('HSET', KEYS[1], 'next_seq', tonumber(ARGV[1]) + n)
""",
    "one entry per batch": """
local n = tonumber(ARGV[2])
redis.call('XADD', KEYS[2], (tonumber(ARGV[1]) + n - 1) .. '-' .. n, 'events', ARGV[3])
redis.call('HSET', KEYS[1], 'next_seq', tonumber(ARGV[1]) + n)
""",
}


def _args(layout: str, batch: list[Any]) -> list[Any]:
    dumps = orjson.dumps
    records = [{"seq": e.seq, "type": e.type, "time": e.time, "data": e.data} for e in batch]
    if layout == "per-field entries":
        flat: list[Any] = [batch[0].seq]
        for e in batch:
            flat += [e.seq, e.type, e.time, dumps(e.data)]
        return flat
    if layout == "one JSON field per event":
        return [batch[0].seq, *(dumps(r) for r in records)]
    return [batch[0].seq, len(batch), b"[" + b",\n".join(dumps(r) for r in records) + b"]"]


def _read(client: redis.Redis, layout: str, stream: str) -> list[dict[str, Any]]:
    loads = orjson.loads
    found: list[dict[str, Any]] = []
    start = "-"
    while True:
        entries = client.xrange(stream, start, "+", count=1000)
        for _, fields in entries:
            if layout == "per-field entries":
                found.append(
                    {
                        "seq": int(fields[b"seq"]),
                        "type": fields[b"type"].decode(),
                        "time": int(fields[b"time"]),
                        "data": loads(fields[b"data"]),
                    }
                )
            elif layout == "one JSON field per event":
                found.append(loads(fields[b"event"]))
            else:
                found += loads(fields[b"events"])
        if len(entries) < 1000:
            return found
        start = "(" + entries[-1][0].decode()


def _best(action: Callable[[], int], reps: int = 5) -> float:
    """Operations per second: the best of ``reps`` runs (the machine is shared)."""
    rates = []
    for _ in range(reps):
        start = time.perf_counter()
        count = action()
        rates.append(count / (time.perf_counter() - start))
    return max(rates) if rates else statistics.mean(rates)


def _append_rate(
    client: redis.Redis, sha: str, layout: str, names: tuple[str, str], size: int
) -> float:
    calls = 300 if size == 1 else 30
    done = {"next": 0}

    def append() -> int:
        batches = workload.batches(done["next"], calls, size)
        done["next"] += calls * size
        for batch in batches:
            client.evalsha(sha, 2, *names, *_args(layout, batch))
        return calls * size

    return _best(append)


def _read_rate(
    client: redis.Redis, sha: str, layout: str, names: tuple[str, str], size: int
) -> float:
    for batch in workload.batches(0, 10_000 // size, size):
        client.evalsha(sha, 2, *names, *_args(layout, batch))
    return _best(lambda: len(_read(client, layout, names[1])))


def measure(url: str) -> list[tuple[str, list[float]]]:
    """(layout, [append 1, append 100, read 10k in 1000-event appends, read 10k appended
    1 at a time]), events per second each."""
    client = redis.Redis.from_url(url)
    rows = []
    for number, (layout, script) in enumerate(SCRIPTS.items()):
        sha = client.script_load(script)
        figures = [
            _append_rate(client, sha, layout, (f"l{number}:{{a{n}}}:m", f"l{number}:{{a{n}}}:e"), n)
            for n in (1, 100)
        ]
        figures += [
            _read_rate(client, sha, layout, (f"l{number}:{{r{n}}}:m", f"l{number}:{{r{n}}}:e"), n)
            for n in (1000, 1)
        ]
        rows.append((layout, figures))
    client.close()
    return rows


def main() -> None:
    with RedisServer() as server:
        rows = measure(server.url)
    print(
        "| Layout | append 1 event | append 100 events | load 10k (appended 1000 at a time)"
        " | load 10k (appended 1 at a time) |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for layout, figures in rows:
        print(f"| {layout} | " + " | ".join(f"{x:,.0f}" for x in figures) + " |")


if __name__ == "__main__":
    main()
