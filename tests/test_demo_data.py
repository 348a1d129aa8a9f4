"""The demo respects data: it deletes only what it wrote, refuses a namespace holding
anything else unless ``--reset`` (and then keeps it), refuses a store that cannot take
the run before writing anything, and its summary adds up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from test_demo import run_demo

import sessionstore
from sessionstore import SessionEvent, SessionHeader
from sessionstore.cli.common import DURABILITY_HINT
from sessionstore.cli.demo import data, engine
from sessionstore.cli.demo.ownership import ForeignDataError, owns_session, owns_value

T = 1_718_000_000_000


def seed_foreign(url: str, ns: str) -> None:
    """A user's session, a user's value, and a plain value under the demo's own key."""
    with sessionstore.connect(url, ns) as store:
        store.events.create(SessionHeader(id="user-run", cwd="/home/me", created_at=1))
        store.events.append("user-run", [SessionEvent(seq=0, type="note", time=T, data={})])
        store.session("BTCUSDT", "mine", "binance", "1h").set_data({"keep": 1}, T)
        store.session("SYM000USDT", data.STRATEGY, data.EXCHANGE, data.FRAME).set_data(5, T)
        # The demo's own name but not its header: not the demo's own either.
        store.events.create(SessionHeader(id="momentum-SYM009USDT", cwd="/mine", created_at=1))
        store.events.append(
            "momentum-SYM009USDT", [SessionEvent(seq=0, type="note", time=T, data={})]
        )


def snapshot(backend: str, url: str, ns: str) -> object:
    """Everything stored in the namespace, byte for byte."""
    if backend == "file":
        root = Path(url.removeprefix("file://"))
        return {
            str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))
        }
    client = redis.Redis.from_url(url)
    try:
        return {key: client.dump(key) for key in sorted(client.scan_iter(f"ss:{ns}:*"))}
    finally:
        client.close()


@pytest.fixture(params=["file", "redis"])
def store_url(request, tmp_path):
    if request.param == "file":
        return request.param, (tmp_path / "store").as_uri()
    return request.param, request.getfixturevalue("redis_server").url


def test_foreign_data_is_refused_without_reset_and_kept_with_it(store_url, tmp_path, namespace):
    backend, url = store_url
    seed_foreign(url, namespace)
    before = snapshot(backend, url, namespace)
    refused = run_demo(tmp_path, "--url", url, "-n", namespace)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "not the demo's own" in refused.stderr and "--reset" in refused.stderr
    assert "'user-run'" in refused.stderr and "Traceback" not in refused.stderr
    assert snapshot(backend, url, namespace) == before, "a refused demo writes nothing"

    started = run_demo(tmp_path, "--url", url, "-n", namespace, "--reset")
    assert started.returncode == 0, started.stdout + started.stderr
    with sessionstore.connect(url, namespace) as store:
        for sid in ("user-run", "momentum-SYM009USDT"):
            assert [e.type for e in store.events.read_from(sid, 0)] == ["note"]
        assert store.session("BTCUSDT", "mine", "binance", "1h").get_data(T) == {"keep": 1}
        plain = store.session("SYM000USDT", data.STRATEGY, data.EXCHANGE, data.FRAME)
        assert plain.get_data(T) == 5


def test_a_foreign_session_with_an_id_the_demo_writes_is_refused_even_with_reset(tmp_path):
    url = (tmp_path / "store").as_uri()
    with sessionstore.connect(url, "demo") as store:
        store.events.create(SessionHeader(id="momentum-SYM000USDT", cwd="/mine"))
        store.events.append("momentum-SYM000USDT", [SessionEvent(seq=0, type="n", time=T)])
    with pytest.raises(ForeignDataError) as refused:
        engine.run(url, workers=1, symbol_count=1, candle_count=4, reset=True)
    assert refused.value.taken == ["momentum-SYM000USDT"]
    with sessionstore.connect(url, "demo") as store:
        assert [h.id for h in store.events.list()] == ["momentum-SYM000USDT"]
        assert store.list_values() == []


def test_the_demo_deletes_its_own_leftovers_of_any_earlier_run(tmp_path):
    url = (tmp_path / "store").as_uri()
    first = engine.run(url, workers=1, symbol_count=3, candle_count=4)
    assert first.ok, first.problems
    second = engine.run(url, workers=1, symbol_count=1, candle_count=4)
    assert second.ok, second.problems
    assert second.deleted == (6, 3)
    with sessionstore.connect(url, "demo") as store:
        assert sorted(h.id for h in store.events.list()) == [
            "contrarian-SYM000USDT",
            "momentum-SYM000USDT",
        ]
        assert [ref.symbol for ref in store.list_values()] == ["SYM000USDT"]


def test_what_the_demo_owns_is_its_naming_pattern_and_header():
    assert owns_session(SessionHeader(id="momentum-SYM003USDT", cwd="/demo/momentum"))
    assert not owns_session(SessionHeader(id="momentum-SYM003USDT", cwd="/demo/contrarian"))
    assert not owns_session(SessionHeader(id="momentum-BTCUSDT", cwd="/demo/momentum"))
    ref = sessionstore.ValueRef("SYM001USDT", "llm-signal", "synthetic", "1h", "backtest", True)
    assert owns_value(ref)
    assert not owns_value(ref._replace(history=False))
    assert not owns_value(ref._replace(mode="live"))


def test_a_refused_demo_leaves_no_key_on_a_redis_without_durable_aof(tmp_path):
    from support.redis_server import RedisServer

    with RedisServer(durable=False) as server:
        result = run_demo(tmp_path, "--url", server.url)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "DurabilityError" in result.stderr
        assert result.stderr.rstrip().endswith(DURABILITY_HINT)
        client = redis.Redis(port=server.port)
        try:
            assert client.dbsize() == 0
        finally:
            client.close()


def test_the_crash_summary_adds_up_and_names_the_crashed_worker(tmp_path):
    url = (tmp_path / "store").as_uri()
    result = run_demo(tmp_path, "--url", url, "--crash", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = result.stdout.splitlines()
    summary = json.loads(line)
    assert summary["candles"] == summary["model_calls"] + summary["reused"] + summary["waited"]
    assert summary["model_calls"] == summary["distinct_answers"]
    assert summary["events_written"] == sum(summary["events_by"].values())
    with sessionstore.connect(url, "demo") as store:
        stored = sum(len(store.events.read_from(h.id, 0)) for h in store.events.list())
    assert summary["events_written"] == stored
    (crashed,) = summary["crashed_workers"]
    assert crashed["candles"] == crashed["model_calls"] + crashed["reused"] + crashed["waited"] > 0
    assert crashed["interrupted"] and crashed["events"] == 6 * crashed["candles"] + 3
    assert summary["namespace"] == "demo"
    assert summary["sessions_command"].endswith("sessions list -n demo --url " + url)
