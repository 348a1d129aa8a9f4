"""Redis Sentinel: ``redis+sentinel://`` URLs on a real local setup (one primary, two
replicas, three sentinels; :mod:`support.redis_sentinel`), and a failover under traffic.

With ``durability="replicas:1"`` every acknowledged append and value write was confirmed
by a replica, so it survives a SIGKILL of the primary: after the sentinels promote a
replica, the same store carries on (no reconnect call), every acknowledged event and
value is there, and nothing acknowledged is applied twice.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.redis_sentinel import SERVICE, SentinelSetup
from support.staleness import late_reads

import sessionstore
from sessionstore import (
    DurabilityError,
    SeqConflictError,
    SessionEvent,
    SessionHeader,
    StoreUnavailableError,
)
from sessionstore.cli.doctor import run_checks
from sessionstore.redis.tracking import BOUND

T0 = 1_700_000_000_000
KEY = ("BTCUSDT", "sentinel", "binance", "1m")
#: The errors a call may raise while the primary is down or just replaced.
PASSING = (StoreUnavailableError, DurabilityError)


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
    import redis

    client = redis.Redis(port=primary.port)
    try:
        stats = client.info("commandstats")
        assert "cmdstat_cluster" not in stats  # no cluster detection was made
    finally:
        client.close()


def test_doctor_reports_the_sentinels_and_the_service_topology(setup):
    checks = run_checks(setup.url + "?durability=replicas:1", "t-doctor", False)
    [sentinel] = [c for c in checks if c.name == "sentinel"]
    assert sentinel.status == "OK", sentinel.detail
    host, port = setup.current_primary()  # type: ignore[misc]
    assert "3 of 3 sentinels reached" in sentinel.detail
    assert f"primary {host}:{port}" in sentinel.detail and SERVICE in sentinel.detail
    assert sentinel.detail.count("127.0.0.1:") >= 3 + 1 + 2


class Traffic(threading.Thread):
    """Appends batches of 3 events and writes values through one store, recording what
    was acknowledged; a call refused by a :data:`PASSING` error is made again."""

    def __init__(self, store: Any, session_id: str) -> None:
        super().__init__(daemon=True)
        self.store, self.session_id = store, session_id
        self.events: list[SessionEvent] = []
        self.value_acks = 0  # the last {"n": ...} acknowledged by set_data
        self.update_tokens: list[str] = []  # tokens whose update was acknowledged
        self.failures: dict[str, int] = {}
        self.stop = threading.Event()
        self.crash: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.crash = exc

    def _failed(self, exc: BaseException) -> None:
        self.failures[type(exc).__name__] = self.failures.get(type(exc).__name__, 0) + 1
        time.sleep(0.02)

    def _run(self) -> None:
        value = self.store.session(*KEY)
        counter = self.store.session(KEY[0], "sentinel-updates", KEY[2], KEY[3])
        next_seq, n = 0, 0
        while not self.stop.is_set():
            events = [
                SessionEvent(seq=seq, type="tick", time=T0, data={"n": seq})
                for seq in range(next_seq, next_seq + 3)
            ]
            try:
                next_seq = self.store.events.append(self.session_id, events)
                self.events += events
            except PASSING as exc:
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
                    value.set_data({"n": n}, T0)
                    self.value_acks = n
                    break
                except PASSING as exc:
                    self._failed(exc)
            token = uuid.uuid4().hex
            try:
                counter.update(lambda v, t=token: {"ops": [*(v or {}).get("ops", []), t]}, T0)
                self.update_tokens.append(token)
            except PASSING as exc:
                self._failed(exc)


def test_a_killed_primary_is_followed_and_nothing_acknowledged_is_lost_or_doubled(setup):
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    session_id = "failover"
    store = sessionstore.connect(setup.url, namespace, timeout=1, durability="replicas:1")
    traffic = Traffic(store, session_id)
    store.events.create(SessionHeader(id=session_id))
    traffic.start()
    try:

        def acknowledged_at_least(count: int, timeout: float = 20) -> None:
            deadline = time.monotonic() + timeout
            while len(traffic.events) < count:
                assert traffic.crash is None, traffic.crash
                assert time.monotonic() < deadline, f"stuck at {len(traffic.events)} events"
                time.sleep(0.01)

        acknowledged_at_least(60)
        old = setup.current_primary()
        assert old is not None
        setup.node_at(old[1]).kill()
        setup.wait(lambda: setup.current_primary() not in (None, old), "a new primary", 20)
        at_failover = len(traffic.events)
        acknowledged_at_least(at_failover + 60)
    finally:
        traffic.stop.set()
        traffic.join(15)
    try:
        assert not traffic.is_alive() and traffic.crash is None, traffic.crash
        assert traffic.failures.get("StoreUnavailableError", 0) > 0, "the outage went unnoticed"
        assert set(traffic.failures) <= {
            "StoreUnavailableError",
            "DurabilityError",
            "SeqConflictError",
        }
        # The same store reads what the new primary holds.
        stored = store.events.load(session_id).events
        assert [e.seq for e in stored] == list(range(len(stored)))
        assert all(e.data == {"n": e.seq} for e in stored)
        by_seq = {e.seq: e for e in stored}
        assert all(by_seq.get(e.seq) == e for e in traffic.events)
        assert store.session(*KEY).get_data(T0) == {"n": traffic.value_acks}
        ops = store.session(KEY[0], "sentinel-updates", KEY[2], KEY[3]).get_data(T0)["ops"]
        assert len(ops) == len(set(ops)), "an update was applied twice"
        assert set(traffic.update_tokens) <= set(ops)
    finally:
        store.close()


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
                except PASSING:
                    assert time.monotonic() < deadline, "the new primary takes no write"
            acknowledged = time.monotonic()
            late = late_reads(lambda: value.get_data(T0), 2, acknowledged, BOUND, passing=PASSING)
            assert late == []
        finally:
            stopped.send_signal(signal.SIGCONT)
            cached.close()
            other.close()
