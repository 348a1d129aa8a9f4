"""EventLogContract: every event-log backend, through the sync and the async API."""

from __future__ import annotations

import datetime as dt
import math
import time

import pytest
from support import artifacts

from sessionstore import (
    CorruptLogError,
    EventTimeOrderError,
    InvalidArgumentError,
    NotJSONSerializableError,
    SeqConflictError,
    SessionEvent,
    SessionExistsError,
    SessionHeader,
    SessionNotFoundError,
    SessionStoreError,
    StoredRecord,
    UnsupportedVersionError,
)
from sessionstore.errors import HarnessFieldError
from sessionstore.records import parsed_values

T = 1_718_000_000_000


def ev(seq: int, type: str = "note", data: dict | None = None, time: int = T, **extra):
    return SessionEvent(
        seq=seq, type=type, time=time + seq, data={} if data is None else data, **extra
    )


def header(session_id: str = "s-1", **fields) -> SessionHeader:
    return SessionHeader(id=session_id, cwd="/home/me/project", **fields)


def started(store, session_id: str = "s-1", count: int = 3, **fields) -> SessionHeader:
    h = header(session_id, **fields)
    store.events.create(h)
    if count:
        store.events.append(session_id, [ev(i) for i in range(count)])
    return h


def seqs(events) -> list[int]:
    return [e.seq for e in events]


# --- create ----------------------------------------------------------------------------


def test_create_is_lazy_and_leaves_nothing_behind(store, backend, store_url, namespace):
    log = store.events
    log.create(header("lazy"))
    assert [h.id for h in log.list()] == []
    with pytest.raises(SessionNotFoundError):
        log.load("lazy")
    assert artifacts.footprint(backend, store_url, namespace) == []


def test_the_first_append_materialises_the_created_session(store):
    h = header("s-1", parent_id="p-0", fork_seq=7)
    store.events.create(h)
    store.events.append("s-1", [ev(0)])
    loaded = store.events.load("s-1")
    assert loaded.header == h
    assert seqs(loaded.events) == [0]


def test_header_defaults(store):
    h = SessionHeader(id="d")
    assert h.version == 1 and h.parent_id is None and h.fork_seq is None
    assert abs(h.created_at - time.time() * 1000) < 60_000


def test_creating_an_existing_id_raises(store, open_store, backend):
    log = store.events
    log.create(header("dup"))
    with pytest.raises(SessionExistsError):
        log.create(header("dup"))
    log.append("dup", [ev(0)])
    with pytest.raises(SessionExistsError):
        log.create(header("dup"))
    if backend != "memory":
        with pytest.raises(SessionExistsError):
            open_store().events.create(header("dup"))


def test_a_create_raced_by_another_store_is_refused_once_then_forgotten(store, open_store, backend):
    if backend == "memory":
        pytest.skip("a memory:// store is its one connect: no other store shares it")
    other = open_store()
    store.events.create(header("raced", created_at=1))
    other.events.create(header("raced", created_at=2))
    assert other.events.append("raced", [ev(0)]) == 1
    with pytest.raises(SessionExistsError):
        store.events.append("raced", [ev(0)])
    # The refused header is forgotten: the next append goes to the stored session.
    assert store.events.append("raced", [ev(1)]) == 2
    loaded = store.events.load("raced")
    assert loaded.header.created_at == 2 and seqs(loaded.events) == [0, 1]


def test_a_header_of_an_unknown_version_cannot_be_created(store):
    with pytest.raises(UnsupportedVersionError):
        store.events.create(SessionHeader(id="v", version=99))


@pytest.mark.parametrize("call", ["load", "delete", "read_from"])
def test_unknown_ids_raise_session_not_found(store, call):
    args = ("nope", 0) if call == "read_from" else ("nope",)
    with pytest.raises(SessionNotFoundError) as caught:
        getattr(store.events, call)(*args)
    assert "nope" in str(caught.value)
    assert isinstance(caught.value, SessionStoreError)


def test_append_to_a_session_never_created_raises_not_found(store):
    with pytest.raises(SessionNotFoundError):
        store.events.append("ghost", [ev(0)])


def test_append_by_another_store_to_a_materialised_session(store, open_store, shared):
    started(store, "s-1", 2)
    other = open_store()
    assert other.events.append("s-1", [ev(2)]) == 3
    assert seqs(store.events.load("s-1").events) == [0, 1, 2]


# --- append ----------------------------------------------------------------------------


# --- append naming the session's header --------------------------------------------------


def test_an_append_naming_the_stored_header_lands(store, open_store, shared):
    h = started(store, "s-1", 2)
    other = open_store()
    assert other.events.append("s-1", [ev(2)], header=other.events.info("s-1").header) == 3
    assert store.events.append("s-1", [ev(3)], header=h) == 4
    assert seqs(store.events.load("s-1").events) == [0, 1, 2, 3]


def test_an_append_naming_a_session_made_again_is_refused_at_the_same_seq(
    store, open_store, backend
):
    old = started(store, "s-1", 2)
    store.events.delete("s-1")
    made_again = header("s-1", created_at=old.created_at + 1)
    store.events.create(made_again)
    store.events.append("s-1", [ev(0, data={"again": True}), ev(1)])
    for writer in (store,) if backend == "memory" else (store, open_store()):
        with pytest.raises(SessionExistsError) as caught:
            writer.events.append("s-1", [ev(2)], header=old)
        assert caught.value.session_id == "s-1"
    loaded = store.events.load("s-1")
    assert loaded.header == made_again and seqs(loaded.events) == [0, 1]
    assert store.events.append("s-1", [ev(2)], header=made_again) == 3


