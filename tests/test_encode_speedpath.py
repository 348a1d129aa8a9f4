"""The lossless check of event data without a round trip (``jsondata.plain``): plain
data is decided by one strict pass, everything else by the round trip as before, so the
verdicts, the messages and the stored bytes are those of the round trip alone."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import math
import struct
import threading
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore import NotJSONSerializableError, SessionEvent, jsondata
from sessionstore.eventlog import encode_batch
from sessionstore.jsondata import plain

#: A typical agent event's data (about 300 bytes of JSON).
AGENT = {
    "turn": 12,
    "step": 1,
    "call_id": "call_000012",
    "name": "bash",
    "arguments": {"cmd": "pytest -x tests/test_12.py", "timeout": 120, "env": {"CI": "1"}},
    "content": "Looking at the failing test, the fixture opens the store first.",
    "tags": ["tool", "shell", 3, 4.5, True, None, -0.0, 2**64 - 1, -(2**63)],
}


class Word(str):
    pass


class Count(int):
    pass


class Share(float):
    pass


class Colour(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass
class Point:
    x: int = 1


def _nan(bits: int) -> float:
    return struct.unpack(">d", bits.to_bytes(8, "big"))[0]


#: Parts orjson writes as it writes plain JSON, or writes at all, that are not plain.
NOT_PLAIN = [
    (1, 2),
    Colour.RED,
    Level.LOW,
    Word("w"),
    Count(3),
    Share(0.5),
    uuid.UUID(int=7),
    datetime.datetime(2026, 1, 1),
    datetime.date(2026, 1, 1),
    Point(),
    orjson.Fragment(b"1"),
    collections.OrderedDict(a=1),
    math.nan,
    -math.nan,
    math.inf,
    -math.inf,
    _nan(0x7FF0_0000_0000_0001),  # a signalling NaN
    _nan(0xFFFF_FFFF_FFFF_FFFF),
    2**64,
    -(2**63) - 1,
    "\ud800",
    {1, 2},
    1j,
]


def _events(data: Any, count: int = 1) -> list[SessionEvent]:
    return [SessionEvent(seq=i, type="note", time=i, data=data) for i in range(count)]


def _round_trip(data: Any, seq: int = 0) -> bytes | None:
    """What the check before ``plain`` decided: the text of event ``seq`` when its data
    comes back equal from its JSON, else None."""
    record = {"seq": seq, "type": "note", "time": seq, "data": data}
    try:
        text = orjson.dumps(record)
    except (TypeError, orjson.JSONEncodeError):
        return None
    return text if orjson.loads(text)["data"] == data else None


def test_plain_data_is_plain_and_each_other_part_is_not():
    assert plain(AGENT) and plain([AGENT, {}, {"a": [[], {}]}])
    for part in NOT_PLAIN:
        assert not plain({"x": [AGENT, part]}), part
        assert not plain({"k": {"x": part}}), part
    assert not plain({Word("k"): 1})
    cycle: list[Any] = []
    cycle.append(cycle)
    assert not plain({"x": cycle})


def test_plain_data_is_checked_without_a_round_trip(monkeypatch):
    def no_parse(*_: Any) -> Any:
        raise AssertionError("parsed")

    monkeypatch.setattr(orjson, "loads", no_parse)
    for count in (1, 100):
        texts = encode_batch("s", _events(AGENT, count)).texts
        assert texts[0] == orjson.dumps({"seq": 0, "type": "note", "time": 0, "data": AGENT})


def test_what_is_not_plain_gets_the_verdict_of_the_round_trip():
    for part in NOT_PLAIN:
        data = {"x": [1, part]}
        expected = _round_trip(data)
        for count in (1, 3):
            try:
                texts = encode_batch("s", _events(data, count)).texts
            except NotJSONSerializableError as exc:
                assert expected is None, part
                assert exc.seq == 0 and exc.path in ("$.x[1]", "$"), part
            else:
                assert texts[0] == expected, part


def test_bytes_that_look_like_a_nan_only_send_the_data_to_the_round_trip():
    # A 203-byte string: msgpack writes its length as 0xcb, then "\x7f", then 0xf0.
    text = "\x7f\U0001f600" + "a" * 198
    assert len(text.encode()) == 203 and not plain({"t": text})
    assert encode_batch("s", _events({"t": text}, 2)).texts[0] == _round_trip({"t": text})


def test_data_too_deep_for_its_event_record_is_refused_naming_the_event():
    data: Any = 1
    for _ in range(253):
        data = [data]
    for count in (1, 3):
        with pytest.raises(NotJSONSerializableError) as caught:
            encode_batch("s", _events({"x": data}, count))
        assert caught.value.seq == 0
        assert caught.value.reason == f"nested deeper than {jsondata.MAX_DEPTH} levels"


def test_each_thread_packs_with_its_own_packer():
    results: list[bool] = []

    def work(data: Any, expected: bool) -> None:
        results.extend(plain(data) is expected for _ in range(300))

    threads = [
        threading.Thread(target=work, args=args)
        for args in ((AGENT, True), ({"x": (1,)}, False), ({"y": math.nan}, False))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 900 and all(results)


def test_a_thread_keeps_no_packer_that_packed_much():
    assert plain(AGENT) and jsondata._PACKERS.packer is not None
    kept = jsondata._PACKERS.packer
    assert plain(AGENT) and jsondata._PACKERS.packer is kept
    # A packer's buffer stays as large as the most it packed: a large batch drops it.
    assert plain([AGENT] * 2000) and jsondata._PACKERS.packer is None
    assert plain(AGENT) and jsondata._PACKERS.packer is not None


_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from([Level.LOW, Colour.RED, Word("w"), (1,), Share(2.0), orjson.Fragment(b"2")])
)
_DATA = st.dictionaries(
    st.text(max_size=4),
    st.recursive(
        _LEAVES,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=10,
    ),
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_DATA, min_size=1, max_size=4))
def test_a_batch_is_taken_exactly_when_each_data_survives_its_round_trip(datas):
    events = [SessionEvent(seq=i, type="note", time=i, data=data) for i, data in enumerate(datas)]
    expected = [_round_trip(data, seq) for seq, data in enumerate(datas)]
    try:
        texts = encode_batch("s", events).texts
    except NotJSONSerializableError as exc:
        # The first event whose data does not survive is named.
        assert expected[exc.seq] is None and None not in expected[: exc.seq]
    else:
        assert texts == expected
