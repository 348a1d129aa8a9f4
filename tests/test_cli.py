"""The ``sessionstore`` command end to end against real stores: run in this process
through the same ``main`` the console script and ``python -m sessionstore`` call, and in
a process of its own where a process is the point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from support import artifacts
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionEvent, SessionHeader
from sessionstore.cli import main
from sessionstore.cli.common import DURABILITY_HINT

T = 1_718_000_000_000
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def rows_of(stdout: str) -> list[dict]:
    """The JSON lines of a listing: one object per line."""
    return [json.loads(line) for line in stdout.splitlines()]


@dataclass(frozen=True)
class Ran:
    """What one run of the command left: its exit code and what it wrote to each stream."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, env_extra: dict[str, str] | None = None) -> Ran:
    """Run ``sessionstore *args`` with no ``SESSIONSTORE_*`` variable and no ``COLUMNS``
    in the environment but those of ``env_extra``; stdout and stderr are not terminals."""
    env: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("SESSIONSTORE_") or name == "COLUMNS"
    }
    env.update(env_extra or {})
    with CliRunner().isolation(env=env) as (stdout, stderr, _):
        with pytest.raises(SystemExit) as exited:
            main(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        return Ran(exited.value.code, stdout.getvalue().decode(), stderr.getvalue().decode())


@pytest.fixture(autouse=True)
def elsewhere(tmp_path, monkeypatch):
    """The default store (./.sessionstore) of a command without --url is the test's own."""
    monkeypatch.chdir(tmp_path)


def test_the_console_script_runs_the_main_these_tests_call():
    target = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]["sessionstore"]
    module, _, name = target.partition(":")
    assert getattr(import_module(module), name) is main


@pytest.fixture(params=["file", "redis"])
def target(request, tmp_path, namespace):
    if request.param == "file":
        url = (tmp_path / "store").as_uri()
    else:
        url = request.getfixturevalue("redis_server").url
    with sessionstore.connect(url, namespace) as store:
        store.events.create(SessionHeader(id="done", cwd="/w", created_at=1))
        store.events.append(
            "done",
            [
                SessionEvent(seq=0, type="turn/start", time=T, data={"turn": 1}),
                SessionEvent(
                    seq=1,
                    type="tool/call",
                    time=T,
                    data={
                        "turn": 1,
                        "step": 1,
                        "call_id": "c1",
                        "name": "grep",
                        "arguments": {"q": "x"},
                    },
                ),
                SessionEvent(
                    seq=2,
                    type="tool/result",
                    time=T,
                    data={
                        "turn": 1,
                        "step": 1,
                        "call_id": "c1",
                        "is_error": False,
                        "content": "found",
                    },
                ),
                SessionEvent(
                    seq=3, type="turn/end", time=T, data={"turn": 1, "reason": {"kind": "done"}}
                ),
            ],
        )
        store.events.create(SessionHeader(id="live", created_at=2))
        store.events.append(
            "live", [SessionEvent(seq=0, type="turn/start", time=T, data={"turn": 7})]
        )
    return request.param, url, namespace


