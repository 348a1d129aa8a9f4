"""Late copies of a value write: what the server does with a copy of a request that a
middlebox delivers long after its client gave up on it and resent it.

``tests/support/tcp_proxy.py`` holds the first send of a write (its connection forwards
nothing more): the client (timeout 0.5 s) times out, redis-py resends the call on a new
connection, the resend is applied and acknowledged, and another client writes or deletes
the value after it. Then the proxy delivers the held copy.

* Within the bound of docs/reliability.md ("Late copies"): the copy reaches the server
  while its writer slot's record is on the value's ``seq`` hash, which is kept at least
  the client's resend window after the slot last wrote the value. The copy is refused
  (the script answers as for a resend, writing nothing): the newer value stays, a delete
  stays, ``update``'s swap is not applied a second time.
* Past it: the copy reaches the server once the record is gone (here: the ``seq`` hash
  expired, once the windows of every write of the value passed). The server cannot tell
  it from a first send, and applies it: the documented limit, pinned here so that a
  change of it is seen.

Windows are compressed (divided by a scale, as in ``test_mixed_clients.py``) so that the
past-the-bound case takes a second, not twenty.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from support.redis_server import RedisServer
from support.tcp_proxy import TcpProxy

import sessionstore
from sessionstore import keys
from sessionstore.keys import ValueKey
from sessionstore.redis import values
from sessionstore.redis.options import resend_window_ms

from .test_linearizable_values import _preload

#: The client whose first send is held: it times out and resends within a second.
TIMEOUT = 0.5
#: The compressed windows: 1,250 ms and 250 ms for TIMEOUT (10 s uncompressed).
WITHIN_SCALE, PAST_SCALE = 8, 40
T0 = 1_718_000_000_000
KEY = ("BTCUSDT", "late-copies", "binance", "1m")
OPS = pytest.mark.parametrize("op", ["set_data", "update", "delete"])
HISTORY = pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=False) as own:
        _preload(own)  # so that the held request is the script call itself
        yield own


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def run_held(
    server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    scale: int,
    history: bool,
    op: str,
    deliver: Any,
) -> tuple[Any, list[Any], Any, bytes | None]:
    """Play the scenario of the module doc: ``op`` through the proxy with its first send
    held (``update`` of no value, the others of a value), then another client's newer
    write (or delete, after ``update``), then
    ``deliver(clock, namespace, acknowledged_ms)`` returns when the copy is to be
    delivered. Returns (the value afterwards, what ``fn`` saw, what the call returned,
    the server's reply to the copy)."""
    window = resend_window_ms(TIMEOUT) // scale
    monkeypatch.setattr(
        values, "resend_window_ms", lambda timeout: resend_window_ms(timeout) // scale
    )
    namespace = f"late-{uuid.uuid4().hex[:10]}"
    with (
        contextlib.closing(redis.Redis(port=server.port)) as clock,
        TcpProxy(server.port) as proxy,
        sessionstore.connect(proxy.url, namespace, timeout=TIMEOUT) as late_store,
        sessionstore.connect(server.url, namespace, timeout=5.0) as other_store,
    ):
        mine = late_store.session(*KEY, history=history)
        other = other_store.session(*KEY, history=history)
        if op != "update":  # an update starts from no value, so a delete brings it back
            other.set_data(5, T0)
        mine.get_data(T0)  # connected: the held request is the write's own
        seen: list[Any] = []

        def increment(value: Any) -> int:
            seen.append(value)
            return (value or 0) + 1

        # A history write sends its index entry's call (index_add.lua) first; a plain
        # value's write function checks the entry itself, in its one call.
        held = proxy.hold_requests("FCALL", skip=1 if history and op != "delete" else 0)
        if op == "set_data":
            returned = mine.set_data("late", T0)
        elif op == "update":
            returned = mine.update(increment, T0)
        else:
            returned = mine.delete()
        acknowledged = server_ms(clock)
        assert held.taken and not held.delivered.is_set(), "the first send was not held"
        if op == "update":
            other.delete()
        else:
            other.set_data("newer", T0)
        deliver(clock, namespace, acknowledged, window)
        held.release.set()
        assert held.delivered.wait(10), "the held copy never reached the server"
        return other.get_data(T0), seen, returned, held.reply


def newer_state(op: str) -> Any:
    """What the other client left: a delete after ``update``, else its newer value."""
    return None if op == "update" else "newer"


@HISTORY
@OPS
def test_a_copy_reaching_the_server_within_the_window_is_refused(server, monkeypatch, history, op):
    def within(clock: redis.Redis, namespace: str, acknowledged: int, window: int) -> None:
        # Most of the window, counted from the acknowledgement (after the application).
        deadline = acknowledged + int(0.8 * window)
        while server_ms(clock) < deadline:
            time.sleep(0.01)

    final, seen, returned, reply = run_held(server, monkeypatch, WITHIN_SCALE, history, op, within)
    assert final == newer_state(op), f"the late copy was applied again: {final!r}"
    if op == "update":
        assert seen == [None] and returned == 1
    # Answered as a resend of an applied call: its first outcome, nothing written (the
    # delete found the value then).
    assert reply == (b":1\r\n" if op == "delete" else b"$2\r\nOK\r\n"), reply


@OPS
def test_a_copy_reaching_the_server_after_its_record_is_gone_is_applied(server, monkeypatch, op):
    """The documented bound (docs/reliability.md, "Late copies"): past the record's
    life the server cannot recognise the copy."""

    def past(clock: redis.Redis, namespace: str, acknowledged: int, window: int) -> None:
        seq = keys.seq_key(ValueKey(namespace, *KEY, "backtest"))  # plain and history alike
        # The record is kept at least the window; the hash expires within twice the
        # window of the last write (nothing else writes the value now).
        limit = time.monotonic() + 20 * window / 1000 + 5
        while clock.exists(seq) and time.monotonic() < limit:
            time.sleep(0.02)
        assert not clock.exists(seq), "the seq hash outlived twice every window"

    # One form (a plain value) suffices here: the record is the same for a history.
    final, seen, returned, reply = run_held(server, monkeypatch, PAST_SCALE, False, op, past)
    applied_again = {"set_data": "late", "update": 1, "delete": None}[op]
    assert final == applied_again, f"expected the documented re-application, found {final!r}"
    if op == "update":
        assert seen == [None] and returned == 1  # fn ran once; its swap landed twice
