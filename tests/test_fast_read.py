"""Stored events are read without pydantic (:func:`~sessionstore.models.built_events`):
a field-by-field check of the parsed records, then events built directly. It must take
exactly the records the full validation takes, the one every backend ran before it
(``orjson.loads``, pydantic's strict :class:`SessionEvent`, seqs in place, ``data`` an
object), and give equal events: valid stored records are mutated at random (a field
dropped, added or retyped, a bool for an int, a value past 64 bits, NaN, broken JSON,
a seq out of place) and every read path's verdict is compared with that reference,
on Redis (a real server), JSONL files and SQLite. The items the OpenAI Agents adapter
(``SessionStoreSession.get_items``) decodes from such logs get the same verdicts.

Longer than most test modules: every read path is held to the one reference
(:func:`reference`) on the same generated damage, so they share its strategies here.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import sessionstore
from sessionstore import (
    CorruptDataError,
    CorruptLogError,
    SessionEvent,
    SessionHeader,
    aio,
    keys,
    models,
)
from sessionstore.eventlog import events_of_texts
from sessionstore.models import (
    INT64_MAX,
    built_events,
    decodes_alike,
    events_from_records,
    stored_events,
)
from sessionstore.records import json_text, parsed_values, records_of_events, stored_records

SID = "fast-read"


@contextmanager
def msgspec_reads() -> Iterator[None]:
    """The recursion limit of a plain process while the block runs: Hypothesis raises
    it around each example, and above :data:`~sessionstore.models.MSGSPEC_RECURSION_LIMIT`
    the msgspec paths step aside for orjson's (which the tests below also hold to the
    reference, without this)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


EXAMPLES = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=5)
)
json_data = st.dictionaries(st.text(max_size=4), json_leaf, max_size=3)


def any_data(kind: str, seq: int) -> Any:
    return json_data


#: The events of an OpenAI Agents session (items and pops) and others.
SESSION_KINDS = ["item", "item", "pop", "note"]


def session_data(kind: str, seq: int) -> Any:
    """An item's data, a pop's (naming an earlier seq), or any data."""
    if kind == "item":
        return st.fixed_dictionaries({"item": json_data})
    if kind == "pop":
        return st.fixed_dictionaries({"seq": st.integers(0, seq)})
    return json_data


@st.composite
def records(
    draw: Any, first: int = 0, kinds: list[str] | None = None, data: Any = any_data
) -> list[dict[str, Any]]:
    """Valid stored event objects, seqs from ``first``, as :func:`event_text` writes them
    (of the types ``kinds``; ``data(type, seq)`` is the strategy of their data)."""
    found = []
    count = draw(st.integers(1, 5))
    times = sorted(
        draw(st.lists(st.integers(-INT64_MAX, INT64_MAX), min_size=count, max_size=count))
    )
    for seq, time in zip(range(first, first + count), times, strict=True):
        kind = draw(st.sampled_from(kinds or ["note", "note/é", ""]))
        record = {"seq": seq, "type": kind, "time": time, "data": draw(data(kind, seq))}
        if draw(st.booleans()):
            record["id"] = draw(st.text(max_size=4))
        found.append(record)
    return found


#: Values that are the wrong thing for some field (a bool for an int, a float, 2**63...).
ODD = [None, True, False, 0, 1.0, -1, 2**63, -(2**63), 2**64 - 1, "5", "", [], [1], {}, {"a": 1}]
odd = st.one_of(
    st.sampled_from(ODD),
    st.integers(-(2**63), 2**64 - 1),  # what JSON parsers take
    st.text(max_size=3),
)
FIELDS = ["seq", "type", "time", "data", "id"]


