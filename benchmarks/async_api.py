"""The async API on Redis: ``sessionstore.aio`` against ``redis.asyncio`` doing the same
work, on one event loop kept for the whole scenario (each timed block is one coroutine
making all its calls, run to completion), with the targets of the sync rows.

* get_data / set_data: ``AsyncSession.get_data`` / ``set_data`` against ``HMGET key v w``
  + ``msgpack.unpackb`` / ``HSET key v <msgpack> w <when>`` on a ``redis.asyncio`` client.
* append, 1 and 100 events per call: ``AsyncEventLog.append`` against ``EVALSHA`` of
  ``lua/log_append.lua`` with the arguments the sync raw side builds.
* load, 10k events: ``AsyncEventLog.load`` against ``XRANGE`` of the same stream in
  chunks of 1000 entries, each entry's events decoded into plain dicts.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis.asyncio

from sessionstore import SessionHeader, aio, keys
from sessionstore.redis import library

from . import workload
from .harness import Result, Sizes, Timed, compare, result
from .redis_log import NAMESPACE, load_result, raw_args, raw_keys
from .values import WHEN, _pack, _raw_key, _unpack

AREA = "Async API (Redis)"
SETTINGS = "redis.asyncio, Redis, AOF off; durability='none'"


class Loop:
    """One event loop, driving each timed block to completion from synchronous code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, work: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(work)

    def side(self, calls: int, call: Callable[[int], Awaitable[Any]], units: int = 1) -> Timed:
        """A timed block making ``call(i)`` for ``i`` in ``range(calls)``, in order."""

        async def block() -> None:
            for i in range(calls):
                await call(i)

        def run() -> int:
            self.run(block())
            return calls * units

        return run


async def raw_get(client: redis.asyncio.Redis, key: str, when: int) -> Any:
    payload, stored_when = await client.hmget(key, ("v", "w"))
    if payload is None or int(stored_when) > when:
        return None
    return _unpack(payload)


async def raw_load(client: redis.asyncio.Redis, stream: str, chunk: int = 1000) -> list[Any]:
    """The sync raw load (``redis_log.raw_load``) on ``redis.asyncio``."""
    found: list[Any] = []
    start = "-"
    while True:
        entries = await client.xrange(stream, start, "+", count=chunk)
        for _, fields in entries:
            found += orjson.loads(fields[b"events"])
        if len(entries) < chunk:
            return found
        start = "(" + entries[-1][0].decode()


class RawAsyncLog:
    """The baseline's session on ``redis.asyncio``: ``EVALSHA`` of ``log_append.lua``."""

    def __init__(self, loop: Loop, client: redis.asyncio.Redis) -> None:
        self.loop, self.client = loop, client
        self.sha = loop.run(client.script_load(library.script("log_append").source))
        self.keys = raw_keys()
        header = ["id", "raw", "version", "1", "created_at", str(workload.T0)]
        loop.run(client.evalsha(self.sha, 3, *self.keys, *raw_args(workload.events(0, 1), header)))
        self.next_seq = 1

    def side(self, calls: int, size: int) -> Timed:
        prepared = workload.batches(self.next_seq, calls, size)
        self.next_seq += calls * size
        meta, stream, digests = self.keys

        def call(i: int) -> Awaitable[Any]:
            return self.client.evalsha(self.sha, 3, meta, stream, digests, *raw_args(prepared[i]))

        return self.loop.side(calls, call, size)


class OurAsyncLog:
    """One session of ours on the async API, appended to in pre-built batches."""

    def __init__(self, loop: Loop, store: aio.AsyncStore) -> None:
        self.loop, self.log = loop, store.events
        self.id = f"ours-{uuid.uuid4().hex[:12]}"
        loop.run(self.log.create(SessionHeader(id=self.id, cwd="/home/bench/project")))
        self.next_seq = 0

    def fill(self, count: int, batch: int = 1000) -> None:
        for first in range(0, count, batch):
            self.loop.run(
                self.log.append(self.id, workload.events(first, min(batch, count - first)))
            )
        self.next_seq = count

    def side(self, calls: int, size: int) -> Timed:
        prepared = workload.batches(self.next_seq, calls, size)
        self.next_seq += calls * size

        def call(i: int) -> Awaitable[Any]:
            return self.log.append(self.id, prepared[i])

        return self.loop.side(calls, call, size)


def async_results(url: str, sizes: Sizes) -> list[Result]:
    loop = Loop()
    client = redis.asyncio.Redis.from_url(url)
    store = aio.connect(url, NAMESPACE, durability="none")
    try:
        return _value_rows(loop, store, client, sizes) + _log_rows(loop, store, client, sizes)
    finally:
        loop.run(store.close())
        loop.run(client.aclose())
        loop.loop.close()


def _value_rows(
    loop: Loop, store: aio.AsyncStore, client: redis.asyncio.Redis, sizes: Sizes
) -> list[Result]:
    value, calls = workload.value(), sizes.calls
    session = store.session("BTCUSDT", strategy="bench-async", exchange="binance", frame="1h")
    key = _raw_key()
    loop.run(session.set_data(value, WHEN))
    loop.run(client.hset(key, mapping={"v": _pack(value), "w": WHEN}))
    assert loop.run(session.get_data(WHEN)) == loop.run(raw_get(client, key, WHEN)) == value
    get_samples = compare(
        lambda: loop.side(calls, lambda i: session.get_data(WHEN)),
        lambda: loop.side(calls, lambda i: raw_get(client, key, WHEN)),
        sizes.reps,
        sizes.blocks,
    )
    set_samples = compare(
        lambda: loop.side(calls, lambda i: session.set_data(value, WHEN + i)),
        lambda: loop.side(
            calls, lambda i: client.hset(key, mapping={"v": _pack(value), "w": WHEN + i})
        ),
        sizes.reps,
        sizes.blocks,
    )
    return [
        result(AREA, "get_data", "raw HMGET + msgpack", get_samples, "ops/s", 0.90, SETTINGS),
        result(AREA, "set_data", "raw HSET of msgpack", set_samples, "ops/s", 0.90, SETTINGS),
    ]


def _log_rows(
    loop: Loop, store: aio.AsyncStore, client: redis.asyncio.Redis, sizes: Sizes
) -> list[Result]:
    rows = []
    for size, calls in ((1, sizes.calls), (100, sizes.batch_calls)):
        ours, raw = OurAsyncLog(loop, store), RawAsyncLog(loop, client)
        samples = compare(
            lambda ours=ours, calls=calls, size=size: ours.side(calls, size),
            lambda raw=raw, calls=calls, size=size: raw.side(calls, size),
            sizes.reps,
            sizes.blocks,
        )
        plural = "s" if size > 1 else ""
        rows.append(
            result(
                AREA,
                f"append {size} event{plural} per call",
                "raw EVALSHA of log_append.lua",
                samples,
                "events/s",
                0.90,
                SETTINGS,
            )
        )
    count = sizes.load_small
    mine = OurAsyncLog(loop, store)
    mine.fill(count)
    stream = keys.log_keys(NAMESPACE, mine.id)[1]

    async def ours_load(i: int) -> None:
        assert len((await mine.log.load(mine.id)).events) == count

    async def raw_load_once(i: int) -> None:
        assert len(await raw_load(client, stream)) == count

    samples = compare(
        lambda: loop.side(1, ours_load, count),
        lambda: loop.side(1, raw_load_once, count),
        sizes.reps,
        4,
        settle=True,
    )
    rows.append(load_result(AREA, count, samples, SETTINGS))
    return rows
