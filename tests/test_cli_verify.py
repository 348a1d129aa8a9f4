"""One damaged session never hides the others: ``sessions list`` and ``sessions verify``
go on past it, on every backend, and name it with what is wrong."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import artifacts
from support.events import batch_of, stored
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionEvent, SessionHeader
from sessionstore.cli import app

T = 1_718_000_000_000


def run(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr
    return result


def json_lines(output: str) -> list[Any]:
    return [json.loads(line) for line in output.splitlines()]


def turn(turn_no: int, *, closed: bool) -> list[SessionEvent]:
    events = [SessionEvent(seq=0, type="turn/start", time=T, data={"turn": turn_no})]
    events.append(SessionEvent(seq=1, type="note", time=T, data={"n": 1}))
    if closed:
        events.append(
            SessionEvent(seq=2, type="turn/end", time=T, data={"reason": {"kind": "done"}})
        )
    return events


@pytest.fixture(params=["file", "sqlite", "redis"])
def damaged(request, tmp_path, namespace):
    """Four sessions: ``good`` (balanced), ``live`` (open turn 7), ``holed`` (an event lost
    from the middle) and ``future`` (a header of an unknown format version)."""
    backend = request.param
    url = {
        "file": (tmp_path / "store").as_uri(),
        "sqlite": f"sqlite:///{tmp_path / 'store.db'}",
    }.get(backend) or request.getfixturevalue("redis_server").url
    with sessionstore.connect(url, namespace) as store:
        for sid, closed in (("good", True), ("live", False), ("holed", True), ("future", True)):
            store.events.create(SessionHeader(id=sid, created_at=1))
            store.events.append(sid, turn(7, closed=closed))
        paths = {sid: store.events.locate(sid) for sid in ("holed", "future")}
    artifacts.remove_event(backend, url, namespace, "holed", paths["holed"], 1)
    artifacts.set_stored_version(backend, url, namespace, "future", paths["future"], 99)
    return backend, url, namespace


def lines_naming(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


def test_verify_names_each_damaged_session_checks_the_others_and_exits_1(damaged):
    _, url, ns = damaged
    result = run("sessions", "verify", "--url", url, "-n", ns)
    assert result.exit_code == 1, result.stdout + result.stderr
    out = result.stdout
    assert lines_naming(out, "good: ") == ["good: ok (3 events)"]
    assert lines_naming(out, "live: ") == ["live: open turn 7 (2 events)"]
    (holed,) = lines_naming(out, "holed")
    assert "CORRUPT: " in holed and "seq 1" in holed
    (future,) = lines_naming(out, "future")
    assert "CORRUPT: " in future and "99" in future
    assert "4 session(s) checked: 2 damaged, 0 with warnings" in out


def test_verify_json_lists_every_session_with_its_verdict(damaged):
    _, url, ns = damaged
    result = run("sessions", "verify", "--url", url, "-n", ns, "--json")
    assert result.exit_code == 1
    results = json_lines(result.stdout)
    assert len(results) == 4
    verdicts = {r["id"] or "": r for r in results}
    assert verdicts["good"]["ok"] and verdicts["live"]["state"] == "open turn 7"
    broken = [r for r in results if not r["ok"]]
    assert all(r["state"] == "corrupt" for r in broken)
    assert any("holed" in r["reason"] for r in broken)
    assert any("future" in (r["id"] or "") + r["reason"] for r in broken)


def test_list_goes_on_past_damaged_sessions_and_says_what_it_skipped(damaged):
    _, url, ns = damaged
    result = run("sessions", "list", "--url", url, "-n", ns, "--json")
    assert result.exit_code == 0, result.stderr
    rows = {row["id"]: row for row in json_lines(result.stdout)}
    assert rows["good"]["state"] == "balanced" and rows["live"]["state"] == "open turn 7"
    assert "future" not in rows or rows["future"]["state"] == "corrupt"
    assert rows["holed"]["state"] == "corrupt" and rows["holed"]["events"] is None
    warnings = result.stderr.splitlines()
    assert all(line.startswith("warning: ") for line in warnings)
    assert lines_naming(result.stderr, "holed") and lines_naming(result.stderr, "future")
    table = run("sessions", "list", "--url", url, "-n", ns)
    assert table.exit_code == 0 and "good" in table.stdout and "CORRUPT" in table.stdout


def test_verify_of_one_damaged_session_exits_1(damaged):
    _, url, ns = damaged
    holed = run("sessions", "verify", "holed", "--url", url, "-n", ns)
    assert holed.exit_code == 1 and holed.stdout.startswith("holed: CORRUPT: ")
    assert run("sessions", "verify", "good", "--url", url, "-n", ns).exit_code == 0


@pytest.mark.parametrize("as_json", [False, True])
def test_verify_of_a_session_that_does_not_exist_says_so_and_exits_2_as_show_does(damaged, as_json):
    _, url, ns = damaged
    args = ("sessions", "verify", "nope", "--url", url, "-n", ns)
    missing = run(*args, *(["--json"] if as_json else []))
    assert missing.exit_code == 2, missing.stdout + missing.stderr
    assert missing.stdout == "" and "damaged" not in missing.stderr
    (line,) = missing.stderr.splitlines()
    assert line.startswith("error: not found (") and line.endswith("session 'nope' not found")
    assert run("sessions", "show", "nope", "--url", url, "-n", ns).exit_code == 2


def test_show_of_a_damaged_session_is_one_line_on_stderr(damaged):
    _, url, ns = damaged
    result = run("sessions", "show", "holed", "--url", url, "-n", ns)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and "holed" in result.stderr


# --- damaged headers ---------------------------------------------------------------------


def two_sessions(url: str) -> None:
    with sessionstore.connect(url, "ns") as store:
        for sid in ("a", "b"):
            store.events.create(SessionHeader(id=sid, created_at=1))
            store.events.append(sid, turn(1, closed=True))


@pytest.mark.parametrize("header", [b"{not json", b"[1, 2]", b'{"version": 1}'])
def test_a_jsonl_header_that_cannot_be_read_is_reported_not_fatal(tmp_path, header):
    url = (tmp_path / "store").as_uri()
    two_sessions(url)
    with sessionstore.connect(url, "ns") as store:
        path = Path(store.events.locate("a") or "")
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(header + b"\n" + b"".join(lines[1:]))
    listed = run("sessions", "list", "--url", url, "-n", "ns", "--json")
    assert listed.exit_code == 0
    assert [row["id"] for row in json_lines(listed.stdout)] == ["b"]
    assert lines_naming(listed.stderr, "a.jsonl")
    verified = run("sessions", "verify", "--url", url, "-n", "ns")
    assert verified.exit_code == 1
    assert "b: ok (3 events)" in verified.stdout
    (damaged,) = lines_naming(verified.stdout, "CORRUPT")
    assert "a.jsonl" in damaged


@pytest.mark.parametrize("assignment", ["created_at='zz'", "version='x'", "cwd=x'ff'"])
def test_a_sqlite_header_row_that_cannot_be_read_is_reported_not_fatal(tmp_path, assignment):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    two_sessions(url)
    with sqlite3.connect(tmp_path / "store.db") as db:
        db.execute(f"UPDATE log_sessions SET {assignment} WHERE id='a'")
    listed = run("sessions", "list", "--url", url, "-n", "ns", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [row["id"] for row in json_lines(listed.stdout)] == ["b"]
    assert listed.stderr.startswith("warning: ")
    verified = run("sessions", "verify", "--url", url, "-n", "ns")
    assert verified.exit_code == 1
    assert "b: ok (3 events)" in verified.stdout and "CORRUPT" in verified.stdout


# --- harness fields of a log written before append checked them ---------------------------


def legacy(seq: int, kind: str, data: Any) -> SessionEvent:
    return stored(seq, kind, T + seq, data)


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_malformed_harness_fields_are_a_warning_not_a_traceback(tmp_path, backend):
    url = (tmp_path / "store").as_uri() if backend == "file" else f"sqlite:///{tmp_path}/s.db"
    with sessionstore.connect(url, "ns") as store:
        # Written the way a version without the harness-field checks stored it.
        store._backends.events.append(
            "old",
            batch_of(
                [
                    legacy(0, "turn/start", {"turn": 1}),
                    legacy(1, "assistant/message", {"tool_calls": 5}),
                    legacy(2, "tool/result", {"call_id": ["c"], "is_error": True, "error": "boom"}),
                    legacy(3, "turn/end", {"reason": "done"}),
                ]
            ),
            SessionHeader(id="old", created_at=1),
        )
    verified = run("sessions", "verify", "--url", url, "-n", "ns")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    (line,) = verified.stdout.splitlines()[:1]
    assert line.startswith("old: ok (4 events); WARNING: seq 1 (assistant/message)")
    assert "tool_calls" in line and "seq 2 (tool/result)" in line
    shown = run("sessions", "show", "old", "--url", url, "-n", "ns")
    assert shown.exit_code == 0
    assert "result [['c']] error boom: None" in shown.stdout
    assert "end of turn None (done)" in shown.stdout
    listed = run("sessions", "list", "--url", url, "-n", "ns", "--json")
    assert json_lines(listed.stdout)[0]["state"] == "balanced"
