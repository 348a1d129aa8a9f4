"""``sessionstore demo --scheduler``: the same backtest with its workers as Dask tasks,
on a LocalCluster the demo starts and on an existing cluster reached by its address."""

from __future__ import annotations

import json
import subprocess

from test_demo import run_demo as demo_cli

SMALL = ["--workers", "2", "--symbols", "2", "--candles", "8"]


def run_demo(cwd, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: ANN001
    return demo_cli(cwd, *args, small=SMALL)


def test_the_demo_runs_on_a_local_dask_cluster(tmp_path):
    result = run_demo(tmp_path, "--scheduler", "local")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "as tasks on a local Dask cluster" in result.stdout
    assert "all invariants hold" in result.stdout
    assert "sessions balanced" in result.stdout and "4/4" in result.stdout
    progress = [line for line in result.stdout.splitlines() if line.startswith("worker ")]
    assert len(progress) == 2 and all("16/16" in line for line in progress), progress


def test_the_demo_runs_on_an_existing_dask_cluster_by_address(tmp_path, redis_server):
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        dashboard_address=":0",  # a free port: clusters of parallel runs never collide
        silence_logs=40,
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        result = run_demo(
            tmp_path, "--scheduler", address, "--url", redis_server.url, "-n", "demo-dask", "--json"
        )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["ok"] and summary["problems"] == []
    assert (
        summary["candles"] == 32 == summary["model_calls"] + summary["reused"] + summary["waited"]
    )
    assert summary["model_calls"] == summary["distinct_answers"] == 2 * 2
    assert summary["future_reads"] == 0 and summary["reused"] > 0
    assert (summary["sessions"], summary["balanced"]) == (4, 4)


def test_crash_is_refused_on_a_dask_scheduler_before_anything_runs(tmp_path):
    result = run_demo(tmp_path, "--scheduler", "local", "--crash")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "local process pool only" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".sessionstore").exists(), "nothing written"
