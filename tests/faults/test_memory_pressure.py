"""Part 6 of the fault suite: Redis at ``maxmemory`` with ``maxmemory-policy noeviction``.

The test fills a server of its own with junk, under a key it owns, until Redis refuses
writes, then holds it there. Every write that needs memory -- appends (to a log and to a
new one), the closers of ``load``, a writer's flush, ``set_data`` and ``update`` on plain
and history values, sync and async -- must fail cleanly: a :class:`StoreUnavailableError`
(a :class:`SessionStoreError`) whose message says the server is out of memory, with the
redis-py error chained, and nothing partial left (every key of the namespace exactly as
before). Reads keep working. Once ``maxmemory`` is raised, the same store object works
again, and what was refused can simply be retried.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from support.redis_helpers import namespace_snapshot
from support.redis_server import RedisServer

import sessionstore
import sessionstore.aio
from sessionstore import SessionHeader, SessionStoreError, StoreUnavailableError

from . import figures
from .figures import figures_run  # noqa: F401 - used by pytestmark
from .test_writer_killed import (
    T0,
    Workload,
    check_balanced,
    check_closers,
    ends_mid_turn,
    note,
)

KEY = ("BTCUSDT", "memory", "binance", "1m")
CHUNK = 64 * 1024
#: How far below the memory in use ``maxmemory`` is held once full, so that buffers
#: freed after a refused command cannot bring the server back under the limit.
MARGIN = 1024 * 1024

pytestmark = pytest.mark.usefixtures("figures_run")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=True) as own:
        yield own


def fill_to_the_limit(client: redis.Redis, junk: str) -> int:
    """Write junk until Redis refuses for lack of memory; return how many chunks it took.
    Then hold ``maxmemory`` :data:`MARGIN` below what is used."""
    client.config_set("maxmemory-policy", "noeviction")
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + 4 * 1024 * 1024)
    filler = b"j" * CHUNK
    for number in range(1000):
        try:
            client.hset(junk, f"f{number}", filler)
        except redis.exceptions.OutOfMemoryError:
            break
    else:
        raise AssertionError("Redis never refused the junk")
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", max(1, used - MARGIN))
    return number


def check_oom(name: str, error: BaseException | None) -> None:
    assert isinstance(error, StoreUnavailableError), f"{name}: {error!r}"
    assert isinstance(error, SessionStoreError)
    assert "out of memory" in str(error), f"{name}: {error}"
    assert isinstance(error.__cause__, redis.RedisError), f"{name}: {error.__cause__!r}"


def attempt(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - checked by the caller
        return exc
    return None


def test_at_maxmemory_writes_fail_cleanly_leave_nothing_partial_and_work_again(server):
    namespace = f"oom-{uuid.uuid4().hex[:10]}"
    junk = f"junk:{namespace}"  # the test's own key, outside the store's namespace
    rng = random.Random()
    client = redis.Redis(port=server.port)
    store = sessionstore.connect(server.url, namespace, timeout=5)
    try:
        plain = store.session(*KEY)
        history = store.session(*KEY, history=True)
        plain.set_data({"n": 1}, T0)
        plain.update(lambda v: {"n": v["n"] + 1}, T0)
        history.set_data({"n": 1}, T0)
        history.update(lambda v: {"n": v["n"] + 1}, T0 + 1)
        # "done": a balanced log; "open": one that ends mid-turn, so load adds closers.
        done = SessionHeader(id="done", created_at=T0)
        store.events.create(done)
        store.events.append("done", [note(0, "d0")])
        store.events.create(SessionHeader(id="open", created_at=T0))
        work, opened = Workload("oom", rng), []
        while len(opened) < 5 or not ends_mid_turn(opened):
            batch = work.batch(len(opened), rng.randint(1, 5), f"o{len(opened)}")
            store.events.append("open", batch)
            opened += batch
        writer = store.events.writer(done, window=3600)
        chunks = fill_to_the_limit(client, junk)
        before = namespace_snapshot(client, namespace)

        calls: list[tuple[str, Callable[[], Any]]] = [
            ("append", lambda: store.events.append("done", [note(1, "d1")])),
            (
                "append to a new log",
                lambda: (
                    store.events.create(SessionHeader(id="new", created_at=T0)),
                    store.events.append("new", [note(0, "n0")]),
                ),
            ),
            ("load (closers)", lambda: store.events.load("open")),
            ("set_data", lambda: plain.set_data({"n": 100}, T0)),
            ("update", lambda: plain.update(lambda v: {"n": v["n"] + 1}, T0)),
            ("history set_data", lambda: history.set_data({"n": 100}, T0 + 2)),
            ("history update", lambda: history.update(lambda v: {"n": v["n"] + 1}, T0 + 1)),
        ]
        refused = 0
        for name, call in calls:
            check_oom(name, attempt(call))
            assert namespace_snapshot(client, namespace) == before, f"{name} left a trace"
            refused += 1
        writer.emit("note", {"batch": "w1", "batch_size": 1, "index": 0})
        check_oom("writer flush", attempt(writer.flush))
        refused += 1

        async def async_calls() -> int:
            async with sessionstore.aio.connect(server.url, namespace, timeout=5) as astore:
                count = 0
                for name, call in (
                    ("async append", lambda: astore.events.append("done", [note(1, "d1")])),
                    ("async set_data", lambda: astore.session(*KEY).set_data({"n": 9}, T0)),
                    (
                        "async update",
                        lambda: astore.session(*KEY).update(lambda v: {"n": 0}, T0),
                    ),
                ):
                    try:
                        await call()
                    except BaseException as exc:  # noqa: BLE001 - checked
                        check_oom(name, exc)
                    else:
                        pytest.fail(f"{name} succeeded out of memory")
                    count += 1
                return count

        refused += asyncio.run(async_calls())
        assert namespace_snapshot(client, namespace) == before, "something partial was left"
        # Reads need no memory: they keep working, and see nothing of what was refused.
        assert plain.get_data(T0) == {"n": 2}
        assert history.get_data(T0 + 5) == {"n": 2}
        assert store.events.read_from("open", 0) == opened
        assert len(store.events.read_from("done", 0)) == 1
        figures.record(
            "memory_pressure",
            "redis",
            faults=refused,
            inputs=refused,
            refused=refused,
            junk_chunks=chunks,
            acked_events=len(opened) + 1,
            lost=0,
        )

        client.config_set("maxmemory", 0)
        # The same store works again; the refused calls can simply be made again.
        writer.flush()  # the batch refused before is still queued, in order
        writer.close()
        assert store.events.append("done", [note(2, "d2")]) == 3
        # "new" is still pending in this store (create writes nothing): just append.
        assert store.events.append("new", [note(0, "n0")]) == 1
        loaded = store.events.load("open").events
        check_closers(opened, loaded)
        check_balanced(loaded)
        plain.set_data({"n": 100}, T0)
        assert plain.update(lambda v: {"n": v["n"] + 1}, T0) == {"n": 101}
        history.set_data({"n": 100}, T0 + 2)
        assert history.update(lambda v: {"n": v["n"] + 1}, T0 + 1) == {"n": 3}
        # The version at T0 + 2 was dropped by the update at T0 + 1 (history rule).
        assert history.get_data(T0 + 2) == {"n": 3}
        assert [e.data["batch"] for e in store.events.read_from("done", 0)] == ["d0", "w1", "d2"]
    finally:
        client.config_set("maxmemory", 0)
        client.delete(junk)
        client.close()
        store.close()
