"""What the CLI prints of stored values is literal: hostile ids, symbols, strategies,
header fields, event types and data (rich markup, ANSI escapes, control characters,
bidi overrides) reach the terminal as visible text, and ``--json`` gives them back
exactly."""

from __future__ import annotations

import base64
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionEvent, SessionHeader
from sessionstore.cli import app
from sessionstore.cli.common import json_text
from sessionstore.cli.text import literal, preview

T = 1_718_000_000_000
NS = "literal"
HOSTILE = [
    "[link=http://x]a[/link]",
    "[bold red]",
    "[/]",
    "\\[b]",
    ":smile:",
    "\x1b[31m",
    "\x1b]8;;http://evil\x07",
    "\x9b2J",
    "\r",
    "\x00",
    "\x7f",
    "\u202e",
    "\u2028",
    "\ufeff",
    "'\"",
]
#: Unicode without lone surrogates (the library refuses those, as UTF-8 cannot hold them).
ANY_CHAR = st.characters(blacklist_categories=("Cs",))
hostile = (
    st.lists(
        st.one_of(st.sampled_from(HOSTILE), st.text(ANY_CHAR, min_size=1, max_size=3)),
        min_size=1,
        max_size=3,
    )
    .map("".join)
    .filter(lambda text: len(literal(text)) <= 36)
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(ANY_CHAR, max_size=8),
    st.binary(max_size=8),
)
map_keys = st.one_of(st.text(ANY_CHAR, max_size=6), st.binary(max_size=4), st.integers(-9, 9))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(map_keys, inner, max_size=3)
    ),
    max_leaves=10,
).filter(lambda value: value is not None)  # None is what "nothing stored" reads as