@st.composite
def stored(draw: Any, first: int = 0, **shape: Any) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Valid records (``shape``: as :func:`records` takes), then at most two mutations:
    the mutated records and their texts (a text mutation breaks a record's JSON or puts
    NaN / Infinity in it)."""
    found = draw(records(first, **shape))
    for _ in range(draw(st.integers(0, 2))):
        index = draw(st.integers(0, len(found) - 1))
        if type(found[index]) is not dict:
            continue
        record = dict(found[index])
        how = draw(st.sampled_from(["drop", "retype", "extra", "seq", "null id", "not object"]))
        if how == "drop":
            record.pop(draw(st.sampled_from(FIELDS)), None)
        elif how == "retype":
            record[draw(st.sampled_from(FIELDS))] = draw(odd)
        elif how == "extra":
            record[draw(st.sampled_from(["extra", "Seq", "batch"]))] = draw(odd)
        elif how == "seq" and type(record.get("seq")) is int:
            record["seq"] = record["seq"] + draw(st.sampled_from([-1, 1, 2, -(2**62)]))
        elif how == "null id":
            record["id"] = None
        found[index] = record if how != "not object" else draw(odd)
    texts = [orjson.dumps(record) for record in found]
    if draw(st.integers(0, 3)) == 0:
        index = draw(st.integers(0, len(texts) - 1))
        text = texts[index]
        texts[index] = draw(
            st.sampled_from(
                [
                    text[: len(text) // 2],
                    text.replace(b'"time":', b'"time":NaN,"t":', 1),
                    text.replace(b'"data":{', b'"data":{"x":Infinity,', 1),
                    text + b"}",
                    b"",
                ]
            )
        )
    return found, texts


def reference(texts: list[bytes], first: int) -> list[SessionEvent] | None:
    """The full validation: the events of stored texts, None if any is refused (each
    must be a JSON object with a data object, a valid :class:`SessionEvent`, in place)."""
    try:
        parsed = orjson.loads(b"[" + b",".join(texts) + b"]")
    except orjson.JSONDecodeError:
        return None
    if len(parsed) != len(texts):
        return None
    if any(type(record) is not dict or "data" not in record for record in parsed):
        return None  # a stored event always has its data: the model's default is for append
    try:
        events = events_from_records(parsed)
    except ValidationError:
        return None
    if [event.seq for event in events] != list(range(first, first + len(events))):
        return None
    if any(type(event.data) is not dict for event in events):
        return None
    return events


def same(found: list[SessionEvent], expected: list[SessionEvent]) -> None:
    assert found == expected
    for event, wanted in zip(found, expected, strict=True):
        assert type(event) is SessionEvent
        assert [type(value) for _, value in event] == [type(value) for _, value in wanted]


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, INT64_MAX - 10).flatmap(lambda first: st.tuples(st.just(first), stored(first)))
)
def test_built_events_take_what_the_full_validation_takes(case):
    first, (_, texts) = case
    expected = reference(texts, first)
    try:
        parsed = orjson.loads(b"[" + b",".join(texts) + b"]")
    except orjson.JSONDecodeError:
        assert expected is None
        return
    if len(parsed) != len(texts):  # every reader checks the count it expects
        assert expected is None
        return
    found = built_events(parsed, first)
    if found is not None:
        assert expected is not None
        same(found, expected)
    else:
        # Refused: an explicit "id": null is the one thing it leaves to validation.
        nulls = any(type(r) is dict and "id" in r and r["id"] is None for r in parsed)
        assert expected is None or nulls


@st.composite
def sliced(draw: Any) -> tuple[int, list[bytes], bytes, int, int]:
    """Stored texts from a seq ``first`` (:func:`stored`), their JSON array and a slice
    (skip, stop) of them."""
    first = draw(st.integers(0, INT64_MAX - 10))
    _, texts = draw(stored(first))
    skip = draw(st.integers(0, len(texts)), label="skip")
    stop = draw(st.integers(skip, len(texts)), label="stop")
    return first, texts, b"[" + b",".join(texts) + b"]", skip, stop


@settings(max_examples=400, deadline=None)
@given(sliced())
def test_stored_events_take_exactly_what_the_full_validation_takes(case):
    """The one-pass parse of a stored array: the same verdict as the full validation on
    every generated damage (an explicit ``"id": null`` included), and equal events for
    any slice of it that is asked for."""
    first, texts, joined, skip, stop = case
    expected = reference(texts, first)
    with msgspec_reads():
        found = stored_events(joined, first, len(texts), skip, stop)
        alike = decodes_alike(joined)
    if expected is None:
        assert found is None
    elif alike:  # else it steps aside for orjson
        assert found is not None
        same(found, expected[skip:stop])


@settings(max_examples=400, deadline=None)
@given(sliced())
def test_stored_records_and_their_parsed_values_take_what_the_full_validation_takes(case):
    """Records keep data values as text: with those values parsed, the verdict is the
    full validation's on every generated damage, and the fields and values equal its
    events'."""
    first, texts, joined, skip, stop = case
    expected = reference(texts, first)
    with msgspec_reads():
        found = stored_records(joined, first, len(texts), skip, stop)
        alike = decodes_alike(joined, numbers=(skip, stop) != (0, len(texts)))
    try:
        values = None if found is None else parsed_values(found)
    except CorruptDataError:
        values = None
    if expected is None:
        assert values is None
        return
    if not alike:  # it steps aside for orjson
        return
    assert found is not None and values is not None
    wanted = expected[skip:stop]
    fields = [(r.seq, r.type, r.time, r.id, list(r.data)) for r in found]
    assert fields == [(e.seq, e.type, e.time, e.id, list(e.data)) for e in wanted]
    assert values == [value for event in wanted for value in event.data.values()]