def test_an_append_naming_a_header_of_a_session_not_stored_writes_only_from_seq_0(store):
    h = header("s-1")
    with pytest.raises(SeqConflictError) as caught:
        store.events.append("s-1", [ev(2)], header=h)
    assert (caught.value.expected, caught.value.got) == (0, 2)
    with pytest.raises(SessionNotFoundError):
        store.events.info("s-1")
    assert store.events.append("s-1", [ev(0)], header=h) == 1
    assert store.events.load("s-1").header == h


def test_an_append_naming_the_header_another_store_wrote_drops_its_own_create(
    store, open_store, shared
):
    """This store created the session (not written yet) and lost the race: another
    store wrote it with its own header. An append naming that header lands; the create
    that did not take is forgotten."""
    mine = header("s-1")
    store.events.create(mine)
    theirs = SessionHeader(id="s-1", created_at=mine.created_at + 1)
    other = open_store()
    other.events.create(theirs)
    other.events.append("s-1", [ev(0)])
    assert store.events.append("s-1", [ev(1)], header=theirs) == 2
    assert store.events.append("s-1", [ev(2)]) == 3
    assert store.events.load("s-1").header == theirs


def test_an_append_naming_another_header_than_its_own_create_stores_that_one(store):
    mine = header("s-1")
    store.events.create(mine)
    named = SessionHeader(id="s-1", created_at=mine.created_at)
    assert store.events.append("s-1", [ev(0)], header=named) == 1
    assert store.events.load("s-1").header == named
    with pytest.raises(SessionExistsError):
        store.events.append("s-1", [ev(1)], header=mine)


def test_an_empty_append_naming_a_header_checks_it(store):
    old = started(store, "s-1", 2)
    assert store.events.append("s-1", [], header=old) == 2
    store.events.delete("s-1")
    assert store.events.append("s-1", [], header=old) == 0
    made_again = header("s-1", created_at=old.created_at + 1)
    store.events.create(made_again)
    store.events.append("s-1", [ev(0)])
    with pytest.raises(SessionExistsError):
        store.events.append("s-1", [], header=old)


@pytest.mark.parametrize(
    "bad",
    [{"id": "s-1"}, SessionHeader(id="s-2"), SessionHeader.model_construct(id="s-1", version=9)],
    ids=["a dict", "another session's", "another version"],
)
def test_an_append_naming_a_bad_header_is_refused_and_writes_nothing(store, bad):
    started(store, "s-1", 1)
    with pytest.raises(SessionStoreError) as caught:
        store.events.append("s-1", [ev(1)], header=bad)
    assert "s-1" in str(caught.value) or "version" in str(caught.value)
    assert seqs(store.events.load("s-1").events) == [0]


def test_seq_starts_at_zero_and_is_contiguous_across_batches(store):
    store.events.create(header())
    assert store.events.append("s-1", [ev(0), ev(1)]) == 2
    assert store.events.append("s-1", [ev(2)]) == 3
    assert seqs(store.events.load("s-1").events) == [0, 1, 2]


def test_the_first_batch_must_start_at_zero(store):
    store.events.create(header())
    with pytest.raises(SeqConflictError) as caught:
        store.events.append("s-1", [ev(1)])
    assert (caught.value.session_id, caught.value.expected, caught.value.got) == ("s-1", 0, 1)
    with pytest.raises(SessionNotFoundError):
        store.events.load("s-1")


@pytest.mark.parametrize("first", [3, 5])
def test_a_batch_past_the_next_seq_conflicts_and_writes_nothing(store, first):
    started(store, "s-1", 2)
    with pytest.raises(SeqConflictError) as caught:
        store.events.append("s-1", [ev(first), ev(first + 1)])
    assert (caught.value.expected, caught.value.got) == (2, first)
    assert seqs(store.events.load("s-1").events) == [0, 1]


def test_a_batch_with_a_gap_conflicts_and_writes_nothing(store):
    started(store, "s-1", 2)
    with pytest.raises(SeqConflictError):
        store.events.append("s-1", [ev(2), ev(4)])
    assert seqs(store.events.load("s-1").events) == [0, 1]


def test_append_takes_plain_dicts(store):
    store.events.create(header())
    store.events.append("s-1", [{"seq": 0, "type": "turn/start", "time": T, "data": {"turn": 1}}])
    event = store.events.load("s-1").events[0]
    assert (event.type, event.data) == ("turn/start", {"turn": 1})


def test_events_round_trip_every_field(store):
    store.events.create(header())
    data = {"text": "héllo ✓", "n": 2**63 - 1, "f": -0.5, "nested": {"list": [1, None, True]}}
    store.events.append("s-1", [SessionEvent(seq=0, type="custom/x", time=T, data=data, id="e-0")])
    [event] = store.events.load("s-1").events
    assert event == SessionEvent(seq=0, type="custom/x", time=T, data=data, id="e-0")


def _label(bad: object) -> str:
    """A test id: the repr, or the fields set of an event built without some."""
    try:
        return repr(bad)[:40]
    except AttributeError:
        given = [name for name in ("seq", "type", "time", "data", "id") if hasattr(bad, name)]
        return f"SessionEvent.model_construct({','.join(given)})"


