"""The harness fields that crash repair reads: checked at append, read leniently from a
stored log (a log written before the check still loads), reported by harness_warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.events import batch_of, stored

import sessionstore
from sessionstore import InvalidArgumentError, SessionEvent, SessionHeader
from sessionstore.errors import HarnessFieldError
from sessionstore.eventlog import closers, encode_batch
from sessionstore.harness import HARNESS_TYPES, harness_warnings

T = 1_718_000_000_000


def ev(seq: int, type: str, **data: Any) -> SessionEvent:
    return SessionEvent(seq=seq, type=type, time=T + seq, data=data)


MALFORMED = [
    ("turn/start", {"turn": 1.5}, "$.turn"),
    ("turn/start", {"turn": True}, "$.turn"),
    ("turn/start", {"turn": {"n": 1}}, "$.turn"),
    ("step/start", {"turn": 1}, "$.step"),
    ("step/start", {"step": None}, "$.step"),
    ("step/start", {"step": [1]}, "$.step"),
    ("assistant/message", {"tool_calls": 5}, "$.tool_calls"),
    ("assistant/message", {"tool_calls": {"id": "c"}}, "$.tool_calls"),
    ("assistant/message", {"tool_calls": ["c-1"]}, "$.tool_calls[0]"),
    ("assistant/message", {"tool_calls": [{"id": "a"}, {"id": 7}]}, "$.tool_calls[1].id"),
    ("assistant/message", {"tool_calls": [{"name": "x"}]}, "$.tool_calls[0].id"),
    ("assistant/message", {"step": False}, "$.step"),
    ("tool/call", {"name": "bash"}, "$.call_id"),
    ("tool/call", {"call_id": 3}, "$.call_id"),
    ("tool/call", {"call_id": "c", "step": 1.0}, "$.step"),
    ("tool/result", {"content": "ok"}, "$.call_id"),
    ("tool/result", {"call_id": None}, "$.call_id"),
]

WELL_FORMED = [
    ("turn/start", {}),
    ("turn/start", {"turn": "t-1"}),
    ("turn/start", {"turn": None}),
    ("step/start", {"step": 0}),
    ("step/start", {"step": "s-1", "turn": 1}),
    ("assistant/message", {"text": "hi"}),
    ("assistant/message", {"tool_calls": None, "step": None}),
    ("assistant/message", {"tool_calls": [{"id": "c", "name": "x", "arguments": {}}]}),
    ("tool/call", {"call_id": "c", "step": 2}),
    ("tool/result", {"call_id": "c", "is_error": False}),
    ("step/end", {"step": {"anything": True}}),
    ("turn/end", {"reason": 5}),
    ("note", {"step": [1], "tool_calls": 5, "call_id": 3}),
]


@pytest.mark.parametrize(("kind", "data", "path"), MALFORMED)
def test_a_malformed_harness_field_is_refused_naming_type_seq_and_path(kind, data, path):
    with pytest.raises(HarnessFieldError) as caught:
        encode_batch("s", [ev(0, "note"), SessionEvent(seq=1, type=kind, time=T, data=data)])
    error = caught.value
    assert (error.event_type, error.seq, error.path) == (kind, 1, path)
    assert kind in str(error) and "seq 1" in str(error) and path in str(error)
    assert isinstance(error, InvalidArgumentError)


@pytest.mark.parametrize(("kind", "data"), WELL_FORMED)
def test_well_formed_harness_fields_and_other_types_are_accepted(kind, data):
    [text] = encode_batch("s", [SessionEvent(seq=0, type=kind, time=T, data=data)]).texts
    assert orjson.loads(text)["data"] == data


def test_lossy_data_is_named_before_a_missing_harness_field():
    with pytest.raises(sessionstore.NotJSONSerializableError):
        encode_batch("s", [SessionEvent(seq=0, type="tool/call", time=T, data={"x": {1}})])


def test_closers_pass_the_check():
    log = [
        ev(0, "turn/start"),
        ev(1, "step/start", step=1),
        ev(2, "assistant/message", tool_calls=[{"id": "a"}, {"id": "b"}]),
        ev(3, "tool/call", call_id="a"),
    ]
    extra = closers(log)
    assert [e.type for e in extra] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert len(encode_batch("s", extra)) == 4


# --- stored logs written before the check -------------------------------------------------


def legacy(seq: int, kind: str, data: dict[str, Any]) -> SessionEvent:
    return stored(seq, kind, T + seq, data)


LEGACY_TURN = [
    legacy(0, "turn/start", {"turn": {"n": 1}}),
    legacy(1, "step/start", {"step": [1]}),
    legacy(2, "assistant/message", {"tool_calls": 5}),
    legacy(3, "assistant/message", {"tool_calls": [{"id": 1}, "x", {"id": "ok"}], "step": 1.5}),
    legacy(4, "tool/call", {"call_id": ["c"]}),
    legacy(5, "tool/result", {}),
    legacy(6, "step/start", {"step": 2}),
]


@pytest.fixture(params=["memory", "file", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return {
        "memory": "memory://",
        "file": (tmp_path / "store").as_uri(),
        "sqlite": f"sqlite:///{tmp_path / 'store.db'}",
    }[request.param]


def test_a_log_with_malformed_harness_fields_still_loads_and_is_repaired(url):
    with sessionstore.connect(url, "ns") as store:
        store._backends.events.append("old", batch_of(LEGACY_TURN), SessionHeader(id="old"))
        loaded = store.events.load("old")
    added = loaded.events[len(LEGACY_TURN) :]
    assert [(e.type, e.data.get("call_id")) for e in added] == [
        ("tool/result", "ok"),
        ("step/end", None),
        ("turn/end", None),
    ]
    assert added[0].data["error"]["code"] == "TOOL_NOT_STARTED"
    assert added[0].data["turn"] is None and added[0].data["step"] is None
    assert added[1].data == {"turn": None, "step": 2}


def test_harness_warnings_name_seq_type_and_path_of_what_repair_ignored(url):
    with sessionstore.connect(url, "ns") as store:
        store._backends.events.append("old", batch_of(LEGACY_TURN), SessionHeader(id="old"))
        warnings = harness_warnings(store.events.read_from("old", 0))
    assert warnings == [
        "seq 0 (turn/start): $.turn must be an int or a string or null, not dict",
        "seq 1 (step/start): $.step must be an int or a string, not list",
        "seq 2 (assistant/message): $.tool_calls must be a list of objects or null, not int",
        "seq 3 (assistant/message): $.step must be an int or a string or null, not float",
        "seq 4 (tool/call): $.call_id must be a string, not list",
        "seq 5 (tool/result): $.call_id missing (must be a string)",
    ]
    assert harness_warnings([ev(0, "turn/start", turn=1), ev(1, "note", step=[])]) == []


# --- generated shapes -----------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = st.sampled_from(["turn", "step", "call_id", "tool_calls", "id", "x"])
harness_data = st.dictionaries(
    FIELDS,
    json_values | st.lists(st.dictionaries(st.sampled_from(["id", "name"]), json_values)),
    max_size=4,
)
harness_kinds = st.sampled_from(sorted(HARNESS_TYPES))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@given(shapes=st.lists(st.tuples(harness_kinds, harness_data), min_size=1, max_size=8))
@SETTINGS
def test_repair_never_fails_on_any_stored_shape_and_its_closers_are_well_formed(shapes):
    events = [
        SessionEvent(seq=seq, type=kind, time=T, data=data)
        for seq, (kind, data) in enumerate([("turn/start", {}), *shapes])
    ]
    extra = closers(events)
    assert closers(events + extra) == []
    encode_batch("s", extra)


@given(shapes=st.lists(st.tuples(harness_kinds, harness_data), min_size=1, max_size=6))
@SETTINGS
def test_an_append_is_refused_whole_or_accepted_and_loads(shapes):
    with sessionstore.connect("memory://", "ns") as store:
        store.events.create(SessionHeader(id="s"))
        store.events.append("s", [ev(0, "turn/start", turn=1)])
        batch = [
            SessionEvent(seq=seq, type=kind, time=T, data=data)
            for seq, (kind, data) in enumerate(shapes, start=1)
        ]
        try:
            store.events.append("s", batch)
        except InvalidArgumentError:
            assert [e.seq for e in store.events.read_from("s", 0)] == [0]
            assert harness_warnings(batch)
        else:
            assert harness_warnings(batch) == []
            loaded = store.events.load("s")
            assert loaded.events[: len(batch) + 1] == [ev(0, "turn/start", turn=1), *batch]


@given(shapes=st.lists(st.tuples(harness_kinds, harness_data), min_size=1, max_size=6))
@SETTINGS
def test_a_stored_log_of_any_shape_loads(shapes):
    written = [legacy(0, "turn/start", {})] + [
        legacy(seq, kind, data) for seq, (kind, data) in enumerate(shapes, start=1)
    ]
    with sessionstore.connect("memory://", "ns") as store:
        store._backends.events.append("s", batch_of(written), SessionHeader(id="s"))
        loaded = store.events.load("s")
        assert closers(loaded.events) == []
        assert store.events.load("s") == loaded
