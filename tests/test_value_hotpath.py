"""The client-side hot path of a plain value's get_data / set_data: a Redis write hands
redis-py its own arguments as bytes (the same bytes on the wire as before), and a call
that no telemetry records runs without the flow machinery (a recorded one still does)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis._parsers.encoders import Encoder

import sessionstore
from sessionstore import keys, store
from sessionstore.contracts import Stored
from sessionstore.drive import drive
from sessionstore.keys import ValueKey
from sessionstore.redis.boundary import ErrorBoundary
from sessionstore.redis.index import REFRESH_MS
from sessionstore.redis.library import script
from sessionstore.redis.valueformat import ANY
from sessionstore.redis.values import ValueOps

KEY = ValueKey("ns", "BTCUSDT", "hot", "binance", "1h", "backtest")
WHEN = 1_700_000_000_000


def sent_write(expected: Any, ttl_ms: int | None) -> list[Any]:
    """The one command a plain write (``expected``: ANY, or a swap's record) sends."""
    sent: list[Any] = []

    def answer(step: Any) -> Any:
        sent.extend(step.commands)
        return lambda: [b"OK"]

    values = ValueOps(ErrorBoundary("redis://127.0.0.1:1/0", 0.5), None)
    client = redis.Redis(port=1)  # never connects: the answer stands in for the server
    if expected is ANY:
        steps = values.write(client, KEY, b"\x01", WHEN, ttl_ms)
    else:
        steps = values.swap(client, KEY, expected, b"\x01", WHEN, ttl_ms)
    drive(steps, answer)
    (command,) = sent
    return list(command)


@pytest.mark.parametrize(
    ("expected", "ttl_ms", "flag"),
    [(ANY, None, ["-"]), (Stored(b"\x00", WHEN - 1), 60_000, ["1"])],
    ids=["write", "swap"],
)
def test_a_plain_write_hands_redis_py_bytes_and_sends_what_it_sent_before(expected, ttl_ms, flag):
    command = sent_write(expected, ttl_ms)
    index, member = keys.index_keys(KEY.namespace)[1], keys.value_member(KEY, False)
    # Only the verb and the index entry's arguments are left for redis-py to encode.
    assert [arg for arg in command if not isinstance(arg, bytes)] == [
        "FCALL",
        index,
        command[-3],
        command[-2],
        member,
    ]
    slot, number, window = command[6], command[7], command[8]
    now = command[-3]
    old = [] if expected is ANY else [expected.payload, str(expected.when)]
    before = [
        *["FCALL", script("value_swap").function, 3],
        *[keys.value_key(KEY), keys.seq_key(KEY), index],
        *[slot.decode(), int(number), int(window), str(keys.SEQ_FIELDS), str(ttl_ms or 0)],
        *[*flag, b"\x01", str(WHEN), *old, now, now - REFRESH_MS, member],
    ]
    encoder = Encoder("utf-8", "strict", False)
    assert [encoder.encode(arg) for arg in command] == [encoder.encode(arg) for arg in before]


def test_a_plain_call_nobody_records_runs_without_a_flow_and_a_history_call_with_one(
    monkeypatch,
):
    with sessionstore.connect("memory://", namespace="hot") as opened:
        plain = opened.session("BTCUSDT", strategy="hot", exchange="binance", frame="1h")
        history = opened.session(
            "BTCUSDT", strategy="hist", exchange="binance", frame="1h", history=True
        )
        plain.set_data({"n": 1}, WHEN)  # prepares the handles, by their flows
        history.set_data({"n": 1}, WHEN)
        flows: list[Any] = []
        real_run = store.run

        def counted(flow: Any, backend: Any) -> Any:
            flows.append(flow)
            return real_run(flow, backend)

        monkeypatch.setattr(store, "run", counted)
        monkeypatch.setattr(store, "recording", lambda: None)
        plain.set_data({"n": 2}, WHEN + 1)
        assert plain.get_data(WHEN + 1) == {"n": 2}
        assert plain.get_data(WHEN) is None  # the same look-ahead
        assert flows == []
        assert history.get_data(WHEN) == {"n": 1}
        assert len(flows) == 1
        # A recorded call runs its flow (the telemetry's seam).
        monkeypatch.setattr(store, "recording", lambda: object())
        plain.set_data({"n": 3}, WHEN + 2)
        assert plain.get_data(WHEN + 2) == {"n": 3}
        assert len(flows) == 3
