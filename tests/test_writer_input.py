"""``emit`` refuses what it cannot log, at once and with nothing queued: the sync writer
and the async writer share the check (``WriterBuffer.make``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import sessionstore
import sessionstore.aio
from sessionstore import InvalidArgumentError, SessionHeader, SessionStoreError

BAD_EMITS: list[tuple[tuple[Any, ...], str]] = [
    ((5,), "event type must be a str, not int 5"),
    ((None,), "event type must be a str, not NoneType"),
    ((b"turn/start",), "event type must be a str, not bytes"),
    (("",), "event type must not be empty"),
    (("tick", [1, 2]), r"data must be a dict, JSON text or None, not list"),
    (("tick", "text"), r"data must be a dict, JSON text or None, not str"),
    (("tick", 5), r"data must be a dict, JSON text or None, not int"),
    (("tick", ({"a": 1},)), r"data must be a dict, JSON text or None, not tuple"),
    (("tick", {"tags": {1, 2}}), r"not lossless JSON at \$\.tags"),
    (("tick", None, 1.5), "when must be a datetime or int epoch milliseconds, not float"),
    (("tick", {}, "2024-06-10"), "when must be a datetime or int epoch milliseconds, not str"),
    (("tick", {}, 2**80), "out of range"),
]
IDS = [repr(args)[:40] for args, _ in BAD_EMITS]


@pytest.mark.parametrize(("args", "message"), BAD_EMITS, ids=IDS)
def test_a_bad_emit_raises_invalid_argument_and_queues_nothing(args, message):
    with sessionstore.connect("memory://", "input") as store:
        writer = store.events.writer(SessionHeader(id="s"))
        writer.emit("before", {"n": 1})
        with pytest.raises(InvalidArgumentError, match=message) as raised:
            writer.emit(*args)
        assert isinstance(raised.value, SessionStoreError)
        assert writer.next_seq == 1
        writer.emit("after")
        writer.close()
        events = store.events.load("s").events
    assert [(e.seq, e.type, e.data) for e in events] == [(0, "before", {"n": 1}), (1, "after", {})]


@pytest.mark.parametrize(("args", "message"), BAD_EMITS, ids=IDS)
def test_a_bad_emit_on_the_async_writer_raises_the_same(args, message):
    async def main() -> list[Any]:
        async with sessionstore.aio.connect("memory://", "input") as store:
            writer = await store.events.writer(SessionHeader(id="s"))
            writer.emit("before", {"n": 1})
            with pytest.raises(InvalidArgumentError, match=message):
                writer.emit(*args)
            assert writer.next_seq == 1
            writer.emit("after")
            await writer.close()
            return (await store.events.load("s")).events

    events = asyncio.run(main())
    assert [(e.seq, e.type, e.data) for e in events] == [(0, "before", {"n": 1}), (1, "after", {})]


def test_emit_without_data_logs_an_empty_dict():
    with sessionstore.connect("memory://", "input") as store:
        with store.events.writer(SessionHeader(id="s")) as writer:
            assert writer.emit("tick").data == {}
            assert writer.emit("tock", None).data == {}
        assert [e.data for e in store.events.load("s").events] == [{}, {}]
