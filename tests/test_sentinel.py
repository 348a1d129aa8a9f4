"""Redis Sentinel: ``redis+sentinel://`` URLs on a real local setup (one primary, two
replicas, three sentinels; :mod:`support.redis_sentinel`), and a failover under traffic.

With ``durability="replicas:1"`` every acknowledged append and value write was confirmed
by a replica, so it survives a SIGKILL of the primary: after the sentinels promote a
replica, the same store carries on (no reconnect call), every acknowledged event and
value is there, and nothing acknowledged is applied twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from support.redis_sentinel import SERVICE, SentinelSetup
from support.staleness import late_reads

import sessionstore
from sessionstore import (
    SeqConflictError,
    SessionEvent,
    SessionHeader,
    StoreUnavailableError,
)
from sessionstore.cli.doctor import run_checks
from sessionstore.redis.tracking import BOUND

T0 = 1_700_000_000_000
KEY = ("BTCUSDT", "sentinel", "binance", "1m")
Address = tuple[str, int]


@pytest.fixture(scope="module")
def setup() -> Iterator[SentinelSetup]:
    with SentinelSetup() as started:
        yield started


def test_a_sentinel_url_reaches_the_primary_and_is_never_taken_for_a_cluster(setup):
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    url = setup.url + "?durability=replicas:1&max_connections=4"
    with sessionstore.connect(url, namespace, timeout=2) as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T0)
        assert value.get_data(T0) == {"n": 1}
        store.events.create(SessionHeader(id="s"))
        event = SessionEvent(seq=0, type="tick", time=T0, data={"n": 0})
        assert store.events.append("s", [event]) == 1
        assert store.events.read_from("s", 0) == [event]
    primary = setup.node_at(setup.current_primary()[1])  # type: ignore[index]
    client = redis.Redis(port=primary.port)
    try:
        stats = client.info("commandstats")
        assert "cmdstat_cluster" not in stats  # no cluster detection was made
    finally:
        client.close()


def test_doctor_reports_every_node_of_the_service_and_its_default_durability(setup):
    """The URL names two of the three sentinels: the third is listed as the others know
    it; the persistence judged is the default durability of the service (replicas:1)."""
    first_two = ",".join(f"127.0.0.1:{s.port}" for s in setup.sentinels[:2])
    checks = run_checks(f"redis+sentinel://{first_two}/{SERVICE}/0", "t-doctor", False)
    by_name = {c.name: c for c in checks}
    sentinel = by_name["sentinel"]
    assert sentinel.status == "OK", sentinel.detail
    host, port = setup.current_primary()  # type: ignore[misc]
    assert "2 of 2 sentinels reached" in sentinel.detail
    assert f"other sentinels 127.0.0.1:{setup.sentinels[2].port}" in sentinel.detail
    assert f"primary {host}:{port}" in sentinel.detail and SERVICE in sentinel.detail
    for replica in setup.replicas:
        assert f"127.0.0.1:{replica.port}" in sentinel.detail.partition("replicas ")[2]
    assert by_name["persistence"].status == "OK", by_name["persistence"]
    assert "replicas:1" in by_name["persistence"].detail


class Traffic(threading.Thread):
    """Appends batches of 3 events, writes a value and updates a counter through one
    store, each thread on keys of its own (``tag``), recording what was acknowledged and
    when; a call refused by :class:`StoreUnavailableError` is made again."""

    def __init__(self, store: Any, tag: str) -> None:
        super().__init__(daemon=True)
        self.store, self.session_id = store, f"failover-{tag}"
        self.value_key = (KEY[0], f"value-{tag}", KEY[2], KEY[3])
        self.counter_key = (KEY[0], f"updates-{tag}", KEY[2], KEY[3])
        self.value = store.session(*self.value_key)
        self.counter = store.session(*self.counter_key)
        self.events: list[SessionEvent] = []
        self.acked_at: list[float] = []  # when each acknowledged append returned
        self.value_acks = 0  # the last {"n": ...} acknowledged by set_data
        self.update_tokens: list[str] = []  # tokens whose update was acknowledged
        self.failures: dict[str, int] = {}
        self.stop = threading.Event()
        self.crash: BaseException | None = None

    @property
    def acknowledged(self) -> int:
        """Appends, value writes and updates acknowledged."""
        return len(self.events) // 3 + self.value_acks + len(self.update_tokens)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.crash = exc

    def _failed(self, exc: BaseException) -> None:
        self.failures[type(exc).__name__] = self.failures.get(type(exc).__name__, 0) + 1
        time.sleep(0.02)

    def _run(self) -> None:
        self.store.events.create(SessionHeader(id=self.session_id))
        next_seq, n = 0, 0
        while not self.stop.is_set():
            events = [
                SessionEvent(seq=seq, type="tick", time=T0, data={"n": seq})
                for seq in range(next_seq, next_seq + 3)
            ]
            try:
                next_seq = self.store.events.append(self.session_id, events)
                self.events += events
                self.acked_at.append(time.monotonic())
            except StoreUnavailableError as exc:
                self._failed(exc)
                continue
            except SeqConflictError as exc:
                # An earlier send of this batch was applied (its reply lost): go on after it.
                self._failed(exc)
                next_seq = exc.expected
                continue
            n += 1
            while True:
                try:
                    self.value.set_data({"n": n}, T0)
                    self.value_acks = n
                    break
                except StoreUnavailableError as exc:
                    self._failed(exc)
            token = uuid.uuid4().hex
            try:
                self.counter.update(lambda v, t=token: {"ops": [*(v or {}).get("ops", []), t]}, T0)
                self.update_tokens.append(token)
            except StoreUnavailableError as exc:
                self._failed(exc)


@dataclass
class FailoverRun:
    """What one failover under traffic acknowledged, lost and duplicated."""

    acknowledged: int
    lost: int
    duplicated: int
    #: The longest time (s) any thread went without an acknowledged append.
    outage: float
    failures: dict[str, int]


def failover_under_traffic(
    setup: SentinelSetup,
    fault: Callable[[Address], None],
    after: Callable[[], None] = lambda: None,
) -> FailoverRun:
    """Three threads write through one store on the URL's default durability; ``fault``
    is done to the primary once each acknowledged 30 events, ``after`` once the sentinels
    name a new primary; once each thread acknowledged 30 more, every acknowledged write is
    looked up on the new primary, through a ``redis://`` URL of its own (a store still
    talking to the old primary would read what the sentinels are about to discard)."""
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    store = sessionstore.connect(setup.url, namespace, timeout=1)
    threads = [Traffic(store, str(number)) for number in range(3)]
    for thread in threads:
        thread.start()

    def acknowledged_at_least(counts: list[int], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while any(len(t.events) < c for t, c in zip(threads, counts, strict=True)):
            for thread in threads:
                assert thread.crash is None, thread.crash
            assert time.monotonic() < deadline, [len(t.events) for t in threads]
            time.sleep(0.01)

    try:
        acknowledged_at_least([30] * 3)
        old = setup.current_primary()
        assert old is not None
        fault(old)
        setup.wait(lambda: setup.current_primary() not in (None, old), "a new primary", 20)
        after()
        acknowledged_at_least([len(t.events) + 30 for t in threads])
    finally:
        for thread in threads:
            thread.stop.set()
        for thread in threads:
            thread.join(15)
    store.close()
    primary = setup.current_primary()
    assert primary is not None
    direct = f"redis://{primary[0]}:{primary[1]}/0?cluster=no&durability=none"
    with sessionstore.connect(direct, namespace, timeout=2) as reader:
        return _check(threads, reader)


def _check(threads: list[Traffic], reader: Any) -> FailoverRun:
    """What of the threads' acknowledged writes ``reader`` finds, lost or doubled."""
    for thread in threads:
        assert not thread.is_alive() and thread.crash is None, thread.crash
    lost = duplicated = 0
    failures: dict[str, int] = {}
    for thread in threads:
        for name, count in thread.failures.items():
            failures[name] = failures.get(name, 0) + count
        stored = reader.events.load(thread.session_id).events
        # seqs are contiguous from 0, so no event is stored twice
        assert [e.seq for e in stored] == list(range(len(stored)))
        assert all(e.data == {"n": e.seq} for e in stored)
        by_seq = {e.seq: e for e in stored}
        lost += sum(by_seq.get(e.seq) != e for e in thread.events) // 3
        value = reader.session(*thread.value_key).get_data(T0)
        lost += value != {"n": thread.value_acks}
        counter = reader.session(*thread.counter_key).get_data(T0)
        ops = (counter or {}).get("ops", [])
        duplicated += len(ops) - len(set(ops))
        lost += len(set(thread.update_tokens) - set(ops))
    assert set(failures) <= {"StoreUnavailableError", "NotReplicatedError", "SeqConflictError"}
    gaps = [
        later - earlier
        for thread in threads
        for earlier, later in zip(thread.acked_at, thread.acked_at[1:], strict=False)
    ]
    return FailoverRun(sum(t.acknowledged for t in threads), lost, duplicated, max(gaps), failures)


