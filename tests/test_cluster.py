"""The Redis backend on a real Redis Cluster (3 primaries, 3 replicas), reached by a plain
``redis://`` URL of any node: detection, every primary scanned, scripts per node,
durability per node, and a primary killed under a stream of appends.

The conformance suites run on the cluster too (backend "cluster" in ``conftest``); the
tests here are the ones only a cluster can show. Tests that break nodes start their own
cluster; the others use the shared ``redis_cluster`` with a namespace of their own.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import key_slot
from support.events import batch_of, stored
from support.redis_cluster import ClusterNodes, own_slots

import sessionstore
from sessionstore import keys
from sessionstore.contracts import EventBatch, Stored
from sessionstore.errors import (
    DurabilityError,
    InvalidArgumentError,
    SeqConflictError,
    StoreUnavailableError,
)
from sessionstore.keys import ValueKey
from sessionstore.models import SessionHeader
from sessionstore.redis.library import install

T0 = 1_718_000_000_000


@pytest.fixture
def ns() -> str:
    return f"cl-{uuid.uuid4().hex[:10]}"


def vkey(ns: str, symbol: str = "BTCUSDT") -> ValueKey:
    return ValueKey(ns, symbol, "s", "binance", "1h", "backtest")


def batch(first: int, count: int) -> EventBatch:
    return batch_of([stored(s, "note", T0 + s, {"n": s}) for s in range(first, first + count)])


def header(session_id: str) -> SessionHeader:
    return SessionHeader(id=session_id, created_at=T0)


def slot_owners(cluster: ClusterNodes) -> dict[int, int]:
    """slot -> port of the primary serving it."""
    owners: dict[int, int] = {}
    for node in cluster.primaries():
        for start, end in own_slots(node):
            owners.update(dict.fromkeys(range(start, end + 1), node.port))
    return owners


def spread_ids(cluster: ClusterNodes, ns: str, per_primary: int = 2) -> dict[int, list[str]]:
    """Session ids whose keys land on each primary (by port): ``per_primary`` each."""
    owners = slot_owners(cluster)
    found: dict[int, list[str]] = {port: [] for port in set(owners.values())}
    index = 0
    while any(len(ids) < per_primary for ids in found.values()):
        session_id = f"s-{index}"
        port = owners[key_slot(keys.log_keys(ns, session_id)[0].encode())]
        if len(found[port]) < per_primary:
            found[port].append(session_id)
        index += 1
    return found


# --- detection --------------------------------------------------------------------------


def test_any_node_url_reaches_the_whole_cluster(redis_cluster, ns, open_):
    """Primary or replica URL: every key works, whichever primary serves its slot."""
    owners = slot_owners(redis_cluster)
    symbols = [f"SYM{i}" for i in range(12)]
    assert len({owners[key_slot(keys.value_key(vkey(ns, s)).encode())] for s in symbols}) == 3
    for index, node in enumerate(redis_cluster.nodes):
        backends = open_(node.url, ns)
        for symbol in symbols:
            key = vkey(ns, symbol)
            backends.values.write(key, bytes([index + 1]), T0)
            assert backends.values.read(key) == Stored(bytes([index + 1]), T0)
            assert backends.values.swap(key, Stored(bytes([index + 1]), T0), b"\x00", T0)
            backends.values.write_version(key, b"\x01", T0, 2)
            assert backends.values.read_as_of(key, T0) == Stored(b"\x01", T0)
    roles = {redis_cluster.role(node) for node in redis_cluster.nodes}
    assert roles == {"primary", "replica"}


def test_detection_in_the_async_flavour(redis_cluster, ns, open_):
    replica = next(n for n in redis_cluster.nodes if redis_cluster.role(n) == "replica")
    backends = open_(replica.url, ns)

    async def go() -> None:
        pair = backends.make_async()
        try:
            for symbol in ("A", "B", "C", "D", "E", "F"):
                await pair.values.write(vkey(ns, symbol), b"\x01", T0)
                assert await pair.values.swap(vkey(ns, symbol), Stored(b"\x01", T0), b"\x02", T0)
            assert await pair.events.append("a", batch(0, 2), header("a")) == 2
            assert [h.id for h in await pair.events.list()] == ["a"]
        finally:
            await pair.aclose()

    asyncio.run(go())
    assert backends.values.read(vkey(ns, "F")) == Stored(b"\x02", T0)


def test_a_forced_plain_client_on_a_cluster_is_refused_clearly(redis_cluster, ns, open_):
    values = open_(redis_cluster.url + "?cluster=no", ns).values
    forced = open_(redis_cluster.url + "?cluster=yes", ns).values
    moved = 0
    for symbol in ("A", "B", "C", "D", "E", "F"):
        forced.write(vkey(ns, symbol), b"\x01", T0)
        try:
            values.read(vkey(ns, symbol))
        except StoreUnavailableError as exc:
            assert "?cluster=no" in str(exc)
            moved += 1
    assert moved > 0


def test_a_cluster_has_only_database_0(redis_cluster, open_):
    with pytest.raises(InvalidArgumentError, match="database 0"):
        open_(redis_cluster.url.replace("/0", "/2"), "ns").values.read(vkey("ns"))


# --- every primary ----------------------------------------------------------------------


@pytest.mark.parametrize("api", ["sync", "async"])
def test_list_finds_the_sessions_of_every_primary(redis_cluster, ns, open_, api):
    by_primary = spread_ids(redis_cluster, ns)
    assert len(by_primary) == 3
    backends = open_(redis_cluster.url, ns)
    wanted = sorted(i for ids in by_primary.values() for i in ids)
    for session_id in wanted:
        backends.events.append(session_id, batch(0, 1), header(session_id))
    if api == "sync":
        listed = backends.events.list()
    else:

        async def go() -> list[SessionHeader]:
            pair = backends.make_async()
            try:
                return list(await pair.events.list())
            finally:
                await pair.aclose()

        listed = asyncio.run(go())
    assert sorted(h.id for h in listed) == wanted
    backends.events.delete(wanted[0])
    assert sorted(h.id for h in backends.events.list()) == wanted[1:]


def test_scripts_are_loaded_again_on_each_node_after_script_flush(redis_cluster, ns, open_):
    backends = open_(redis_cluster.url, ns)
    ids = [i for group in spread_ids(redis_cluster, ns, 1).values() for i in group]
    for session_id in ids:
        backends.events.append(session_id, batch(0, 1), header(session_id))
    for node in redis_cluster.nodes:
        redis.Redis(port=node.port).script_flush()
    for session_id in ids:
        assert backends.events.append(session_id, batch(1, 1), None) == 2
        assert backends.values.swap(vkey(ns, session_id), None, b"\x01", T0)

    async def go() -> None:
        pair = backends.make_async()
        try:
            for node in redis_cluster.nodes:
                redis.Redis(port=node.port).script_flush()
            for session_id in ids:
                assert await pair.events.append(session_id, batch(2, 1), None) == 3
        finally:
            await pair.aclose()

    asyncio.run(go())


def test_the_fsync_check_covers_every_primary_and_only_writes(redis_cluster, ns, open_):
    started = open_(redis_cluster.url, ns).events
    started.append("s", batch(0, 1), header("s"))
    lax = redis_cluster.primaries()[-1]
    client = redis.Redis(port=lax.port)
    client.config_set("appendfsync", "everysec")
    try:
        events = open_(redis_cluster.url, ns).events
        assert events.exists("s") and len(events.read("s")[1]) == 1 and events.list()
        with pytest.raises(DurabilityError, match=f"127.0.0.1:{lax.port}"):
            events.append("s", batch(1, 1), None)
    finally:
        client.config_set("appendfsync", "always")
        client.close()
    assert events.append("s", batch(1, 1), None) == 2


@pytest.mark.parametrize("api", ["sync", "async"])
def test_replicas_durability_waits_on_the_primary_of_the_slot(redis_cluster, ns, open_, api):
    """WAIT runs on the connection that wrote: with the slot's replica stopped it times
    out (a WAIT elsewhere would count the idle replicas at once and pass)."""
    owner = redis_cluster.owner(keys.log_keys(ns, "w")[0])
    # The URL names another primary: the error must name the one that waited.
    other = next(n for n in redis_cluster.primaries() if n is not owner)
    # Room for a loaded machine's replica to confirm the first append in time.
    backends = open_(other.url + "?durability=replicas:1", ns, timeout=1.5)
    replica = next(
        n for n in redis_cluster.nodes
        if redis_cluster.role(n) == "replica"
        and redis.Redis(port=n.port).info("replication")["master_port"] == owner.port
    )  # fmt: skip

    async def append_async(first: int) -> int:
        pair = backends.make_async()
        try:
            return int(await pair.events.append("w", batch(first, 1), header("w")))
        finally:
            await pair.aclose()

    def append(first: int) -> int:
        if api == "sync":
            return backends.events.append("w", batch(first, 1), header("w"))
        return asyncio.run(append_async(first))

    assert append(0) == 1
    assert replica.process is not None
    replica.process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(DurabilityError, match="0 of 1 replica") as caught:
            append(1)
        assert f"the primary at 127.0.0.1:{owner.port} " in str(caught.value)
        assert isinstance(caught.value, sessionstore.StoreUnavailableError)  # it was applied
    finally:
        replica.process.send_signal(signal.SIGCONT)
    redis_cluster.wait_ok()
    assert append(1) == 2  # the applied batch is a replay, now acknowledged


def test_the_least_privilege_user_suffices_on_a_cluster(redis_cluster, ns):
    from sessionstore.redis.acl import setuser_args

    user = f"u-{uuid.uuid4().hex[:8]}"
    admins = [redis.Redis(port=node.port) for node in redis_cluster.nodes]
    for node, admin in zip(redis_cluster.nodes, admins, strict=True):  # ACLs are per node
        admin.execute_command(*setuser_args(user, "pw", ns))
        if redis_cluster.role(node) == "primary":
            install(admin)  # as `sessionstore doctor --fix` does: the user may not
    try:
        replica = next(n for n in redis_cluster.nodes if redis_cluster.role(n) == "replica")
        url = f"redis://{user}:pw@127.0.0.1:{replica.port}/0?durability=replicas:1"
        with sessionstore.connect(url, ns) as store:
            for symbol in ("A", "B", "C", "D"):
                session = store.session(symbol, "s", "e", "1h", history=symbol == "D")
                session.set_data(1, T0)
                assert session.update(lambda v: v + 1, T0) == 2
            event = sessionstore.SessionEvent(seq=0, type="t", time=T0)
            for session_id in [i for ids in spread_ids(redis_cluster, ns, 1).values() for i in ids]:
                store.events.create(SessionHeader(id=session_id))
                store.events.append(session_id, [event])
                assert len(store.events.load(session_id).events) == 1
            assert len(store.events.list()) == 3 and len(store.list_values()) == 4
            assert store.session("A", "s", "e", "1h").delete()
    finally:
        for admin in admins:
            admin.acl_deluser(user)
            admin.close()


# --- failover ---------------------------------------------------------------------------


@pytest.fixture
def own_cluster() -> Iterator[ClusterNodes]:
    """A cluster of this test's own, for killing nodes."""
    with ClusterNodes() as cluster:
        yield cluster