@pytest.mark.parametrize(
    "bad",
    [
        {"seq": -1, "type": "x", "time": T},
        {"type": "x", "time": T},
        {"seq": 0, "type": "x", "time": "soon"},
        {"seq": "0", "type": "x", "time": T},
        {"seq": True, "type": "x", "time": T},
        {"seq": False, "type": "x", "time": T},
        {"seq": 0.0, "type": "x", "time": T},
        {"seq": 0, "type": "x", "time": str(T)},
        {"seq": 0, "type": "x", "time": True},
        {"seq": 0, "type": "x", "time": T + 0.5},
        {"seq": 0, "type": 5, "time": T},
        {"seq": 0, "type": "x", "time": T, "id": 5},
        {"seq": 0, "type": "x", "time": T, "extra": 1},
        SessionEvent.model_construct(seq="0", type="x", time=T, data={}, id=None),
        SessionEvent.model_construct(seq=0, type="x", time=True, data={}, id=None),
        SessionEvent.model_construct(seq=1, type="x"),
        SessionEvent.model_construct(type="x", time=T, data={}),
        "not an event",
        None,
    ],
    ids=lambda bad: _label(bad),
)
def test_a_malformed_event_raises_invalid_argument_and_nothing_is_coerced(store, bad):
    store.events.create(header())
    with pytest.raises(InvalidArgumentError) as caught:
        store.events.append("s-1", [ev(0), bad])
    assert "#1" in str(caught.value)
    with pytest.raises(SessionNotFoundError):
        store.events.read_from("s-1", 0)


@pytest.mark.parametrize("events", [None, 5, ev(0), {"seq": 0, "type": "x", "time": T}])
def test_append_takes_a_list_of_events(store, events):
    store.events.create(header())
    with pytest.raises(InvalidArgumentError):
        store.events.append("s-1", events)


@pytest.mark.parametrize(
    ("kind", "data", "path"),
    [
        ("step/start", {"turn": 1}, "$.step"),
        ("assistant/message", {"tool_calls": [{"id": "c-1"}, {"id": 2}]}, "$.tool_calls[1].id"),
        ("assistant/message", {"tool_calls": "c-1"}, "$.tool_calls"),
        ("tool/call", {"name": "bash"}, "$.call_id"),
        ("tool/result", {"call_id": 7}, "$.call_id"),
        ("turn/start", {"turn": [1]}, "$.turn"),
    ],
)
def test_a_malformed_harness_field_is_refused_and_nothing_written(store, kind, data, path):
    started(store, "s-1", 1)
    with pytest.raises(HarnessFieldError) as caught:
        store.events.append("s-1", [ev(1), SessionEvent(seq=2, type=kind, time=T, data=data)])
    error = caught.value
    assert (error.event_type, error.seq, error.path) == (kind, 2, path)
    assert isinstance(error, InvalidArgumentError)
    assert seqs(store.events.read_from("s-1", 0)) == [0]


def test_other_event_types_stay_free_form(store):
    store.events.create(header())
    data = {"step": [1], "tool_calls": 5, "call_id": None}
    store.events.append("s-1", [ev(0, "my/step", data)])
    assert store.events.read_from("s-1", 0)[0].data == data


# --- idempotent replay -----------------------------------------------------------------


def test_an_identical_batch_is_an_applied_replay(store, backend, store_url, namespace):
    h = started(store, "s-1", 0)
    batch = [ev(0, "note", {"turn": 1}), ev(1, "note", {"x": [1, 2]}, id="n1")]
    assert store.events.append("s-1", batch) == 2
    before = artifacts.footprint(backend, store_url, namespace)
    store.events.append("s-1", batch)
    store.events.append("s-1", batch[1:])
    assert artifacts.footprint(backend, store_url, namespace) == before
    loaded = store.events.load("s-1")
    assert loaded.header == h and seqs(loaded.events) == [0, 1]


@pytest.mark.parametrize(
    "replay",
    [
        [ev(0, "turn/start", {"turn": 2})],
        [ev(0, "turn/start", {"turn": 1}, time=T + 5)],
        [ev(0, "turn/start", {"turn": 1}, id="other")],
        [ev(0, "turn/end", {"turn": 1})],
        [ev(1, "note"), ev(2, "note")],
    ],
    ids=["data", "time", "id", "type", "runs-past-the-end"],
)
def test_a_batch_that_differs_from_the_stored_events_conflicts(store, replay):
    store.events.create(header())
    store.events.append("s-1", [ev(0, "turn/start", {"turn": 1}), ev(1, "note")])
    with pytest.raises(SeqConflictError) as caught:
        store.events.append("s-1", replay)
    assert caught.value.expected == 2
    stored = store.events.read_from("s-1", 0)
    assert [(e.seq, e.type, e.data) for e in stored] == [
        (0, "turn/start", {"turn": 1}),
        (1, "note", {}),
    ]


# --- lossless JSON ---------------------------------------------------------------------


class Thing:
    pass


def _cycle() -> dict:
    data: dict = {"a": {}}
    data["a"]["self"] = data["a"]
    return data


LOSSY = [
    ({"x": math.nan}, "$.x"),
    ({"x": math.inf}, "$.x"),
    ({"args": {"tags": {"a", "b"}}}, "$.args.tags"),
    ({"blob": b"bytes"}, "$.blob"),
    ({"pair": (1, 2)}, "$.pair"),
    ({"at": dt.datetime(2024, 1, 1)}, "$.at"),
    ({"m": {1: "int key"}}, "$.m"),
    ({"list": [1, Thing()]}, "$.list[1]"),
    ({"n": 2**70}, "$.n"),
    (_cycle(), "$.a.self"),
    ({"s": "\ud800"}, "$.s"),
]


@pytest.mark.parametrize(("data", "path"), LOSSY, ids=[p for _, p in LOSSY])
def test_lossy_data_is_rejected_naming_type_seq_and_path(store, data, path):
    started(store, "s-1", 1)
    event = SessionEvent(seq=2, type="tool/call", time=T, data=data)
    with pytest.raises(NotJSONSerializableError) as caught:
        store.events.append("s-1", [ev(1), event])
    error = caught.value
    assert (error.event_type, error.seq, error.path) == ("tool/call", 2, path)
    assert "tool/call" in str(error) and "2" in str(error) and path in str(error)
    assert isinstance(error, InvalidArgumentError)
    assert seqs(store.events.load("s-1").events) == [0]


