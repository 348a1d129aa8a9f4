"""Part 4 of the fault suite: the Redis server is unavailable.

Three ways, each through the sync and the async API (``sessionstore.aio.connect``):

* nothing listens on the port (connection refused), then a server starts there;
* the server is SIGKILLed mid-session, then restarted on its data dir and port;
* the server hangs (SIGSTOP: connections are accepted, nothing is answered), then
  resumes (SIGCONT).

While it is unavailable every call -- values (plain and history: get, set, update) and
logs (create, append, load, read_from, iter_events, list, delete, writer) -- raises
:class:`StoreUnavailableError`, a :class:`SessionStoreError` with the redis-py error
chained, within the configured ``timeout`` and the client's two retries. Once the server
is back the same store works again, with its data.

No timing is asserted: each call runs under a generous hang guard only (a call that never
returns fails the test instead of hanging the suite); the slowest failure is reported in
the figures.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
from support.redis_server import RedisServer, free_port

import sessionstore
import sessionstore.aio
from sessionstore import SessionHeader, SessionStoreError, StoreUnavailableError

from . import figures
from .figures import figures_run  # noqa: F401 - used by pytestmark
from .test_writer_killed import T0, note

KEY = ("BTCUSDT", "unavailable", "binance", "1m")
TIMEOUT = 0.5
#: A hang guard, not a timing assertion: far above (RETRIES + 1) * timeout + back-off.
GUARD = 30.0
SESSION = "outage"

pytestmark = pytest.mark.usefixtures("figures_run")


def guarded(
    calls: list[tuple[str, Callable[[], Any]]],
) -> list[tuple[str, Any, BaseException | None, float]]:
    """Run every call at once, each in a thread of its own (the store is shared by
    threads); (name, result, error, seconds) for each. Fails if one hangs."""
    boxes: list[dict[str, Any]] = [{} for _ in calls]

    def run(call: Callable[[], Any], box: dict[str, Any]) -> None:
        start = time.monotonic()
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
        box["seconds"] = time.monotonic() - start

    threads = [
        threading.Thread(target=run, args=(call, box), daemon=True)
        for (_, call), box in zip(calls, boxes, strict=True)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + GUARD
    for (name, _), thread in zip(calls, threads, strict=True):
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            pytest.fail(f"{name} did not return within {GUARD} s: it hangs")
    return [
        (name, box.get("result"), box.get("error"), box["seconds"])
        for (name, _), box in zip(calls, boxes, strict=True)
    ]


async def guarded_async(
    calls: list[tuple[str, Callable[[], Awaitable[Any]]]],
) -> list[tuple[str, BaseException | None, float]]:
    """The async flavour of :func:`guarded`: every call at once (gathered)."""

    async def run(name: str, call: Callable[[], Awaitable[Any]]) -> tuple[str, Any, float]:
        start = time.monotonic()
        try:
            await asyncio.wait_for(call(), GUARD)
        except TimeoutError:
            pytest.fail(f"async {name} did not return within {GUARD} s: it hangs")
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            return name, exc, time.monotonic() - start
        return name, None, time.monotonic() - start

    return list(await asyncio.gather(*(run(name, call) for name, call in calls)))


def check_refused(name: str, error: BaseException | None, timeout: float) -> None:
    assert isinstance(error, StoreUnavailableError), f"{name}: {error!r}"
    assert isinstance(error, SessionStoreError)
    assert isinstance(error.__cause__, redis.RedisError), f"{name}: cause {error.__cause__!r}"
    if isinstance(error.__cause__, redis.ConnectionError | redis.TimeoutError):
        assert f"timeout {timeout:g} s" in str(error), str(error)


# --- the calls ---------------------------------------------------------------------------


def sync_calls(store: sessionstore.Store, tag: str) -> list[tuple[str, Callable[[], Any]]]:
    """Every kind of call of the sync API, each one a fresh action."""
    plain = store.session(*KEY)
    history = store.session(*KEY, history=True)
    header = SessionHeader(id=SESSION, created_at=T0)

    def append() -> int:
        next_seq = len(store.events.read_from(SESSION, 0))
        return store.events.append(SESSION, [note(next_seq, f"{tag}-{next_seq}")])

    def writer() -> int:
        with store.events.writer(header) as opened:
            opened.emit("note", {"batch": f"w-{tag}", "batch_size": 1, "index": 0})
            return opened.next_seq

    def scratch() -> None:
        doomed = SessionHeader(id=f"scratch-{tag}", created_at=T0)
        store.events.create(doomed)
        store.events.append(doomed.id, [note(0, "scratch")])
        store.events.delete(doomed.id)

    return [
        ("get_data", lambda: plain.get_data(T0)),
        ("set_data", lambda: plain.set_data({"tag": tag}, T0)),
        ("update", lambda: plain.update(lambda v: {**(v or {}), "updated": tag}, T0)),
        ("history get_data", lambda: history.get_data(T0)),
        ("history set_data", lambda: history.set_data({"tag": tag}, T0)),
        ("history update", lambda: history.update(lambda v: {**(v or {}), "u": tag}, T0)),
        ("events.append", append),
        ("events.load", lambda: store.events.load(SESSION)),
        ("events.read_from", lambda: store.events.read_from(SESSION, 0)),
        ("events.iter_events", lambda: list(store.events.iter_events(SESSION))),
        ("events.list", lambda: store.events.list()),
        ("events.writer", writer),
        ("events.create+append+delete", scratch),
    ]


def async_calls(
    store: sessionstore.aio.AsyncStore, tag: str
) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """The same calls through the async API."""
    plain = store.session(*KEY)
    history = store.session(*KEY, history=True)
    header = SessionHeader(id=SESSION, created_at=T0)

    async def append() -> int:
        next_seq = len(await store.events.read_from(SESSION, 0))
        return await store.events.append(SESSION, [note(next_seq, f"{tag}-{next_seq}")])

    async def writer() -> int:
        opened = await store.events.writer(header)
        async with opened:
            opened.emit("note", {"batch": f"w-{tag}", "batch_size": 1, "index": 0})
            return opened.next_seq

    async def iterate() -> list[Any]:
        return [event async for event in store.events.iter_events(SESSION)]

    async def scratch() -> None:
        doomed = SessionHeader(id=f"scratch-{tag}", created_at=T0)
        await store.events.create(doomed)
        await store.events.append(doomed.id, [note(0, "scratch")])
        await store.events.delete(doomed.id)

    return [
        ("get_data", lambda: plain.get_data(T0)),
        ("set_data", lambda: plain.set_data({"tag": tag}, T0)),
        ("update", lambda: plain.update(lambda v: {**(v or {}), "updated": tag}, T0)),
        ("history get_data", lambda: history.get_data(T0)),
        ("history set_data", lambda: history.set_data({"tag": tag}, T0)),
        ("history update", lambda: history.update(lambda v: {**(v or {}), "u": tag}, T0)),
        ("events.append", append),
        ("events.load", lambda: store.events.load(SESSION)),
        ("events.read_from", lambda: store.events.read_from(SESSION, 0)),
        ("events.iter_events", iterate),
        ("events.list", lambda: store.events.list()),
        ("events.writer", writer),
        ("events.create+append+delete", scratch),
    ]


def start_session(store: sessionstore.Store) -> None:
    store.events.create(SessionHeader(id=SESSION, created_at=T0))
    store.events.append(SESSION, [note(0, "first")])


async def start_session_async(store: sessionstore.aio.AsyncStore) -> None:
    await store.events.create(SessionHeader(id=SESSION, created_at=T0))
    await store.events.append(SESSION, [note(0, "first")])


# --- sync and async drivers --------------------------------------------------------------


def all_refused(store: sessionstore.Store, figure: str, timeout: float = TIMEOUT) -> None:
    """Every call at once fails as unavailable; the slowest is reported as ``figure``."""
    calls = sync_calls(store, f"down-{uuid.uuid4().hex[:6]}")
    outcomes = guarded(calls)
    for name, _, error, _ in outcomes:
        check_refused(name, error, timeout)
    figures.record(
        "unavailable",
        "redis",
        faults=1,
        inputs=len(calls),
        refused=len(calls),
        **{figure: round(max(seconds for *_, seconds in outcomes) * 1000)},
    )


def all_work(store: sessionstore.Store) -> None:
    for name, call in sync_calls(store, f"up-{uuid.uuid4().hex[:6]}"):
        [(_, _, error, _)] = guarded([(name, call)])
        assert error is None, f"{name} failed once the server was back: {error!r}"


async def all_refused_async(
    store: sessionstore.aio.AsyncStore, figure: str, timeout: float = TIMEOUT
) -> None:
    calls = async_calls(store, f"down-{uuid.uuid4().hex[:6]}")
    outcomes = await guarded_async(calls)
    for name, error, _ in outcomes:
        check_refused(f"async {name}", error, timeout)
    figures.record(
        "unavailable",
        "redis",
        faults=1,
        inputs=len(calls),
        refused=len(calls),
        **{figure: round(max(seconds for *_, seconds in outcomes) * 1000)},
    )


async def all_work_async(store: sessionstore.aio.AsyncStore) -> None:
    for name, call in async_calls(store, f"up-{uuid.uuid4().hex[:6]}"):
        [(_, error, _)] = await guarded_async([(name, call)])
        if error is not None:
            raise AssertionError(f"async {name} failed once the server was back") from error


@pytest.fixture
def namespace() -> str:
    return f"down-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def server() -> Iterator[RedisServer]:
    own = RedisServer(durable=True)
    try:
        yield own.start()
    finally:
        if own.process is not None and own.process.poll() is None:
            os.kill(own.process.pid, signal.SIGCONT)
        own.cleanup()


# --- nothing listening -------------------------------------------------------------------


def test_nothing_listening_every_call_is_unavailable_then_works_once_a_server_starts(namespace):
    port = free_port()
    with sessionstore.connect(f"redis://127.0.0.1:{port}/0", namespace, timeout=TIMEOUT) as store:
        all_refused(store, "max_ms_to_fail_first_use")
        with RedisServer(port=port, durable=True):
            start_session(store)
            all_work(store)


def test_nothing_listening_async(namespace):
    port = free_port()

    async def go() -> None:
        url = f"redis://127.0.0.1:{port}/0"
        async with sessionstore.aio.connect(url, namespace, timeout=TIMEOUT) as store:
            await all_refused_async(store, "max_ms_to_fail_first_use")
            started = await asyncio.to_thread(RedisServer(port=port, durable=True).start)
            try:
                await start_session_async(store)
                await all_work_async(store)
            finally:
                await asyncio.to_thread(started.cleanup)

    asyncio.run(go())


# --- killed mid-session ------------------------------------------------------------------


def test_a_server_killed_mid_session_then_restarted(server, namespace):
    with sessionstore.connect(server.url, namespace, timeout=TIMEOUT) as store:
        start_session(store)
        all_work(store)
        before = store.events.read_from(SESSION, 0)
        value = store.session(*KEY).get_data(T0)
        server.kill()
        all_refused(store, "max_ms_to_fail")
        server.start()
        # The same store, no reconnect call: the data is back and calls work again.
        assert store.events.read_from(SESSION, 0) == before
        assert store.session(*KEY).get_data(T0) == value
        all_work(store)


def test_a_server_killed_mid_session_then_restarted_async(server, namespace):
    async def go() -> None:
        async with sessionstore.aio.connect(server.url, namespace, timeout=TIMEOUT) as store:
            await start_session_async(store)
            await all_work_async(store)
            before = await store.events.read_from(SESSION, 0)
            await asyncio.to_thread(server.kill)
            await all_refused_async(store, "max_ms_to_fail")
            await asyncio.to_thread(server.start)
            assert await store.events.read_from(SESSION, 0) == before
            await all_work_async(store)

    asyncio.run(go())


# --- hung --------------------------------------------------------------------------------


def test_a_hung_server_times_out_at_the_configured_timeout_then_recovers(server, namespace):
    timeout = 0.25  # each call waits (RETRIES + 1) * timeout plus back-off, then gives up
    assert server.process is not None
    pid = server.process.pid
    with sessionstore.connect(server.url, namespace, timeout=timeout) as store:
        start_session(store)
        plain = store.session(*KEY)
        plain.set_data({"n": 0}, T0)
        os.kill(pid, signal.SIGSTOP)
        try:
            calls = [
                ("get_data", lambda: plain.get_data(T0)),
                ("set_data", lambda: plain.set_data({"n": 1}, T0)),
                ("events.append", lambda: store.events.append(SESSION, [note(1, "hung")])),
                ("events.load", lambda: store.events.load(SESSION)),
            ]
            outcomes = guarded(calls)
        finally:
            os.kill(pid, signal.SIGCONT)
        for name, _, error, _ in outcomes:
            check_refused(name, error, timeout)
            assert isinstance(error.__cause__, redis.TimeoutError), name
        figures.record(
            "unavailable",
            "redis",
            faults=1,
            inputs=len(calls),
            refused=len(calls),
            max_ms_to_fail_hung=round(max(seconds for *_, seconds in outcomes) * 1000),
        )
        # A call that timed out may still have been applied once the server resumed (the
        # request was sent): retrying it is safe for append and set_data.
        assert store.events.append(SESSION, [note(1, "hung")]) == 2
        plain.set_data({"n": 1}, T0)
        stored = store.events.read_from(SESSION, 0)
        assert [e.data["batch"] for e in stored] == ["first", "hung"]
        assert plain.get_data(T0) == {"n": 1}


def test_a_hung_server_async(server, namespace):
    timeout = 0.25
    assert server.process is not None
    pid = server.process.pid

    async def go() -> None:
        async with sessionstore.aio.connect(server.url, namespace, timeout=timeout) as store:
            await start_session_async(store)
            plain = store.session(*KEY)
            os.kill(pid, signal.SIGSTOP)
            try:
                outcomes = await guarded_async(
                    [
                        ("get_data", lambda: plain.get_data(T0)),
                        ("events.append", lambda: store.events.append(SESSION, [note(1, "h")])),
                    ]
                )
            finally:
                os.kill(pid, signal.SIGCONT)
            for name, error, _ in outcomes:
                check_refused(f"async {name}", error, timeout)
                assert isinstance(error.__cause__, redis.TimeoutError), name
            assert await store.events.append(SESSION, [note(1, "h")]) == 2
            assert len(await store.events.read_from(SESSION, 0)) == 2

    asyncio.run(go())
    figures.record("unavailable", "redis", faults=1, inputs=2, refused=2)
