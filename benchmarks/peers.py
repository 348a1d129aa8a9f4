"""Against a peer library: openai-agents' ``RedisSession`` (``agents.extensions.memory``).

``RedisSession.add_items`` appends conversation items to a Redis list under ``WATCH`` /
``MULTI`` (key-type checks, then ``HSET``/``HSETNX``/``RPUSH``/``HSET`` in a transaction);
``get_items`` reads the whole list with ``LRANGE`` and ``json.loads`` each item. It is
async only, so it runs on one event loop kept for the whole scenario, with its own
``redis.asyncio`` client on the same server. Its items carry the same payloads as our
events (the event type plus the event data, see :func:`workload.items`).

Ours is the sync API, ``store.events.append`` / ``load``, as in the other Redis scenarios.

The "openai-agents Session" rows compare the same SDK protocol on both sides: our
``SessionStoreSession`` (``sessionstore.integrations.openai_agents``, on an async store)
against ``RedisSession``, both driven the same way on the same event loop and server:
``add_items`` of 1 and of 100 items per call, and ``get_items`` of a 10k-item session,
once by a new session object each time (it reads the whole log) and once by an object
that has read it before (ours then reads only what was appended since; the peer keeps
nothing, so its figure is the same operation in both rows). Both return new item objects
on every call.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import redis.asyncio

import sessionstore
from sessionstore import aio

from . import workload
from .harness import Result, Sizes, Timed, compare, result
from .redis_log import NAMESPACE, SETTINGS, OurLog, connect, load_side, thousands

AREA = "vs openai-agents"
SESSION_AREA = "openai-agents Session"
BASELINE = "openai-agents RedisSession"


class DrivenSession:
    """One SDK session (``RedisSession`` or ours) driven from synchronous code through a
    private event loop; ``make`` builds a session object on the conversation ``name``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, make: Callable[[str], Any]) -> None:
        self.loop = loop
        self.make = make
        self.name = f"peer-{uuid.uuid4().hex[:12]}"
        self.session = make(self.name)
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

    def get_side(self, count: int, *, new_object: bool = False) -> Timed:
        """``get_items`` of the whole session, by this object or by a new one (built
        outside the clock)."""
        session = self.make(self.name) if new_object else self.session

        def run() -> int:
            found = self.loop.run_until_complete(session.get_items())
            assert len(found) == count
            return count

        return run


def peer_results(url: str, sizes: Sizes) -> list[Result]:
    loop = asyncio.new_event_loop()
    client = redis.asyncio.Redis.from_url(url)
    ours_async = aio.connect(url, NAMESPACE, durability="none")
    try:
        with connect(url) as store:
            rows = _results(store, loop, client, sizes)
        return rows + _session_results(ours_async, loop, client, sizes)
    finally:
        loop.run_until_complete(ours_async.close())
        loop.run_until_complete(client.aclose())
        loop.close()


def _peer(loop: asyncio.AbstractEventLoop, client: redis.asyncio.Redis) -> DrivenSession:
    from agents.extensions.memory.redis_session import RedisSession

    return DrivenSession(loop, lambda name: RedisSession(name, redis_client=client))


def _results(
    store: sessionstore.Store,
    loop: asyncio.AbstractEventLoop,
    client: redis.asyncio.Redis,
    sizes: Sizes,
) -> list[Result]:
    def scenario(size: int) -> str:
        return f"append {size} event{'s' if size > 1 else ''} per call"

    rows = _add_rows(
        AREA, scenario, "events/s", (4.0, 2.5), lambda: OurLog(store).side, loop, client, sizes
    )
    count = sizes.load_small
    ours, peer = OurLog(store), _peer(loop, client)
    ours.fill(count)
    peer.fill(count)
    samples = compare(
        lambda: load_side(ours, count), lambda: peer.get_side(count), sizes.reps, 4, settle=True
    )
    rows.append(
        result(
            AREA,
            f"load {thousands(count)} events",
            f"{BASELINE}.get_items",
            samples,
            "events/s",
            1.2,
            SETTINGS,
        )
    )
    return rows


def _add_rows(
    area: str,
    scenario: Callable[[int], str],
    unit: str,
    targets: tuple[float, float],
    ours: Callable[[], Callable[[int, int], Timed]],
    loop: asyncio.AbstractEventLoop,
    client: redis.asyncio.Redis,
    sizes: Sizes,
) -> list[Result]:
    """The rows of 1 and of 100 items per call against ``RedisSession.add_items``;
    ``ours()`` gives the side (calls, size) -> timed block of a new session of ours."""
    rows = []
    cases = ((1, sizes.peer_calls, targets[0]), (100, max(1, sizes.peer_calls // 10), targets[1]))
    for size, calls, target in cases:
        our_side, peer_side = ours(), _peer(loop, client).add_side
        samples = compare(
            lambda side=our_side, calls=calls, size=size: side(calls, size),
            lambda side=peer_side, calls=calls, size=size: side(calls, size),
            sizes.reps,
            sizes.blocks,
        )
        rows.append(
            result(area, scenario(size), f"{BASELINE}.add_items", samples, unit, target, SETTINGS)
        )
    return rows


def _session_results(
    store: aio.AsyncStore,
    loop: asyncio.AbstractEventLoop,
    client: redis.asyncio.Redis,
    sizes: Sizes,
) -> list[Result]:
    """SessionStoreSession against RedisSession: the same protocol on both sides."""
    from sessionstore.integrations.openai_agents import SessionStoreSession

    def ours() -> DrivenSession:
        return DrivenSession(loop, lambda name: SessionStoreSession(name, store))

    def scenario(size: int) -> str:
        return f"add_items, {size} item{'s' if size > 1 else ''} per call"

    rows = _add_rows(
        SESSION_AREA, scenario, "items/s", (1.0, 1.0), lambda: ours().add_side, loop, client, sizes
    )
    count = sizes.load_small
    mine, peer = ours(), _peer(loop, client)
    mine.fill(count)
    peer.fill(count)
    cases = ((True, "a new session object", 1.2), (False, "the same object again", 1.0))
    for new_object, how, target in cases:
        samples = compare(
            lambda new_object=new_object: mine.get_side(count, new_object=new_object),
            lambda new_object=new_object: peer.get_side(count, new_object=new_object),
            sizes.reps,
            4,
            settle=True,
        )
        rows.append(
            result(
                SESSION_AREA,
                f"get_items of {thousands(count)} items, {how}",
                f"{BASELINE}.get_items",
                samples,
                "items/s",
                target,
                SETTINGS,
            )
        )
    return rows