def test_building_an_event_never_rejects_its_data():
    event = SessionEvent(seq=0, type="x", time=T, data={"tags": {1, 2}})
    assert event.data == {"tags": {1, 2}}


def _nested(depth: int, key: str) -> dict:
    data: dict = {}
    inner = data
    for _ in range(depth):
        inner[key] = {}
        inner = inner[key]
    inner["bad"] = {1, 2}
    return data


@pytest.mark.parametrize(("depth", "key"), [(5000, "k"), (3, "k" * 10_000), (300, "é" * 10_000)])
def test_the_path_in_a_message_stays_short(store, depth, key):
    store.events.create(header())
    with pytest.raises(InvalidArgumentError) as caught:
        store.events.append("s-1", [ev(0, "note", _nested(depth, key))])
    assert len(str(caught.value)) < 500
    assert str(caught.value).startswith("event 'note' (seq 0)")


def test_quoted_ids_and_types_in_messages_stay_short(store):
    long = "x" * 10_000
    with pytest.raises(SessionNotFoundError) as not_found:
        store.events.load(long)
    store.events.create(header())
    with pytest.raises(NotJSONSerializableError) as lossy:
        store.events.append("s-1", [ev(0, long, {"x": math.nan})])
    with pytest.raises(InvalidArgumentError) as invalid:
        store.events.append("s-1", [{"seq": long, "type": [[[long]]], "time": T}])
    for caught in (not_found, lossy, invalid):
        assert len(str(caught.value)) < 500


def test_data_must_be_an_object(store):
    store.events.create(header())
    with pytest.raises(NotJSONSerializableError) as caught:
        store.events.append("s-1", [SessionEvent(seq=0, type="x", time=T, data=[1, 2])])
    assert caught.value.path == "$"


# --- load: interrupted turns -----------------------------------------------------------


def turn_events(*specs):
    return [SessionEvent(seq=i, type=t, time=T + i, data=d) for i, (t, d) in enumerate(specs)]


def test_a_balanced_log_loads_unchanged(store):
    store.events.create(header())
    events = turn_events(
        ("turn/start", {"turn": 1}),
        ("step/start", {"turn": 1, "step": 1}),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "done"}}),
    )
    store.events.append("s-1", events)
    assert store.events.load("s-1").events == events