def test_stored_events_leave_nesting_msgspec_cannot_follow_to_orjson():
    """Appends refuse data nested deeper than 253 levels; a foreign record nested past
    what msgspec follows is parsed by orjson, as the full validation parses it."""
    deep = b'{"seq":0,"type":"t","time":1,"data":{"a":' + b"[" * 1000 + b"]" * 1000 + b"}}"
    assert stored_events(b"[" + deep + b"]", 0, 1) is None
    [event] = events_of_texts([deep], 0)
    assert event.seq == 0 and type(event.data["a"]) is list
    shallow = deep.replace(b"[" * 1000, b"[" * 250).replace(b"]" * 1000, b"]" * 250)
    assert stored_events(b"[" + shallow + b"]", 0, 1) == events_of_texts([shallow], 0)


@pytest.mark.parametrize(
    "number", [2**64, 2**64 - 1, -(2**63) - 1, -(2**63), 10**30, -(10**30)], ids=str
)
def test_integers_past_64_bits_in_data_read_as_orjson_reads_them(number):
    """orjson makes a float of an integer outside [-2**63, 2**64): msgspec, which keeps
    it exact, steps aside for such text, so every backend returns the same value."""
    text = orjson.dumps({"seq": 0, "type": "t", "time": 1, "data": {"n": 0}})
    text = text.replace(b'"n":0', b'"n":' + str(number).encode())
    [expected] = reference([text], 0)
    [event] = events_of_texts([text], 0)
    assert event == expected and type(event.data["n"]) is type(expected.data["n"])
    if -(2**63) <= number < 2**64:
        assert type(event.data["n"]) is int
    else:
        assert type(event.data["n"]) is float


def test_above_a_raised_recursion_limit_reads_nest_as_deep_as_orjson_and_no_deeper():
    """msgspec nests as deep as the recursion limit lets it (and past the C stack far
    above it): with a raised limit the reads take orjson's 1023 levels instead."""

    def text(depth: int) -> bytes:
        opened, closed = b"[" * depth, b"]" * depth
        return b'{"seq":0,"type":"t","time":1,"data":{"a":' + opened + closed + b"}}"

    before = sys.getrecursionlimit()
    sys.setrecursionlimit(5000)
    try:
        assert stored_events(b"[" + text(1100) + b"]", 0, 1) is None
        assert stored_records(b"[" + text(1100) + b"]", 0, 1) is None
        with pytest.raises(ValidationError):
            events_of_texts([text(1100)], 0)
        [event] = events_of_texts([text(1000)], 0)
        [record] = records_of_events([event])
        assert parsed_values([record]) == [event.data["a"]]
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.parametrize("damage", [b'"\xff"', b'"\xed\xa0\x80"', b"1e400"])
def test_parsed_values_name_the_record_holding_a_value_a_read_refuses(damage):
    good = b'{"seq":3,"type":"t","time":1,"data":{"a":1}}'
    bad = b'{"seq":4,"type":"t","time":1,"data":{"a":2,"b":' + damage + b"}}"
    records = stored_records(b"[" + good + b",\n" + bad + b"]", 3, 2)
    assert records is not None  # values are kept as text: parsing them finds the damage
    with pytest.raises(CorruptLogError) as caught:
        parsed_values(records, "s-1")
    assert (caught.value.session_id, caught.value.seq) == ("s-1", 4)
    with pytest.raises(CorruptDataError, match="event 4"):
        parsed_values(records)


