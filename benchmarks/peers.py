"""Against a peer library: openai-agents' ``RedisSession`` (``agents.extensions.memory``).

``RedisSession.add_items`` appends conversation items to a Redis list under ``WATCH`` /
``MULTI`` (key-type checks, then ``HSET``/``HSETNX``/``RPUSH``/``HSET`` in a transaction);
``get_items`` reads the whole list with ``LRANGE`` and ``json.loads`` each item. It is
async only, so it runs on one event loop kept for the whole scenario, with its own
``redis.asyncio`` client on the same server. Its items carry the same payloads as our
events (the event type plus the event data, see :func:`workload.items`).

Ours is the sync API, ``store.events.append`` / ``load``, as in the other Redis scenarios.
"""

from __future__ import annotations

import asyncio
import uuid

import redis.asyncio

import sessionstore

from . import workload
from .harness import Result, Sizes, Timed, compare, result
from .redis_log import SETTINGS, OurLog, connect, load_side, thousands

AREA = "vs openai-agents"
BASELINE = "openai-agents RedisSession"


class PeerSession:
    """One ``RedisSession`` driven from synchronous code through a private event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: redis.asyncio.Redis) -> None:
        from agents.extensions.memory.redis_session import RedisSession

        self.loop = loop
        self.session = RedisSession(f"peer-{uuid.uuid4().hex[:12]}", redis_client=client)
        self.next_item = 0

    def fill(self, count: int, batch: int = 1000) -> None:
        """Add ``count`` items (untimed set-up)."""
        for first in range(0, count, batch):
            items = workload.items(self.next_item + first, min(batch, count - first))
            self.loop.run_until_complete(self.session.add_items(items))
        self.next_item += count

    def add_side(self, calls: int, size: int) -> Timed:
        prepared = [workload.items(self.next_item + call * size, size) for call in range(calls)]
        self.next_item += calls * size
        session = self.session

        async def add_all() -> None:
            for items in prepared:
                await session.add_items(items)

        def run() -> int:
            self.loop.run_until_complete(add_all())
            return calls * size

        return run

    def get_side(self, count: int) -> Timed:
        def run() -> int:
            found = self.loop.run_until_complete(self.session.get_items())
            assert len(found) == count
            return count

        return run


def peer_results(url: str, sizes: Sizes) -> list[Result]:
    loop = asyncio.new_event_loop()
    client = redis.asyncio.Redis.from_url(url)
    try:
        with connect(url) as store:
            return _results(store, loop, client, sizes)
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


def _results(
    store: sessionstore.Store,
    loop: asyncio.AbstractEventLoop,
    client: redis.asyncio.Redis,
    sizes: Sizes,
) -> list[Result]:
    rows = []
    cases = ((1, sizes.peer_calls, 4.0), (100, max(1, sizes.peer_calls // 10), 2.5))
    for size, calls, target in cases:
        ours, peer = OurLog(store), PeerSession(loop, client)
        samples = compare(
            lambda ours=ours, calls=calls, size=size: ours.side(calls, size),
            lambda peer=peer, calls=calls, size=size: peer.add_side(calls, size),
            sizes.reps,
            sizes.blocks,
        )
        rows.append(
            result(
                AREA,
                f"append {size} event{'s' if size > 1 else ''} per call",
                f"{BASELINE}.add_items",
                samples,
                "events/s",
                target,
                SETTINGS,
            )
        )
    count = sizes.load_small
    ours, peer = OurLog(store), PeerSession(loop, client)
    ours.fill(count)
    peer.fill(count)
    samples = compare(lambda: load_side(ours, count), lambda: peer.get_side(count), sizes.reps, 4)
    rows.append(
        result(
            AREA,
            f"load {thousands(count)} events",
            f"{BASELINE}.get_items",
            samples,
            "events/s",
            2.0,
            SETTINGS,
        )
    )
    return rows