@pytest.fixture
def fresh() -> Iterator[SentinelSetup]:
    """A setup of its own: the fault leaves it changed."""
    with SentinelSetup() as started:
        yield started


def _report(what: str, run: FailoverRun) -> None:
    print(
        f"\n{what}: {run.acknowledged} acknowledged, {run.lost} lost, {run.duplicated} "
        f"duplicated, longest pause {run.outage:.2f} s, refused {run.failures}"
    )


def test_sentinel_failover_under_traffic_loses_and_doubles_nothing(fresh):
    def failover(old: Address) -> None:
        client = redis.Redis(port=fresh.sentinels[0].port, socket_timeout=2)
        try:
            assert client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        finally:
            client.close()

    run = failover_under_traffic(fresh, failover)
    _report("SENTINEL FAILOVER", run)
    assert (run.lost, run.duplicated) == (0, 0), run


def test_a_killed_primary_is_followed_and_nothing_acknowledged_is_lost_or_doubled(fresh):
    """The primary is killed 0.2 s after its replicas lost their links (they cannot
    reconnect meanwhile): what it acknowledged alone would be lost."""

    def ask(port: int, *command: str) -> None:
        client = redis.Redis(port=port, socket_timeout=2)
        try:
            client.execute_command(*command)
        finally:
            client.close()

    def kill(old: Address) -> None:
        replicas = [n.port for n in fresh.data_nodes if n.port != old[1]]
        for port in replicas:  # a password the primary does not have: no resync
            ask(port, "CONFIG", "SET", "masterauth", "not-the-password")
        ask(old[1], "CLIENT", "KILL", "TYPE", "replica")
        time.sleep(0.2)
        fresh.node_at(old[1]).kill()
        for port in replicas:
            ask(port, "CONFIG", "SET", "masterauth", "")

    run = failover_under_traffic(fresh, kill)
    _report("primary SIGKILLed", run)
    assert run.failures.get("StoreUnavailableError", 0) > 0, "the outage went unnoticed"
    assert (run.lost, run.duplicated) == (0, 0), run


