"""Hostile input: generated values, events, whens, key parts and session ids (huge, deeply
nested, unicode, control characters, path tricks, glob characters), harness events of any
shape and arguments of any type. Only SessionStoreError subclasses come out, with short
messages, and nothing already stored changes."""

from __future__ import annotations

import contextlib
import math
import uuid

import orjson
import pytest
from conftest import BACKENDS, url_for
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support.events import batch_of, stored

import sessionstore
from sessionstore import InvalidArgumentError, SessionEvent, SessionHeader, SessionStoreError
from sessionstore.eventlog import closers
from sessionstore.harness import HARNESS_TYPES, harness_warnings

from .conftest import iterations

#: The generated inputs are large on purpose (deep and long values); Hypothesis warns when
#: it builds the repr of such an example, which says nothing about the library.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

T0 = 1_718_000_000_000
TRICKS = [
    "",
    ".",
    "..",
    "../../etc/passwd",
    "/abs",
    "a:b",
    "{x}",
    "*",
    "?",
    "[a-z]",
    "\\",
    "%2F",
    "\x00",
    "\n",
    "\u202e",
    "\ud800",
    "日本語",
    "x" * 5000,
    "CON",
    "a\x7fb",
]


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


text = st.one_of(st.sampled_from(TRICKS), st.text(max_size=40))
anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | text
    | st.binary(max_size=20)
    | st.sampled_from([math.nan, math.inf, 2**200, object(), {1, 2}, (1, 2), b"\xff"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(inner.filter(_hashable), inner, max_size=3)
    ),
    max_leaves=15,
)
whens = st.one_of(st.integers(), st.floats(), text, st.none(), st.booleans(), st.datetimes())

SETTINGS = settings(
    max_examples=iterations(normal=60, ci=40, soak=2000),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=False,
)


@pytest.fixture(params=BACKENDS)
def seeded(request, tmp_path, namespace):
    url = url_for(request.param, request, tmp_path)
    store = sessionstore.connect(url, namespace=namespace)
    session = store.session("BTCUSDT", "s", "e", "1h")
    session.set_data({"kept": True}, T0)
    store.events.create(SessionHeader(id="kept"))
    store.events.append("kept", [SessionEvent(seq=0, type="note", time=T0, data={"n": 0})])
    before = (session.get_data(T0), store.events.read_from("kept", 0))
    yield store, before
    after = (
        store.session("BTCUSDT", "s", "e", "1h").get_data(T0),
        store.events.read_from("kept", 0),
    )
    store.close()
    assert after == before


def _only_our_errors(call) -> None:
    with contextlib.suppress(SessionStoreError):
        call()


@given(
    parts=st.tuples(text, text, text, text).filter(lambda p: p != ("BTCUSDT", "s", "e", "1h")),
    value=anything,
    when=whens,
)
@SETTINGS
def test_hostile_values_keys_and_whens(seeded, parts, value, when):
    store, _ = seeded
    _only_our_errors(lambda: store.session(*parts).set_data(value, when))
    _only_our_errors(lambda: store.session(*parts).get_data(when))
    _only_our_errors(lambda: store.session(*parts, history=True).set_data(value, when))
    _only_our_errors(lambda: store.session(*parts).update(lambda v: value, when))


@given(
    session_id=text.filter(lambda s: s != "kept"),
    seq=st.integers(-5, 5) | st.integers(),
    data=anything,
    type_=text,
    event_time=st.integers() | st.floats(),
)
@SETTINGS
def test_hostile_events_and_session_ids(seeded, session_id, seq, data, type_, event_time):
    store, _ = seeded
    event = {"seq": seq, "type": type_, "time": event_time, "data": data}
    try:
        header = SessionHeader(id=session_id)
    except ValidationError:
        header = None
    if header is not None:
        _only_our_errors(lambda: store.events.create(header))
    _only_our_errors(lambda: store.events.append(session_id, [event]))
    _only_our_errors(lambda: store.events.append("kept", [{**event, "seq": 0}]))
    _only_our_errors(lambda: store.events.load(session_id))
    _only_our_errors(lambda: store.events.read_from(session_id, seq))
    _only_our_errors(lambda: store.events.delete(session_id))


# --- harness events and arguments -------------------------------------------------------

