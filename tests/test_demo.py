"""``sessionstore demo`` end to end, on the embedded default and on Redis, with --crash."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sessionstore.cli.common import DURABILITY_HINT
from sessionstore.cli.demo import data, engine
from sessionstore.cli.demo.check import check_cache

SMALL = ["--workers", "2", "--symbols", "2", "--candles", "12"]


def run_demo(cwd, *args: str, small: list[str] = SMALL) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SESSIONSTORE_URL"}
    env["COLUMNS"] = "120"
    return subprocess.run(
        [sys.executable, "-m", "sessionstore", "demo", *small, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_runs_on_the_embedded_default(tmp_path):
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all invariants hold" in result.stdout
    assert "sessions balanced" in result.stdout and "4/4" in result.stdout
    assert (tmp_path / ".sessionstore").is_dir()


@pytest.mark.parametrize("backend", ["file", "redis"])
def test_demo_with_a_crash_repairs_the_interrupted_turn(
    tmp_path, tmp_path_factory, request, backend
):
    # A short path: the heading's first line (at 120 columns) holds the URL and namespace.
    url = (
        (tmp_path_factory.mktemp("d") / "store").as_uri()
        if backend == "file"
        else request.getfixturevalue("redis_server").url
    )
    result = run_demo(tmp_path, "--url", url, "--crash", "--namespace", f"demo-{backend}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TOOL_OUTCOME_UNKNOWN" in result.stdout
    assert "crashed workers" in result.stdout
    (crashed,) = [line for line in result.stdout.splitlines() if line.startswith("crashed worker")]
    assert "killed mid-turn in " in crashed and "turn" in crashed
    assert f"namespace 'demo-{backend}'" in result.stdout.splitlines()[0]
    assert f"sessions list -n demo-{backend} --url" in result.stdout
    assert "all invariants hold" in result.stdout


def test_a_redis_without_durable_aof_is_refused_once_with_a_hint(tmp_path):
    from support.redis_server import RedisServer

    with RedisServer(durable=False) as server:
        result = run_demo(tmp_path, "--url", server.url)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "DurabilityError" in result.stderr and "appendonly no" in result.stderr
        assert result.stderr.rstrip().endswith(DURABILITY_HINT)
        assert "Traceback" not in result.stderr, "no worker started"
        throwaway = run_demo(tmp_path, "--url", server.url + "?durability=none")
        assert throwaway.returncode == 0, throwaway.stdout + throwaway.stderr
        assert "all invariants hold" in throwaway.stdout


def test_the_invariant_check_catches_a_wrong_cached_answer(tmp_path):
    url = (tmp_path / "store").as_uri()
    result = engine.run(url, workers=1, symbol_count=1, candle_count=8)
    assert result.ok, result.problems
    import sessionstore

    with sessionstore.connect(url, "demo") as store:
        cache = store.session(
            data.symbols(1)[0], data.STRATEGY, data.EXCHANGE, data.FRAME, history=True
        )
        answer = cache.get_data(data.START_MS + 4 * data.CANDLE_MS)
        cache.set_data({**answer, "signal": "flipped"}, answer["confirmedAt"])
    problems: list[str] = []
    with sessionstore.connect(url, "demo") as store:
        assert check_cache(store, data.symbols(1)[0], 8, problems, required={0, 4}) == 1
    assert "wrong" in problems[0]


def test_a_refusal_comes_alone_and_the_banner_only_with_a_run(tmp_path):
    from support.redis_server import RedisServer
    from typer.testing import CliRunner

    from sessionstore import SessionEvent, SessionHeader, connect
    from sessionstore.cli import app

    def demo_cli(url: str) -> object:
        return CliRunner().invoke(app, ["demo", *SMALL, "--url", url], env={"COLUMNS": "200"})

    foreign = (tmp_path / "store").as_uri()
    with connect(foreign, "demo") as store:
        store.events.create(SessionHeader(id="user-run"))
        store.events.append("user-run", [SessionEvent(seq=0, type="note", time=1)])
    with RedisServer(durable=False) as server:
        for url, reason in ((foreign, "not the demo's own"), (server.url, "DurabilityError")):
            refused = demo_cli(url)
            assert refused.exit_code == 2, refused.stdout + refused.stderr
            assert refused.stdout == ""
            assert refused.stderr.startswith("error: ") and reason in refused.stderr
    ran = demo_cli((tmp_path / "empty").as_uri())
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    assert ran.stdout.startswith("sessionstore demo on ")


def test_a_worker_process_imports_no_redis_driver_for_the_cli_around_it():
    """A spawned worker imports the CLI package its functions live in: that import loads
    the command line's own modules but no Redis driver, which a worker on files never
    needs (and which would add to every worker's start-up)."""
    code = (
        "import sys, sessionstore.cli.demo.processes\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis'"
        " or m.startswith('sessionstore.redis')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert found.stdout.strip() == "[]"


#: Set up as ``sitecustomize`` in every process of a demo run (the parent and each spawned
#: worker), as ``opentelemetry-instrument`` sets up an SDK from the environment: metrics
#: are read in memory and, at the process's exit, its compute outcomes are written out.
_PROCESS_METRICS = """
import atexit, json, os
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

_reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[_reader]))


@atexit.register
def _write_outcomes():
    counts = {}
    data = _reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "sessionstore.compute.outcomes":
                    for point in metric.data.data_points:
                        outcome = point.attributes["sessionstore.compute.outcome"]
                        counts[outcome] = counts.get(outcome, 0) + point.value
    path = os.path.join(os.environ["DEMO_METRICS_DIR"], f"{os.getpid()}.json")
    with open(path, "w") as out:
        json.dump(counts, out)
"""


def test_the_demo_reports_its_model_calls_through_metrics_from_every_process(tmp_path):
    """With a meter provider set in every process (each worker is a process of its own,
    so each sets its own, as auto-instrumentation does), the computes the metrics count
    are the demo's model calls."""
    import json

    hooks, out = tmp_path / "hooks", tmp_path / "metrics"
    hooks.mkdir()
    out.mkdir()
    (hooks / "sitecustomize.py").write_text(_PROCESS_METRICS)
    env = {k: v for k, v in os.environ.items() if k != "SESSIONSTORE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(hooks), *filter(None, [env.get("PYTHONPATH")])])
    env["DEMO_METRICS_DIR"] = str(out)
    result = subprocess.run(
        [sys.executable, "-m", "sessionstore", "demo", *SMALL, "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    files = list(out.glob("*.json"))
    assert len(files) >= 3  # the parent and both workers
    counted: dict[str, int] = {}
    for path in files:
        for outcome, count in json.loads(path.read_text()).items():
            counted[outcome] = counted.get(outcome, 0) + count
    assert summary["model_calls"] > 0
    assert counted.get("computed", 0) == summary["model_calls"], (counted, summary)
