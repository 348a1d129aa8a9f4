"""JSON text as event data against hostile texts: the text path takes exactly what the
data path takes, and stores the same bytes for it (the batch check, without a backend)."""

from __future__ import annotations

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore import JSONText, NotJSONSerializableError, SessionEvent
from sessionstore.eventlog import encode_batch
from sessionstore.jsondata import MAX_DEPTH

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**66), max_value=2**66)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
_ESCAPES = st.sampled_from(
    [b" ", b"\n", b"\\ud800", b"\\u00e9", b"NaN", b"1e999", b"\xff", b",", b"}", b'"', b"0" * 20]
)


@st.composite
def hostile_texts(draw: st.DrawFn) -> bytes:
    """Python-encoded JSON of any value (non-finite numbers written as NaN/Infinity),
    spaced as json.dumps writes it, then cut or spliced with troublesome bytes."""
    import json

    text = json.dumps(draw(_JSON), ensure_ascii=draw(st.booleans())).encode("utf-8", "replace")
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 2))
        text = text[:at] + draw(_ESCAPES | st.binary(max_size=3)) + text[at + cut :]
    return text


def _batch(data: object) -> list[bytes]:
    return encode_batch("s", [SessionEvent(seq=0, type="note", time=0, data=data)]).texts


def _refused(data: object) -> bool:
    try:
        _batch(data)
    except NotJSONSerializableError:
        return True
    return False


@settings(max_examples=200, deadline=None)
@given(hostile_texts())
def test_the_text_path_takes_what_the_data_path_takes_and_stores_the_same_bytes(text):
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = None
    try:
        exact = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        exact = parsed
    for given_text in (JSONText(text), msgspec.Raw(text)):
        try:
            [stored] = _batch(given_text)
        except NotJSONSerializableError as exc:
            assert exc.seq == 0 and exc.event_type == "note"
            assert parsed is None or type(parsed) is not dict or _refused(exact), text
        else:
            assert type(parsed) is dict and exact == parsed, text
            assert _batch(parsed) == [stored], text
            assert orjson.loads(stored)["data"] == parsed


def test_a_str_is_taken_as_its_utf8_and_other_types_are_refused():
    assert JSONText('{"é":1}') == '{"é":1}'.encode()
    assert _batch(JSONText('{"é": 1}')) == _batch({"é": 1})
    with pytest.raises(TypeError, match="JSONText takes a str or bytes, not int"):
        JSONText(5)  # type: ignore[arg-type]


def _nested(depth: int) -> dict[str, object]:
    """An object holding arrays down to ``depth`` levels, the object counted."""
    inner: object = 1
    for _ in range(depth - 1):
        inner = [inner]
    return {"a": inner}


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2])
@pytest.mark.parametrize("count", [1, 3])
def test_data_nested_past_the_limit_is_refused_as_text_and_as_data_alike(depth, count):
    data = _nested(depth)
    text = b'{"a":' + b"[" * (depth - 1) + b"1" + b"]" * (depth - 1) + b"}"
    verdicts = set()
    for given_data in (data, JSONText(text), msgspec.Raw(text), JSONText(text + b" ")):
        events = [SessionEvent(seq=seq, type="note", time=0, data={}) for seq in range(count)]
        events[-1] = SessionEvent(seq=count - 1, type="deep", time=0, data=given_data)
        try:
            stored = encode_batch("s", events).texts
        except NotJSONSerializableError as exc:
            assert (exc.event_type, exc.seq) == ("deep", count - 1)
            assert exc.reason == f"nested deeper than {MAX_DEPTH} levels" or exc.path == "$"
            verdicts.add("refused")
        else:
            assert orjson.loads(stored[-1])["data"] == data
            assert stored == _batch_of(events[:-1], data)
            verdicts.add("stored")
    assert verdicts == {"stored" if depth <= MAX_DEPTH else "refused"}


def _batch_of(events: list[SessionEvent], data: object) -> list[bytes]:
    last = SessionEvent(seq=len(events), type="deep", time=0, data=data)
    return encode_batch("s", [*events, last]).texts


def test_an_event_too_deep_to_write_again_is_refused_naming_it():
    """An older version let JSON text nest one level too deep for its record to be
    written again (a fork, an export): that raises the error naming the event."""
    from sessionstore.eventlog import event_text

    event = SessionEvent.model_construct(
        seq=7, type="old", time=0, data=_nested(MAX_DEPTH + 1), id=None
    )
    with pytest.raises(NotJSONSerializableError) as caught:
        event_text(event)
    assert (caught.value.event_type, caught.value.seq) == ("old", 7)