HARNESS_KINDS = st.sampled_from(sorted(HARNESS_TYPES))
json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(-1e9, 1e9) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=10,
)
harness_data = st.dictionaries(
    st.sampled_from(["turn", "step", "call_id", "tool_calls", "id"]) | text,
    json_like | st.lists(st.dictionaries(st.sampled_from(["id", "name"]), json_like)),
    max_size=4,
)
harness_events = st.lists(st.tuples(HARNESS_KINDS, harness_data), min_size=1, max_size=5)


def _fresh_session(store) -> str:
    session_id = f"h-{uuid.uuid4().hex[:8]}"
    store.events.create(SessionHeader(id=session_id))
    store.events.append(session_id, [SessionEvent(seq=0, type="turn/start", time=T0)])
    return session_id


@given(shapes=harness_events)
@SETTINGS
def test_a_harness_batch_is_refused_whole_or_accepted_and_loads(seeded, shapes):
    store, _ = seeded
    session_id = _fresh_session(store)
    batch = [
        SessionEvent(seq=seq, type=kind, time=T0, data=data)
        for seq, (kind, data) in enumerate(shapes, start=1)
    ]
    try:
        store.events.append(session_id, batch)
    except InvalidArgumentError:
        assert [e.seq for e in store.events.read_from(session_id, 0)] == [0]
    else:
        assert closers(store.events.load(session_id).events) == []
    store.events.delete(session_id)


@given(shapes=harness_events)
@SETTINGS
def test_a_stored_log_with_any_harness_shapes_loads(seeded, shapes):
    store, _ = seeded
    session_id = f"h-{uuid.uuid4().hex[:8]}"
    try:
        texts = [orjson.dumps(data).decode() for _, data in shapes]
    except TypeError:  # not valid Unicode: no stored log holds it
        assume(False)
    written = [stored(0, "turn/start", T0, "{}")] + [
        stored(seq, shapes[seq - 1][0], T0, texts[seq - 1]) for seq in range(1, len(shapes) + 1)
    ]
    # Written past append's check, as a log stored before it was introduced.
    store._backends.events.append(session_id, batch_of(written), SessionHeader(id=session_id))
    loaded = store.events.load(session_id)
    assert closers(loaded.events) == []
    assert len(harness_warnings(loaded.events)) <= len(shapes)
    store.events.delete(session_id)


@given(value=anything | st.sampled_from([True, "1", 1.5, -1, 0, 2**64, "kept", "a\x00b"]))
@SETTINGS
def test_hostile_arguments_of_the_event_log(seeded, value):
    store, _ = seeded
    log = store.events
    _only_our_errors(lambda: next(iter(log.iter_events("kept", batch=value))))
    _only_our_errors(lambda: log.read_from("kept", value))
    if value == 0 or not isinstance(value, int) or isinstance(value, bool) or value < 0:
        # (a valid seq past the end would wait for an event forever)
        _only_our_errors(lambda: next(iter(log.follow("kept", value, poll=0.01))))
    _only_our_errors(lambda: log.read_from(value, 0))
    _only_our_errors(lambda: log.load(value))
    _only_our_errors(lambda: log.locate(value))
    _only_our_errors(lambda: log.append("kept", value))
    _only_our_errors(lambda: log.create(value))
    _only_our_errors(lambda: log.writer(value).close())
    _only_our_errors(lambda: log.writer(SessionHeader(id="kept"), window=value).close())


def _nested(depth: int, key: str, leaf: object) -> dict:
    data: dict = {}
    inner = data
    for _ in range(depth):
        inner[key] = {}
        inner = inner[key]
    inner[key] = leaf
    return data


@given(
    depth=st.integers(0, 5000),
    key=st.text(min_size=1, max_size=20).map(lambda k: k * 500),
    leaf=st.sampled_from([math.nan, {1}, b"x", object(), 2**70, (1,)]),
)
@SETTINGS
def test_error_messages_about_nested_data_stay_short(seeded, depth, key, leaf):
    store, _ = seeded
    event = {"seq": 1, "type": "note", "time": T0, "data": _nested(depth, key, leaf)}
    try:
        store.events.append("kept", [event])
    except SessionStoreError as exc:
        assert len(str(exc)) < 500
    else:
        raise AssertionError("lossy data was accepted")
