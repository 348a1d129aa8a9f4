"""A long-lived store keeps working while an operator reshards, grows and fails over the
Redis Cluster under it.

Each test starts its own small cluster, opens one store before the operation, runs
traffic (values written and updated, events appended) from a few threads during it, and
afterwards checks every acknowledged write: a value holds the last acknowledged number
or a later one, a log holds every acknowledged event, contiguous, none twice. A call may
fail only with ``StoreUnavailableError`` (the outcome is unknown); the tests count those.
The store that ran through the operation then lists every session and value.

``SESSIONSTORE_SOAK=1`` moves more slots and runs the traffic longer.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.cluster import key_slot
from support import cluster_ops
from support.redis_cluster import ClusterNodes, own_slots
from support.redis_server import RedisServer

import sessionstore
import sessionstore.aio
from sessionstore import keys
from sessionstore.errors import DurabilityError, SeqConflictError, StoreUnavailableError
from sessionstore.keys import ValueKey

SOAK = bool(os.environ.get("SESSIONSTORE_SOAK"))
T0 = 1_718_000_000_000
#: Slots moved by one reshard.
RESHARD_SLOTS = 2000 if SOAK else 300
MODE = "backtest"


@pytest.fixture
def ns() -> str:
    return f"ops-{uuid.uuid4().hex[:8]}"


def value_slot(ns: str, symbol: str) -> int:
    return key_slot(keys.value_key(ValueKey(ns, symbol, "s", "e", "1h", MODE)).encode())


def log_slot(ns: str, session_id: str) -> int:
    return key_slot(keys.log_keys(ns, session_id)[0].encode())


def pick(count: int, slot_of: Callable[[str], int], wanted: set[int], prefix: str) -> list[str]:
    """``count`` names whose slot is in ``wanted``."""
    found: list[str] = []
    index = 0
    while len(found) < count:
        name = f"{prefix}{index}"
        if slot_of(name) in wanted:
            found.append(name)
        index += 1
    return found


def first_slots(node: RedisServer, count: int) -> set[int]:
    """The ``count`` lowest slots ``node`` serves: those ``redis-cli --cluster reshard``
    moves first."""
    slots: list[int] = []
    for start, end in own_slots(node):
        slots += range(start, end + 1)
    return set(sorted(slots)[:count])


class Traffic:
    """Threads writing values (``set_data`` then ``update``) and appending events, each
    on keys of its own, recording what was acknowledged and every error."""

    def __init__(self, store: Any, symbols: list[str], sessions: list[str], threads: int = 3):
        self.store = store
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.values: dict[str, int] = {}
        self.logs: dict[str, list[int]] = {}
        self.unavailable = 0
        self.calls = 0
        self.unexpected: list[BaseException] = []
        #: The traceback of each of ``unexpected``, for the failure message.
        self.traces: list[str] = []
        self.unconfirmed = 0
        for session_id in sessions:
            store.events.create(sessionstore.SessionHeader(id=session_id))
        share = [(symbols[k::threads], sessions[k::threads]) for k in range(threads)]
        self.threads = [
            threading.Thread(target=self._guarded, args=pair, daemon=True) for pair in share
        ]

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def wait_calls(self, count: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        start = self.calls
        while self.calls < start + count:
            assert not self.unexpected, "\n".join(self.traces)
            assert time.monotonic() < deadline, "the traffic stalled"
            time.sleep(0.01)

    def _guarded(self, symbols: list[str], sessions: list[str]) -> None:
        try:
            self._run(symbols, sessions)
        except BaseException as exc:  # reported by the test
            self.traces.append(traceback.format_exc())
            self.unexpected.append(exc)

    def _call(self, call: Callable[[], Any]) -> tuple[bool, Any]:
        with self.lock:
            self.calls += 1
        try:
            return True, call()
        except StoreUnavailableError:
            with self.lock:
                self.unavailable += 1
            time.sleep(0.02)
            return False, None
        except DurabilityError as exc:
            # replicas:N right after a failover or a resync: applied on the primary, not yet
            # confirmed by a replica, so not acknowledged (a resend is recognised as applied).
            assert "confirmed" in str(exc), exc
            with self.lock:
                self.unconfirmed += 1
            time.sleep(0.02)
            return False, None

    def _run(self, symbols: list[str], sessions: list[str]) -> None:
        sent = dict.fromkeys(symbols, 0)
        next_seq = dict.fromkeys(sessions, 0)
        while not self.stop.is_set():
            for symbol in symbols:
                handle = self.store.session(symbol, "s", "e", "1h")
                sent[symbol] += 1
                n = sent[symbol]
                ok, _ = self._call(lambda h=handle, n=n: h.set_data({"n": n}, T0))
                if ok:
                    self.values[symbol] = n
                ok, stored = self._call(
                    lambda h=handle: h.update(lambda v: {"n": (v or {"n": 0})["n"] + 1}, T0)
                )
                if ok:
                    sent[symbol] = self.values[symbol] = stored["n"]
            for session_id in sessions:
                seq = next_seq[session_id]
                event = sessionstore.SessionEvent(seq=seq, type="t", time=T0, data={"n": seq})
                try:
                    ok, _ = self._call(
                        lambda s=session_id, e=event: self.store.events.append(s, [e])
                    )
                except SeqConflictError as conflict:
                    # An earlier send whose outcome was unknown was applied.
                    next_seq[session_id] = conflict.expected
                    continue
                if ok:
                    self.logs.setdefault(session_id, []).append(seq)
                    next_seq[session_id] = seq + 1

    def check(self, url: str, ns: str) -> int:
        """Assert every acknowledged write is stored; returns how many were checked."""
        assert not self.unexpected, "\n".join(self.traces)
        assert not any(t.is_alive() for t in self.threads)
        checked = 0
        with sessionstore.connect(url, ns, timeout=5) as reader:
            for symbol, n in self.values.items():
                stored = reader.session(symbol, "s", "e", "1h").get_data(T0)
                assert stored is not None and stored["n"] >= n, (symbol, stored, n)
                checked += 1
            for session_id, seqs in self.logs.items():
                events = reader.events.load(session_id).events
                assert [e.seq for e in events] == list(range(len(events))), session_id
                assert all(events[s].data == {"n": s} for s in seqs), session_id
                checked += len(seqs)
        return checked


def report(what: str, traffic: Traffic, checked: int) -> None:
    print(
        f"\n{what}: {traffic.calls} calls, {checked} acknowledged writes checked, "
        f"{traffic.unavailable} StoreUnavailableError"
    )


@pytest.fixture
def three() -> Iterator[ClusterNodes]:
    """3 primaries, no replicas."""
    with ClusterNodes(primaries=3, replicas=0) as cluster:
        yield cluster


@pytest.fixture
def three_with_replicas() -> Iterator[ClusterNodes]:
    with ClusterNodes(primaries=3, replicas=1) as cluster:
        replicas_online(cluster)
        yield cluster


def replicas_online(cluster: ClusterNodes, timeout: float = 30) -> None:
    """Wait until every primary has its replica attached and in sync: before that,
    ``WAIT`` confirms nothing and a ``replicas:1`` write is refused as unconfirmed."""
    deadline = time.monotonic() + timeout
    for node in cluster.primaries():
        client = redis.Redis(port=node.port)
        try:
            while (client.info("replication").get("slave0") or {}).get("state") != "online":
                assert time.monotonic() < deadline, f"no replica of {node.port} came online"
                time.sleep(0.05)
        finally:
            client.close()


def spread(cluster: ClusterNodes, ns: str, per_node: int, moving: set[int] | None = None):
    """(symbols, session ids): ``per_node`` of each on every primary, in ``moving``
    slots where given."""
    symbols: list[str] = []
    sessions: list[str] = []
    for node in cluster.primaries():
        slots = {s for a, b in own_slots(node) for s in range(a, b + 1)}
        if moving is not None and slots & moving:
            slots &= moving
        symbols += pick(per_node, lambda s: value_slot(ns, s), slots, f"V{node.port}-")
        sessions += pick(per_node, lambda s: log_slot(ns, s), slots, f"L{node.port}-")
    return symbols, sessions


def assert_listed(store: Any, symbols: list[str], sessions: list[str]) -> None:
    listed = {h.id for h in store.events.list()}
    assert set(sessions) <= listed, f"listed {len(listed)} of {len(sessions)} sessions"
    assert {ref.symbol for ref in store.list_values()} >= set(symbols)


def assert_lists_everything(store: Any, traffic: Traffic) -> None:
    """Every session and value with an acknowledged write is listed (a session whose only
    appends were never acknowledged may rightly not exist)."""
    assert_listed(store, list(traffic.values), list(traffic.logs))


# --- resharding between existing primaries --------------------------------------------------


@pytest.mark.parametrize("durability", ["none", "replicas:1"])
def test_reshard_under_traffic(ns, durability):
    replicas = 1 if durability.startswith("replicas") else 0
    with ClusterNodes(primaries=3, replicas=replicas) as cluster:
        source, target = cluster.primaries()[:2]
        moving = first_slots(source, RESHARD_SLOTS)
        symbols, sessions = spread(cluster, ns, 2, moving)
        url = f"{cluster.url}?durability={durability}"
        with sessionstore.connect(url, ns, timeout=1) as store:
            with Traffic(store, symbols, sessions) as traffic:
                traffic.wait_calls(50)
                cluster_ops.reshard(cluster, source, target, RESHARD_SLOTS)
                traffic.wait_calls(50)
            checked = traffic.check(cluster.url, ns)
            assert_lists_everything(store, traffic)
        report(f"reshard {RESHARD_SLOTS} slots ({durability})", traffic, checked)


# --- growing the cluster --------------------------------------------------------------------


def test_add_node_and_rebalance_under_traffic(three, ns):
    """The new primary is unknown to the store until slots move to it; redirections to
    it are followed and its script cache filled; the long-lived store then lists the
    data it serves."""
    moving = set().union(*(first_slots(n, 1200) for n in three.primaries()))
    symbols, sessions = spread(three, ns, 2, moving)
    with sessionstore.connect(three.url, ns, timeout=1) as store:
        with Traffic(store, symbols, sessions) as traffic:
            traffic.wait_calls(50)
            added = cluster_ops.add_node(three)
            cluster_ops.rebalance_onto_empty(three)
            traffic.wait_calls(50)
        assert own_slots(added), "the rebalance moved nothing to the new node"
        checked = traffic.check(three.url, ns)
        moved = [s for s in sessions if three.serving(keys.log_keys(ns, s)[0]) is added]
        assert moved, "no session moved to the new primary"
        assert_lists_everything(store, traffic)
    report("add-node + rebalance", traffic, checked)


# --- failovers --------------------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["none", "replicas:1"])
def test_graceful_failover_under_traffic(three_with_replicas, ns, durability):
    cluster = three_with_replicas
    symbols, sessions = spread(cluster, ns, 2)
    victim = cluster.primaries()[0]
    with sessionstore.connect(f"{victim.url}?durability={durability}", ns, timeout=1) as store:
        with Traffic(store, symbols, sessions) as traffic:
            traffic.wait_calls(50)
            cluster_ops.graceful_failover(cluster, victim)
            traffic.wait_calls(50)
        checked = traffic.check(cluster.primaries()[0].url, ns)
        assert_lists_everything(store, traffic)
    report(f"CLUSTER FAILOVER ({durability})", traffic, checked)


def test_killed_primary_under_traffic(three_with_replicas, ns):
    cluster = three_with_replicas
    symbols, sessions = spread(cluster, ns, 2)
    victim = cluster.owner(keys.log_keys(ns, sessions[0])[0])
    # A failover keeps what a replica confirmed: fsync alone protects against a restart,
    # not against promoting a replica that had not received the latest writes.
    url = f"{cluster.url}?durability=replicas:1"
    with sessionstore.connect(url, ns, timeout=1) as store:
        with Traffic(store, symbols, sessions) as traffic:
            traffic.wait_calls(50)
            cluster_ops.kill_primary(cluster, victim)
            cluster.wait_ok()
            traffic.wait_calls(50)
        checked = traffic.check(cluster.primaries()[0].url, ns)
        assert_lists_everything(store, traffic)
    report("primary SIGKILL", traffic, checked)


# --- listing with a primary down ----------------------------------------------------------------


def full_coverage_off(cluster: ClusterNodes) -> None:
    """The other primaries keep serving their slots while one slot is not served."""
    for node in cluster.primaries():
        client = redis.Redis(port=node.port)
        client.config_set("cluster-require-full-coverage", "no")
        client.close()


def test_listing_with_a_dead_primary_fails_naming_it(three, ns):
    """A primary down (no replica, the cluster serving the other slots): a listing that
    has entries on it raises naming that node, never a shorter list."""
    full_coverage_off(three)
    index_owner = three.owner(keys.index_keys(ns)[0])
    victim = next(n for n in three.primaries() if n is not index_owner)
    symbols, sessions = spread(three, ns, 2)
    with sessionstore.connect(three.url, ns, timeout=1) as store:
        event = sessionstore.SessionEvent(seq=0, type="t", time=T0)
        for session_id in sessions:
            store.events.create(sessionstore.SessionHeader(id=session_id))
            store.events.append(session_id, [event])
        for symbol in symbols:
            store.session(symbol, "s", "e", "1h").set_data(1, T0)
        assert_listed(store, symbols, sessions)
        three.kill(victim)
        for listing in (store.events.list, store.list_values):
            with pytest.raises(StoreUnavailableError, match=str(victim.port)):
                listing()


# --- one slot caught mid-migration ------------------------------------------------------------


@pytest.mark.parametrize("durability", ["none", "replicas:1"])
def test_a_slot_mid_migration_is_served_by_its_target(three_with_replicas, ns, durability):
    """The keys are on the target, the source answers ASK; the target has never loaded
    the scripts (its cache flushed). Every call is followed there (with ``replicas:N``
    too: ASKING, the script and WAIT on the target) and the scripts are loaded on the
    node that lacked them."""
    cluster = three_with_replicas
    session_id = "mid"
    slot = log_slot(ns, session_id)
    (symbol,) = pick(1, lambda s: value_slot(ns, s), {slot}, "V")
    source = cluster.owner(keys.log_keys(ns, session_id)[0])
    target = next(n for n in cluster.primaries() if n is not source)
    url = f"{cluster.url}?durability={durability}"
    # A roomy timeout: WAIT gets 80% of it, and a loaded machine's replica can take
    # longer than 0.8 s to confirm a write.
    with sessionstore.connect(url, ns, timeout=5) as store:
        handle = store.session(symbol, "s", "e", "1h")
        handle.set_data({"n": 1}, T0)
        store.events.create(sessionstore.SessionHeader(id=session_id))
        event = sessionstore.SessionEvent(seq=0, type="t", time=T0, data={"n": 0})
        assert store.events.append(session_id, [event]) == 1
        cluster_ops.begin_migration(cluster, slot, source, target)
        flush = redis.Redis(port=target.port)
        flush.script_flush()
        flush.close()
        event = sessionstore.SessionEvent(seq=1, type="t", time=T0, data={"n": 1})
        assert store.events.append(session_id, [event]) == 2
        assert [e.seq for e in store.events.load(session_id).events] == [0, 1]
        handle.set_data({"n": 2}, T0)
        assert handle.update(lambda v: {"n": v["n"] + 1}, T0) == {"n": 3}
        assert handle.get_data(T0) == {"n": 3}
        cluster_ops.finish_migration(cluster, slot, target)
        assert cluster.owner(keys.log_keys(ns, session_id)[0]) is target
        assert handle.get_data(T0) == {"n": 3}
        assert_listed(store, [symbol], [session_id])


def test_listing_with_a_slot_not_served_fails(three, ns):
    """A node that answers but refuses one entry's check (``CLUSTERDOWN Hash slot not
    served``): the listing raises instead of skipping that entry."""
    full_coverage_off(three)
    symbols = ["A", "B"]
    index_slot = key_slot(keys.index_keys(ns)[0].encode())
    sessions = pick(4, lambda s: log_slot(ns, s), set(range(16384)) - {index_slot}, "s")
    with sessionstore.connect(three.url, ns, timeout=1) as store:
        event = sessionstore.SessionEvent(seq=0, type="t", time=T0)
        for session_id in sessions:
            store.events.create(sessionstore.SessionHeader(id=session_id))
            store.events.append(session_id, [event])
        for symbol in symbols:
            store.session(symbol, "s", "e", "1h").set_data(1, T0)
        assert_listed(store, symbols, sessions)
        owner = three.owner(keys.log_keys(ns, sessions[0])[0])
        dropped = redis.Redis(port=owner.port)
        dropped.execute_command("CLUSTER", "DELSLOTS", log_slot(ns, sessions[0]))
        dropped.close()
        with pytest.raises(StoreUnavailableError, match="not served"):
            store.events.list()


@pytest.mark.parametrize("durability", ["none", "replicas:1"])
def test_a_slot_mid_migration_is_served_by_its_target_async(three_with_replicas, ns, durability):
    """:func:`test_a_slot_mid_migration_is_served_by_its_target` with ``sessionstore.aio``."""
    cluster = three_with_replicas
    session_id = "mid"
    slot = log_slot(ns, session_id)
    (symbol,) = pick(1, lambda s: value_slot(ns, s), {slot}, "V")
    source = cluster.owner(keys.log_keys(ns, session_id)[0])
    target = next(n for n in cluster.primaries() if n is not source)

    def event(seq: int) -> sessionstore.SessionEvent:
        return sessionstore.SessionEvent(seq=seq, type="t", time=T0, data={"n": seq})

    async def go() -> None:
        url = f"{cluster.url}?durability={durability}"
        async with sessionstore.aio.connect(url, ns, timeout=5) as store:
            handle = store.session(symbol, "s", "e", "1h")
            await handle.set_data({"n": 1}, T0)
            await store.events.create(sessionstore.SessionHeader(id=session_id))
            assert await store.events.append(session_id, [event(0)]) == 1
            cluster_ops.begin_migration(cluster, slot, source, target)
            flush = redis.Redis(port=target.port)
            flush.script_flush()
            flush.close()
            assert await store.events.append(session_id, [event(1)]) == 2
            loaded = await store.events.load(session_id)
            assert [e.seq for e in loaded.events] == [0, 1]
            await handle.set_data({"n": 2}, T0)
            assert await handle.update(lambda v: {"n": v["n"] + 1}, T0) == {"n": 3}
            assert await handle.get_data(T0) == {"n": 3}
            cluster_ops.finish_migration(cluster, slot, target)
            assert session_id in {h.id for h in await store.events.list()}

    asyncio.run(go())
