"""``sessions list`` and ``sessions tail`` read metadata and the last events of a log,
never a whole log; ``sessions show`` looks at a live session and names a fork's parent."""

from __future__ import annotations

from typing import Any

import pytest
from support import artifacts
from test_cli_verify import json_lines, run

import sessionstore
from sessionstore import CorruptLogError, SessionEvent, SessionHeader
from sessionstore.cli.sessions import STATE_TAIL
from sessionstore.store import EventLog

T = 1_718_000_000_000
LONG = 500


def url_of(backend: str, request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return {
        "file": (tmp_path / "store").as_uri(),
        "sqlite": f"sqlite:///{tmp_path / 'store.db'}",
    }.get(backend) or request.getfixturevalue("redis_server").url


def long_log(url: str, namespace: str, sid: str = "long") -> str | None:
    """``LONG`` events: one turn, notes, then the turn's end; returns the log's path."""
    events = [SessionEvent(seq=0, type="turn/start", time=T, data={"turn": 1})]
    events += [SessionEvent(seq=i, type="note", time=T + i, data={"n": i}) for i in range(1, LONG)]
    events[-1] = SessionEvent(seq=LONG - 1, type="turn/end", time=T + LONG, data={"turn": 1})
    with sessionstore.connect(url, namespace) as store:
        store.events.create(SessionHeader(id=sid, created_at=1))
        store.events.append(sid, events)
        return store.events.locate(sid)


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every ``read_from`` the CLI makes; whole-log reads fail the test."""
    reads: list[tuple[str, int]] = []
    original = EventLog.read_from

    def read_from(self: EventLog, session_id: str, seq: int) -> list[SessionEvent]:
        reads.append((session_id, seq))
        return original(self, session_id, seq)

    def whole(*_: Any, **__: Any) -> Any:
        raise AssertionError("a whole log was read")

    monkeypatch.setattr(EventLog, "read_from", read_from)
    for name in ("load", "inspect", "iter_events"):
        monkeypatch.setattr(EventLog, name, whole)
    return reads


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_list_and_tail_read_only_the_last_events(backend, request, tmp_path, spied):
    url = url_of(backend, request, tmp_path)
    long_log(url, "ns")
    listed = run("sessions", "list", "--url", url, "-n", "ns", "--json")
    assert listed.exit_code == 0, listed.stderr
    (row,) = json_lines(listed.stdout)
    assert row["events"] == LONG and row["last_activity"] == T + LONG
    assert row["state"] == "balanced" and row["busy"] is False
    assert spied == [("long", LONG - STATE_TAIL)]
    spied.clear()
    tailed = run("sessions", "tail", "long", "--last", "3", "--url", url, "-n", "ns", "--json")
    assert [e["seq"] for e in json_lines(tailed.stdout)] == [LONG - 3, LONG - 2, LONG - 1]
    assert spied == [("long", LONG - 3)]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_hole_in_the_middle_of_a_long_log_stops_load_not_list_or_tail(
    backend, request, tmp_path, namespace
):
    url = url_of(backend, request, tmp_path)
    path = long_log(url, namespace)
    artifacts.remove_event(backend, url, namespace, "long", path, LONG // 2)
    with sessionstore.connect(url, namespace) as store, pytest.raises(CorruptLogError):
        store.events.load("long")
    listed = run("sessions", "list", "--url", url, "-n", namespace, "--json")
    assert listed.exit_code == 0 and listed.stderr == ""
    (row,) = json_lines(listed.stdout)
    assert row["events"] == LONG and row["state"] == "balanced"
    tailed = run("sessions", "tail", "long", "--last", "5", "--url", url, "-n", namespace)
    assert tailed.exit_code == 0, tailed.stderr
    assert [int(line.split()[0]) for line in tailed.stdout.splitlines()] == list(
        range(LONG - 5, LONG)
    )


def test_a_final_turn_older_than_the_tail_read_is_unknown(tmp_path):
    url = (tmp_path / "store").as_uri()
    events = [SessionEvent(seq=0, type="turn/start", time=T, data={"turn": 3})]
    events += [SessionEvent(seq=i, type="note", time=T, data={}) for i in range(1, LONG)]
    with sessionstore.connect(url, "ns") as store:
        store.events.create(SessionHeader(id="old-turn"))
        store.events.append("old-turn", events)
    (row,) = json_lines(run("sessions", "list", "--url", url, "-n", "ns", "--json").stdout)
    assert row["events"] == LONG and row["state"] == "unknown"


@pytest.mark.parametrize("backend", ["file", "sqlite", "redis"])
def test_a_live_writer_shows_as_busy_and_its_session_can_be_shown(
    backend, request, tmp_path, namespace
):
    url = url_of(backend, request, tmp_path)
    with sessionstore.connect(url, namespace) as store:
        writer = store.events.writer(SessionHeader(id="live", created_at=1))
        try:
            writer.emit("turn/start", {"turn": 4})
            writer.emit("note", {"n": 1})
            writer.flush()
            (row,) = json_lines(
                run("sessions", "list", "--url", url, "-n", namespace, "--json").stdout
            )
            assert row["busy"] is True and row["state"] == "open turn 4" and row["events"] == 2
            table = run("sessions", "list", "--url", url, "-n", namespace)
            assert "busy" in next(line for line in table.stdout.splitlines() if "live" in line)
            shown = run("sessions", "show", "live", "--url", url, "-n", namespace)
            assert shown.exit_code == 0, shown.stderr
            lines = shown.stdout.splitlines()
            assert "turn 4" in lines[0] and len(lines) == 3
            assert lines[-1].startswith("live: a writer holds the lease")
            assert "not stored" not in shown.stdout
        finally:
            writer.close()
    (row,) = json_lines(run("sessions", "list", "--url", url, "-n", namespace, "--json").stdout)
    assert row["busy"] is False


def test_show_of_an_interrupted_turn_marks_what_load_would_append_and_writes_nothing(tmp_path):
    url = (tmp_path / "store").as_uri()
    with sessionstore.connect(url, "ns") as store:
        store.events.create(SessionHeader(id="cut"))
        store.events.append(
            "cut", [SessionEvent(seq=0, type="turn/start", time=T, data={"turn": 2})]
        )
    shown = run("sessions", "show", "cut", "--url", url, "-n", "ns")
    assert shown.exit_code == 0, shown.stderr
    first, closer = shown.stdout.splitlines()
    assert "turn 2" in first and "not stored" not in first
    assert "end of turn" in closer and closer.endswith("(not stored: load would append it)")
    rows = json_lines(run("sessions", "show", "cut", "--url", url, "-n", "ns", "--json").stdout)
    assert [r.get("stored", True) for r in rows] == [True, False]
    with sessionstore.connect(url, "ns") as store:
        assert len(store.events.read_from("cut", 0)) == 1


@pytest.mark.parametrize("backend", ["file", "redis"])
def test_show_of_a_fork_names_its_parent_and_fork_point(backend, request, tmp_path, namespace):
    url = url_of(backend, request, tmp_path)
    with sessionstore.connect(url, namespace) as store:
        store.events.create(SessionHeader(id="parent\x1b[31m", created_at=1))
        store.events.append(
            "parent\x1b[31m",
            [
                SessionEvent(seq=0, type="turn/start", time=T, data={"turn": 1}),
                SessionEvent(seq=1, type="turn/end", time=T, data={"turn": 1}),
                SessionEvent(seq=2, type="turn/start", time=T, data={"turn": 2}),
                SessionEvent(seq=3, type="turn/end", time=T, data={"turn": 2}),
            ],
        )
        store.events.fork("parent\x1b[31m", "child", at_seq=2)
    shown = run("sessions", "show", "child", "--url", url, "-n", namespace)
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "forked from parent\\x1b[31m at seq 2"
    assert "\x1b" not in shown.stdout and len(lines) == 3
    rows = json_lines(run("sessions", "list", "--url", url, "-n", namespace, "--json").stdout)
    child = next(row for row in rows if row["id"] == "child")
    assert child["parent_id"] == "parent\x1b[31m" and child["fork_seq"] == 2
    as_json = json_lines(
        run("sessions", "show", "child", "--url", url, "-n", namespace, "--json").stdout
    )
    assert [e["seq"] for e in as_json] == [0, 1]


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_list_shows_the_logical_time_a_writer_stamped(backend, request, tmp_path):
    url = url_of(backend, request, tmp_path)
    with sessionstore.connect(url, "ns") as store, store.events.writer(SessionHeader(id="bt")) as w:
        w.emit("candle", {"n": 1}, time=T)
        w.emit("candle", {"n": 2}, time=T + 3_600_000)
    (row,) = json_lines(run("sessions", "list", "--url", url, "-n", "ns", "--json").stdout)
    assert row["last_activity"] == T + 3_600_000
    shown = run("sessions", "list", "--url", url, "-n", "ns").stdout
    assert "2024-06-10T07:13:20.000Z" in shown
