"""Event data given as JSON text (``JSONText``, ``msgspec.Raw``): every backend, through
the sync and the async API, stores what the same data given as Python objects stores."""

from __future__ import annotations

import math

import msgspec
import orjson
import pytest

from sessionstore import JSONText, NotJSONSerializableError, SessionEvent, SessionHeader

T = 1_718_000_000_000

#: Texts and the data they hold: canonical, spaced, escaped, reordered duplicates, Raw.
TEXTS = [
    JSONText(b'{"turn":1,"text":"h\\u00e9llo","n":[1,2.5,-3,true,null]}'),
    JSONText('{ "call_id" : "c-1",\n "args": {"path": "/tmp/é", "deep": [[{}]]} }'),
    msgspec.Raw(b'{"a":1,"a":2,"big":18446744073709551615,"neg":-9223372036854775808}'),
    JSONText(b"{}"),
]
KINDS = ["note", "tool/call", "note", "turn/end"]


def _events(datas: list[object], first: int = 0) -> list[SessionEvent]:
    return [
        SessionEvent(seq=first + i, type=KINDS[i % len(KINDS)], time=T + i, data=data)
        for i, data in enumerate(datas)
    ]


def test_json_text_reads_back_as_its_data_stored_as_the_same_data_would_be(store):
    store.events.create(SessionHeader(id="s-1"))
    datas = [orjson.loads(bytes(text)) for text in TEXTS]
    mixed = [TEXTS[0], datas[1], TEXTS[2], TEXTS[3]]
    assert store.events.append("s-1", _events(mixed)) == 4
    assert [e.data for e in store.events.load("s-1").events] == datas
    # The same data as Python objects, or as the other texts, is an applied replay:
    # every backend compares the stored bytes, so each event was stored alike.
    assert store.events.append("s-1", _events(datas)) == 4
    assert store.events.append("s-1", _events(TEXTS)) == 4
    # A writer's emit takes text as well.
    writer = store.events.writer(SessionHeader(id="w"))
    emitted = writer.emit("note", TEXTS[1])
    writer.close()
    assert emitted.data == datas[1]
    assert [e.data for e in store.events.read_from("w", 0)] == [datas[1]]


def _deep(depth: int) -> tuple[bytes, dict]:
    data: dict = {}
    for _ in range(depth):
        data = {"k": data}
    return b'{"k":' * depth + b"{}" + b"}" * depth, data


#: (text, the same data as Python objects or None, the path refused).
DAMAGED = [
    (b'{"x":NaN}', {"x": math.nan}, "$"),
    (b'{"x":Infinity}', {"x": math.inf}, "$"),
    (b'{"x":1e400}', {"x": math.inf}, "$"),
    (b"[1,2]", [1, 2], "$"),
    (b'"text"', "text", "$"),
    (b'{"n":100000000000000000000000}', {"n": 10**23}, "$.n"),
    (_deep(300)[0], _deep(300)[1], None),
    (b'{"x":1', None, "$"),
    (b'{"x":"\\ud800"}', {"x": "\ud800"}, "$"),
    (b'{"x":"\xff"}', None, "$"),
    (b'{"a":1}{"b":2}', None, "$"),
]


def test_damaged_json_text_is_refused_naming_the_event_as_its_data_is(store):
    store.events.create(SessionHeader(id="s-1"))
    store.events.append("s-1", _events([TEXTS[0]]))
    for text, data, path in DAMAGED:
        for given in (JSONText(text), msgspec.Raw(text), data):
            if given is None:
                continue
            batch = [SessionEvent(seq=1, type="note", time=T, data={}), *_events([given], 2)]
            with pytest.raises(NotJSONSerializableError) as caught:
                store.events.append("s-1", batch)
            error = caught.value
            assert (error.event_type, error.seq) == ("note", 2), text
            if path is not None and given is not data:
                assert error.path == path, text
            assert str(error).startswith("event 'note' (seq 2)")
    assert [e.seq for e in store.events.read_from("s-1", 0)] == [0]