def test_records_of_events_write_data_nested_deeper_than_orjson_writes():
    nested: Any = {"x": [1.5, None, True, 'é"\\']}
    for _ in range(400):
        nested = {"k": [nested, -(2**63)]}
    event = SessionEvent(seq=3, type="note", time=1, data={"deep": nested, "n": 1})
    [record] = records_of_events([event])
    assert list(record.data) == ["deep", "n"]
    assert parsed_values([record]) == [nested, 1]
    assert json_text({"a": [1.5, "é"]}) == orjson.dumps({"a": [1.5, "é"]})


@pytest.mark.parametrize(
    "damage", [b'"x":"\xff"', b'"x":1e400', b'"x":18446744073709551616'], ids=repr
)
def test_stored_records_of_a_slice_check_the_records_left_out(damage):
    """A record before the slice asked for is checked as an event read checks it: text
    that is not UTF-8 or a number out of range refuses the whole entry (a long integer
    only sends it to orjson, which takes it)."""
    texts = [orjson.dumps({"seq": seq, "type": "t", "time": 1, "data": {}}) for seq in range(3)]
    texts[0] = texts[0].replace(b'"data":{}', b'"data":{' + damage + b"}")
    joined = b"[" + b",".join(texts) + b"]"
    with msgspec_reads():
        found = stored_records(joined, 0, 3, 2, 3)
        whole = stored_events(joined, 0, 3)
    assert found is None and whole is None
    with msgspec_reads():
        assert stored_records(joined.replace(damage, b'"x":1'), 0, 3, 2, 3) is not None


@pytest.mark.parametrize("field", [*FIELDS, "extra"])
@pytest.mark.parametrize("value", [*ODD, "missing"], ids=repr)
def test_every_odd_value_of_every_field_gets_the_full_validations_verdict(field, value):
    records_ = [
        {"seq": 4, "type": "note", "time": 1, "data": {}, "id": "a"},
        {"seq": 5, "type": "note", "time": 2, "data": {"b": 1}},
    ]
    for record in records_:
        if value == "missing":
            record.pop(field, None)
        else:
            record[field] = value
        texts = [orjson.dumps(one) for one in records_]
        expected = reference(texts, 4)
        joined = b"[" + b",".join(texts) + b"]"
        one_pass = stored_events(joined, 4, 2)
        assert (one_pass is None) == (expected is None)
        if one_pass is not None and expected is not None:
            same(one_pass, expected)
        found = built_events(orjson.loads(joined), 4)
        if found is None:
            assert expected is None or (field == "id" and value is None)
        else:
            assert expected is not None
            same(found, expected)


def test_built_events_are_session_events_with_every_method():
    [event] = built_events([{"seq": 7, "type": "note", "time": -1, "data": {"a": [1]}}], 7)
    assert type(event) is SessionEvent
    assert event == SessionEvent(seq=7, type="note", time=-1, data={"a": [1]})
    assert event.model_dump() == {
        "seq": 7,
        "type": "note",
        "time": -1,
        "data": {"a": [1]},
        "id": None,
    }
    assert SessionEvent.model_validate_json(event.model_dump_json()) == event
    assert event.model_copy(update={"seq": 8}).seq == 8
    with pytest.raises(ValidationError):
        event.seq = 8  # type: ignore[misc]


def test_without_the_slot_layout_events_are_constructed_alike(monkeypatch):
    records_ = [{"seq": 0, "type": "note", "time": 1, "data": {"a": 1}, "id": "x"}]
    fast = built_events(records_, 0)
    monkeypatch.setattr(models, "_build", models._constructed)
    constructed = built_events(records_, 0)
    assert constructed is not None and fast is not None
    same(constructed, fast)


def test_memory_texts_read_back_through_the_fast_path_or_validation():
    valid = [orjson.dumps({"seq": 3, "type": "t", "time": 1, "data": {}})]
    assert events_of_texts(valid, 3) == [SessionEvent(seq=3, type="t", time=1, data={})]
    # Not an object's data (append takes any JSON): validation builds it.
    other = [orjson.dumps({"seq": 0, "type": "t", "time": 1, "data": [1]})]
    assert events_of_texts(other, 0)[0].data == [1]
    with pytest.raises(ValidationError):
        events_of_texts([b'{"seq":0,"type":"t","time":1.5,"data":{}}'], 0)
    with pytest.raises(ValidationError):
        events_of_texts([b'{"seq":0,'], 0)


