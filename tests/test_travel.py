"""Stores, value handles and ``store.events`` travel: pickled as a task argument they
carry the URL, namespace and options, and the receiving process connects on first use.

The pool tests hand a store, handles or an event log to two workers of each engine
(multiprocessing spawn and forkserver, ``ProcessPoolExecutor`` with spawn, joblib's loky,
a Dask ``LocalCluster`` of worker processes) on the file, SQLite and Redis backends;
every worker counts through one shared value and writes its own, and the parent finds
every write and the exact count.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import sessionstore
from sessionstore import (
    SessionDisposedError,
    SessionEvent,
    SessionHeader,
    SessionStoreError,
    StoreClosedError,
    StoreUnavailableError,
    aio,
)

T0 = 1_718_000_000_000
COUNTER = ("COUNTER", "travel", "test", "1h")
WORKERS = 2
TIMES = 25
SECRET = "travel-secret-9f3c"

Runner = Callable[[Callable[..., Any], list[tuple[Any, ...]]], list[Any]]


# -- what the workers run (module level: the pools import it by name) ----------------


def own_key(worker: int) -> tuple[str, str, str, str]:
    return (f"W{worker}", "travel", "test", "1h")


def count(counter: sessionstore.Session) -> None:
    for _ in range(TIMES):
        counter.update(lambda v: (v or 0) + 1, T0)


def work_with_store(store: sessionstore.Store, worker: int) -> tuple[int, int]:
    count(store.session(*COUNTER))
    store.session(*own_key(worker)).set_data({"worker": worker, "pid": os.getpid()}, T0)
    return worker, os.getpid()


def work_with_handles(
    handles: tuple[sessionstore.Session, sessionstore.Session], worker: int
) -> tuple[int, int]:
    counter, own = handles
    assert counter._owner is own._owner, "handles unpickled together share one store"
    count(counter)
    own.set_data({"worker": worker, "pid": os.getpid()}, T0)
    return worker, os.getpid()


def work_with_events(
    parts: tuple[sessionstore.EventLog, sessionstore.Session], worker: int
) -> tuple[int, int]:
    events, counter = parts
    count(counter)
    session_id = f"w-{worker}"
    events.create(SessionHeader(id=session_id))
    events.append(
        session_id,
        [SessionEvent(seq=0, type="worker", time=T0, data={"worker": worker, "pid": os.getpid()})],
    )
    return worker, os.getpid()


def use_disposed(handle: sessionstore.Session) -> str:
    try:
        handle.get_data(T0)
    except SessionDisposedError as exc:
        return type(exc).__name__
    return "usable"


# -- the engines ----------------------------------------------------------------------


def _multiprocessing(method: str) -> Iterator[Runner]:
    with multiprocessing.get_context(method).Pool(WORKERS) as pool:
        yield lambda fn, args: pool.starmap(fn, args)


def _executor() -> Iterator[Runner]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(WORKERS, mp_context=context) as pool:
        yield lambda fn, args: list(pool.map(fn, *zip(*args, strict=True)))


def _joblib() -> Iterator[Runner]:
    import joblib

    with joblib.Parallel(n_jobs=WORKERS, backend="loky") as parallel:
        yield lambda fn, args: parallel(joblib.delayed(fn)(*a) for a in args)


def _dask() -> Iterator[Runner]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=WORKERS,
            processes=True,
            threads_per_worker=1,
            dashboard_address=":0",  # a free port: clusters of parallel runs never collide
            silence_logs=40,
        ) as cluster,
        Client(cluster) as client,
    ):

        def run(fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> list[Any]:
            futures = client.map(fn, *zip(*args, strict=True), pure=False)
            return client.gather(futures)

        yield run


ENGINES: dict[str, Callable[[], Iterator[Runner]]] = {
    "spawn": lambda: _multiprocessing("spawn"),
    "forkserver": lambda: _multiprocessing("forkserver"),
    "executor-spawn": _executor,
    "joblib-loky": _joblib,
    "dask": _dask,
}


@pytest.fixture(scope="module", params=list(ENGINES))
def runner(request: pytest.FixtureRequest) -> Iterator[Runner]:
    yield from ENGINES[request.param]()


@pytest.fixture(params=["file", "sqlite", "redis"])
def shared_url(request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001
    from conftest import url_for

    return url_for(request.param, request, tmp_path)


def task_args(kind: str, store: sessionstore.Store) -> tuple[Callable[..., Any], list[Any]]:
    if kind == "store":
        return work_with_store, [(store, n) for n in range(WORKERS)]
    if kind == "handles":
        counter = store.session(*COUNTER)
        return work_with_handles, [
            ((counter, store.session(*own_key(n))), n) for n in range(WORKERS)
        ]
    return work_with_events, [((store.events, store.session(*COUNTER)), n) for n in range(WORKERS)]


# -- every engine, every shared backend -----------------------------------------------


@pytest.mark.parametrize("kind", ["store", "handles", "events"])
def test_workers_share_what_a_pickled_store_reaches(runner, shared_url, namespace, kind):
    with sessionstore.connect(shared_url, namespace) as store:
        # The parent opens the store first, so the workers find a SQLite file whose
        # schema exists: what is under test is the travel, not concurrent creation.
        assert store.list_values() == []
        fn, args = task_args(kind, store)
        done = runner(fn, args)
        assert sorted(worker for worker, _ in done) == list(range(WORKERS))
        assert all(pid != os.getpid() for _, pid in done), "the work ran in other processes"
        assert store.session(*COUNTER).get_data(T0) == WORKERS * TIMES
        pids = dict(done)
        for n in range(WORKERS):
            if kind == "events":
                (event,) = store.events.load(f"w-{n}").events
                assert event.data == {"worker": n, "pid": pids[n]}
            else:
                assert store.session(*own_key(n)).get_data(T0) == {"worker": n, "pid": pids[n]}


@pytest.fixture(scope="module")
def spawn_pool() -> Iterator[Runner]:
    yield from _multiprocessing("spawn")


def test_a_disposed_handle_arrives_disposed(spawn_pool, tmp_path):
    with sessionstore.connect(tmp_path.as_uri(), "t") as store:
        handle = store.session(*COUNTER)
        handle.dispose()
        assert spawn_pool(use_disposed, [(handle,)]) == ["SessionDisposedError"]


# -- what a pickle carries, in one process --------------------------------------------


def redis_url_with_password(port: int = 1) -> str:
    return f"redis://app:{SECRET}@127.0.0.1:{port}/0?durability=none"


def test_a_store_pickles_as_its_url_namespace_and_options():
    store = sessionstore.connect(redis_url_with_password(), "ns", timeout=0.2, ttl=30)
    copy = pickle.loads(pickle.dumps(store))
    assert isinstance(copy, sessionstore.Store) and copy is not store
    assert (copy.url, copy.namespace) == (store.url, "ns")
    assert copy._args == store._args
    assert (copy._args.timeout, copy._args.ttl) == (0.2, 30)
    assert copy.events._ttl_ms == 30_000


def test_the_pickle_carries_the_password_and_no_repr_or_error_shows_it():
    store = sessionstore.connect(redis_url_with_password(), "ns", timeout=0.2)
    handle = store.session(*COUNTER)
    data = pickle.dumps((store, handle, store.events))
    assert SECRET.encode() in data, "the receiver needs it to connect"
    copy, copied_handle, _ = pickle.loads(data)
    for shown in (repr(copy), str(copy), copy.url, repr(copy._args), repr(copied_handle)):
        assert SECRET not in shown
    with pytest.raises(StoreUnavailableError) as raised:
        copied_handle.get_data(T0)  # port 1: nothing listens
    assert SECRET not in str(raised.value) and SECRET not in repr(raised.value)


def test_unpickling_does_no_io():
    store = sessionstore.connect(redis_url_with_password(), "ns", timeout=0.2)
    copy = pickle.loads(pickle.dumps(store))  # nothing listens on port 1: no error yet
    with pytest.raises(StoreUnavailableError):
        copy.session(*COUNTER).get_data(T0)


def test_handles_unpickled_together_share_one_store(tmp_path):
    with sessionstore.connect(tmp_path.as_uri(), "ns") as store:
        a, b, events = pickle.loads(
            pickle.dumps((store.session(*COUNTER), store.session(*own_key(0)), store.events))
        )
        assert a._owner is b._owner and events is a._owner.events
        assert a._owner is not store


def test_a_handle_keeps_its_mode_history_and_retention(tmp_path):
    with sessionstore.connect(tmp_path.as_uri(), "ns") as store:
        handle = store.session(*COUNTER, mode="live", history=True, max_versions=3, ttl=60)
        state = pickle.loads(pickle.dumps(handle))._state
        assert (state.key, state.history, state.max_versions, state.ttl_ms) == (
            handle._state.key,
            True,
            3,
            60_000,
        )
        handle.set_data(1, T0)
        assert pickle.loads(pickle.dumps(handle)).get_data(T0) == 1


def test_a_disposed_handle_stays_disposed(tmp_path):
    with sessionstore.connect(tmp_path.as_uri(), "ns") as store:
        handle = store.session(*COUNTER)
        handle.dispose()
        with pytest.raises(SessionDisposedError):
            pickle.loads(pickle.dumps(handle)).get_data(T0)


def test_a_closed_store_arrives_closed(tmp_path):
    store = sessionstore.connect(tmp_path.as_uri(), "ns")
    handle = store.session(*COUNTER)
    store.close()
    copy, copied_handle = pickle.loads(pickle.dumps((store, handle)))
    with pytest.raises(StoreClosedError):
        copy.session(*COUNTER)
    with pytest.raises(StoreClosedError):
        copied_handle.get_data(T0)


@pytest.mark.parametrize("what", ["store", "handle", "events"])
def test_a_memory_store_refuses_to_travel(what):
    store = sessionstore.connect("memory://", "ns")
    target = {"store": store, "handle": store.session(*COUNTER), "events": store.events}[what]
    with pytest.raises(SessionStoreError, match="memory:// store cannot be pickled"):
        pickle.dumps(target)


def test_a_relative_path_travels_as_an_absolute_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for url, expected in [
        ("store", (tmp_path / "store").as_uri()),
        ("sqlite:///store.db", f"sqlite:///{tmp_path / 'store.db'}"),
    ]:
        copy = pickle.loads(pickle.dumps(sessionstore.connect(url, "ns")))
        assert copy._args.url == expected


def test_an_async_store_and_its_handles_travel(tmp_path):
    store = aio.connect(f"sqlite:///{tmp_path / 'a.db'}", "ns", ttl=30)
    copy, handle, events = pickle.loads(
        pickle.dumps((store, store.session(*COUNTER), store.events))
    )
    assert isinstance(copy, aio.AsyncStore) and isinstance(handle, aio.AsyncSession)
    assert handle._owner is copy and events is copy.events and events._ttl_ms == 30_000

    async def scenario() -> Any:
        await store.session(*COUNTER).set_data("from the sender", T0)
        seen = await handle.get_data(T0)
        await copy.close()
        await store.close()
        return seen

    assert asyncio.run(scenario()) == "from the sender"
    with pytest.raises(SessionStoreError, match="memory://"):
        pickle.dumps(aio.connect("memory://").session(*COUNTER))
    closed = pickle.loads(pickle.dumps(copy))
    with pytest.raises(StoreClosedError):
        closed.session(*COUNTER)
