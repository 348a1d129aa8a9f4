"""examples/backtest_optimize.py: backtesting.py's optimize over a small grid, its signal
cached in a history session value that every pool process reuses, computed once per bar
across the pool, with no look-ahead and the same result as without the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import sessionstore

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "backtest_optimize.py"
#: The one namespace every run of the example uses (its docstring names it).
NAMESPACE = "backtest-example"


def run_example(cwd: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SESSIONSTORE_URL"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--small", "--json", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_optimisation_reuses_signals_without_look_ahead(tmp_path):
    out = run_example(tmp_path, "--bars", "200", "--processes", "2")
    assert out["combinations"] == 4 and out["runs"] == 5, "every backtest reported"
    assert out["signal_lookups"] == out["model_calls"] + out["reused"] + out["waited"]
    assert out["model_calls"] == out["distinct_bars"] > 0, "one model call per bar"
    assert out["reused"] > 0 and out["reuse_rate"] > 0
    assert out["model_calls"] < out["signal_lookups"]
    assert out["lookahead_reads"] == 0
    assert out["same_result_without_store"] is True
    assert out["wall_with_store"] > 0 and out["wall_without_store"] > 0


@pytest.mark.slow
def test_runs_on_redis_leave_nothing_of_the_namespace_once_the_index_grace_has_passed(
    tmp_path, redis_server, monkeypatch
):
    from sessionstore.keys import GRACE_MS
    from sessionstore.redis import index

    admin = redis.Redis(port=redis_server.port, decode_responses=True)
    pattern = f"ss:{NAMESPACE}:*"
    entries = f"ss:{NAMESPACE}:idx:{{{NAMESPACE}}}:values"
    try:
        out = run_example(tmp_path, "--bars", "60", "--processes", "1", "--url", redis_server.url)
        assert out["runs"] == 5
        left = {key: admin.type(key) for key in admin.scan_iter(pattern)}
        # The entries of its two values (each run re-adds the same two), nothing else.
        assert admin.zcard(entries) == 2
        ops = [key for key in left if key.startswith(f"ss:{NAMESPACE}:seq:")]
        assert sorted(left) == sorted([entries, *ops]), left
        # The writer records of the last writes, kept for their resend window only.
        assert all(admin.pttl(key) > 0 for key in ops)
        # A listing once the grace has passed (its clock 10 minutes on) removes the entries.
        clock = index.now_ms
        monkeypatch.setattr(index, "now_ms", lambda: clock() + GRACE_MS + 1)
        with sessionstore.connect(redis_server.url, NAMESPACE) as store:
            assert store.list_values() == []
        assert [key for key in admin.scan_iter(pattern) if key not in ops] == []
    finally:
        for key in admin.scan_iter(pattern):
            admin.delete(key)
        admin.close()
