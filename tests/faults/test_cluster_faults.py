"""Parts 2, 3 and 4 of the fault suite on a real Redis Cluster, each test on a small
cluster of its own (figures recorded under the backend ``cluster``):

* server killed: a primary SIGKILLed while writers append events and write values with
  ``durability=replicas:1``; its replica takes over, the killed node comes back as a
  replica, and the same store keeps writing. Every acknowledged event and value is
  there, no event twice, and the calls raised only :class:`StoreUnavailableError` (as
  :class:`NotReplicatedError` for a write the new primary applied before a replica of its
  own was in sync to confirm it; resending is safe).
* lost reply: a cluster's nodes announce their own addresses, so a proxy cannot front
  the whole cluster. The node serving the test's slot announces the port of a
  :class:`TcpProxy` in front of it instead (``cluster-announce-port``, as behind a port
  forward), so every client of the cluster reaches that node through the proxy, which
  loses the replies it is told to: an ``update`` whose reply was lost returns its result
  applied once, a resent append is recognised as applied, nothing is written twice.
* server unavailable: the primary serving a slot is killed (no replica) and later hung
  (SIGSTOP): calls on its slots raise :class:`StoreUnavailableError` (the slowest is
  recorded), calls on the other slots keep working, and once it is back the same store
  works on its slots again.

``SESSIONSTORE_SOAK=1`` kills more primaries and loses more replies.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.cluster import key_slot
from support import cluster_ops
from support.redis_cluster import ClusterNodes, own_slots
from support.redis_server import RedisServer
from support.tcp_proxy import TcpProxy

import sessionstore
from sessionstore import NotReplicatedError, SessionHeader, StoreUnavailableError, keys
from sessionstore.keys import ValueKey
from sessionstore.redis.retry import RETRIES

from . import figures
from .conftest import iterations
from .figures import figures_run  # noqa: F401 - used by pytestmark
from .test_unavailable import check_refused, guarded
from .test_writer_killed import T0, Workload, check_acknowledged, check_batches, note

#: How long a writer retries one refused call, and waits for anything else.
PATIENCE = 30.0
MODE = "backtest"

pytestmark = pytest.mark.usefixtures("figures_run")


@pytest.fixture
def ns() -> str:
    return f"cf-{uuid.uuid4().hex[:8]}"


def value_slot(ns: str, symbol: str) -> int:
    return key_slot(keys.value_key(ValueKey(ns, symbol, "s", "e", "1h", MODE)).encode())


def log_slot(ns: str, session_id: str) -> int:
    return key_slot(keys.log_keys(ns, session_id)[0].encode())


def node_slots(node: RedisServer) -> set[int]:
    return {slot for start, end in own_slots(node) for slot in range(start, end + 1)}


def name_on(node: RedisServer, slot_of: Callable[[str], int], prefix: str) -> str:
    """The first name ``prefix<n>`` whose slot ``node`` serves."""
    slots = node_slots(node)
    index = 0
    while slot_of(f"{prefix}{index}") not in slots:
        index += 1
    return f"{prefix}{index}"


def batch_ids(events: list[sessionstore.SessionEvent]) -> list[str]:
    return [e.data["batch"] for e in events if e.data.get("index") == 0]


# --- server killed ----------------------------------------------------------------------------


#: What a call may raise while a primary is down or just replaced: the outcome is
#: unknown (:class:`StoreUnavailableError`), or the write is applied on a new primary
#: that has no replica in sync yet to confirm it (``replicas:1``, :class:`NotReplicatedError`,
#: one of them).
REFUSED = (StoreUnavailableError,)


class Writer(threading.Thread):
    """Appends random batches to one session and writes one value (``set_data`` of a
    growing number, then ``update`` adding 1), through a shared store. A refused append
    (:data:`REFUSED`) is resent as is until acknowledged; a refused value write is not
    resent, so the stored number lies between the last acknowledged and the last sent."""

    def __init__(self, store: sessionstore.Store, session_id: str, symbol: str, seed: int):
        super().__init__(name=f"writer-{session_id}", daemon=True)
        self.store, self.session_id = store, session_id
        self.symbol = symbol
        self.value = store.session(symbol, "s", "e", "1h")
        self.rng = random.Random(seed)
        self.work = Workload(session_id, self.rng)
        self.acks: list[tuple[str, int, int]] = []
        self.acked_value = 0
        self.sent_value = 0
        self.refused = 0
        self.unconfirmed = 0
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        next_seq, number = 0, 0
        try:
            while not self.halt.is_set():
                size = self.rng.randint(1, 8)
                batch = self.work.batch(next_seq, size, f"{self.session_id}-b{number}")
                next_seq = self.resend_until_acknowledged(
                    functools.partial(self.store.events.append, self.session_id, batch)
                )
                self.acks.append((f"{self.session_id}-b{number}", size, next_seq))
                number += 1
                self.sent_value += 1
                ok, _ = self.refusable(lambda: self.value.set_data({"n": self.sent_value}, T0))
                if ok:
                    self.acked_value = self.sent_value
                self.sent_value += 1
                ok, stored = self.refusable(lambda: self.value.update(bump, T0))
                if ok:
                    assert stored["n"] <= self.sent_value, (stored, self.sent_value)
                    self.acked_value = stored["n"]
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def resend_until_acknowledged(self, call: Callable[[], int]) -> int:
        deadline = time.monotonic() + PATIENCE
        while True:
            ok, result = self.refusable(call)
            if ok:
                return int(result)
            if time.monotonic() > deadline:
                raise AssertionError(f"refused for {PATIENCE} s")

    def refusable(self, call: Callable[[], Any]) -> tuple[bool, Any]:
        """(True, what ``call`` returned), or (False, None) when it was refused."""
        try:
            return True, call()
        except NotReplicatedError as exc:
            assert "replica(s) confirmed it" in str(exc), exc
            self.unconfirmed += 1
        except StoreUnavailableError:
            self.refused += 1
        time.sleep(0.02)
        return False, None

    def wait_for(self, count: int) -> None:
        """Until at least ``count`` batches are acknowledged."""
        deadline = time.monotonic() + PATIENCE
        while len(self.acks) < count:
            if self.error is not None:
                raise AssertionError(f"{self.name} failed") from self.error
            assert time.monotonic() < deadline, f"{self.name} made no progress"
            time.sleep(0.01)


def bump(value: dict[str, int] | None) -> dict[str, int]:
    return {"n": (value or {"n": 0})["n"] + 1}


def test_a_killed_primary_loses_no_acknowledged_write_and_the_same_store_goes_on(ns):
    kills = iterations(normal=1, ci=1, soak=6)
    rng = random.Random()
    with ClusterNodes(primaries=3, replicas=1) as cluster:
        sessions = [
            name_on(n, lambda s: log_slot(ns, s), f"L{n.port}-") for n in cluster.primaries()
        ]
        symbols = [
            name_on(n, lambda s: value_slot(ns, s), f"V{n.port}-") for n in cluster.primaries()
        ]
        url = f"{cluster.url}?durability=replicas:1"
        with sessionstore.connect(url, ns, timeout=1) as store:
            for session_id in sessions:
                store.events.create(SessionHeader(id=session_id, created_at=T0))
            writers = [
                Writer(store, session_id, symbol, rng.randrange(1 << 30))
                for session_id, symbol in zip(sessions, symbols, strict=True)
            ]
            try:
                for writer in writers:
                    writer.start()
                for kill in range(kills):
                    for writer in writers:
                        writer.wait_for(len(writer.acks) + 3)
                    # The primary serving one writer's log, a different one each time.
                    victim = cluster.owner(keys.log_keys(ns, sessions[kill % 3])[0])
                    cluster_ops.kill_primary(cluster, victim)
                    cluster.start(victim)  # it rejoins as a replica of its successor
                    cluster.wait_ok()
                    for writer in writers:
                        writer.wait_for(len(writer.acks) + 3)
                    figures.record("server_killed", "cluster", kills=1, faults=1)
            finally:
                for writer in writers:
                    writer.halt.set()
                for writer in writers:
                    writer.join(PATIENCE)
            for writer in writers:
                assert writer.error is None, f"{writer.name}: {writer.error!r}"
        # A fresh client reads what the cluster holds now.
        with sessionstore.connect(cluster.primaries()[0].url, ns, timeout=5) as reader:
            acked = lost = duplicates = 0
            for writer in writers:
                committed = reader.events.read_from(writer.session_id, 0)
                assert [e.seq for e in committed] == list(range(len(committed)))
                check_batches(committed)
                ids = batch_ids(committed)
                duplicates += len(ids) - len(set(ids))
                lost += check_acknowledged(committed, writer.acks)
                acked += sum(size for _, size, _ in writer.acks)
                stored = reader.session(writer.symbol, "s", "e", "1h").get_data(T0)
                assert stored is not None
                assert writer.acked_value <= stored["n"] <= writer.sent_value, (
                    writer.name,
                    stored,
                    writer.acked_value,
                    writer.sent_value,
                )
            figures.record(
                "server_killed",
                "cluster",
                acked_events=acked,
                lost=lost,
                duplicates=duplicates,
                outage_calls=sum(w.refused for w in writers),
                unconfirmed_calls=sum(w.unconfirmed for w in writers),
            )
            assert lost == 0, f"{lost} acknowledged events lost"
            assert duplicates == 0, f"{duplicates} batches stored twice"


def _ask(node: RedisServer, *command: str) -> None:
    client = redis.Redis(port=node.port, socket_timeout=5)
    try:
        client.execute_command(*command)
    finally:
        client.close()


def test_a_killed_index_primary_leaves_no_acknowledged_session_or_value_unlisted(ns):
    """With ``replicas:1`` a session's and a value's index entry is as durable as its data:
    the primary holding the namespace index is cut off from its replica (which cannot
    resync meanwhile), sessions and values whose data lives on the other primaries are
    written, and the index's primary is killed; its replica takes over without ever
    having received what was written since the cut. Every session and value whose write
    was acknowledged is listed afterwards (the index entry's own WAIT refuses the others
    with StoreUnavailableError)."""
    with ClusterNodes(primaries=3, replicas=1) as cluster:
        pair: list[RedisServer] = []

        def index_pair() -> bool:
            """The index's primary and its replica, once the cluster reports both (a
            loaded machine may see a failover right after the cluster was made)."""
            try:
                primary = cluster.owner(keys.index_keys(ns)[0])
                pair[:] = [primary, cluster_ops.replica_of(cluster, primary)]
            except AssertionError:
                return False
            return True

        cluster.wait(index_pair, "a replica of the index's primary")
        index_node, replica = pair
        others = [n for n in cluster.primaries() if n is not index_node]
        session_of = functools.partial(log_slot, ns)
        symbol_of = functools.partial(value_slot, ns)
        acknowledged: list[str] = []
        symbols: list[str] = []
        refused: dict[str, int] = {}
        url = f"{cluster.url}?durability=replicas:1"
        with sessionstore.connect(url, ns, timeout=1) as store:

            def write(tag: str) -> None:
                refused.setdefault(tag, 0)
                for node in others:
                    session_id = name_on(node, session_of, f"{tag}{node.port}-")
                    symbol = name_on(node, symbol_of, f"{tag}{node.port}-")
                    event = sessionstore.SessionEvent(seq=0, type="e", time=T0)
                    try:
                        store.events.create(SessionHeader(id=session_id, created_at=T0))
                        store.events.append(session_id, [event])
                        acknowledged.append(session_id)
                    except REFUSED:
                        refused[tag] += 1
                    try:
                        store.session(symbol, "s", "e", "1h").set_data({"n": 1}, T0)
                        symbols.append(symbol)
                    except REFUSED:
                        refused[tag] += 1

            write("before")
            # The replica cannot resync: it offers a password the primary does not have.
            _ask(replica, "CONFIG", "SET", "masterauth", "not-the-password")
            _ask(index_node, "CLIENT", "KILL", "TYPE", "replica")
            write("cut")
            killed = time.monotonic()
            cluster_ops.kill_primary(cluster, index_node)
            failover_s = time.monotonic() - killed
            _ask(replica, "CONFIG", "SET", "masterauth", "")
            cluster.start(index_node)  # it rejoins as a replica of its successor
            cluster.wait_ok()
            write("after")
        with sessionstore.connect(cluster.primaries()[0].url, ns, timeout=5) as reader:
            listed = {header.id for header in reader.events.list()}
            values = {key.symbol for key in reader.list_values()}
        assert set(acknowledged) <= listed, sorted(set(acknowledged) - listed)
        assert set(symbols) <= values, sorted(set(symbols) - values)
        assert refused["cut"] == 2 * len(others), "a write during the cut was acknowledged"
        print(
            f"\nindex primary killed: {len(acknowledged) + len(symbols)} acknowledged, "
            f"0 lost, refused {refused}, replica serving after {failover_s:.2f} s"
        )


# --- lost reply -------------------------------------------------------------------------------


def applied(reply: bytes) -> bool:
    """Whether a swallowed reply says the server did the work (not an error)."""
    return not reply.startswith(b"-")


@pytest.fixture
def proxied(ns: str) -> Iterator[tuple[ClusterNodes, RedisServer, TcpProxy]]:
    """A cluster of 3 primaries whose node serving ``ns``'s session ``S`` is reached
    through a proxy (it announces the proxy's port)."""
    with ClusterNodes(primaries=3, replicas=0) as cluster:
        node = cluster.owner(keys.log_keys(ns, "S")[0])
        with TcpProxy(node.port) as proxy:
            cluster_ops.announce_port(cluster, node, proxy.port)
            yield cluster, node, proxy


def test_a_lost_reply_on_a_cluster_node_is_applied_once(ns, proxied):
    cluster, node, proxy = proxied
    rounds = iterations(normal=5, ci=3, soak=100)
    symbol = name_on(node, lambda s: value_slot(ns, s), "V")
    other_node = next(n for n in cluster.primaries() if n is not node)
    # A value write sends its index entry's call (index_add.lua) first, to the index's
    # node: when that is the proxied one too, the reply lost is the next FCALL's.
    entry = int(cluster.owner(keys.index_keys(ns)[1]).port == node.port)
    # The store starts from another node and learns the proxy's address from the cluster.
    with (
        sessionstore.connect(other_node.url, ns, timeout=1) as store,
        sessionstore.connect(other_node.url, ns, timeout=5) as other,
    ):
        rng = random.Random()
        work = Workload("lost", rng)
        store.events.create(SessionHeader(id="S", created_at=T0))
        next_seq = store.events.append("S", work.batch(0, 2, "b-first"))
        assert proxy.connections >= 1, "the store does not reach the node through the proxy"
        session = store.session(symbol, "s", "e", "1h")
        session.set_data(0, T0)
        calls: list[int] = []

        def increment(value: int) -> int:
            calls.append(value)
            return value + 1

        acked = next_seq
        for number in range(rounds):
            # An update whose swap reply is lost returns its result, fn applied once.
            proxy.drop_replies("FCALL", skip=entry)
            assert session.update(increment, T0) == number + 1
            assert proxy.pending_drops() == 0, "the swap did not pass the proxy"
            assert calls[-1] == number and len(calls) == number + 1, calls
            # An append whose reply is lost is resent and recognised as applied.
            size = rng.randint(1, 6)
            proxy.drop_replies("FCALL")
            batch = work.batch(next_seq, size, f"b{number}")
            assert store.events.append("S", batch) == next_seq + size
            assert proxy.pending_drops() == 0, "the append did not pass the proxy"
            next_seq += size
            acked += size
        # Another client's write lands between the lost reply and the resend: it stays.
        proxy.drop_replies(
            "FCALL",
            skip=entry,
            before_close=lambda: other.session(symbol, "s", "e", "1h").set_data(100, T0),
        )
        assert session.update(increment, T0) == rounds + 1
        assert len(calls) == rounds + 1
        assert other.session(symbol, "s", "e", "1h").get_data(T0) == 100
        # Every retry of the client loses its reply: the call is refused, maybe applied;
        # the caller's resend of the same batch is recognised as applied.
        batch = work.batch(next_seq, 3, "b-resent")
        proxy.drop_replies("FCALL", count=1000)
        with pytest.raises(StoreUnavailableError):
            store.events.append("S", batch)
        proxy.cancel()
        assert store.events.append("S", batch) == next_seq + 3
        acked += 3
        assert not proxy.hook_errors
        assert all(applied(reply) for reply in proxy.dropped_replies)
        stored = other.events.read_from("S", 0)
        ids = batch_ids(stored)
        figures.record(
            "lost_reply",
            "cluster",
            faults=proxy.dropped,
            inputs=2 * rounds + 2,
            acked_events=acked,
            lost=max(acked - len(stored), 0),
            duplicates=len(ids) - len(set(ids)) + max(len(stored) - acked, 0),
        )
        assert len(stored) == acked and len(ids) == len(set(ids))
        check_batches(stored)


# --- server unavailable -----------------------------------------------------------------------

TIMEOUT = 0.5
#: The longest a refused call may take: each of the client's attempts a connect and a
#: reply of up to ``TIMEOUT``, plus back-off and slack for a loaded machine.
BOUND = (RETRIES + 1) * 2 * TIMEOUT + 2.0


def slot_calls(
    store: sessionstore.Store, session_id: str, symbol: str, tag: str
) -> list[tuple[str, Callable[[], Any]]]:
    """Calls on one session's and one value's slot, each a fresh action."""
    plain = store.session(symbol, "s", "e", "1h")
    history = store.session(symbol, "s", "e", "1h", history=True)

    def append() -> int:
        next_seq = len(store.events.read_from(session_id, 0))
        return store.events.append(session_id, [note(next_seq, f"{tag}-{next_seq}")])

    return [
        ("get_data", lambda: plain.get_data(T0)),
        ("set_data", lambda: plain.set_data({"tag": tag}, T0)),
        ("update", lambda: plain.update(lambda v: {**(v or {}), "updated": tag}, T0)),
        ("history get_data", lambda: history.get_data(T0)),
        ("history set_data", lambda: history.set_data({"tag": tag}, T0)),
        ("events.append", append),
        ("events.load", lambda: store.events.load(session_id)),
        ("events.read_from", lambda: store.events.read_from(session_id, 0)),
    ]


def refused_on_the_slot(
    store: sessionstore.Store, down: tuple[str, str], up: tuple[str, str], figure: str
) -> list[tuple[str, Any, BaseException | None, float]]:
    """Every call on ``down``'s slots refused, at once; then every call on ``up``'s
    slots works. Records the slowest refusal as ``figure``; it must come within
    :data:`BOUND`."""
    calls = slot_calls(store, *down, tag=f"down-{uuid.uuid4().hex[:6]}")
    outcomes = guarded(calls)
    for name, _, error, _ in outcomes:
        check_refused(name, error, TIMEOUT)
    for name, call in slot_calls(store, *up, tag=f"up-{uuid.uuid4().hex[:6]}"):
        [(_, _, error, _)] = guarded([(name, call)])
        assert error is None, f"{name} on a served slot failed: {error!r}"
    slowest = max(seconds for *_, seconds in outcomes)
    figures.record(
        "unavailable",
        "cluster",
        faults=1,
        inputs=len(calls),
        refused=len(calls),
        **{figure: round(slowest * 1000)},
    )
    assert slowest < BOUND, f"the slowest refusal took {slowest:.2f} s (bound {BOUND:g} s)"
    return outcomes


def all_work(store: sessionstore.Store, session_id: str, symbol: str) -> None:
    for name, call in slot_calls(store, session_id, symbol, f"up-{uuid.uuid4().hex[:6]}"):
        [(_, _, error, _)] = guarded([(name, call)])
        assert error is None, f"{name} failed once the node was back: {error!r}"


def test_a_slot_whose_primary_is_killed_or_hung_is_unavailable_the_others_work(ns):
    with ClusterNodes(primaries=3, replicas=0) as cluster:
        cluster_ops.require_full_coverage(cluster, False)
        index_owner = cluster.owner(keys.index_keys(ns)[0])
        victim = next(n for n in cluster.primaries() if n is not index_owner)
        down = (
            name_on(victim, lambda s: log_slot(ns, s), "down-"),
            name_on(victim, lambda s: value_slot(ns, s), "D"),
        )
        up = (
            name_on(index_owner, lambda s: log_slot(ns, s), "up-"),
            name_on(index_owner, lambda s: value_slot(ns, s), "U"),
        )
        with sessionstore.connect(index_owner.url, ns, timeout=TIMEOUT) as store:
            for session_id, symbol in (down, up):
                store.events.create(SessionHeader(id=session_id, created_at=T0))
                store.events.append(session_id, [note(0, "first")])
                all_work(store, session_id, symbol)
            before = store.events.read_from(down[0], 0)
            # Killed, no replica to take over.
            cluster.kill(victim)
            refused_on_the_slot(store, down, up, "max_ms_to_fail_cluster_killed")
            cluster.start(victim)
            cluster.wait_ok()
            assert store.events.read_from(down[0], 0) == before
            all_work(store, *down)
            # Hung: connections accepted, nothing answered.
            assert victim.process is not None
            os.kill(victim.process.pid, signal.SIGSTOP)
            try:
                outcomes = refused_on_the_slot(store, down, up, "max_ms_to_fail_cluster_hung")
            finally:
                os.kill(victim.process.pid, signal.SIGCONT)
            for name, _, error, _ in outcomes:
                assert isinstance(error.__cause__, redis.TimeoutError), (name, error.__cause__)
            cluster.wait_ok()
            all_work(store, *down)
