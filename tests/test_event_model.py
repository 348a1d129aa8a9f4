"""``SessionEvent`` behaves as the frozen, strict pydantic model it replaced.

The reference below is the former definition (a ``BaseModel``); every check builds the
same input both ways and compares what pydantic accepts, refuses (error types and
locations), dumps and copies.
"""

from __future__ import annotations

import copy
import gc
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sessionstore import InvalidArgumentError, SessionEvent
from sessionstore.models import INT64_MAX


class Reference(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, title="SessionEvent")

    seq: int = Field(ge=0, le=INT64_MAX)
    type: str
    time: int = Field(ge=-INT64_MAX, le=INT64_MAX)
    data: Any = Field(default_factory=dict)
    id: str | None = None


#: The constructor of a dataclass names an unknown keyword with another error type.
SAME_ERROR = {"unexpected_keyword_argument": "extra_forbidden"}


def outcome(build: Any) -> tuple[str, Any]:
    """("ok", dump) or ("error", [(type, loc)]) of ``build()``."""
    try:
        event = build()
    except ValidationError as exc:
        found = [(SAME_ERROR.get(e["type"], e["type"]), e["loc"]) for e in exc.errors()]
        return "error", found
    return "ok", (event.model_dump(), event.model_dump_json(), dict(event), str(event))


anything = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=3)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)
fields = st.dictionaries(
    st.sampled_from(["seq", "type", "time", "data", "id", "extra"]), anything, max_size=6
)
valid = st.fixed_dictionaries(
    {"seq": st.integers(0, INT64_MAX), "type": st.text(), "time": st.integers(0, INT64_MAX)},
    optional={"data": st.dictionaries(st.text(), st.integers()), "id": st.none() | st.text()},
)


@given(st.one_of(fields, valid))
def test_construction_accepts_and_refuses_what_the_model_did(values):
    assert outcome(lambda: SessionEvent(**values)) == outcome(lambda: Reference(**values))
    for strict in (None, True):
        ours = outcome(lambda strict=strict: SessionEvent.model_validate(values, strict=strict))
        theirs = outcome(lambda strict=strict: Reference.model_validate(values, strict=strict))
        assert ours == theirs


@given(st.one_of(fields, valid))
def test_json_validation_matches_the_model(values):
    try:
        text = Reference.model_construct(**values).model_dump_json(warnings=False)
    except Exception:  # a value JSON cannot hold (bytes that are not UTF-8, ...)
        return
    assert outcome(lambda: SessionEvent.model_validate_json(text)) == outcome(
        lambda: Reference.model_validate_json(text)
    )


@given(valid, st.sampled_from(["seq", "type", "time", "data", "id", "other"]), anything)
def test_an_event_is_frozen_as_the_model_was(values, name, value):
    ours, theirs = SessionEvent(**values), Reference(**values)
    with pytest.raises(ValidationError) as caught:
        setattr(ours, name, value)
    with pytest.raises(ValidationError) as expected:
        setattr(theirs, name, value)
    assert caught.value.errors()[0]["type"] == expected.value.errors()[0]["type"]
    assert ours.model_dump() == theirs.model_dump()
    with pytest.raises(ValidationError):
        delattr(ours, "seq")