def test_a_primary_hung_past_down_after_ms_loses_and_doubles_nothing(fresh):
    """The hung primary resumes as soon as the sentinels named another, while the
    clients still write: a primary in its own eyes until the sentinels demote it."""
    stopped: list[int] = []

    def hang(old: Address) -> None:
        pid = fresh.node_at(old[1]).process.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)

    def resume() -> None:
        while stopped:
            os.kill(stopped.pop(), signal.SIGCONT)

    try:
        run = failover_under_traffic(fresh, hang, resume)
    finally:
        resume()
    _report("primary SIGSTOPped past down-after-milliseconds", run)
    assert run.failures.get("StoreUnavailableError", 0) > 0, "the outage went unnoticed"
    assert (run.lost, run.duplicated) == (0, 0), run


def _store_connections(port: int) -> set[int]:
    """Ids of the data connections of stores on the server at ``port`` (not the
    sentinels', not this one)."""
    client = redis.Redis(port=port, socket_timeout=2)
    try:
        own = client.client_id()
        return {
            int(c["id"])
            for c in client.client_list(_type="normal")
            if int(c["id"]) != own and not str(c.get("name", "")).startswith("sentinel")
        }
    finally:
        client.close()


def test_a_wait_refused_by_a_demoted_primary_is_unavailable_and_drops_the_connection(fresh):
    """The primary is made a replica of another node under an open connection of the
    store, by hand (no sentinel event, no CLIENT KILL): the resend of a stored batch
    writes nothing, and its WAIT is refused there."""
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    url = fresh.url + "?durability=replicas:1"
    with sessionstore.connect(url, namespace, timeout=1) as store:
        store.events.create(SessionHeader(id="s"))
        batch = [SessionEvent(seq=seq, type="tick", time=T0, data={}) for seq in range(2)]
        assert store.events.append("s", batch) == 2
        primary = fresh.current_primary()
        assert primary is not None
        before = _store_connections(primary[1])
        assert before
        other = next(n for n in fresh.replicas if n.port != primary[1])
        admin = redis.Redis(port=other.port, socket_timeout=2)
        old = redis.Redis(port=primary[1], socket_timeout=2)
        try:
            admin.execute_command("REPLICAOF", "NO", "ONE")
            old.execute_command("REPLICAOF", "127.0.0.1", str(other.port))
            fresh.wait(
                lambda: old.info("replication").get("master_link_status") == "up",
                "the old primary in sync as a replica",
            )
        finally:
            admin.close()
            old.close()
        # A function not flagged no-writes is refused by a replica before it runs
        # (READONLY, which redis-py's Sentinel connection reports as "now a slave"); a
        # server without Functions runs the script's replay and refuses its WAIT.
        with pytest.raises(StoreUnavailableError, match="no longer one|now a slave"):
            store.events.append("s", batch)
        assert not before & _store_connections(primary[1]), "the connection was kept"
    # A redis:// URL of the demoted primary cannot go elsewhere: the refusal is mapped alike.
    direct = f"redis://127.0.0.1:{primary[1]}/0?cluster=no&durability=replicas:1"
    with (
        sessionstore.connect(direct, namespace, timeout=1) as store,
        pytest.raises(StoreUnavailableError, match="no longer a primary|read only replica"),
    ):
        store.events.append("s", batch)