def invoke(*args: str) -> Any:
    # Wide enough that no table cell is wrapped over two lines.
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "4000"})
    assert result.exit_code == 0, (args, result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stdout + result.stderr
    assert printable(result.stdout) and printable(result.stderr), result.stdout
    return result


def json_lines(output: str) -> list[Any]:
    return [json.loads(line) for line in output.splitlines()]


def printable(output: str) -> bool:
    return all(char == "\n" or char.isprintable() for char in output)


def from_json(value: Any) -> Any:
    """The inverse of the JSON form ``values get --json`` documents."""
    if isinstance(value, list):
        return [from_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((tag, body),) = value.items()
        if tag == "$bytes":
            return base64.b64decode(body)
        if tag == "$map":
            return {from_json(k): from_json(v) for k, v in body}
        if tag == "$float":
            return float(body)
    return {key: from_json(item) for key, item in value.items()}


def same(a: Any, b: Any) -> bool:
    """Equality in which NaN equals NaN and a bool is not an int."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def test_literal_escapes_what_is_not_printable_and_keeps_markup_text():
    assert literal("[bold red]x[/]") == "[bold red]x[/]"
    assert literal("a\x1b[31m\r\n\x7f\x9b") == "a\\x1b[31m\\r\\n\\x7f\\x9b"
    assert literal("\u202eevil\u2028\U000e0001") == "\\u202eevil\\u2028\\U000e0001"
    assert literal(b"\x1b") == "b'\\x1b'"


def test_preview_cuts_huge_strings_and_deep_nesting_readably():
    assert preview("x" * 10_000, 20) == "x" * 19 + "… (10000 chars)"
    deep: Any = "bottom"
    for _ in range(400):
        deep = [deep]
    shown = preview(deep, 80)
    assert len(shown) <= 80 and "…" in shown and "bottom" not in shown


def test_json_escapes_unprintable_characters_and_round_trips():
    value = {"\x1b[31m\u202e\x9b\U000e0001": [b"\xff", float("inf")], b"k": {1: None}}
    text = json_text(value)
    assert printable(text) and "\\u001b" in text and "\\u202e" in text
    assert same(from_json(json.loads(text)), value)


def test_a_map_whose_only_key_is_a_tag_is_not_mistaken_for_one():
    for stored in ({"$bytes": "AA=="}, {"$map": []}, {"$float": "nan"}):
        assert from_json(json.loads(json_text(stored))) == stored


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    session_id=hostile.filter(lambda text: "\0" not in text),  # ids refuse NUL
    cwd=hostile,
    event_type=hostile,
    note=hostile,
    parts=st.tuples(hostile, hostile, hostile, hostile),
    value=values,
)
def test_hostile_text_is_printed_literally_and_json_round_trips(
    session_id, cwd, event_type, note, parts, value
):
    with tempfile.TemporaryDirectory() as tmp:
        url = (Path(tmp) / "store").as_uri()
        data = {"note": note, "nested": {"k": [note]}}
        with sessionstore.connect(url, NS) as store:
            store.events.create(SessionHeader(id=session_id, cwd=cwd, created_at=T))
            store.events.append(
                session_id, [SessionEvent(seq=0, type=event_type, time=T, data=data)]
            )
            store.session(*parts).set_data(value, T)
        where = ("--url", url, "-n", NS)

        listed = invoke("sessions", "list", *where)
        assert literal(session_id) in listed.stdout
        rows = json_lines(invoke("sessions", "list", *where, "--json").stdout)
        assert [(row["id"], row["cwd"]) for row in rows] == [(session_id, cwd)]

        shown = invoke("sessions", "show", *where, "--", session_id)
        assert literal(event_type) in shown.stdout and repr(note) in shown.stdout
        (event,) = [
            json.loads(line)
            for line in invoke(
                "sessions", "show", *where, "--json", "--", session_id
            ).stdout.splitlines()
        ]
        assert event["type"] == event_type and event["data"] == data

        table = invoke("values", "list", *where).stdout
        assert all(literal(part) in table for part in parts)
        refs = json_lines(invoke("values", "list", *where, "--json").stdout)
        assert [
            tuple(ref[name] for name in ("symbol", "strategy", "exchange", "frame")) for ref in refs
        ] == [parts]

        invoke("values", "get", *where, "--", *parts)
        got = json.loads(invoke("values", "get", *where, "--json", "--", *parts).stdout)
        assert same(from_json(got["value"]), value)


def test_show_renders_event_data_of_any_shape(tmp_path):
    url = (tmp_path / "store").as_uri()
    deep: Any = "bottom"
    for _ in range(200):
        deep = {"k": deep}
    events = [
        SessionEvent(seq=0, type="turn/start", time=T, data={}),
        SessionEvent(seq=1, type="tool/call", time=T, data={"call_id": "c1"}),
        SessionEvent(
            seq=2,
            type="tool/result",
            time=T,
            data={"call_id": "c1", "is_error": True, "error": "boom"},
        ),
        SessionEvent(seq=3, type="note", time=T, data=deep),
        SessionEvent(seq=4, type="note", time=T, data={"text": "[red]x" * 50_000}),
        SessionEvent(seq=5, type="turn/end", time=T, data={"reason": "done"}),
    ]
    with sessionstore.connect(url, NS) as store:
        store.events.create(SessionHeader(id="s", created_at=T))
        store.events.append("s", events)
    lines = invoke("sessions", "show", "s", "--url", url, "-n", NS).stdout.splitlines()
    assert len(lines) == len(events) and all(len(line) < 200 for line in lines)
    assert lines[0].endswith("turn None")
    assert lines[1].endswith("call None(None) [c1]")
    assert lines[2].endswith("result [c1] error boom: None")
    assert "{'k': {'k':" in lines[3] and "…" in lines[3]
    assert "[red]x[red]x" in lines[4] and lines[4].endswith("…")
    assert lines[5].endswith("end of turn None (done)")


def test_values_get_json_gives_maps_with_bytes_and_int_keys_exactly(tmp_path):
    url = (tmp_path / "store").as_uri()
    stored = {b"k": b"\xff", 1: [b"x"], "nan": float("nan"), "plain": {"a": 1}}
    with sessionstore.connect(url, NS) as store:
        store.session("BTC", "s", "x", "1h").set_data(stored, T)
    where = ("--url", url, "-n", NS, "BTC", "s", "x", "1h")
    got = json.loads(invoke("values", "get", "--json", *where).stdout)["value"]
    assert got["$map"][0] == [{"$bytes": "aw=="}, {"$bytes": "/w=="}]
    assert same(from_json(got), stored)
    shown = invoke("values", "get", *where).stdout
    assert same(from_json(json.loads(shown)), stored), "printed as the same JSON"