@given(valid, st.dictionaries(st.sampled_from(["seq", "type", "data"]), anything, max_size=2))
def test_copies_match_the_model(values, update):
    ours, theirs = SessionEvent(**values), Reference(**values)
    # model_copy(update=...) does not validate (pydantic's documented behaviour): dumping a
    # copy given values of the wrong type would warn, for ours as for the model.
    assert ours.model_copy(update=update).model_dump(warnings=False) == theirs.model_copy(
        update=update
    ).model_dump(warnings=False)
    deep = ours.model_copy(deep=True)
    assert deep == ours and deep.data is not ours.data
    for same in (copy.copy(ours), copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert same == ours and type(same) is SessionEvent


def test_model_construct_skips_validation_as_the_model_did():
    for values in ({"seq": "0", "type": 1, "time": True}, {"seq": 1, "type": "x", "time": 1}):
        ours = SessionEvent.model_construct(**values, unknown=1)
        theirs = Reference.model_construct(**values, unknown=1)
        assert (ours.seq, ours.type, ours.time, ours.data, ours.id) == (
            theirs.seq,
            theirs.type,
            theirs.time,
            theirs.data,
            theirs.id,
        )
        assert not hasattr(ours, "unknown")


def test_equality_hash_fields_and_schema_match_the_model():
    a = SessionEvent(seq=1, type="x", time=2, data={"k": [1]})
    assert a == SessionEvent(seq=1, type="x", time=2, data={"k": [1]})
    assert a != SessionEvent(seq=1, type="x", time=2, data={"k": [2]})
    assert a != Reference(seq=1, type="x", time=2, data={"k": [1]})
    assert hash(SessionEvent(seq=1, type="x", time=2, data=None)) == hash(
        SessionEvent(seq=1, type="x", time=2, data=None)
    )
    assert list(SessionEvent.model_fields) == list(Reference.model_fields)
    for name, info in SessionEvent.model_fields.items():
        reference = Reference.model_fields[name]
        assert info.is_required() == reference.is_required(), name
    ours, theirs = SessionEvent.model_json_schema(), Reference.model_json_schema()
    ours.pop("description", None)
    assert ours == theirs


@given(valid, valid)
def test_equal_events_hash_alike_whatever_their_data(one, other):
    """Every event hashes (a dict in ``data`` too), and equality implies equal hashes."""
    a, b = SessionEvent(**one), SessionEvent(**other)
    assert hash(a) == hash(SessionEvent(**one))
    if a == b:
        assert hash(a) == hash(b)


def test_events_of_dict_data_work_as_set_members_and_dict_keys():
    a = SessionEvent(seq=1, type="x", time=2, data={"k": [1], "n": 1})
    same = SessionEvent(seq=1, type="x", time=2, data={"n": 1.0, "k": [1]})  # 1 == 1.0
    other = SessionEvent(seq=1, type="x", time=2, data={"k": [2], "n": 1})
    assert a == same and hash(a) == hash(same)
    assert a != other
    assert {a, same, other} == {a, other} and len({a, same, other}) == 2
    assert {a: "seen"}[same] == "seen"


def test_model_validate_is_strict_and_refuses_to_relax():
    values = {"seq": 1, "type": "x", "time": 2}
    assert SessionEvent.model_validate(values, strict=True) == SessionEvent(**values)
    assert SessionEvent.model_validate(values) == SessionEvent(**values)
    with pytest.raises(ValidationError):
        SessionEvent.model_validate({**values, "seq": "1"}, strict=None)
    with pytest.raises(InvalidArgumentError, match="always strict"):
        SessionEvent.model_validate(values, strict=False)


def test_an_event_is_one_object_for_the_garbage_collector():
    event = SessionEvent(seq=1, type="x", time=2, data={"k": [1]})
    assert not hasattr(event, "__dict__")
    held = [ref for ref in gc.get_referents(event) if gc.is_tracked(ref)]
    assert held == [event.data, SessionEvent]  # its data and its class: nothing of its own


def test_stored_events_are_built_from_the_fields_in_the_event_order():
    from sessionstore.models import _EVENT_SLOTS, _StoredEvent, stored_events

    assert _StoredEvent.__struct_fields__ == _EVENT_SLOTS
    text = (
        b'[{"seq":3,"type":"a","time":-5,"data":{"k":[1]},"id":"x"},'
        b'{"seq":4,"type":"b","time":7,"data":{}}]'
    )
    built = stored_events(text, 3, 2)
    assert built == [
        SessionEvent(seq=3, type="a", time=-5, data={"k": [1]}, id="x"),
        SessionEvent(seq=4, type="b", time=7, data={}),
    ]
    assert [type(event) for event in built or []] == [SessionEvent, SessionEvent]
    assert stored_events(text, 3, 2, skip=1) == built[1:]
