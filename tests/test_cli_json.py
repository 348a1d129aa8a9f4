"""One ``--json`` rule for every subcommand: JSON lines, one object per line; one per row
for a listing, exactly one for a single result; nothing else on stdout."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionEvent, SessionHeader
from sessionstore.cli import app
from sessionstore.cli.common import JSON_RULE

T = 1_718_000_000_000
NS = "json"


def commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


ALL = commands(typer.main.get_command(app))


def objects(*args: str, exit_code: int = 0) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, list(args), env={"SESSIONSTORE_URL": None})
    assert result.exit_code == exit_code, (args, result.stdout, result.stderr, result.exception)
    lines = result.stdout.splitlines()
    parsed = [json.loads(line) for line in lines]
    assert all(isinstance(item, dict) for item in parsed), (args, lines)
    return parsed


@pytest.fixture
def url(tmp_path):
    url = (tmp_path / "store").as_uri()
    with sessionstore.connect(url, NS) as store:
        for sid in ("a", "b"):
            store.events.create(SessionHeader(id=sid, created_at=1))
            store.events.append(
                sid,
                [
                    SessionEvent(seq=0, type="turn/start", time=T, data={"turn": 1}),
                    SessionEvent(seq=1, type="note", time=T, data={"n": 1}),
                    SessionEvent(seq=2, type="turn/end", time=T, data={"reason": {"kind": "x"}}),
                ],
            )
        store.session("BTC", "s", "x", "1h").set_data([1, 2], T)
        history = store.session("ETH", "s", "x", "1h", history=True)
        history.set_data("early", T)
        history.set_data("late", T + 1)
    return url


def test_the_rule_is_stated_in_the_top_level_help():
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "400"})
    assert " ".join(JSON_RULE.split()) in " ".join(result.stdout.replace("│", " ").split())


def test_every_subcommand_takes_json():
    group = typer.main.get_command(app)
    assert len(ALL) == 18  # demo, doctor, acl, copy, export, import, top, namespaces delete, 6 + 4
    for path in ALL:
        command: Any = group
        for name in path:
            command = command.commands[name]
        assert any("--json" in param.opts for param in command.params), path


def test_listings_print_one_object_per_row(url):
    where = ("--url", url, "-n", NS)
    assert [row["id"] for row in objects("sessions", "list", *where, "--json")] == ["a", "b"]
    assert [e["seq"] for e in objects("sessions", "show", "a", *where, "--json")] == [0, 1, 2]
    assert [
        e["seq"] for e in objects("sessions", "tail", "a", "--last", "2", *where, "--json")
    ] == [
        1,
        2,
    ]
    assert [r["id"] for r in objects("sessions", "verify", *where, "--json")] == ["a", "b"]
    assert [r["symbol"] for r in objects("values", "list", *where, "--json")] == ["BTC", "ETH"]
    history = ("values", "get", "ETH", "s", "x", "1h", "--history", *where, "--json")
    assert [v["value"] for v in objects(*history)] == ["early", "late"]
    assert objects("sessions", "list", "--url", url, "-n", "empty", "--json") == []


def test_single_results_print_exactly_one_object(url, tmp_path):
    where = ("--url", url, "-n", NS)
    (got,) = objects("values", "get", "BTC", "s", "x", "1h", *where, "--json")
    assert got["value"] == [1, 2]
    (cleared,) = objects("values", "clear", "BTC", "s", "x", "1h", *where, "--json")
    assert cleared == {"cleared": True}
    (deleted,) = objects("sessions", "delete", "b", *where, "--json")
    assert deleted == {"deleted": "b"}
    (report,) = objects("doctor", *where, "--json")
    assert report["ok"] is True and report["checks"]
    (acl,) = objects("acl", "u", "-n", NS, "--json")
    assert acl["command"].startswith("redis-cli ACL SETUSER u ")
    demo = ("demo", "--url", url, "-n", "demo-json", "--workers", "1", "--symbols", "1")
    (summary,) = objects(*demo, "--candles", "4", "--json")
    assert summary["ok"] is True and summary["candles"] == 8
