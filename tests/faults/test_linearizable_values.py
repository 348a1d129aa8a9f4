"""Session values are linearizable under lost and delayed replies and server crashes,
checked the way Jepsen checks: record every call, then search for a linearization.

5 processes run random ``set_data`` / ``get_data`` / ``update`` (an increment) on one
value, plain or history, through ``tests/support/tcp_proxy.py``. Meanwhile the test
process injects faults: it loses a few % of the script replies (the server applies the
call, the client's connection drops, redis-py resends), stalls the proxy for a moment
(replies delayed, then the connection cut: the request may or may not have arrived),
and in one variant SIGKILLs redis-server (AOF ``appendfsync always``) and restarts it.
Each process records its calls with :func:`~.linearizability.timed_call` (a call that
raised is indeterminate: it may or may not have taken effect), and
:func:`~.linearizability.check` must find every history linearizable. The counter
histories (increments and reads only) must also end exactly at the increments
acknowledged plus some of the indeterminate ones.

Short by default (the whole file well under 40 s); ``SESSIONSTORE_SOAK=1`` runs long.
The figures of each run are printed (``-s``) for ``docs/reliability.md``.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from support.redis_server import RedisServer
from support.tcp_proxy import TcpProxy

import sessionstore
from sessionstore import ConcurrentModificationError
from sessionstore.redis.library import install

from .conftest import CI, SOAK
from .figures import figures_run, record  # noqa: F401 - figures_run is used by pytestmark
from .linearizability import Op, Verdict, check, history_model, register_model, timed_call

pytestmark = pytest.mark.usefixtures("figures_run")

PROCESSES = 5
#: The client's timeout (s): each attempt waits at most this for a reply.
TIMEOUT = 0.5
#: The longest stall of the proxy (s).
STALL = 0.3
#: When every call is made: one logical time, so every write is visible to every read.
T0 = 1_718_000_000_000
KEY = ("BTCUSDT", "linearizable", "binance", "1m")
#: How long each history runs (s), and how many histories a test checks.
SECONDS = 60.0 if SOAK else (1.5 if CI else 2.0)
HISTORIES = 10 if SOAK else 2
#: One script reply in about this many is lost.
DROP_EVERY = 25


@dataclass
class Faults:
    """What the fault injector did during one history."""

    dropped: int = 0
    stalls: int = 0
    kills: int = 0

    @property
    def total(self) -> int:
        return self.dropped + self.stalls + self.kills


@dataclass
class Figures:
    """Totals over the histories of one test, printed for docs/reliability.md."""

    histories: int = 0
    ops: int = 0
    indeterminate: int = 0
    faults: Faults = field(default_factory=Faults)
    verdicts: list[str] = field(default_factory=list)

    def add(self, history: list[Op], faults: Faults, verdict: Verdict) -> None:
        self.histories += 1
        self.ops += len(history)
        self.indeterminate += sum(not op.ok for op in history)
        self.faults.dropped += faults.dropped
        self.faults.stalls += faults.stalls
        self.faults.kills += faults.kills
        self.verdicts.append(verdict.value)

    def show(self, name: str) -> None:
        record(
            "linearizable_values",
            "redis",
            kills=self.faults.kills,
            inputs=self.ops,
            faults=self.faults.total,
            histories=self.histories,
            operations=self.ops,
            indeterminate=self.indeterminate,
        )
        print(
            f"\nFIGURES {name}: histories={self.histories} ops={self.ops} "
            f"indeterminate={self.indeterminate} faults={self.faults.total} "
            f"(lost replies {self.faults.dropped}, stalls {self.faults.stalls}, "
            f"kills {self.faults.kills}) verdicts={sorted(set(self.verdicts))}"
        )


# --- the worker processes -----------------------------------------------------------------


def _work(
    process: int, url: str, namespace: str, history: bool, mix: str, until: float, out: Any
) -> None:
    """Run random calls until the monotonic time ``until``; send the recorded ops."""
    rng = random.Random(process * 7919 + int(time.time() * 1000))
    ops: list[Op] = []
    with sessionstore.connect(url, namespace, timeout=TIMEOUT) as store:
        session = store.session(*KEY, history=history)
        number = 0
        while time.monotonic() < until:
            number += 1
            roll = rng.random()
            if mix == "mixed" and roll < 0.3:
                value = process * 1_000_000 + number * 1000
                op = timed_call(
                    process, "set", (value, T0), lambda v=value: session.set_data(v, T0)
                )
            elif roll < 0.65:
                op = timed_call(
                    process,
                    "update_add",
                    (1, T0),
                    lambda: session.update(lambda v: (v or 0) + 1, T0),
                    no_effect=(ConcurrentModificationError,),
                )
            else:
                op = timed_call(process, "get", (T0,), lambda: session.get_data(T0))
            if op is not None:
                ops.append(op)
    out.put((process, ops))


def _final_read(url: str, namespace: str, history: bool) -> Op:
    """A last read, after every process stopped, as an op of its own."""
    with sessionstore.connect(url, namespace, timeout=5) as store:
        session = store.session(*KEY, history=history)
        op = timed_call(PROCESSES, "get", (T0,), lambda: session.get_data(T0))
    assert op is not None and op.ok, "the final read failed"
    return op


# --- the fault injector -------------------------------------------------------------------


class Injector(threading.Thread):
    """Loses about one script reply in :data:`DROP_EVERY`, stalls the proxy now and
    then, and (``kill``) SIGKILLs and restarts the server once or twice per history."""

    def __init__(
        self, proxy: TcpProxy, server: RedisServer, until: float, seed: int, kill: bool
    ) -> None:
        super().__init__(name="injector", daemon=True)
        self.proxy, self.server, self.until, self.kill = proxy, server, until, kill
        self.rng = random.Random(seed)
        self.faults = Faults()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._inject()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.proxy.cancel()
            self.proxy.resume()

    def _inject(self) -> None:
        start = time.monotonic()
        kills_at = sorted(
            start + self.rng.uniform(0.2, 0.6) * (self.until - STALL - start)
            for _ in range((2 if SOAK else 1) if self.kill else 0)
        )
        while time.monotonic() < self.until - STALL:
            if self.proxy.pending_drops() == 0:
                self.proxy.drop_replies("FCALL", skip=self.rng.randrange(2 * DROP_EVERY))
            if kills_at and time.monotonic() >= kills_at[0]:
                kills_at.pop(0)
                self.server.kill()
                time.sleep(self.rng.uniform(0.05, 0.3))
                self.server.start()  # same dir and port: the AOF is replayed
                self.faults.kills += 1
            elif self.rng.random() < 0.02:
                self.proxy.stall()
                time.sleep(self.rng.uniform(0.02, STALL))
                self.proxy.resume()
                self.faults.stalls += 1
            time.sleep(0.01)


# --- one history ------------------------------------------------------------------------


def run_history(
    server: RedisServer, history: bool, mix: str, kill: bool = False
) -> tuple[list[Op], Faults]:
    """Run :data:`PROCESSES` workers against a fresh namespace through a fresh proxy."""
    namespace = f"lin-{uuid.uuid4().hex[:10]}"
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    with TcpProxy(server.port) as proxy:
        dropped_before = proxy.dropped
        until = time.monotonic() + SECONDS
        workers = [
            context.Process(
                target=_work,
                args=(n, proxy.url, namespace, history, mix, until, out),
                daemon=True,
            )
            for n in range(PROCESSES)
        ]
        for worker in workers:
            worker.start()
        injector = Injector(proxy, server, until, random.randrange(1 << 30), kill)
        injector.start()
        recorded: list[Op] = []
        for _ in workers:
            recorded += out.get(timeout=SECONDS + 60)[1]
        for worker in workers:
            worker.join(10)
        injector.join(10)
        assert injector.error is None, injector.error
        injector.faults.dropped = proxy.dropped - dropped_before
    recorded.append(_final_read(server.url, namespace, history))
    return recorded, injector.faults


def check_counter(ops: list[Op]) -> None:
    """Increments only: the final value is the acknowledged increments plus some of the
    indeterminate ones, and every acknowledged update returned a distinct count."""
    final = ops[-1].result or 0
    acked = [op for op in ops if op.kind == "update_add" and op.ok]
    maybe = sum(1 for op in ops if op.kind == "update_add" and not op.ok)
    assert len(acked) <= final <= len(acked) + maybe, (
        f"counter at {final}: {len(acked)} increments acknowledged, {maybe} indeterminate"
    )
    returned = [op.result for op in acked]
    assert len(set(returned)) == len(returned), "two updates returned the same count"


def assert_linearizable(ops: list[Op], history: bool) -> Verdict:
    model = history_model() if history else register_model()
    result = check(ops, model, horizon=STALL + TIMEOUT, timeout=60.0)
    assert result.verdict is not Verdict.NOT_LINEARIZABLE, str(result)
    assert result.ok, f"the checker could not decide: {result}"
    return result.verdict


# --- the tests ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=True) as own:
        yield own


def _preload(server: RedisServer) -> None:
    client = redis.Redis(port=server.port)
    try:
        install(client)
    finally:
        client.close()


HISTORY = pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])


@HISTORY
def test_set_get_and_update_are_linearizable_under_lost_and_delayed_replies(server, history):
    _preload(server)
    figures = Figures()
    for _ in range(HISTORIES):
        ops, faults = run_history(server, history, "mixed")
        figures.add(ops, faults, assert_linearizable(ops, history))
    figures.show(f"mixed/{'history' if history else 'plain'}/lost+delayed")
    assert figures.faults.dropped > 0


@HISTORY
def test_a_counter_updated_by_every_process_ends_exact(server, history):
    _preload(server)
    figures = Figures()
    for _ in range(HISTORIES):
        ops, faults = run_history(server, history, "counter")
        check_counter(ops)
        figures.add(ops, faults, assert_linearizable(ops, history))
    figures.show(f"counter/{'history' if history else 'plain'}/lost+delayed")
    assert figures.faults.dropped > 0


@HISTORY
def test_values_stay_linearizable_when_the_server_is_killed_and_restarted(history):
    figures = Figures()
    with RedisServer(durable=True) as own:
        for _ in range(1 if not SOAK else HISTORIES):
            ops, faults = run_history(own, history, "mixed", kill=True)
            figures.add(ops, faults, assert_linearizable(ops, history))
            ops, faults = run_history(own, history, "counter", kill=True)
            check_counter(ops)
            figures.add(ops, faults, assert_linearizable(ops, history))
    figures.show(f"kill/{'history' if history else 'plain'}")
    assert figures.faults.kills >= 2
