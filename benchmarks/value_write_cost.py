"""``python -m benchmarks.value_write_cost``: what exactly once costs the server per value write.

Server time only, as ``INFO commandstats`` counts it (``usec_per_call``: the time a
command ran on the server, without the network or the client), on a ``redis-server``
of its own. Each case is sent ``--calls`` times in pipelines and measured again in
``--rounds`` rounds, the cases taking turns, since a shared machine slows whatever runs
when it is busy; the minimum and the median over the rounds are printed, and the
minimum against a plain ``HSET``:

* ``HSET`` of ``v`` and ``w``: what a write costs without any guarantee;
* ``FCALL`` of a function that returns at once, and of one that runs that ``HSET``: the
  floor of any write done by a function (the call, its arguments, one ``redis.call``);
* ``set_data`` as sent: ``value_swap.lua`` taking its index entry in the same call (a
  single server), and as a cluster sends it, ``index_add.lua`` then ``value_swap.lua``
  (the figure is the time of both, per write);
* ``value_swap.lua``: a write of one hot value by one writer slot, a compare-and-set
  that succeeds (``update``), a resend recognised (nothing written);
  ``history_set.lua``: a write of a history; ``value_forget.lua``: a delete;

then the size of the value's ``seq`` hash after every write of the run (one record per
writer slot, however many writes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.servers import RedisServer  # noqa: E402
from sessionstore import keys  # noqa: E402
from sessionstore.contracts import Stored  # noqa: E402
from sessionstore.keys import ValueKey  # noqa: E402
from sessionstore.redis import index, library  # noqa: E402
from sessionstore.redis import valueformat as layout  # noqa: E402

#: A small msgpack map, as ``set_data({"signal": "buy", "score": 0.8})`` stores it.
PAYLOAD = b"\x82\xa6signal\xa3buy\xa5score\xcb?\xe9\x99\x99\x99\x99\x99\x9a"
WINDOW_MS = 63_000
KEY = ValueKey("bench", "BTCUSDT", "cost", "binance", "1h", "backtest")
FLOOR = """#!lua name=bench_floor
redis.register_function('bench_nothing', function(keys, args) return 1 end)
redis.register_function('bench_hset', function(keys, args)
  return redis.call('HSET', keys[1], 'v', args[1], 'w', args[2])
end)
"""

Queue = Callable[[Any, int], None]


def cases(numbers: list[int]) -> dict[str, tuple[str, Queue]]:
    """Each case: the command whose ``usec_per_call`` it reads, and how call ``i`` is
    queued on a pipeline. ``numbers`` counts the calls of the one writer slot."""
    plain, history, forget = (
        layout.plain_keys(KEY),
        layout.history_set_keys(KEY),
        layout.forget_keys(KEY),
    )
    swap, history_set, value_forget = (
        library.script(name).function for name in ("value_swap", "history_set", "value_forget")
    )

    def mark() -> layout.Mark:
        numbers[0] += 1
        return ("bench-slot", numbers[0])

    def write(pipe: Any, i: int) -> None:
        args = layout.swap_args(layout.ANY, PAYLOAD, i, mark(), WINDOW_MS)
        pipe.execute_command("FCALL", swap, 2, *plain, *args)

    entry = index.value_entry(KEY, PAYLOAD, history=False)
    assert entry is not None
    index_add = library.script("index_add").function

    def set_data(pipe: Any, i: int) -> None:
        args = layout.swap_args(layout.ANY, PAYLOAD, i, mark(), WINDOW_MS)
        pipe.execute_command("FCALL", swap, 3, *plain, *entry.keys, *args, *entry.args)

    def set_data_apart(pipe: Any, i: int) -> None:
        pipe.execute_command("FCALL", index_add, 1, *entry.keys, *entry.args)
        write(pipe, i)

    def compare_and_set(pipe: Any, i: int) -> None:
        # expects what the previous call wrote: every call succeeds
        expected = Stored(PAYLOAD, 10**9 + i - 1)
        args = layout.swap_args(expected, PAYLOAD, 10**9 + i, mark(), WINDOW_MS)
        pipe.execute_command("FCALL", swap, 2, *plain, *args)

    def resend(pipe: Any, i: int) -> None:
        args = layout.swap_args(layout.ANY, PAYLOAD, i, ("bench-slot", 1), WINDOW_MS)
        pipe.execute_command("FCALL", swap, 2, *plain, *args)

    def version(pipe: Any, i: int) -> None:
        args = layout.history_set_args(PAYLOAD, i, 100, None, False, mark(), WINDOW_MS)
        pipe.execute_command("FCALL", history_set, 3, *history, *args)

    def delete(pipe: Any, i: int) -> None:
        args = layout.forget_args(mark(), WINDOW_MS)
        pipe.execute_command("FCALL", value_forget, 4, *forget, *args)

    return {
        "HSET v w": ("hset", lambda pipe, i: pipe.hset("plain", mapping={"v": PAYLOAD, "w": i})),
        "FCALL, returns at once": ("fcall", lambda pipe, i: pipe.fcall("bench_nothing", 0)),
        "FCALL, one HSET v w": (
            "fcall",
            lambda pipe, i: pipe.fcall("bench_hset", 1, "floor", PAYLOAD, i),
        ),
        "set_data, one call": ("fcall", set_data),
        "set_data, index_add.lua apart": ("fcall", set_data_apart),
        "value_swap.lua, write": ("fcall", write),
        "value_swap.lua, compare-and-set": ("fcall", compare_and_set),
        "value_swap.lua, resend": ("fcall", resend),
        "history_set.lua, write": ("fcall", version),
        "value_forget.lua, delete": ("fcall", delete),
    }


def measure(client: redis.Redis, rounds: int, calls: int) -> dict[str, list[float]]:
    """The server time of every case per call queued (``usec`` over the calls queued: a
    case queuing two commands a call counts both), one figure a round."""
    numbers = [0]
    found: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, (command, queue) in cases(numbers).items():
            if name.startswith("value_swap.lua, compare"):
                client.hset(keys.value_key(KEY), mapping={"v": PAYLOAD, "w": 10**9 - 1})
            client.config_resetstat()
            pipe = client.pipeline(transaction=False)
            for i in range(calls):
                queue(pipe, i)
            pipe.execute()
            stats = client.info("commandstats")[f"cmdstat_{command}"]
            found.setdefault(name, []).append(float(stats["usec"]) / calls)
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=1000)
    options = parser.parse_args(argv)
    with RedisServer() as server:
        client = redis.Redis(port=server.port)
        library.install(client)
        client.function_load(FLOOR)
        found = measure(client, options.rounds, options.calls)
        base = min(found["HSET v w"])
        print(f"{'case':34} {'min us':>7} {'median us':>10} {'min / HSET':>11}")
        for name, figures in found.items():
            low = min(figures)
            print(f"{name:34} {low:7.2f} {statistics.median(figures):10.2f} {low / base:10.1f}x")
        seq = keys.seq_key(KEY)
        writes = options.rounds * options.calls * 4
        print(
            f"seq hash after {writes:,} writes of one slot: {client.hlen(seq)} field(s), "
            f"{client.memory_usage(seq)} bytes"
        )
        client.close()


if __name__ == "__main__":
    main()