def verdict(store: sessionstore.Store) -> list[SessionEvent] | None:
    """The events a fresh store loads, None when it raises CorruptLogError (naming the
    session and the seq, or for a line of a file that is not an event, the line)."""
    try:
        return store.events.read_from(SID, 0)
    except CorruptLogError as exc:
        assert exc.session_id == SID
        assert exc.seq is not None or exc.line is not None
        return None


def check(store: sessionstore.Store, texts: list[bytes], tail: list[SessionEvent]) -> None:
    expected = reference(texts, 0)
    found = verdict(store)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        same(found, expected + tail)


def good(records_: list[dict[str, Any]]) -> list[SessionEvent]:
    return [SessionEvent(seq=i, type="note", time=1, data={}) for i in range(len(records_))]


def folded(events: list[SessionEvent]) -> list[Any]:
    """The items of an OpenAI Agents session log: the ``"item"`` events' items, less
    those a ``"pop"`` names (the layout ``sessionstore.integrations.openai_agents``
    states)."""
    items: dict[int, Any] = {}
    for event in events:
        data = event.data
        if event.type == "item" and type(data) is dict and "item" in data:
            items[event.seq] = data["item"]
        elif event.type == "pop" and type(data) is dict and type(data.get("seq")) is int:
            items.pop(data["seq"], None)
    return list(items.values())


def check_session(url: str, namespace: str, texts: list[bytes], tail: list[SessionEvent]) -> None:
    """``get_items`` of a new session object on the log: CorruptLogError (naming the
    session) where the full validation refuses a record, else the items of the events
    it builds, the same JSON values."""
    pytest.importorskip("agents")
    from sessionstore.integrations.openai_agents import SessionStoreSession

    async def items() -> list[Any] | None:
        store = aio.connect(url, namespace)
        try:
            return await SessionStoreSession(SID, store).get_items()
        except CorruptLogError as exc:
            assert exc.session_id == SID
            return None
        finally:
            await store.close()

    expected = reference(texts, 0)
    found = asyncio.run(items())
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert orjson.dumps(found) == orjson.dumps(folded(expected + tail))


@contextmanager
def redis_log(url: str, found: list[Any], texts: list[bytes]) -> Iterator[str]:
    """A Redis session log ``SID`` in a namespace of its own (yielded) whose one entry
    holds ``texts``."""
    namespace = f"fast{uuid.uuid4().hex[:8]}"
    meta, stream = keys.log_keys(namespace, SID)
    client = redis.Redis.from_url(url)
    try:
        with sessionstore.connect(url, namespace) as store:
            store.events.create(SessionHeader(id=SID, created_at=1))
            store.events.append(SID, good(found))
            client.delete(stream)
            value = b"[" + b",\n".join(texts) + b"]"
            client.xadd(stream, {b"events": value}, id=f"{len(texts) - 1}-{len(texts)}")
        yield namespace
    finally:
        client.delete(meta, stream)
        client.close()


@pytest.mark.parametrize("parser", ["msgspec", "orjson"])
@EXAMPLES
@given(case=stored())
def test_redis_reads_refuse_and_take_what_the_full_validation_does(redis_server, case, parser):
    found, texts = case
    with (
        redis_log(redis_server.url, found, texts) as namespace,
        sessionstore.connect(redis_server.url, namespace) as store,
        msgspec_reads() if parser == "msgspec" else contextlib.nullcontext(),
    ):
        check(store, texts, [])


@pytest.mark.parametrize("parser", ["msgspec", "orjson"])
@EXAMPLES
@given(case=stored(kinds=SESSION_KINDS, data=session_data))
def test_redis_session_items_refuse_and_take_what_the_full_validation_does(
    redis_server, case, parser
):
    found, texts = case
    with (
        redis_log(redis_server.url, found, texts) as namespace,
        msgspec_reads() if parser == "msgspec" else contextlib.nullcontext(),
    ):
        check_session(redis_server.url, namespace, texts, [])


#: The valid event a JSONL log holds after the mutated batch (damage on the last line
#: would be a torn tail).
AFTER = SessionEvent(seq=0, type="note", time=2, data={"after": True})