def test_an_async_store_follows_a_sentinel_failover_and_loses_nothing(fresh):
    """sessionstore.aio on the same URL: appends from one coroutine through a
    SENTINEL FAILOVER; every acknowledged batch is on the new primary, once."""
    import asyncio

    import sessionstore.aio

    namespace = f"t-{uuid.uuid4().hex[:10]}"
    acknowledged: list[int] = []

    def failover() -> None:
        old = fresh.current_primary()
        sentinel = redis.Redis(port=fresh.sentinels[0].port, socket_timeout=2)
        try:
            sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        finally:
            sentinel.close()
        fresh.wait(lambda: fresh.current_primary() not in (None, old), "a new primary")

    async def go() -> None:
        async with sessionstore.aio.connect(fresh.url, namespace, timeout=1) as store:
            await store.events.create(SessionHeader(id="a"))
            next_seq, switched, after = 0, None, 0
            while switched is None or not switched.done() or after < 20:
                if len(acknowledged) == 20 and switched is None:
                    switched = asyncio.ensure_future(asyncio.to_thread(failover))
                batch = [
                    SessionEvent(seq=seq, type="tick", time=T0, data={"n": seq})
                    for seq in range(next_seq, next_seq + 2)
                ]
                try:
                    next_seq = await store.events.append("a", batch)
                    acknowledged.append(next_seq)
                    after += switched is not None and switched.done()
                except StoreUnavailableError:
                    await asyncio.sleep(0.02)
            await switched

    asyncio.run(go())
    primary = fresh.current_primary()
    assert primary is not None
    direct = f"redis://{primary[0]}:{primary[1]}/0?cluster=no&durability=none"
    with sessionstore.connect(direct, namespace, timeout=2) as reader:
        stored = reader.events.load("a").events
    assert [e.seq for e in stored] == list(range(len(stored)))
    assert len(stored) >= acknowledged[-1]