def test_sessions_list_shows_counts_and_turn_state(target):
    _, url, ns = target
    result = cli("sessions", "list", "--url", url, "-n", ns, "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["id"]: row for row in rows_of(result.stdout)}
    assert rows["done"]["events"] == 4 and rows["done"]["state"] == "balanced"
    assert rows["live"]["state"] == "open turn 7"
    table = cli("sessions", "list", "--url", url, "-n", ns)
    assert "done" in table.stdout and "open turn 7" in table.stdout


def test_sessions_show_is_readable_and_starts_at_from(target):
    _, url, ns = target
    result = cli("sessions", "show", "done", "--url", url, "-n", ns)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "turn 1" in lines[0]
    assert "call grep({'q': 'x'}) [c1]" in lines[1]
    assert "result [c1] ok: found" in lines[2]
    partial = cli("sessions", "show", "done", "--from", "2", "--url", url, "-n", ns, "--json")
    assert [json.loads(line)["seq"] for line in partial.stdout.splitlines()] == [2, 3]


def test_sessions_show_writes_nothing_even_for_an_open_turn(target):
    _, url, ns = target
    cli("sessions", "show", "live", "--url", url, "-n", ns)
    with sessionstore.connect(url, ns) as store:
        assert len(store.events.read_from("live", 0)) == 1


def test_sessions_tail_follows_new_events(target):
    # A process of its own: the follower runs until a signal stops it, while this test
    # appends; it is also the run of `python -m sessionstore` end to end.
    _, url, ns = target
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSTORE_")}
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sessionstore",
            "sessions",
            "tail",
            "live",
            "--follow",
            "--interval",
            "0.05",
            "--json",
            "--url",
            url,
            "-n",
            ns,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert json.loads(follower.stdout.readline())["seq"] == 0
        with sessionstore.connect(url, ns) as store:
            store.events.append("live", [SessionEvent(seq=1, type="note", time=T, data={"n": 1})])
        assert json.loads(follower.stdout.readline())["data"] == {"n": 1}
    finally:
        follower.terminate()
        follower.wait(timeout=10)


def test_sessions_verify_passes_reports_open_turns_and_fails_on_corruption(target):
    backend, url, ns = target
    ok = cli("sessions", "verify", "--url", url, "-n", ns)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "open turn 7" in ok.stdout
    with sessionstore.connect(url, ns) as store:
        path = store.events.locate(SessionHeader(id="done"))
    artifacts.remove_event(backend, url, ns, "done", path, 1)
    bad = cli("sessions", "verify", "--url", url, "-n", ns, "--json")
    assert bad.returncode == 1
    results = {r["id"]: r for r in rows_of(bad.stdout)}
    assert results["done"]["state"] == "corrupt" and "done" in results["done"]["reason"]
    assert results["live"]["ok"] is True


def test_sessions_delete_removes_and_reports_missing_ids(target):
    _, url, ns = target
    assert cli("sessions", "delete", "done", "--url", url, "-n", ns).returncode == 0
    again = cli("sessions", "delete", "done", "--url", url, "-n", ns)
    assert again.returncode == 2
    assert again.stderr.startswith("error: not found") and "Traceback" not in again.stderr


LONG_ID = "agent-" + "0123456789abcdef" * 7 + "-end"


@pytest.mark.parametrize("columns", [None, "40", "100", "300"])
def test_sessions_list_never_cuts_an_id_nor_leaves_a_column_out(tmp_path, columns):
    url = (tmp_path / "store").as_uri()
    with sessionstore.connect(url, "ns") as store:
        for sid in (LONG_ID, "short"):
            store.events.create(SessionHeader(id=sid, created_at=T), ttl=60)
            store.events.append(sid, [SessionEvent(seq=0, type="note", time=T, data={})])
    env = {"COLUMNS": columns} if columns else {}
    result = cli("sessions", "list", "--url", url, "-n", "ns", env_extra=env)  # not a terminal
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert any(LONG_ID in line for line in lines), result.stdout
    assert "…" not in result.stdout
    width = int(columns or 80)
    assert all(len(line) <= width for line in lines if LONG_ID not in line), result.stdout
    words = " ".join(result.stdout.split())  # a header may be wrapped over two lines
    for header in ("created (wall clock)", "events", "size", "last event (logical time)"):
        assert header in words or header.replace(" (", "\n(") in result.stdout, header
    assert "expires (wall" in result.stdout and "never" not in result.stdout


def test_sessions_list_labels_creation_as_wall_clock_and_last_event_as_logical(target):
    _, url, ns = target
    result = cli("sessions", "list", "--url", url, "-n", ns, env_extra={"COLUMNS": "200"})
    header = next(line for line in result.stdout.splitlines() if "id" in line)
    assert "created (wall clock)" in header and "last event (logical time)" in header
    done = next(line for line in result.stdout.splitlines() if " done " in line)
    assert "2024-06-10T06:13:20.000Z" in done  # the events' logical time
    assert "1970-01-01T00:00:00.001Z" in done  # created_at=1 (wall-clock ms)


def test_every_durability_error_ends_with_the_demos_hint():
    from support.redis_server import RedisServer

    with RedisServer(durable=False) as server:
        with sessionstore.connect(server.url + "?durability=none", "ns") as store:
            store.events.create(SessionHeader(id="s"))
            store.events.append("s", [SessionEvent(seq=0, type="note", time=T)])
        deleted = cli("sessions", "delete", "s", "--url", server.url, "-n", "ns")
        assert deleted.returncode == 2
        lines = deleted.stderr.splitlines()
        assert lines[0].startswith("error: DurabilityError") and len(lines) == 2
        assert lines[1] == f"hint: {DURABILITY_HINT}"
        with sessionstore.connect(server.url, "ns") as store:
            assert [h.id for h in store.events.list()] == ["s"]
        doctor = cli("doctor", "--url", server.url, "-n", "ns", "--json")
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert checks["persistence"]["detail"].endswith(DURABILITY_HINT)


def test_environment_variables_supply_url_and_namespace(target):
    _, url, ns = target
    result = cli(
        "sessions",
        "list",
        "--json",
        env_extra={"SESSIONSTORE_URL": url, "SESSIONSTORE_NAMESPACE": ns},
    )
    assert {row["id"] for row in rows_of(result.stdout)} == {"done", "live"}


def test_an_unreachable_server_is_one_line_with_the_password_masked(monkeypatch):
    backoff: list[float] = []  # the waits between attempts, counted instead of slept
    monkeypatch.setattr(time, "sleep", backoff.append)
    result = cli("sessions", "list", "--url", "redis://admin:s3cret@127.0.0.1:1/0")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cannot reach" in result.stderr and "s3cret" not in result.stderr
    assert "admin:***@" in result.stderr
    assert sum(backoff) <= 1.0, f"gave up only after back-offs of {backoff} s"


def test_a_bad_url_is_one_line():
    result = cli("sessions", "list", "--url", "mongodb://x")
    assert result.returncode == 2 and "unknown URL scheme" in result.stderr
    assert "Traceback" not in result.stderr


# --- values ------------------------------------------------------------------------------


@pytest.fixture
def values_target(target):
    _, url, ns = target
    with sessionstore.connect(url, ns) as store:
        store.session("BTCUSDT", "llm", "binance", "1h").set_data({"signal": "buy"}, T)
        history = store.session("ETHUSDT", "llm", "binance", "1h", history=True)
        history.set_data("early", T)
        history.set_data("late", T + 3_600_000)
    return url, ns


def test_values_list_shows_plain_and_history_keys(values_target):
    url, ns = values_target
    rows = rows_of(cli("values", "list", "--url", url, "-n", ns, "--json").stdout)
    assert [(r["symbol"], r["history"]) for r in rows] == [("BTCUSDT", False), ("ETHUSDT", True)]
    assert [(r["bytes"] > 0, r["records"], r["expires_at"]) for r in rows] == [
        (True, 1, None),
        (True, 2, None),
    ]
    table = cli("values", "list", "--url", url, "-n", ns, env_extra={"COLUMNS": "200"}).stdout
    assert "history" in table and "never" in table and "size" in table
    narrow = cli("values", "list", "--url", url, "-n", ns, env_extra={"COLUMNS": "40"}).stdout
    assert all(len(line) <= 40 for line in narrow.splitlines()), narrow
    assert (
        "ETHUSDT" in narrow and "records: 2" in narrow and "expires (wall clock): never" in narrow
    )


def test_values_get_reads_as_of_when_and_never_the_future(values_target):
    url, ns = values_target
    base = ("values", "get", "ETHUSDT", "llm", "binance", "1h", "--url", url, "-n", ns)
    assert json.loads(cli(*base, "--json").stdout)["value"] == "late"
    assert json.loads(cli(*base, "--when", str(T + 1), "--json").stdout)["value"] == "early"
    early = json.loads(cli(*base, "--when", "2024-06-10T06:13:19", "--json").stdout)
    assert early == {"history": True, "state": "withheld", "when": T, "value": None}


def test_values_get_without_history_reads_a_history_value_as_one_and_says_so(values_target):
    url, ns = values_target
    result = cli("values", "get", "ETHUSDT", "llm", "binance", "1h", "--url", url, "-n", ns)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '"late"'
    assert "a history value" in result.stderr and "--history" in result.stderr


def test_values_get_reports_a_value_stored_for_a_later_time_as_withheld(values_target):
    url, ns = values_target
    for key in (("BTCUSDT", "llm", "binance", "1h"), ("ETHUSDT", "llm", "binance", "1h")):
        early = cli("values", "get", *key, "--when", str(T - 1), "--url", url, "-n", ns)
        assert early.returncode == 0, early.stderr
        assert early.stdout.strip() == (
            "stored for 2024-06-10T06:13:20.000Z, later than --when: withheld"
        )
    missing = cli("values", "get", "XRPUSDT", "llm", "binance", "1h", "--url", url, "-n", ns)
    assert missing.stdout.strip() == "(nothing stored)"


def test_values_get_history_lists_every_version_as_a_table_or_json_lines(values_target):
    url, ns = values_target
    base = ("values", "get", "ETHUSDT", "llm", "binance", "1h", "--history", "--url", url, "-n", ns)
    table = cli(*base, "--when", str(T + 1), env_extra={"COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    (early,) = [line for line in lines if "2024-06-10T06:13:20.000Z" in line]
    (late,) = [line for line in lines if "2024-06-10T07:13:20.000Z" in line]
    assert '"early"' in early and "visible" in early
    assert '"late"' in late and "withheld" in late
    versions = rows_of(cli(*base, "--when", str(T + 1), "--json").stdout)
    assert versions == [
        {"when": T, "value": "early", "at_when": "visible"},
        {"when": T + 3_600_000, "value": "late", "at_when": "withheld"},
    ]


@pytest.fixture
def mixed_target(target):
    """A key written by a history handle and by a plain handle: two versions and a plain
    record."""
    _, url, ns = target
    with sessionstore.connect(url, ns) as store:
        history = store.session("MIX", "st", "ex", "1h", history=True)
        history.put("h-100", T + 100)
        history.put("h-200", T + 200)
        store.session("MIX", "st", "ex", "1h").set_data("plain-50", T + 50)
    return url, ns


def test_values_get_history_lists_the_history_of_a_key_that_holds_a_plain_value_too(
    mixed_target,
):
    url, ns = mixed_target
    base = ("values", "get", "MIX", "st", "ex", "1h", "--history", "--when", str(T + 150))
    as_json = cli(*base, "--url", url, "-n", ns, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert rows_of(as_json.stdout) == [
        {"when": T + 100, "value": "h-100", "at_when": "visible"},
        {"when": T + 200, "value": "h-200", "at_when": "withheld"},
    ]
    listed = rows_of(cli("values", "list", "--url", url, "-n", ns, "--json").stdout)
    assert [row["records"] for row in listed if row["history"]] == [2]
    table = cli(*base, "--url", url, "-n", ns, env_extra={"COLUMNS": "200"})
    (older,) = [line for line in table.stdout.splitlines() if '"h-100"' in line]
    (later,) = [line for line in table.stdout.splitlines() if '"h-200"' in line]
    assert "visible" in older and "withheld" in later and "plain-50" not in table.stdout
    for result in (as_json, table):
        assert result.stderr == (
            "note: the key holds a plain value too (stored for 2024-06-10T06:13:20.050Z: "
            '"plain-50"; get without --history shows it): listed are the versions of its '
            "history\n"
        )


def test_values_get_reads_the_plain_value_of_a_key_that_holds_a_history_too_and_says_so(
    mixed_target,
):
    url, ns = mixed_target
    result = cli("values", "get", "MIX", "st", "ex", "1h", "--url", url, "-n", ns, "--json")
    assert json.loads(result.stdout) == {
        "history": False,
        "state": "stored",
        "when": T + 50,
        "value": "plain-50",
    }
    assert "the key holds a history too (2 versions: --history lists them)" in result.stderr


def test_values_print_as_json_not_as_a_python_repr(values_target):
    url, ns = values_target
    shown = cli("values", "get", "BTCUSDT", "llm", "binance", "1h", "--url", url, "-n", ns)
    assert json.loads(shown.stdout) == {"signal": "buy"}


def test_values_get_rejects_a_bad_when_in_one_line(values_target):
    url, ns = values_target
    result = cli(
        "values", "get", "BTCUSDT", "llm", "binance", "1h", "--when", "soon", "--url", url, "-n", ns
    )
    assert result.returncode == 2 and result.stderr.startswith("error: invalid argument")


@pytest.mark.parametrize("when", ["\u00b9", "\u0665\u0660", "-\u0665", "\uff15", "--5", "5\n"])
def test_values_get_takes_only_ascii_digits_as_epoch_milliseconds(tmp_path, when):
    """Superscripts, Arabic-Indic and full-width digits are no epoch milliseconds (and no
    ISO datetime): refused as any other bad --when, never read as a number."""
    url = (tmp_path / "store").as_uri()
    with sessionstore.connect(url, "default") as store:
        store.session("BTCUSDT", "llm", "binance", "1h").set_data("early", 5)
    result = cli("values", "get", "BTCUSDT", "llm", "binance", "1h", "--when", when, "--url", url)
    assert result.returncode == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: invalid argument (")
    assert "): --when must be 'latest', epoch milliseconds or an ISO datetime, not '" in line
    assert result.stdout == ""


def test_values_get_says_a_when_of_more_digits_than_a_number_takes_is_out_of_range(tmp_path):
    url = (tmp_path / "store").as_uri()
    (tmp_path / "store").mkdir()
    result = cli("values", "get", "a", "b", "c", "d", "--when", "9" * 5000, "--url", url)
    assert result.returncode == 2
    assert "): --when of 5000 characters is out of range (|when| <= " in result.stderr


def test_values_clear_removes_the_key(values_target):
    url, ns = values_target
    cleared = cli(
        "values", "clear", "ETHUSDT", "llm", "binance", "1h", "--url", url, "-n", ns, "--json"
    )
    assert json.loads(cleared.stdout) == {"cleared": True}
    rows = rows_of(cli("values", "list", "--url", url, "-n", ns, "--json").stdout)
    assert [r["symbol"] for r in rows] == ["BTCUSDT"]


# --- doctor ------------------------------------------------------------------------------


def test_doctor_passes_on_a_usable_store(target):
    backend, url, ns = target
    result = cli("doctor", "--url", url, "-n", ns, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c["status"] for c in json.loads(result.stdout)["checks"]}
    assert checks["read/write"] == "OK"
    if backend == "redis":
        assert checks["server"] == "OK" and checks["persistence"] == "OK"
    with sessionstore.connect(url, ns) as store:
        assert [h.id for h in store.events.list()] == ["done", "live"]
        assert store.list_values() == []


def test_doctor_fails_when_persistence_does_not_match_the_durability(tmp_path):
    from support.redis_server import RedisServer

    with RedisServer(durable=False) as server:
        result = cli("doctor", "--url", server.url)
        assert result.returncode == 1
        assert "FAIL persistence" in result.stdout and "appendfsync always" in result.stdout
        relaxed = cli("doctor", "--url", server.url + "?durability=none")
        assert relaxed.returncode == 0, relaxed.stdout


def test_doctor_fails_when_the_server_is_down():
    result = cli("doctor", "--url", "redis://:s3cret@127.0.0.1:1/0")
    assert result.returncode == 1
    assert "FAIL" in result.stdout and "s3cret" not in result.stdout + result.stderr


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("acl", "u", "-n", ""),
        ("acl", "u", "-n", "\ud800"),
        ("acl", ""),
        ("acl", "u v"),
        ("acl", "u", "--password", "p q"),
        ("acl", "u\x1b[31m"),
        ("sessions", "show"),
        ("sessions", "show", "x", "--from", "[bold]soon[/]"),
        ("sessions", "nope"),
        ("values", "get", "a", "b", "c", "d", "--mode", "[red]x\x1b[2J"),
    ],
)
def test_every_bad_input_is_one_escaped_line_and_exit_2(args, tmp_path):
    result = cli(*args, "--url", (tmp_path / "s").as_uri()) if args[0] == "values" else cli(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert "\x1b" not in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "list"),
        ("values", "get", "a", "b", "c", "d"),
        ("export",),
        ("import",),
        ("namespaces",),
        ("top", "--once"),
        ("demo",),
    ],
)
def test_an_empty_url_is_an_invalid_argument_not_an_unexpected_error(args):
    result = cli(*args, "--url", "")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (
        "error: invalid argument: url must be a non-empty str or path, not an empty str\n"
    )


def test_a_password_is_never_echoed_in_an_error():
    result = cli("acl", "u", "--password", "s3cret pass")
    assert result.returncode == 2 and "s3cret" not in result.stderr


def test_a_hostile_session_id_in_an_error_is_printed_literally(tmp_path):
    url = (tmp_path / "store").as_uri()
    (tmp_path / "store").mkdir()  # a store that exists: the session is what is missing
    result = cli("sessions", "show", "[bold]x[/]\x1b]8;;http://evil\x07", "--url", url)
    assert result.returncode == 2
    assert "[bold]x[/]\\x1b]8;;http://evil\\x07" in result.stderr and "\x1b" not in result.stderr


def test_no_help_shows_raw_markup():
    """Every command's --help is plain text: no reST literal (``x``) shows through."""
    import typer.main

    from sessionstore.cli import app

    def paths(group: Any, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = [prefix]
        for name, command in group.commands.items():
            if hasattr(command, "commands"):  # a group of commands
                found += paths(command, (*prefix, name))
            else:
                found.append((*prefix, name))
        return found

    root = typer.main.get_command(app)
    runner = CliRunner()
    for path in paths(root, ()):
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert result.exit_code == 0, path
        assert "``" not in result.stdout, path


def test_an_empty_listing_names_the_namespaces_that_hold_data(tmp_path):
    url = (tmp_path / "store").as_uri()
    sessionstore.connect(url, "e").close()  # an empty store
    (tmp_path / "store").mkdir(exist_ok=True)
    found = cli("values", "list", "--url", url, "-n", "e")
    assert found.returncode == 0 and found.stderr.endswith(
        "; no namespace of this store holds data\n"
    )
    with sessionstore.connect(url, "e") as store:
        store.events.create(SessionHeader(id="s-1"))
        store.events.append("s-1", [{"seq": 0, "type": "user", "time": 1, "data": {}}])
    found = cli("values", "list", "--url", url, "-n", "e")
    assert found.stderr.endswith("; no other namespace of this store holds data\n"), found.stderr
    found = cli("values", "list", "--url", url, "-n", "f")
    assert "; namespaces holding data: 'e' (1 session, 0 values) (choose one with -n)" in (
        found.stderr
    )
