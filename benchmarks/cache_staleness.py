"""``python -m benchmarks.cache_staleness``: how far behind the server ``?cache=yes`` reads are.

A writer process (its own store, no cache) writes 1, 2, 3, ... to one plain value, one
write every ``--gap`` ms, and notes when each write was acknowledged
(``time.monotonic()``, the same clock in every process on Linux). Meanwhile this process
reads the value in a loop through a store opened with ``?cache=yes`` and notes when each
read started and what it returned. A read that returned ``n`` is behind by
``start - acknowledged[n + 1]`` when write ``n + 1`` was acknowledged before it started,
else by nothing. Printed per case: the reads, the share answered from memory (server
``HMGET`` calls against reads), and the largest and the 99.9th percentile lag, against
:data:`sessionstore.redis.tracking.BOUND`.

Cases: ``tracked`` (the default user, client tracking), ``stalled`` (the same, with the
listening connection's path stalled by a proxy for the whole run: invalidations never
come, only the heartbeat bounds the reads) and ``timed`` (the least-privilege user of
``sessionstore acl``, refused tracking).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

import redis

import sessionstore
from sessionstore.redis.acl import setuser_args
from sessionstore.redis.tracking import BOUND

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.servers import RedisServer, SubscriberStall  # noqa: E402

KEY = ("BTCUSDT", "staleness", "binance", "1m")
WHEN = 1_700_000_000_000
NAMESPACE = "staleness"
PASSWORD = "staleness-pw"


def _write(url: str, seconds: float, gap: float, out: Any) -> None:
    acknowledged: dict[int, float] = {}
    with sessionstore.connect(url, NAMESPACE) as store:
        value = store.session(*KEY)
        end = time.monotonic() + seconds
        n = 1
        while time.monotonic() < end:
            value.set_data(n, WHEN)
            acknowledged[n] = time.monotonic()
            n += 1
            time.sleep(gap)
    out.put(acknowledged)


def _hmget_calls(port: int) -> int:
    client = redis.Redis(port=port)
    try:
        return int(client.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))
    finally:
        client.close()


def measure(read_url: str, write_url: str, port: int, seconds: float, gap: float) -> str:
    with sessionstore.connect(read_url, NAMESPACE) as store:
        value = store.session(*KEY)
        value.set_data(0, WHEN)
        value.get_data(WHEN)
        queue: Any = multiprocessing.get_context("spawn").Queue()
        writer = multiprocessing.get_context("spawn").Process(
            target=_write, args=(write_url, seconds, gap / 1000, queue)
        )
        reads: list[tuple[float, int]] = []
        before = _hmget_calls(port)
        writer.start()
        while writer.is_alive() and queue.empty():
            reads.append((time.monotonic(), value.get_data(WHEN)))
        acknowledged = queue.get(timeout=60)
        writer.join(60)
        calls = _hmget_calls(port) - before
    lags = sorted(
        max(0.0, started - acknowledged.get(found + 1, started)) for started, found in reads
    )
    p999 = lags[int(len(lags) * 0.999)] if lags else 0.0
    hits = 1 - calls / len(reads) if reads else 0.0
    return (
        f"{len(reads):>8} reads  {hits:6.1%} from memory  largest lag {lags[-1] * 1000:7.2f} ms"
        f"  99.9th {p999 * 1000:7.2f} ms  (bound {BOUND * 1000:g} ms, {len(acknowledged)} writes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--gap", type=float, default=1.0, help="ms between two writes")
    args = parser.parse_args()
    with RedisServer() as server:
        admin = redis.Redis(port=server.port)
        admin.execute_command(*setuser_args("tenant", PASSWORD, NAMESPACE))
        admin.close()
        tenant = f"redis://tenant:{PASSWORD}@127.0.0.1:{server.port}/0?durability=none"
        print("tracked", measure(server.url + "?cache=yes", server.url, server.port,
                                 args.seconds, args.gap), flush=True)  # fmt: skip
        with SubscriberStall(server.port) as proxy:
            print("stalled", measure(proxy.url + "?cache=yes", server.url, server.port,
                                     args.seconds, args.gap), flush=True)  # fmt: skip
        print("timed  ", measure(tenant + "&cache=yes", tenant, server.port,
                                 args.seconds, args.gap), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
