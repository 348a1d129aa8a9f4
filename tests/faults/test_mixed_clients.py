"""Exactly once whatever the other clients' settings: a value write's token is remembered
for its own client's resend window, however short the windows of the other clients that
write, delete or let expire the same value meanwhile.

Every value write sends the resend window of its client's timeout
(:func:`sessionstore.redis.options.resend_window_ms`): 10 s, 63 s and 147 s for timeouts
of 0.5 s, 5 s and 12 s. These tests compress time: they divide every window by a scale
(:func:`compress_windows`), so that "the reply came back after the short client's window"
takes a fraction of a second instead of 10 s. The proxies hold a client's lost reply for
at most what its own scaled window allows (:func:`longest_hold`), as a real network does
within the real windows, so every resend stays inside its own client's window.

* A reproducer: client A (timeout 12) writes through ``tests/support/tcp_proxy.py``,
  which swallows the reply and, before it closes A's connection (so before redis-py
  resends), lets client B (timeout 0.5) write or delete the value once B's window has
  passed since A's write, or write at once and then let B's window pass. A's resend must
  be recognised: ``update`` ran ``fn`` once, an older ``set_data`` did not overwrite
  B's newer value. (Before tokens were kept for their own window, B's writes dropped
  A's token and shortened the expiry of the ``ops`` zset to B's window.)
* A seeded Jepsen-style history: three clients of timeouts 0.5, 5 and 12 s, each
  through a proxy of its own that loses replies at random and holds the connection for
  a random while before closing it, run ``set_data`` / ``update`` / ``get_data`` on one
  value, plain and history. Every call is recorded and the history must be linearizable
  (``tests/faults/linearizability.py``); a counter (increments and reads only) must end
  at the acknowledged increments plus some of the indeterminate ones.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from support.redis_server import RedisServer
from support.tcp_proxy import TcpProxy

import sessionstore
from sessionstore import ConcurrentModificationError
from sessionstore.redis import values
from sessionstore.redis.options import resend_window_ms
from sessionstore.redis.retry import RETRIES, retry_delay

from . import figures
from .conftest import CI, SOAK
from .figures import figures_run  # noqa: F401 - used by pytestmark
from .linearizability import Op, Verdict, check, history_model, register_model, timed_call
from .test_linearizable_values import _preload

pytestmark = pytest.mark.usefixtures("figures_run")

#: Every client's resend window is divided by this in the histories (the back-offs
#: between a call's attempts are not scaled: the short client's call must still fit).
SCALE = 8
#: ... and in the reproducer, where only one long client's call must fit.
QUICK_SCALE = 64
SHORT, MEDIUM, LONG = 0.5, 5.0, 12.0
TIMEOUTS = (SHORT, MEDIUM, LONG)
T0 = 1_718_000_000_000
KEY = ("BTCUSDT", "mixed-clients", "binance", "1m")
HISTORY = pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
#: How long each history runs (s), and the seed of its faults and calls (printed).
SECONDS = 30.0 if SOAK else (1.5 if CI else 2.0)
SEED = int(os.environ.get("SESSIONSTORE_SEED", "20261201"))
#: A client's script replies are lost about one in this many, by its timeout: the long
#: client makes few calls (each lost reply holds it for seconds), so it loses more.
DROP_EVERY = {SHORT: 8, MEDIUM: 4, LONG: 1}


def scaled_window_ms(timeout: float, scale: int = SCALE) -> int:
    """The resend window (ms) of a client of ``timeout`` in these tests."""
    return resend_window_ms(timeout) // scale


def compress_windows(monkeypatch: pytest.MonkeyPatch, scale: int) -> None:
    """Make the clients opened from now on send windows divided by ``scale``."""
    monkeypatch.setattr(
        values, "resend_window_ms", lambda timeout: resend_window_ms(timeout) // scale
    )


def longest_hold(timeout: float) -> float:
    """The longest (s) a proxy holds a client's connection after losing its reply: the
    call's every attempt may be held so long, and with the back-offs between them they
    still end within half the client's own (scaled) window; and never as long as the
    timeout (the client would give up on its own)."""
    backoffs = sum(retry_delay(n) for n in range(1, RETRIES + 1))
    spare = scaled_window_ms(timeout) / 1000 / 2 - backoffs
    return min(0.8 * timeout, spare / (RETRIES + 1))


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=False) as own:
        _preload(own)  # so that a lost reply is never a NOSCRIPT one
        yield own


@pytest.fixture
def namespace() -> str:
    return f"mixed-{uuid.uuid4().hex[:10]}"


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def wait_server_time(client: redis.Redis, at_ms: int) -> None:
    """Return once the server's clock has passed ``at_ms``."""
    while server_ms(client) <= at_ms:
        time.sleep(0.005)