def test_an_interrupted_turn_is_closed_with_both_error_codes(store):
    store.events.create(header())
    store.events.append(
        "s-1",
        turn_events(
            ("turn/start", {"turn": 3}),
            ("step/start", {"turn": 3, "step": 1}),
            (
                "assistant/message",
                {
                    "turn": 3,
                    "step": 1,
                    "tool_calls": [
                        {"id": "c-ran", "name": "bash", "arguments": {"cmd": "ls"}},
                        {"id": "c-never", "name": "read", "arguments": {}},
                        {"id": "c-done", "name": "read", "arguments": {}},
                    ],
                },
            ),
            (
                "tool/call",
                {"turn": 3, "step": 1, "call_id": "c-done", "name": "read", "arguments": {}},
            ),
            (
                "tool/result",
                {"turn": 3, "step": 1, "call_id": "c-done", "is_error": False, "content": "ok"},
            ),
            (
                "tool/call",
                {
                    "turn": 3,
                    "step": 1,
                    "call_id": "c-ran",
                    "name": "bash",
                    "arguments": {"cmd": "ls"},
                },
            ),
        ),
    )
    events = store.events.load("s-1").events
    assert seqs(events) == list(range(10))
    closers = events[6:]
    assert [e.type for e in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    by_call = {e.data["call_id"]: e.data for e in closers[:2]}
    assert by_call["c-ran"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert by_call["c-never"]["error"]["code"] == "TOOL_NOT_STARTED"
    assert all(d["is_error"] is True and d["turn"] == 3 for d in by_call.values())
    assert closers[2].data == {"turn": 3, "step": 1}
    assert closers[3].data == {"turn": 3, "reason": {"kind": "interrupted"}}
    assert {e.time for e in closers} == {events[5].time}


def test_closers_are_durable_and_a_second_load_writes_nothing(
    store, open_store, backend, store_url, namespace
):
    store.events.create(header())
    store.events.append("s-1", turn_events(("turn/start", {"turn": 1})))
    first = store.events.load("s-1")
    assert [e.type for e in first.events] == ["turn/start", "turn/end"]
    before = artifacts.footprint(backend, store_url, namespace)
    assert store.events.load("s-1") == first
    assert artifacts.footprint(backend, store_url, namespace) == before
    assert store.events.read_from("s-1", 0) == first.events
    if backend != "memory":
        assert open_store().events.load("s-1") == first


def test_two_repairers_end_with_one_set_of_closers(store, open_store, shared):
    store.events.create(header())
    store.events.append(
        "s-1", turn_events(("turn/start", {"turn": 1}), ("step/start", {"turn": 1, "step": 1}))
    )
    a, b = store.events.read_from("s-1", 0), None
    other = open_store()
    first, second = store.events.load("s-1"), other.events.load("s-1")
    b = store.events.read_from("s-1", 0)
    assert first == second
    assert seqs(b) == [0, 1, 2, 3] and len(a) == 2


def test_a_new_turn_continues_after_the_closers(store):
    store.events.create(header())
    store.events.append("s-1", turn_events(("turn/start", {"turn": 1})))
    loaded = store.events.load("s-1")
    store.events.append("s-1", [ev(len(loaded.events), "turn/start", {"turn": 2})])
    assert seqs(store.events.load("s-1").events)[-1] == 3


# --- torn tail and corruption ----------------------------------------------------------


def _damageable(backend):
    if backend == "memory":
        pytest.skip("memory:// keeps nothing that can tear")


def _picture(store, backend, store_url, namespace):
    """A byte-exact picture of the stored log of session "s-1"."""
    path = store.events.locate("s-1")
    return artifacts.snapshot(backend, store_url, namespace, "s-1", path)


@pytest.mark.parametrize("records", [1, 2])
def test_a_torn_final_batch_is_dropped_and_cut_off(store, backend, store_url, namespace, records):
    """A read leaves the torn tail out and in place; a load cuts it off (the stored
    log is then as it was committed); the next append follows the committed events."""
    _damageable(backend)
    h = started(store, "s-1", 3)
    committed = _picture(store, backend, store_url, namespace)
    artifacts.tear_tail(backend, store_url, namespace, "s-1", store.events.locate(h), 3, records)
    torn = _picture(store, backend, store_url, namespace)
    assert torn != committed
    assert seqs(store.events.read_from("s-1", 0)) == [0, 1, 2]
    assert seqs(store.events.read_records_from("s-1", 0)) == [0, 1, 2]
    assert _picture(store, backend, store_url, namespace) == torn, "a read wrote"
    assert seqs(store.events.load("s-1").events) == [0, 1, 2]
    assert _picture(store, backend, store_url, namespace) == committed, "the tail was not cut"
    assert store.events.append("s-1", [ev(3)]) == 4
    assert seqs(store.events.load("s-1").events) == [0, 1, 2, 3]


def test_an_append_cuts_a_torn_tail_off_before_writing(store, backend, store_url, namespace):
    """An append after a torn tail (no load between) refuses a seq past the committed
    ones, writing nothing, and writes the next one in place of the torn events."""
    _damageable(backend)
    h = started(store, "s-1", 3)
    artifacts.tear_tail(backend, store_url, namespace, "s-1", store.events.locate(h), 3, 2)
    torn = _picture(store, backend, store_url, namespace)
    with pytest.raises(SeqConflictError):
        store.events.append("s-1", [ev(4)])
    assert _picture(store, backend, store_url, namespace) == torn, "a refused append wrote"
    assert store.events.append("s-1", [ev(3), ev(4)]) == 5
    loaded = store.events.load("s-1").events
    assert seqs(loaded) == [0, 1, 2, 3, 4] and {e.type for e in loaded} == {"note"}


@pytest.mark.parametrize("torn_after", [False, True], ids=["alone", "torn-tail-after"])
def test_damage_before_the_end_is_refused_and_nothing_rewritten(
    store, backend, store_url, namespace, torn_after
):
    """A lost event before the end is corruption, with or without a torn tail after it
    (which a load must then not take for the place to cut)."""
    _damageable(backend)
    h = started(store, "s-1", 4)
    path = store.events.locate(h)
    artifacts.remove_event(backend, store_url, namespace, "s-1", path, 1)
    if torn_after:
        artifacts.tear_tail(backend, store_url, namespace, "s-1", path, 4)
    before = artifacts.snapshot(backend, store_url, namespace, "s-1", path)
    with pytest.raises(CorruptLogError) as caught:
        store.events.load("s-1")
    assert "s-1" in str(caught.value)
    with pytest.raises(CorruptLogError):
        store.events.read_from("s-1", 0)
    with pytest.raises(CorruptLogError):
        store.events.read_records_from("s-1", 0)
    assert artifacts.snapshot(backend, store_url, namespace, "s-1", path) == before


def test_an_unknown_stored_version_is_refused(store, backend, store_url, namespace):
    _damageable(backend)
    h = started(store, "s-1", 2)
    artifacts.set_stored_version(backend, store_url, namespace, "s-1", store.events.locate(h), 99)
    with pytest.raises(UnsupportedVersionError) as caught:
        store.events.load("s-1")
    assert "99" in str(caught.value) and "1" in str(caught.value)


# --- list, read_from, iter_events, delete, locate --------------------------------------


def test_list_orders_by_created_at_then_id(store):
    for session_id, created in [("b", 2), ("a", 2), ("c", 1)]:
        started(store, session_id, 1, created_at=created)
    store.events.create(header("never-appended"))
    assert [h.id for h in store.events.list()] == ["c", "a", "b"]


def test_read_from_returns_events_from_seq(store):
    started(store, "s-1", 5)
    assert seqs(store.events.read_from("s-1", 3)) == [3, 4]
    assert store.events.read_from("s-1", 9) == []


@pytest.mark.parametrize("start", [0, 2, 5, 9])
def test_read_records_from_reads_what_read_from_reads(store, start):
    """The same events as records: the same fields, each data value as JSON text that
    parses to the value read_from gives."""
    store.events.create(header("s-1"))
    data = [{}, {"item": {"role": "user", "content": "hé"}}, {"seq": 1}, {"a": [1, 2.5], "b": None}]
    store.events.append("s-1", [ev(i, "item", data[i % 4], id=f"e{i}") for i in range(6)])
    events = store.events.read_from("s-1", start)
    records = store.events.read_records_from("s-1", start)
    assert all(type(record) is StoredRecord for record in records)
    fields = [(r.seq, r.type, r.time, r.id, list(r.data)) for r in records]
    assert fields == [(e.seq, e.type, e.time, e.id, list(e.data)) for e in events]
    assert parsed_values(records) == [value for e in events for value in e.data.values()]


def test_read_records_from_a_missing_session_raises_not_found(store):
    with pytest.raises(SessionNotFoundError):
        store.events.read_records_from("nobody", 0)


@pytest.mark.parametrize("seq", [-1, "3", True, 1.0, None, 2**63, [[[]]]])
def test_read_from_and_follow_reject_a_bad_seq(store, seq):
    started(store, "s-1", 1)
    with pytest.raises(InvalidArgumentError):
        store.events.read_from("s-1", seq)
    with pytest.raises(InvalidArgumentError):
        store.events.read_records_from("s-1", seq)
    with pytest.raises(InvalidArgumentError):
        next(iter(store.events.follow("s-1", seq, poll=0.01)))


@pytest.mark.parametrize("batch", ["10", True, 0, -1, 1.5, None, 2**64])
def test_iter_events_rejects_a_bad_batch(store, batch):
    started(store, "s-1", 1)
    with pytest.raises(InvalidArgumentError):
        next(iter(store.events.iter_events("s-1", batch=batch)))


BAD_IDS = [5, None, "", "a\x00b", b"s-1", ["s-1"], "\ud800"]


@pytest.mark.parametrize("session_id", BAD_IDS, ids=repr)
@pytest.mark.parametrize(
    "call", ["load", "read_from", "read_records_from", "append", "delete", "locate", "iter"]
)
def test_a_bad_session_id_raises_invalid_argument(store, session_id, call):
    calls = {
        "load": lambda: store.events.load(session_id),
        "read_from": lambda: store.events.read_from(session_id, 0),
        "read_records_from": lambda: store.events.read_records_from(session_id, 0),
        "append": lambda: store.events.append(session_id, [ev(0)]),
        "delete": lambda: store.events.delete(session_id),
        "locate": lambda: store.events.locate(session_id),
        "iter": lambda: next(iter(store.events.iter_events(session_id))),
    }
    with pytest.raises(InvalidArgumentError):
        calls[call]()


@pytest.mark.parametrize("session_id", ["", "a\x00b"], ids=repr)
def test_a_header_with_a_bad_id_cannot_be_created(store, session_id):
    with pytest.raises(InvalidArgumentError):
        store.events.create(SessionHeader.model_construct(id=session_id))


@pytest.mark.parametrize("field", ["cwd", "parent_id"])
def test_a_header_field_past_64_kib_is_refused_at_create_and_one_at_it_kept(store, field):
    """A header's text field holds at most 65,536 bytes of UTF-8 on every backend (the
    Redis backend's scripts read no longer stored field): one past it is refused naming
    the field, before anything is stored; one of exactly that size is kept."""
    longest = "é" * (65_536 // 2)
    with pytest.raises(InvalidArgumentError, match=field):
        store.events.create(SessionHeader(id="s-1", **{field: longest + "x"}))
    assert store.events.list() == []
    store.events.create(SessionHeader(id="s-1", **{field: longest}))
    store.events.append("s-1", [ev(0)])
    assert getattr(store.events.load("s-1").header, field) == longest


@pytest.mark.parametrize("method", ["create", "writer"])
@pytest.mark.parametrize("bad", ["s-1", {"id": "s-1"}, None])
def test_create_and_writer_take_a_session_header(store, method, bad):
    with pytest.raises(InvalidArgumentError, match="SessionHeader"):
        getattr(store.events, method)(bad)
    assert store.events.list() == []


@pytest.mark.parametrize("window", ["0.2", -1, True, None, 1e9])
def test_writer_rejects_a_bad_window(store, window):
    with pytest.raises(InvalidArgumentError, match="window"):
        store.events.writer(header("w"), window=window)


def test_iter_events_streams_the_whole_log_in_batches(store):
    started(store, "s-1", 0)
    store.events.append("s-1", [ev(i) for i in range(25)])
    assert seqs(store.events.iter_events("s-1", batch=7)) == list(range(25))


def test_delete_removes_the_session_entirely(store, backend, store_url, namespace):
    started(store, "s-1", 3)
    store.events.delete("s-1")
    assert artifacts.footprint(backend, store_url, namespace) == []
    with pytest.raises(SessionNotFoundError):
        store.events.load("s-1")
    with pytest.raises(SessionNotFoundError):
        store.events.delete("s-1")
    started(store, "s-1", 1)
    assert seqs(store.events.load("s-1").events) == [0]


def test_a_delete_given_the_last_event_read_removes_the_log_that_still_ends_with_it(
    store, backend, store_url, namespace
):
    started(store, "s-1", 3)
    last = store.events.read_from("s-1", 2)[-1]
    store.events.delete("s-1", last=last)
    assert artifacts.footprint(backend, store_url, namespace) == []
    with pytest.raises(SessionNotFoundError):
        store.events.delete("s-1", last=last)


def test_a_delete_given_an_event_the_log_no_longer_ends_with_deletes_nothing(store):
    """Appended to since it was read, or deleted and written again to the same length
    with other events: refused, and the log is exactly as it was."""
    started(store, "s-1", 3)
    last = store.events.read_from("s-1", 2)[-1]
    store.events.append("s-1", [ev(3)])
    with pytest.raises(SeqConflictError) as appended:
        store.events.delete("s-1", last=last)
    assert (appended.value.expected, appended.value.got) == (3, 4)
    assert seqs(store.events.load("s-1").events) == [0, 1, 2, 3]

    store.events.delete("s-1")
    started(store, "s-1", 0)
    again = [ev(i, data={"again": True}) for i in range(3)]
    store.events.append("s-1", again)
    with pytest.raises(SeqConflictError, match="no longer ends with"):
        store.events.delete("s-1", last=last)
    with pytest.raises(SeqConflictError):
        store.events.delete("s-1", last=store.events.read_from("s-1", 1)[0])
    assert store.events.load("s-1").events == again
    store.events.delete("s-1", last=store.events.read_from("s-1", 2)[-1])
    assert store.events.list() == []


def test_a_guarded_delete_refuses_what_is_not_an_event_and_a_session_holding_none(store):
    started(store, "s-1", 2)
    with pytest.raises(InvalidArgumentError, match="SessionEvent"):
        store.events.delete("s-1", last={"seq": 1})
    stored = store.events.read_from("s-1", 1)[0]
    with pytest.raises(NotJSONSerializableError):  # NaN would be stored as null: no match
        store.events.delete("s-1", last=ev(1, data={"x": math.nan}))
    with pytest.raises(InvalidArgumentError):
        store.events.delete("s-1", last=SessionEvent.model_construct(seq=-1, type="note"))
    # Harness fields are not judged: a log written before append checked them holds such.
    with pytest.raises(SeqConflictError):
        store.events.delete("s-1", last=ev(1, type="tool/call", data={"call_id": 5}))
    assert store.events.read_from("s-1", 1) == [stored]
    with pytest.raises(SessionNotFoundError):
        store.events.delete("none", last=ev(0))
    store.events.create(header("empty"))
    with pytest.raises(SeqConflictError, match="holds no event"):
        store.events.delete("empty", last=ev(0))
    assert seqs(store.events.load("s-1").events) == [0, 1]
    store.events.append("empty", [ev(0)])
    assert seqs(store.events.load("empty").events) == [0]


def test_locate_names_an_absolute_path_or_none(store, backend):
    h = header("where")
    located = store.events.locate(h)
    if backend == "file":
        assert located is not None and located.startswith("/")
    else:
        assert located is None


def test_namespaces_isolate_logs(open_store, namespace, shared):
    a, b = open_store(f"{namespace}-a"), open_store(f"{namespace}-b")
    started(a, "s-1", 2)
    assert b.events.list() == []
    with pytest.raises(SessionNotFoundError):
        b.events.load("s-1")
    started(b, "s-1", 1)
    assert seqs(a.events.load("s-1").events) == [0, 1]


@pytest.mark.parametrize("session_id", ["../../etc/passwd", "a:b", "{x}", "日本語", "*", "a b"])
def test_hostile_session_ids_work_and_stay_apart(store, session_id):
    started(store, session_id, 2)
    started(store, session_id + "-2", 1)
    assert seqs(store.events.load(session_id).events) == [0, 1]
    assert {h.id for h in store.events.list()} == {session_id, session_id + "-2"}


# --- the write-behind writer -----------------------------------------------------------


def test_writer_assigns_seq_and_time_and_flush_makes_events_durable(store, open_store, backend):
    w = store.events.writer(header("w"))
    first = w.emit("turn/start", {"turn": 1})
    second = w.emit("turn/end", {"turn": 1, "reason": {"kind": "done"}})
    assert (first.seq, second.seq) == (0, 1) and second.time >= first.time
    w.flush()
    reader = store if backend == "memory" else open_store()
    assert seqs(reader.events.read_from("w", 0)) == [0, 1]
    w.close()


def test_writer_drains_in_the_background(store):
    w = store.events.writer(header("w"), window=0.05)
    w.emit("note", {"n": 1})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _exists(store, "w"):
        time.sleep(0.02)
    assert seqs(store.events.read_from("w", 0)) == [0]
    w.close()


def _exists(store, session_id):
    try:
        return bool(store.events.read_from(session_id, 0))
    except SessionNotFoundError:
        return False


def test_writer_close_flushes_and_resumes_after_the_stored_log(store):
    h = header("w")
    w = store.events.writer(h)
    w.emit("turn/start", {"turn": 1})
    w.close()
    resumed = store.events.writer(h)
    event = resumed.emit("note", {})
    resumed.close()
    assert event.seq == 2
    assert [e.type for e in store.events.load("w").events] == ["turn/start", "turn/end", "note"]


HOUR = 3_600_000


def test_writer_stamps_events_with_the_logical_time_given_to_emit(store):
    w = store.events.writer(header("w"))
    candle = dt.datetime.fromtimestamp((T + HOUR) / 1000, tz=dt.UTC)
    assert w.emit("candle", {"n": 0}, time=T).time == T
    assert w.emit("candle", {"n": 1}, time=candle).time == T + HOUR
    assert w.emit("candle", {"n": 2}, time=T + HOUR).time == T + HOUR
    w.close()
    assert [e.time for e in store.events.load("w").events] == [T, T + HOUR, T + HOUR]
    info = store.events.info("w")
    assert info.last_time == T + HOUR
    assert [i.last_time for i in store.events.list_info()] == [T + HOUR]


def test_writer_of_a_log_without_events_takes_any_time_first(store):
    """A log with no event yet has no time to go back from: 1969 comes first as well."""
    moon = dt.datetime(1969, 7, 20, 20, 17, tzinfo=dt.UTC)
    early = int(moon.timestamp() * 1000)
    made = header("made")
    store.events.create(made)
    for h in (header("fresh"), made):
        session_id = h.id
        w = store.events.writer(h)
        assert w.emit("candle", {"n": 0}, time=moon).time == early
        assert w.emit("candle", {"n": 1}, time=early + HOUR).time == early + HOUR
        with pytest.raises(EventTimeOrderError):
            w.emit("candle", {"n": 2}, time=early)
        w.close()
        assert [e.time for e in store.events.load(session_id).events] == [early, early + HOUR]


def test_writer_takes_data_nested_as_deep_as_append_does(store):
    from sessionstore.jsondata import MAX_DEPTH

    deepest: object = 1
    for _ in range(MAX_DEPTH - 1):
        deepest = [deepest]
    w = store.events.writer(header("w"))
    assert w.emit("deep", {"a": deepest}).data == {"a": deepest}
    with pytest.raises(NotJSONSerializableError):
        w.emit("deeper", {"a": [deepest]})
    w.close()
    assert [e.data for e in store.events.load("w").events] == [{"a": deepest}]


def test_writer_refuses_a_time_before_the_event_before_it(store):
    h = header("w")
    w = store.events.writer(h)
    w.emit("candle", {"n": 0}, time=T + HOUR)
    with pytest.raises(EventTimeOrderError) as caught:
        w.emit("candle", {"n": 1}, time=T)
    error = caught.value
    assert isinstance(error, InvalidArgumentError)
    assert (error.seq, error.time, error.previous) == (1, T, T + HOUR)
    assert "seq 1" in str(error) and str(T) in str(error) and str(T + HOUR) in str(error)
    assert w.next_seq == 1
    w.close()
    resumed = store.events.writer(h)
    with pytest.raises(EventTimeOrderError):
        resumed.emit("candle", {"n": 1}, time=T)
    assert resumed.emit("candle", {"n": 1}, time=T + 2 * HOUR).seq == 1
    wall = resumed.emit("note")
    resumed.close()
    assert wall.time >= T + 2 * HOUR
    assert [e.time for e in store.events.load("w").events] == [T + HOUR, T + 2 * HOUR, wall.time]


#: An agent harness's chunk streams, interleaved: text deltas stamped from 1000 on, reasoning
#: deltas stamped from 990 on, each stream on a clock of its own.
CHUNK_TIMES = [T + 1000, T + 990, T + 1001, T + 991, T + 992, T + 1002]


def partitions(count: int):
    """Every way to cut ``count`` events into contiguous non-empty batches, as the batch
    sizes."""
    for cuts in range(2 ** (count - 1)):
        sizes, size = [], 1
        for place in range(count - 1):
            if cuts >> place & 1:
                sizes.append(size)
                size = 0
            size += 1
        yield [*sizes, size]


def chunk_events() -> list[SessionEvent]:
    return [
        SessionEvent(seq=i, type="chunk", time=t, data={"stream": "text" if t > T + 995 else "r"})
        for i, t in enumerate(CHUNK_TIMES)
    ]


def check_chunk_log(log, session_id: str, events: list[SessionEvent]) -> None:
    assert log.load(session_id).events == events
    for at in range(len(events) + 1):
        assert log.read_from(session_id, at) == events[at:]
    assert log.info(session_id).last_time == events[-1].time


def test_a_plain_append_keeps_times_that_go_backwards_in_every_batch_partition(
    store, open_store, backend
):
    """The harness's contract: a plain ``append`` stores whatever time each event carries;
    only a writer's clock refuses to go backwards. Such a log round trips through load,
    every ``read_from``, the listing, and a reopened store, however it was cut into
    batches."""
    events = chunk_events()
    ids = []
    for number, sizes in enumerate(partitions(len(events))):
        session_id = f"chunks-{number}"
        store.events.create(header(session_id))
        at = 0
        for size in sizes:
            assert store.events.append(session_id, events[at : at + size]) == at + size
            at += size
        check_chunk_log(store.events, session_id, events)
        ids.append(session_id)
    assert len(ids) == 32
    listed = {i.header.id: i.last_time for i in store.events.list_info()}
    assert listed == dict.fromkeys(ids, CHUNK_TIMES[-1])
    reopened = store if backend == "memory" else open_store()
    for session_id in ids:
        check_chunk_log(reopened.events, session_id, events)
    # A writer resumes such a log on the clock of its last event.
    w = reopened.events.writer(reopened.events.load(ids[0]).header)
    assert w.emit("chunk", {}, time=CHUNK_TIMES[-1]).seq == len(events)
    w.close()
    assert reopened.events.load(ids[0]).events[-1].time == CHUNK_TIMES[-1]


def test_writer_refuses_a_malformed_harness_event_at_emit(store):
    w = store.events.writer(header("w"))
    with pytest.raises(HarnessFieldError):
        w.emit("step/start", {"turn": 1})
    assert w.emit("step/start", {"turn": 1, "step": 1}).seq == 0
    w.close()


def test_writer_rejects_lossy_data_at_emit(store):
    w = store.events.writer(header("w"))
    with pytest.raises(NotJSONSerializableError):
        w.emit("note", {"bad": {1, 2}})
    assert w.emit("note", {}).seq == 0
    w.close()


def test_a_background_failure_keeps_the_batch_and_surfaces_on_flush(store, open_store, shared):
    w = store.events.writer(header("w"), window=0.01)
    w.emit("note", {"n": 0})
    w.flush()
    open_store().events.append("w", [ev(1, "intruder")])
    w.emit("note", {"n": 1})
    with pytest.raises(SeqConflictError):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            w.flush()
            time.sleep(0.02)
    assert [e.type for e in store.events.read_from("w", 0)] == ["note", "intruder"]


def test_follow_yields_stored_events_then_new_ones_as_they_land(store):
    import threading

    started(store, "live", 3)
    seen = []
    for event in store.events.follow("live", 1, poll=0.05):
        seen.append(event.seq)
        if event.seq == 2:
            threading.Thread(target=store.events.append, args=("live", [ev(3)])).start()
        if event.seq == 3:
            break
    assert seen == [1, 2, 3]


@pytest.mark.parametrize("poll", [0, -1, "1", 10_000])
def test_follow_rejects_a_bad_poll(store, poll):
    started(store, "live", 1)
    with pytest.raises(InvalidArgumentError):
        next(iter(store.events.follow("live", 0, poll=poll)))