def test_the_fence_follows_the_events_of_the_service_and_no_other():
    """FailoverWatch on the sentinels' event texts (no server): a failover fences from its
    first event, an abort by the sentinel that began it lifts it, +switch-master lifts it
    and names the new primary, the late events of the leader about the primary already
    replaced fence nothing, and other services' events change nothing."""
    from sessionstore.redis.failover import FailoverWatch

    watch = FailoverWatch([("127.0.0.1", 1)], SERVICE, {}, 1.0)
    old, new = ("127.0.0.1", 7000), ("127.0.0.1", 7001)
    replica = f"slave 127.0.0.1:7001 127.0.0.1 7001 @ {SERVICE} 127.0.0.1 7000"

    watch._event("s1", "+try-failover", "master other 127.0.0.1 9000")
    assert watch.fence() is None and watch.generation == 0
    watch._event("s1", "+try-failover", f"master {SERVICE} 127.0.0.1 7000")
    assert watch.fence() is not None and "s1" in watch.fence()  # type: ignore[operator]
    watch._event("s1", "-failover-abort-not-elected", f"master {SERVICE} 127.0.0.1 7000")
    assert watch.fence() is None
    watch._event("s2", "+selected-slave", replica)
    stamp = watch.generation
    assert watch.fence() is not None
    watch._event("s3", "+switch-master", f"{SERVICE} 127.0.0.1 7000 127.0.0.1 7001")
    assert watch.fence() is None and watch.generation == stamp + 1
    assert watch.address(old) == new and watch.address(new) == new
    watch._event("s2", "+slave-reconf-done", replica)
    watch._event("s2", "+failover-end", f"master {SERVICE} 127.0.0.1 7000")
    assert watch.fence() is None
    # A failover of the new primary fences again.
    watch._event("s1", "+try-failover", f"master {SERVICE} 127.0.0.1 7001")
    assert watch.fence() is not None


def test_a_stopped_primary_leaves_no_cached_read_behind_past_the_bound():
    """SIGSTOP: the primary's sockets stay open and silent, so no connection drops and no
    invalidation comes. The cache's heartbeat goes unanswered: within the bound reads go
    to the server, and after the failover they find the new primary (or raise)."""
    with SentinelSetup() as own:
        namespace = f"t-{uuid.uuid4().hex[:10]}"
        cached = sessionstore.connect(own.url + "?cache=yes", namespace, timeout=1)
        other = sessionstore.connect(own.url, namespace, timeout=1)
        old = own.current_primary()
        assert old is not None
        stopped = own.node_at(old[1]).process
        assert stopped is not None
        try:
            value = cached.session(*KEY)
            value.set_data(1, T0)
            assert value.get_data(T0) == 1 and value.get_data(T0) == 1
            stopped.send_signal(signal.SIGSTOP)
            own.wait(lambda: own.current_primary() not in (None, old), "a new primary", 30)
            deadline = time.monotonic() + 30
            while True:
                try:
                    other.session(*KEY).set_data(2, T0)
                    break
                except StoreUnavailableError:
                    assert time.monotonic() < deadline, "the new primary takes no write"
            acknowledged = time.monotonic()
            late = late_reads(
                lambda: value.get_data(T0),
                2,
                acknowledged,
                BOUND,
                passing=(StoreUnavailableError,),
            )
            assert late == []
        finally:
            stopped.send_signal(signal.SIGCONT)
            cached.close()
            other.close()
