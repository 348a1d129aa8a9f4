"""The Redis log reader decodes XRANGE replies in both shapes the clients give: the raw
flat field list (standalone clients) and a dict of fields (cluster clients). Both must
give the same events, and the same error for the same damage."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

import sessionstore
from sessionstore import CorruptLogError, SessionEvent
from sessionstore.models import events_from_json
from sessionstore.redis.logformat import ENTRY_EVENTS
from sessionstore.redis.logparse import WINDOW, LogRead

META = {b"id": b"s", b"version": b"1", b"created_at": b"1", b"next_seq": b"4"}
Fields = list[tuple[bytes, bytes]]


def entry(at: int, **changes: bytes | None) -> tuple[bytes, Fields]:
    seq = at
    fields = {
        "seq": b"%d" % seq,
        "type": b"note",
        "time": b"%d" % (100 + seq),
        "data": b'{"n":%d}' % seq,
        **changes,
    }
    return b"%d-1" % seq, [(k.encode(), v) for k, v in fields.items() if v is not None]


def flat(entries: list[tuple[bytes, Fields]]) -> list[Any]:
    return [[entry_id, [part for pair in fields for part in pair]] for entry_id, fields in entries]


def mapped(entries: list[tuple[bytes, Fields]]) -> list[Any]:
    return [(entry_id, dict(fields)) for entry_id, fields in entries]


def read(reply: list[Any], from_seq: int = 0, limit: int | None = None) -> LogRead:
    plan = LogRead("s", from_seq, limit)
    plan.first_range()
    plan.take_meta(META)
    plan.take(reply)
    return plan


GOOD = [entry(0), entry(1, id=b"e1"), entry(2, type=b"tool/result"), entry(3)]


@pytest.mark.parametrize("shape", [flat, mapped])
def test_both_reply_shapes_decode_to_the_same_events(shape):
    plan = read(shape(GOOD))
    assert plan.done and plan.tail is False
    assert plan.events == [
        SessionEvent(seq=0, type="note", time=100, data={"n": 0}),
        SessionEvent(seq=1, type="note", time=101, data={"n": 1}, id="e1"),
        SessionEvent(seq=2, type="tool/result", time=102, data={"n": 2}),
        SessionEvent(seq=3, type="note", time=103, data={"n": 3}),
    ]


@pytest.mark.parametrize("shape", [flat, mapped])
def test_entries_in_another_field_order_or_with_extra_fields_still_decode(shape):
    reordered = [
        (GOOD[0][0], list(reversed(GOOD[0][1]))),
        entry(1, id=b"e1", extra=b"x"),
        *GOOD[2:],
    ]
    assert read(shape(reordered)).events == read(flat(GOOD)).events


@pytest.mark.parametrize("shape", [flat, mapped])
def test_a_limit_and_a_torn_tail_end_the_read_in_both_shapes(shape):
    limited = read(shape(GOOD[1:]), from_seq=1, limit=2)
    assert [e.seq for e in limited.events] == [1, 2] and limited.done
    torn = read(shape([*GOOD, entry(4)]))
    assert [e.seq for e in torn.events] == [0, 1, 2, 3] and torn.tail is True


DAMAGE = {
    "gap": [GOOD[0], GOOD[2], GOOD[3]],
    "duplicate": [GOOD[0], GOOD[1], (b"1-2", GOOD[1][1]), GOOD[2], GOOD[3]],
    "no data": [GOOD[0], entry(1, data=None), *GOOD[2:]],
    "bad json": [GOOD[0], entry(1, data=b"{not json"), *GOOD[2:]],
    "data not an object": [GOOD[0], entry(1, data=b"[1]"), *GOOD[2:]],
    "bad time": [GOOD[0], entry(1, time=b"soon"), *GOOD[2:]],
    "bad seq": [GOOD[0], entry(1, seq=b"7"), *GOOD[2:]],
    "bad utf-8": [GOOD[0], entry(1, type=b"\xff"), *GOOD[2:]],
    "bad id": [GOOD[0], (b"1-5", GOOD[1][1]), *GOOD[2:]],
    "short": GOOD[:3],
}


@pytest.mark.parametrize("what", list(DAMAGE))
def test_damage_gives_the_same_error_in_both_shapes(what):
    errors = []
    for shape in (flat, mapped):
        with pytest.raises(CorruptLogError) as caught:
            read(shape(DAMAGE[what]))
        errors.append((caught.value.seq, str(caught.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] == (3 if what == "short" else 1)


def test_a_reply_that_fills_its_window_continues_after_its_last_entry():
    plan = LogRead("s", 0, None)
    bound = WINDOW + ENTRY_EVENTS - 1
    assert plan.first_range() == ("0-0", f"{bound}-{2**64 - 1}", bound + 2)
    plan.take_meta({**META, b"next_seq": b"%d" % (3 * WINDOW)})
    plan.take(flat([entry(seq) for seq in range(bound + 1)]))
    assert not plan.done
    assert plan.next_range() == (f"({bound}-1", f"{2 * bound + 1}-{2**64 - 1}", bound + 3)


def test_a_reply_that_ends_before_its_window_is_missing_events():
    plan = LogRead("s", 0, None)
    plan.first_range()
    plan.take_meta({**META, b"next_seq": b"%d" % (3 * WINDOW)})
    with pytest.raises(CorruptLogError, match="event 100 is missing"):
        plan.take(flat([entry(seq) for seq in range(100)]))


def test_a_restored_event_is_indistinguishable_from_a_validated_one():
    validated = SessionEvent(seq=5, type="tool/call", time=7, data={"a": [1, {"b": None}]})
    text = b'[{"seq":5,"type":"tool/call","time":7,"data":{"a":[1,{"b":null}]}}]'
    [restored] = events_from_json(text)
    assert restored == validated
    assert repr(restored) == repr(validated)
    assert restored.model_dump() == validated.model_dump()
    assert restored.model_dump_json() == validated.model_dump_json()
    assert pickle.loads(pickle.dumps(restored)) == validated
    assert restored.model_copy(update={"seq": 6}).seq == 6 and restored.seq == 5
    with pytest.raises(ValueError):
        restored.seq = 9  # type: ignore[misc]  # frozen, like any SessionEvent


def test_no_module_writes_pydantic_private_attributes():
    package = Path(sessionstore.__file__).parent
    for path in package.rglob("*.py"):
        assert "__pydantic_" not in path.read_text(), path


def batch_entry(first: int, lines: list[bytes]) -> tuple[bytes, Fields]:
    """An entry of the batch layout: ``events`` is a JSON array, one event per line."""
    last = first + len(lines) - 1
    return b"%d-%d" % (last, len(lines)), [(b"events", b"[" + b",\n".join(lines) + b"]")]


def event_line(seq: int, data: bytes = b'{"n":1}', kind: bytes = b'"note"') -> bytes:
    return b'{"seq":%d,"type":%s,"time":%d,"data":%s}' % (seq, kind, 100 + seq, data)


BATCH_DAMAGE: dict[str, tuple[bytes, int]] = {
    "NaN in data": (b"[" + event_line(2, b'{"x":NaN}') + b"]", 2),
    "Infinity in data": (b"[" + event_line(2, b'{"x":-Infinity}') + b"]", 2),
    "NaN in a later event": (b"[" + event_line(2) + b",\n" + event_line(3, b'{"x":NaN}') + b"]", 3),
    "a number out of range in a later event": (
        b"[" + event_line(2) + b",\n" + event_line(3, b'{"x":1e400}') + b"]",
        3,
    ),
    "not JSON": (b"[" + event_line(2)[:-2], 2),
    "one event short": (b"[" + event_line(2) + b"]", 2),
    "seq out of place": (b"[" + event_line(2) + b",\n" + event_line(4) + b"]", 3),
    "data not an object": (b"[" + event_line(2) + b",\n" + event_line(3, b"[1]") + b"]", 3),
    "type not a string": (b"[" + event_line(2) + b",\n" + event_line(3, kind=b"7") + b"]", 3),
}


@pytest.mark.parametrize("what", list(BATCH_DAMAGE))
def test_damage_inside_a_batch_entry_names_its_event_in_both_shapes(what):
    value, seq = BATCH_DAMAGE[what]
    entries = [batch_entry(0, [event_line(0), event_line(1)]), (b"3-2", [(b"events", value)])]
    errors = []
    for shape in (flat, mapped):
        with pytest.raises(CorruptLogError) as caught:
            read(shape(entries))
        errors.append((caught.value.seq, str(caught.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] == seq, errors[0]


def test_a_batch_entry_mentioning_nan_in_a_string_still_decodes():
    entries = [
        batch_entry(0, [event_line(0), event_line(1)]),
        batch_entry(2, [event_line(2, b'{"s":"NaN or Infinity"}'), event_line(3)]),
    ]
    for shape in (flat, mapped):
        events = read(shape(entries)).events
        assert [event.seq for event in events] == [0, 1, 2, 3]
        assert events[2].data == {"s": "NaN or Infinity"}


def test_a_read_from_inside_an_entry_checks_the_events_it_leaves_out():
    good = [
        batch_entry(0, [event_line(0), event_line(1)]),
        batch_entry(2, [event_line(2), event_line(3)]),
    ]
    for shape in (flat, mapped):
        assert [event.seq for event in read(shape(good[1:]), from_seq=3).events] == [3]
        assert [event.seq for event in read(shape(good), from_seq=1, limit=2).events] == [1, 2]
    damaged = [batch_entry(2, [event_line(5), event_line(3)])]
    for shape in (flat, mapped):
        with pytest.raises(CorruptLogError, match="does not hold event 2 in place"):
            read(shape(damaged), from_seq=3)