# --- the reproducer ---------------------------------------------------------------------


def test_the_scaled_windows_keep_the_real_order():
    """What the tests below rely on: the short client's window is shorter than the time
    the long client's reply may be held, and each client's window covers its own call."""
    assert scaled_window_ms(SHORT) < scaled_window_ms(MEDIUM) < scaled_window_ms(LONG)
    assert scaled_window_ms(SHORT) / 1000 < longest_hold(LONG)
    assert all(longest_hold(timeout) > 0.05 for timeout in TIMEOUTS)
    # The reproducer's long client resends (one back-off) well within its window.
    assert scaled_window_ms(LONG, QUICK_SCALE) > 4 * (scaled_window_ms(SHORT, QUICK_SCALE) + 100)


@HISTORY
@pytest.mark.parametrize("op", ["update", "set_data"])
@pytest.mark.parametrize("meanwhile", ["write-later", "delete-later", "write-then-wait"])
def test_a_resend_is_recognised_after_a_client_of_a_shorter_window_wrote(
    server, namespace, monkeypatch, history, op, meanwhile
):
    compress_windows(monkeypatch, QUICK_SCALE)
    with (
        contextlib.closing(redis.Redis(port=server.port)) as clock,
        TcpProxy(server.port) as proxy,
        sessionstore.connect(proxy.url, namespace, timeout=LONG) as long_store,
        sessionstore.connect(server.url, namespace, timeout=SHORT) as short_store,
    ):
        mine = long_store.session(*KEY, history=history)
        other = short_store.session(*KEY, history=history)
        mine.set_data(5, T0)
        short_window = scaled_window_ms(SHORT, QUICK_SCALE)

        def between() -> None:
            # The long client's reply is swallowed; it resends once this returns.
            if meanwhile == "write-then-wait":
                other.set_data(100, T0)
            wait_server_time(clock, server_ms(clock) + short_window)
            if meanwhile == "write-later":
                other.set_data(100, T0)
            elif meanwhile == "delete-later":
                other.delete()

        calls: list[Any] = []

        def increment(value: int | None) -> int:
            calls.append(value)
            return (value or 0) + 1

        proxy.drop_replies("FCALL", before_close=between)
        returned = mine.update(increment, T0) if op == "update" else mine.set_data("A", T0)
        final = other.get_data(T0)
        assert proxy.dropped == 1 and not proxy.hook_errors, proxy.hook_errors
    expected = None if meanwhile == "delete-later" else 100
    figures.record("lost_reply", "redis", faults=1, inputs=1, duplicates=int(final != expected))
    if op == "update":
        assert calls == [5], f"fn ran on {calls}: the resent swap was applied again"
        assert returned == 6
    assert final == expected, f"the resend wrote again over the newer state: {final!r}"


# --- the Jepsen-style history -------------------------------------------------------------


@dataclass
class Client:
    """One client of the history: its number, timeout and proxy."""

    process: int
    timeout: float
    proxy: TcpProxy


def _work(
    client: Client,
    url: str,
    namespace: str,
    history: bool,
    mix: str,
    until: float,
    rng: random.Random,
    out: list[Op],
) -> None:
    with sessionstore.connect(url, namespace, timeout=client.timeout) as store:
        session = store.session(*KEY, history=history)
        number = 0
        while time.monotonic() < until:
            number += 1
            roll = rng.random()
            op: Op | None
            if mix == "mixed" and roll < 0.3:
                value = client.process * 1_000_000 + number
                write = functools.partial(session.set_data, value, T0)
                op = timed_call(client.process, "set", (value, T0), write)
            elif roll < 0.65:
                op = timed_call(
                    client.process,
                    "update_add",
                    (1, T0),
                    lambda: session.update(lambda v: (v or 0) + 1, T0),
                    no_effect=(ConcurrentModificationError,),
                )
            else:
                op = timed_call(client.process, "get", (T0,), lambda: session.get_data(T0))
            if op is not None:
                out.append(op)


