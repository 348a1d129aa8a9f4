"""Hostile input: generated values, events, whens, key parts and session ids (huge, deeply
nested, unicode, control characters, path tricks, glob characters). Only SessionStoreError
subclasses come out, and nothing already stored changes."""

from __future__ import annotations

import contextlib
import math

import pytest
from conftest import BACKENDS, url_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import sessionstore
from sessionstore import SessionEvent, SessionHeader, SessionStoreError

from .conftest import iterations

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
