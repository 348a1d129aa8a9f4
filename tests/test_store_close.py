"""Closing a store closes the writers still open first: each flushes what it queued
and gives its lease up, sync and async, so nothing queued is dropped; a writer that could
not write (the store unreachable) makes the store's close raise, once everything is
closed; one refused for good (its lease taken over) is logged."""

from __future__ import annotations

import asyncio

import pytest

import sessionstore
from sessionstore import SessionHeader, StoreClosedError, StoreUnavailableError, aio

#: A window no test waits for: whatever is stored was flushed, not drained.
LONG_WINDOW = 3600.0


def test_closing_a_store_stores_what_its_open_writers_queued(tmp_path):
    url = (tmp_path / "store").as_uri()
    store = sessionstore.connect(url, "ns")
    writers = [
        store.events.writer(SessionHeader(id=f"w-{n}"), window=LONG_WINDOW) for n in range(3)
    ]
    for n, writer in enumerate(writers):
        writer.emit("note", {"n": n})
        writer.emit("note", {"n": n + 10})
    store.close()
    for writer in writers:
        writer.close()  # closed with the store: nothing left to do, nothing raised
    with sessionstore.connect(url, "ns") as again:
        for n in range(3):
            assert [e.data for e in again.events.read_from(f"w-{n}", 0)] == [
                {"n": n},
                {"n": n + 10},
            ]
            assert again.events.info(f"w-{n}").busy is False  # the leases were given up


def test_closing_an_async_store_stores_what_its_open_writers_queued(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def scenario() -> None:
        store = aio.connect(url, "ns")
        writer = await store.events.writer(SessionHeader(id="w"), window=LONG_WINDOW)
        writer.emit("note", {"n": 0})
        writer.emit("note", {"n": 1})
        await store.close()
        await writer.close()

    asyncio.run(scenario())
    with sessionstore.connect(url, "ns") as again:
        assert [e.data for e in again.events.read_from("w", 0)] == [{"n": 0}, {"n": 1}]
        assert again.events.info("w").busy is False


def test_a_writer_that_cannot_write_makes_closing_the_store_raise_naming_it(caplog):
    store = sessionstore.connect("memory://", "ns")
    h = SessionHeader(id="fenced")
    fenced = store.events.writer(h, window=LONG_WINDOW)
    fenced.emit("note")
    fenced.flush()
    store.events._backend.release_lease("fenced", fenced._buffer.lease.owner)
    store.events.writer(h).close()  # took it over
    fenced.emit("note")
    down = store.events.writer(SessionHeader(id="down"), window=LONG_WINDOW)
    down.emit("note")
    fine = store.events.writer(SessionHeader(id="fine"), window=LONG_WINDOW)
    fine.emit("note")
    append = store.events._backend.append

    def unreachable(session_id: str, *args: object, **kwargs: object) -> int:
        if session_id == "down":
            raise StoreUnavailableError("the server is down")
        return append(session_id, *args, **kwargs)

    store.events._backend.append = unreachable
    with pytest.raises(StoreUnavailableError) as caught:
        store.close()
    assert "'down'" in "".join(caught.value.__notes__)
    [warning] = caught_warnings(caplog)
    assert "session 'fenced'" in warning.getMessage()
    assert "took its lease over" in warning.getMessage()
    assert [e.seq for e in store.events._backend.read("fine")[1]] == [0]  # stored
    with pytest.raises(StoreClosedError):
        store.events.read_from("fine", 0)
    store.close()  # closed whatever happened: idempotent


def caught_warnings(caplog: pytest.LogCaptureFixture) -> list:
    return [r for r in caplog.records if r.name == "sessionstore" and r.levelname == "WARNING"]