class Injector(threading.Thread):
    """Keeps one lost reply armed on every client's proxy, after a random number of
    script calls; each lost reply holds the connection for a random while, up to the
    client's :func:`longest_hold`, before closing it."""

    def __init__(self, clients: list[Client], until: float, rng: random.Random) -> None:
        super().__init__(name="injector", daemon=True)
        self.clients, self.until, self.rng = clients, until, rng
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while time.monotonic() < self.until:
                for client in self.clients:
                    if client.proxy.pending_drops() == 0:
                        hold = self.rng.uniform(0.4, 1.0) * longest_hold(client.timeout)
                        client.proxy.drop_replies(
                            "FCALL",
                            skip=self.rng.randrange(2 * DROP_EVERY[client.timeout]),
                            before_close=functools.partial(self.hold, hold),
                        )
                time.sleep(0.005)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            for client in self.clients:
                client.proxy.cancel()

    def hold(self, seconds: float) -> None:
        """Hold a connection whose reply was lost (in the proxy's thread), at most until
        the history ends."""
        time.sleep(max(0.0, min(seconds, self.until - time.monotonic())))


def run_history(server: RedisServer, history: bool, mix: str, seed: int) -> tuple[list[Op], int]:
    """Three clients, one of each timeout, each through a proxy of its own; the
    recorded ops (a final read last) and the replies lost."""
    namespace = f"mixed-{uuid.uuid4().hex[:10]}"
    rng = random.Random(seed)
    proxies = [TcpProxy(server.port) for _ in TIMEOUTS]
    try:
        clients = [Client(n, t, p) for n, (t, p) in enumerate(zip(TIMEOUTS, proxies, strict=True))]
        until = time.monotonic() + SECONDS
        recorded: list[list[Op]] = [[] for _ in clients]
        workers = [
            threading.Thread(
                target=_work,
                args=(
                    c,
                    c.proxy.url,
                    namespace,
                    history,
                    mix,
                    until,
                    random.Random(rng.random()),
                    out,
                ),
                name=f"client-{c.timeout}",
                daemon=True,
            )
            for c, out in zip(clients, recorded, strict=True)
        ]
        injector = Injector(clients, until, random.Random(rng.random()))
        injector.start()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(SECONDS + 60)
            assert not worker.is_alive(), f"{worker.name} did not finish"
        injector.join(10)
        assert injector.error is None, injector.error
        dropped = sum(p.dropped for p in proxies)
    finally:
        for proxy in proxies:
            proxy.close()
    with sessionstore.connect(server.url, namespace, timeout=5) as store:
        session = store.session(*KEY, history=history)
        last = timed_call(len(TIMEOUTS), "get", (T0,), lambda: session.get_data(T0))
    assert last is not None and last.ok, "the final read failed"
    return [op for ops in recorded for op in ops] + [last], dropped


@HISTORY
@pytest.mark.parametrize("mix", ["mixed", "counter"])
def test_clients_of_different_timeouts_stay_linearizable_under_lost_replies(
    server, monkeypatch, history, mix
):
    compress_windows(monkeypatch, SCALE)
    seed = SEED + 2 * ["mixed", "counter"].index(mix) + int(history)
    ops, dropped = run_history(server, history, mix, seed)
    model = history_model() if history else register_model()
    result = check(ops, model, horizon=1.0, timeout=60.0)
    acknowledged = sum(op.ok for op in ops)
    indeterminate = len(ops) - acknowledged
    lost = duplicated = 0
    if mix == "counter":
        # Every acknowledged increment is in the final count, and nothing else but some
        # of the indeterminate ones.
        updates = [op for op in ops if op.kind == "update_add"]
        acked = sum(op.ok for op in updates)
        final = ops[-1].result or 0
        lost = max(acked - final, 0)
        duplicated = max(final - len(updates), 0)
    name = f"{mix}/{'history' if history else 'plain'}"
    print(
        f"\nFIGURES mixed-timeouts/{name} seed={seed}: ops={len(ops)} "
        f"acknowledged={acknowledged} indeterminate={indeterminate} lost replies={dropped} "
        f"lost={lost} duplicated={duplicated} verdict={result.verdict.value}"
    )
    figures.record(
        "linearizable_values",
        "redis",
        inputs=len(ops),
        faults=dropped,
        duplicates=duplicated,
        histories=1,
        operations=len(ops),
        indeterminate=indeterminate,
    )
    assert dropped > 0, "no reply was lost"
    assert result.verdict is not Verdict.NOT_LINEARIZABLE, f"seed {seed}: {result}"
    assert result.ok, f"seed {seed}: the checker could not decide: {result}"
    assert lost == duplicated == 0, f"seed {seed}: {lost} increments lost, {duplicated} doubled"
