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

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "backtest_optimize.py"


@pytest.mark.slow
def test_the_optimisation_reuses_signals_without_look_ahead(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SESSIONSTORE_URL"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--small", "--bars", "200", "--processes", "2", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["combinations"] == 4 and out["runs"] == 5, "every backtest reported"
    assert out["signal_lookups"] == out["model_calls"] + out["reused"] + out["waited"]
    assert out["model_calls"] == out["distinct_bars"] > 0, "one model call per bar"
    assert out["reused"] > 0 and out["reuse_rate"] > 0
    assert out["model_calls"] < out["signal_lookups"]
    assert out["lookahead_reads"] == 0
    assert out["same_result_without_store"] is True
    assert out["wall_with_store"] > 0 and out["wall_without_store"] > 0
