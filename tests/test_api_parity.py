"""The async API mirrors the sync API: same names, same parameters, I/O as coroutines."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import sessionstore
from sessionstore import aio

PAIRS = [
    (sessionstore.Store, aio.AsyncStore),
    (sessionstore.Session, aio.AsyncSession),
    (sessionstore.EventLog, aio.AsyncEventLog),
    (sessionstore.SessionWriter, aio.AsyncSessionWriter),
]

#: Methods that do no I/O stay plain calls in the async API.
NO_IO = {"session", "emit", "dispose"}
#: Plain calls in the async API whose result is awaited, or entered with ``async with``,
#: to do their I/O (as ``aio.connect`` is a plain call).
OPENERS = {"writer"}


def public(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }


def parameters(fn: object) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_same_public_names(sync, async_):
    assert sorted(public(sync)) == sorted(public(async_))


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_same_parameters_and_io_methods_are_coroutines(sync, async_):
    for name, member in public(sync).items():
        twin = public(async_)[name]
        if isinstance(member, property):
            assert isinstance(twin, property), name
            continue
        assert parameters(member) == parameters(twin), name
        is_async = inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin)
        assert is_async == (name not in NO_IO | OPENERS), name


def test_the_async_writer_is_opened_by_await_or_async_with(tmp_path):
    header = sessionstore.SessionHeader(id="w")

    async def scenario() -> list[int]:
        async with aio.connect((tmp_path / "s").as_uri()) as store:
            opening = store.events.writer(header)  # a plain call: nothing done yet
            assert inspect.isawaitable(opening) and hasattr(opening, "__aenter__")
            assert await store.events.list() == []
            async with opening as writer:
                writer.emit("note")
            writer = await store.events.writer(header)
            writer.emit("note")
            await writer.close()
            with pytest.raises(sessionstore.InvalidArgumentError):
                store.events.writer("w")  # checked at the call, not at the await
            return [e.seq for e in (await store.events.load("w")).events]

    assert asyncio.run(scenario()) == [0, 1]


def test_connect_has_the_same_parameters():
    assert parameters(sessionstore.connect) == parameters(aio.connect)


def test_async_context_managers_mirror_sync_ones():
    assert hasattr(sessionstore.Store, "__enter__") and hasattr(aio.AsyncStore, "__aenter__")
    assert hasattr(sessionstore.SessionWriter, "__enter__")
    assert hasattr(aio.AsyncSessionWriter, "__aenter__")


@pytest.mark.parametrize(("sync", "async_"), PAIRS[:3], ids=[s.__name__ for s, _ in PAIRS[:3]])
def test_sync_and_async_objects_travel_alike(sync, async_):
    """Both twins pickle (as their store's URL, namespace and options)."""
    assert "__reduce__" in vars(sync) and "__reduce__" in vars(async_)