@contextmanager
def jsonl_log(found: list[Any], texts: list[bytes]) -> Iterator[str]:
    """A JSONL store (its URL yielded) whose session log ``SID`` holds ``texts`` as one
    batch, then :data:`AFTER` (at the next seq)."""
    last = len(found) - 1
    lines = [_with_batch_end(text, last) for text in texts]
    with tempfile.TemporaryDirectory() as tmp:
        url = Path(tmp).as_uri()
        with sessionstore.connect(url, "ns") as store:
            store.events.create(SessionHeader(id=SID, created_at=1))
            store.events.append(SID, good(found))
            store.events.append(SID, [after(found)])
        [path] = [
            p for p in Path(tmp).rglob("*") if p.is_file() and p.read_bytes().count(b"\n") > 2
        ]
        raw = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join([raw[0], *lines, *raw[1 + len(found) :]]))
        yield url


def after(found: list[Any]) -> SessionEvent:
    return AFTER.model_copy(update={"seq": len(found)})


@EXAMPLES
@given(stored())
def test_jsonl_reads_refuse_and_take_what_the_full_validation_does(case):
    found, texts = case
    with jsonl_log(found, texts) as url, sessionstore.connect(url, "ns") as store:
        check(store, texts, [after(found)])


@EXAMPLES
@given(stored(kinds=SESSION_KINDS, data=session_data))
def test_jsonl_session_items_refuse_and_take_what_the_full_validation_does(case):
    found, texts = case
    with jsonl_log(found, texts) as url:
        check_session(url, "ns", texts, [after(found)])


def _with_batch_end(text: bytes, last: int) -> bytes:
    """A record's text as a JSONL line: ``batch_end`` added inside its object (text
    that is not an object stays as it is)."""
    if text.startswith(b"{") and text.endswith(b"}") and len(text) > 2:
        return text[:-1] + b',"batch_end":%d}' % last
    return text


SQL_VALUES = st.one_of(
    odd.filter(lambda value: not isinstance(value, list | dict)),
    st.sampled_from(
        [b"\x00\xff", '{"a":NaN}', '{"a":1', "[1]", '{"a":1}', "{}", float("nan"), 2**62]
    ),
)
COLUMNS = ["type", "time", "data", "event_id"]


@EXAMPLES
@given(records(), st.lists(st.tuples(st.sampled_from(COLUMNS), SQL_VALUES), max_size=2), st.data())
def test_sqlite_reads_refuse_and_take_what_the_full_validation_does(found, changes, data):
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'store.db'}"
        events = [SessionEvent.model_validate(record) for record in found]
        with sessionstore.connect(url, "ns") as store:
            store.events.create(SessionHeader(id=SID, created_at=1))
            store.events.append(SID, events)
        db = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        try:
            for column, value in changes:
                seq = data.draw(st.integers(0, len(found) - 1))
                if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
                    value = str(value)  # SQLite integers are 64-bit: stored as text
                db.execute(
                    f"UPDATE log_events SET {column}=? WHERE namespace='ns' AND seq=?",
                    (value, seq),
                )
            rows = db.execute(
                "SELECT seq, type, time, data, event_id FROM log_events"
                " WHERE namespace='ns' ORDER BY seq"
            ).fetchall()
        finally:
            db.close()
        with sessionstore.connect(url, "ns") as store:
            expected = _rows_reference(rows)
            loaded = verdict(store)
            if expected is None:
                assert loaded is None
            else:
                assert loaded is not None
                same(loaded, expected)


def _rows_reference(rows: list[tuple[Any, ...]]) -> list[SessionEvent] | None:
    """The full validation of stored rows: data a text holding a JSON object, every
    column validated by pydantic."""
    parsed = []
    for seq, kind, time, data, event_id in rows:
        if not isinstance(data, str):
            return None
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        record = {"seq": seq, "type": kind, "time": time, "data": value}
        if event_id is not None:
            record["id"] = event_id
        parsed.append(orjson.dumps(record) if _dumpable(record) else None)
    if None in parsed:
        return None
    return reference(parsed, 0)


def _dumpable(record: dict[str, Any]) -> bool:
    """Whether a row's values survive as JSON text (a blob, a float NaN do not: either
    is refused by validation as well)."""
    try:
        return orjson.loads(orjson.dumps(record)) == record
    except (orjson.JSONEncodeError, TypeError):
        return False
