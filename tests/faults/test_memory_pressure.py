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
import os
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
from sessionstore.keys import (
    ValueKey,
    compute_lease_key,
    history_keys,
    index_keys,
    log_digest_key,
    log_epoch_key,
    log_keys,
    log_lease_key,
)
from sessionstore.models import FORMAT_VERSION
from sessionstore.redis import valueformat as layout
from sessionstore.redis.acl import setuser_args
from sessionstore.redis.library import FREEING, READ_ONLY, install, library, script, scripts
from sessionstore.redis.logformat import event_digests

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


# A tenant at maxmemory ------------------------------------------------------------------

#: ``maxmemory`` of the tenant test's server, and what one call of the loop may bring: a
#: call accepted just below the limit stores its arguments once past it (as any write
#: command does), and the server holds a command's arguments while it reads them.
MAXMEMORY = 32 * 1024 * 1024
BIG = 1024 * 1024
SLACK = 4 * BIG
#: The longest index entry a function stores (lua/_index.lua).
INDEX_MEMBER_BYTES = 256 * 1024
#: Rounds of the tenant's loop (every function, once each); more with SESSIONSTORE_SOAK.
ROUNDS = 200 if os.environ.get("SESSIONSTORE_SOAK") else 12
#: The longest token a function stores (lua/_limits.lua).
TOKEN = "t" * 64


def _tenant_calls(namespace: str, round_: int) -> list[tuple[str, list[Any], list[Any]]]:
    """(function, keys, args) of every function of the library, with the largest
    arguments each takes: 64-byte tokens and writer slots, values, members and event
    texts of :data:`BIG` bytes; a new value and session each round. The functions that
    remove (flagged ``allow-oom``) are sent for a value and a session never written, so
    the data of the writes that were accepted stays."""
    vkey = ValueKey(namespace, f"S{round_}", "s", "e", "1h", "backtest")
    ghost = ValueKey(namespace, f"G{round_}", "s", "e", "1h", "backtest")
    gone = [*log_keys(namespace, f"g{round_}"), log_digest_key(namespace, f"g{round_}")]
    meta, stream = log_keys(namespace, f"s{round_}")
    digests = log_digest_key(namespace, f"s{round_}")
    lease = [log_lease_key(namespace, f"s{round_}"), log_epoch_key(namespace, f"s{round_}")]
    at, values = history_keys(vkey)
    index = index_keys(namespace)[1]
    member = "m" * INDEX_MEMBER_BYTES
    marks = [(TOKEN, n * 10**6 + round_) for n in range(1, 5)]
    event = b'{"seq":0,"type":"note","time":1,"data":"' + b"x" * BIG + b'"}'
    header = ["1", "id", f"s{round_}"]
    append = [
        "0",
        str(FORMAT_VERSION),
        "0",
        "0-0",
        *header,
        "1",
        event_digests([event]),
        "1",
        b"[" + event + b"]",
        "",
    ]
    return [
        ("version", [], []),
        ("index_add", [index], [str(T0), str(T0), member]),
        ("value_swap", layout.plain_keys(vkey),
         layout.swap_args(layout.ANY, b"v" * BIG, T0, marks[0], 60_000)),
        ("history_set", layout.history_set_keys(vkey),
         layout.history_set_args(b"h" * BIG, T0, 3, None, False, marks[1], 60_000)),
        ("compute_lease", [compute_lease_key(vkey, T0 + 1)], ["take", TOKEN, "60000"]),
        ("compute_put", layout.compute_put_keys(vkey, T0 + 1),
         layout.compute_put_args(b"c" * BIG, T0 + 1, 3, TOKEN, marks[2], 60_000)),
        ("history_get", [at, values], [str(T0 + 1)]),
        ("history_page", [at, values], [str(T0 + 1), "1000"]),
        ("value_expire", [layout.plain_keys(vkey)[0], at, values], ["60000"]),
        ("log_append", [meta, stream, digests], append),
        ("log_expire", [meta, stream, digests], ["60000"]),
        ("lease_acquire", lease, [TOKEN, "60000"]),
        ("lease_renew", lease, [TOKEN, "1", "60000"]),
        ("lease_release", lease, [TOKEN]),
        ("log_cut_tail", gone[:2], ["1", "0-18446744073709551615"]),
        ("log_delete", gone, []),
        ("value_forget", layout.forget_keys(ghost), layout.forget_args(marks[3], 60_000)),
        ("index_forget", [index], [str(T0), "g" * BIG]),
    ]  # fmt: skip


def test_a_tenant_calling_every_function_at_maxmemory_never_passes_it():
    """The least-privilege user of a namespace calls every function of the library with
    the largest arguments each takes, round after round, on a server filled to within a
    few megabytes of ``maxmemory`` (noeviction): calls that grow memory are refused once
    it is reached, those flagged ``allow-oom`` (which run past it, so memory can be
    freed) never grow it, and used memory never passes ``maxmemory`` by more than what
    one call brings."""
    namespace = f"tenant-{uuid.uuid4().hex[:8]}"
    with RedisServer(durable=False) as own:
        admin = redis.Redis(port=own.port)
        install(admin)
        admin.execute_command(*setuser_args("tenant", "tenant-password", namespace))
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", MAXMEMORY)
        number = 0
        while int(admin.info("memory")["used_memory"]) < MAXMEMORY - SLACK:
            admin.hset("junk", f"f{number}", b"j" * CHUNK)
            number += 1
        tenant = redis.Redis(port=own.port, username="tenant", password="tenant-password")
        called, refused, peak = set(), 0, 0
        for round_ in range(ROUNDS):
            for name, keys_, args in _tenant_calls(namespace, round_):
                function = library().version_function if name == "version" else script(name)
                verb = "FCALL_RO" if name in READ_ONLY or name == "version" else "FCALL"
                target = function if isinstance(function, str) else function.function
                try:
                    tenant.execute_command(verb, target, len(keys_), *keys_, *args)
                except redis.exceptions.OutOfMemoryError:
                    assert name not in FREEING, f"{name} is flagged allow-oom"
                    refused += 1
                called.add(name)
                memory = admin.info("memory")
                peak = max(peak, int(memory["used_memory"]))
        assert peak <= MAXMEMORY + SLACK, f"used memory reached {peak / 2**20:.1f} MiB"
        assert int(admin.info("memory")["used_memory_peak"]) <= MAXMEMORY + SLACK
        assert called == {*scripts(), "version"}, "a function of the library was not called"
        assert refused >= ROUNDS, "the loop never reached maxmemory"
        tenant.close()
        admin.close()
