"""The README's runnable examples run as written, on the embedded default store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(script: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SESSIONSTORE_URL"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_value_quickstart_uses_the_embedded_default(tmp_path):
    out = run("quickstart.py", tmp_path)
    assert "model calls: 3 for 6 candles" in out
    assert "sees None" in out
    assert (tmp_path / ".sessionstore").is_dir()


def test_the_event_log_example_repairs_and_resumes(tmp_path):
    out = run("eventlog.py", tmp_path)
    assert "TOOL_OUTCOME_UNKNOWN" in out
    assert "5 turn/end" in out
    assert "refused:" in out and "expected seq 7, got 1" in out
    assert "sessions: ['agent-1', 'agent-2']" in out
    assert str(tmp_path) in out


def test_the_event_log_example_inspects_a_live_session_from_another_process_and_forks(
    tmp_path,
):
    out = run("eventlog.py", tmp_path)
    assert (
        "inspected: ['turn/start', 'step/start', 'step/end', 'turn/end'] (stored: 2, busy: True);"
        " load: busy"
    ) in out
    assert "after close: ['step/end', 'turn/end']" in out
    assert "fork of agent-1 at 3 -> ['turn/start', 'step/start', 'tool/call', 'tool/result'" in out


@pytest.mark.slow
def test_running_it_twice_starts_afresh(tmp_path):
    assert run("eventlog.py", tmp_path) == run("eventlog.py", tmp_path)


def test_the_adk_example_runs_one_session_in_two_processes_twice(tmp_path):
    pytest.importorskip("google.adk")
    first, second = run("adk_session.py", tmp_path), run("adk_session.py", tmp_path)
    for out in (first, second):
        assert "'hello' -> run 1" in out and "'and again' -> run 3" in out
        assert "('user', 'and again'), ('counter', 'run 3')]" in out
    assert "state: {'app:runs': 3, 'runs': 3, 'user:runs': 3}" in first
    assert "state: {'app:runs': 6, 'runs': 3, 'user:runs': 6}" in second
    assert "temp:" not in first + second
