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