class Appender(threading.Thread):
    """Appends batches of 3 events to one session as a user would: on
    StoreUnavailableError or DurabilityError the same batch is sent again; on
    SeqConflictError the appender continues from the seq the conflict names."""

    def __init__(self, store: Any, session_id: str) -> None:
        super().__init__(daemon=True)
        self.store, self.session_id = store, session_id
        self.acknowledged: list[sessionstore.SessionEvent] = []
        self.failures: dict[str, int] = {}
        self.stop = threading.Event()
        self.crash: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.crash = exc

    def _run(self) -> None:
        self.store.events.create(SessionHeader(id=self.session_id))
        next_seq = 0
        while not self.stop.is_set():
            seqs = range(next_seq, next_seq + 3)
            events = [
                sessionstore.SessionEvent(seq=seq, type="tick", time=T0, data={"n": seq})
                for seq in seqs
            ]
            try:
                next_seq = self.store.events.append(self.session_id, events)
            except (StoreUnavailableError, DurabilityError) as exc:
                self.failures[type(exc).__name__] = self.failures.get(type(exc).__name__, 0) + 1
                time.sleep(0.05)
                continue
            except SeqConflictError as exc:
                self.failures["SeqConflictError"] = self.failures.get("SeqConflictError", 0) + 1
                next_seq = exc.expected
                continue
            self.acknowledged += events


