"""The async API mirrors the sync API: same names, same parameters, I/O as coroutines."""

from __future__ import annotations

import asyncio
import inspect
import time

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


# Down to the backends ------------------------------------------------------------------------

from sessionstore.contracts import EventBackend, ValueBackend  # noqa: E402
from sessionstore.keys import ValueKey  # noqa: E402
from sessionstore.redis import open_redis  # noqa: E402
from sessionstore.redis.events import AsyncRedisEvents, RedisEvents  # noqa: E402
from sessionstore.redis.values import AsyncRedisValues, RedisValues  # noqa: E402

BACKEND_PAIRS = [
    (ValueBackend, RedisValues, AsyncRedisValues),
    (EventBackend, RedisEvents, AsyncRedisEvents),
]
BACKEND_IDS = ["values", "events"]


def contract_methods(contract: type) -> list[str]:
    return [
        name
        for name, member in inspect.getmembers(contract, inspect.isfunction)
        if not name.startswith("_")
    ]


@pytest.mark.parametrize(("contract", "sync", "async_"), BACKEND_PAIRS, ids=BACKEND_IDS)
def test_redis_backends_have_the_contracts_parameters(contract, sync, async_):
    for name in contract_methods(contract):
        assert parameters(getattr(sync, name)) == parameters(getattr(contract, name)), name
        assert parameters(getattr(async_, name)) == parameters(getattr(contract, name)), name


@pytest.mark.parametrize(("contract", "sync", "async_"), BACKEND_PAIRS, ids=BACKEND_IDS)
def test_sync_and_async_redis_backends_run_one_implementation(contract, sync, async_):
    """Each Redis backend method that does I/O is one function shared by the sync and the
    async backend: only the client under it differs, so the two cannot drift apart."""
    no_io = {"prepare", "close", "locate"}
    io_methods = [name for name in contract_methods(contract) if name not in no_io]
    assert io_methods
    for name in io_methods:
        assert getattr(sync, name) is getattr(async_, name), name


def test_async_redis_backend_methods_return_awaitables_without_io():
    """Calling an async backend method only builds a coroutine: the I/O runs when it is
    awaited (the URL names a closed port and nothing is awaited here)."""
    backends = open_redis("redis://127.0.0.1:9/0?cluster=no", "parity")
    pair = backends.make_async()
    key = ValueKey("parity", "S", "st", "ex", "1h", "backtest")
    calls = [
        pair.values.read(key),
        pair.values.write(key, b"\x01", 0),
        pair.values.scan("parity"),
        pair.events.read("s"),
        pair.events.info("s"),
        pair.events.list(),
    ]
    for call in calls:
        assert inspect.isawaitable(call)
        call.close()
    backends.close()


def test_redis_locate_does_no_io():
    """``locate`` is documented to do no I/O: it answers at once on a server that is
    down, sync and async."""
    dead = "redis://127.0.0.1:9/0?durability=none"
    with sessionstore.connect(dead, "parity", timeout=2) as store:
        started = time.monotonic()
        assert store.events.locate("s") is None
        assert time.monotonic() - started < 0.5

    async def scenario() -> None:
        async with aio.connect(dead, "parity", timeout=2) as store:
            assert await store.events.locate("s") is None

    started = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - started < 0.5