def test_a_killed_primary_is_failed_over_and_no_acknowledged_event_is_lost(own_cluster, ns):
    deadline = time.monotonic() + 30
    session_id = "failover"
    meta, _ = keys.log_keys(ns, session_id)
    victim = own_cluster.owner(meta)
    store = sessionstore.connect(victim.url + "?durability=replicas:1", ns, timeout=1)
    appender = Appender(store, session_id)
    appender.start()
    try:

        def acknowledged_at_least(count: int) -> None:
            while len(appender.acknowledged) < count:
                assert appender.crash is None, appender.crash
                assert time.monotonic() < deadline, f"stuck at {len(appender.acknowledged)}"
                time.sleep(0.01)

        acknowledged_at_least(30)
        own_cluster.kill(victim)
        own_cluster.wait(
            lambda: own_cluster.serving(meta) not in (None, victim), "a new primary", 15
        )
        before_restart = len(appender.acknowledged)
        own_cluster.start(victim)  # back as a replica: replicas:1 can be met again
        own_cluster.wait_ok(timeout=max(1.0, deadline - time.monotonic()))
        acknowledged_at_least(before_restart + 30)
    finally:
        appender.stop.set()
        appender.join(10)
        store.close()
    assert not appender.is_alive() and appender.crash is None, appender.crash
    assert sum(appender.failures.values()) > 0, "the outage went unnoticed"
    with sessionstore.connect(own_cluster.primaries()[0].url, ns) as reader:
        stored = reader.events.load(session_id).events
    assert [e.seq for e in stored] == list(range(len(stored)))
    by_seq = {e.seq: e for e in stored}
    assert all(by_seq.get(e.seq) == e for e in appender.acknowledged)
