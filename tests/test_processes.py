"""Worker processes share one store: fork (children keep using the parent's store) and
spawn (workers connect by URL), for every backend that can be shared."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import sessionstore
from sessionstore import SeqConflictError, SessionEvent, SessionHeader

T0 = 1_718_000_000_000
SHARED = ["file", "sqlite", "redis"]
KEY = ("BTCUSDT", "llm-momentum", "binance", "1h")

_INHERITED: Any = None


def increment_by_url(url: str, namespace: str, times: int) -> int:
    with sessionstore.connect(url, namespace) as store:
        session = store.session(*KEY)
        for _ in range(times):
            session.update(lambda v: (v or 0) + 1, T0)
    return times


def increment_inherited(times: int) -> int:
    session = _INHERITED.session(*KEY)
    for _ in range(times):
        session.update(lambda v: (v or 0) + 1, T0)
    return times


def append_by_url(url: str, namespace: str, worker: int, count: int) -> list[int]:
    """Append ``count`` events, retrying on conflict; return the seqs this worker got."""
    mine = []
    with sessionstore.connect(url, namespace) as store:
        for n in range(count):
            while True:
                next_seq = len(store.events.read_from("shared", 0))
                event = SessionEvent(
                    seq=next_seq, type="work", time=T0, data={"worker": worker, "n": n}
                )
                try:
                    store.events.append("shared", [event])
                except SeqConflictError:
                    continue
                mine.append(next_seq)
                break
    return mine


@pytest.fixture(params=SHARED)
def shared_url(request, tmp_path):
    from conftest import url_for

    return url_for(request.param, request, tmp_path)


@pytest.fixture(scope="module")
def spawned() -> Iterator[ProcessPoolExecutor]:
    """One pool of 4 spawned workers for the module: each test's 4 calls still run in 4
    processes at once, each connecting by URL (and closing its store when done), without
    paying their start-up again."""
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.mark.slow
def test_four_spawned_workers_lose_no_update(shared_url, namespace, spawned):
    done = list(spawned.map(increment_by_url, [shared_url] * 4, [namespace] * 4, [500] * 4))
    assert sum(done) == 2000
    with sessionstore.connect(shared_url, namespace) as store:
        assert store.session(*KEY).get_data(T0) == 2000


@pytest.mark.slow
def test_forked_workers_keep_using_the_parents_store(shared_url, namespace):
    global _INHERITED
    store = sessionstore.connect(shared_url, namespace)
    session = store.session(*KEY)
    session.set_data(0, T0)
    assert session.get_data(T0) == 0
    _INHERITED = store
    try:
        with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("fork")) as pool:
            done = list(pool.map(increment_inherited, [100] * 4))
        assert sum(done) == 400
        assert session.get_data(T0) == 400
        assert session.update(lambda v: v + 1, T0) == 401
    finally:
        _INHERITED = None
        store.close()


@pytest.mark.slow
def test_four_processes_appending_to_one_session_stay_contiguous(shared_url, namespace, spawned):
    with sessionstore.connect(shared_url, namespace) as store:
        store.events.create(SessionHeader(id="shared"))
        store.events.append("shared", [SessionEvent(seq=0, type="start", time=T0, data={})])
    results = list(
        spawned.map(append_by_url, [shared_url] * 4, [namespace] * 4, range(4), [40] * 4)
    )
    with sessionstore.connect(shared_url, namespace) as store:
        events = store.events.load("shared").events
    assert [e.seq for e in events] == list(range(161))
    assert sorted(s for seqs in results for s in seqs) == list(range(1, 161))
    for worker in range(4):
        ns = [e.data["n"] for e in events if e.data.get("worker") == worker]
        assert ns == list(range(40))


# --- a history shared by worker processes: put, get_or_compute ---------------------------

CANDLE = 3_600_000
CANDLES = 24
SYMBOLS = ("AAAUSDT", "BBBUSDT")


def candle_answer(symbol: str, index: int) -> dict[str, Any]:
    return {"symbol": symbol, "candle": index}


def put_candles_by_url(url: str, namespace: str, worker: int) -> int:
    """Put every candle of ``SYMBOLS[0]``, in an order of this worker's own."""
    order = list(range(CANDLES))
    random.Random(worker).shuffle(order)
    with sessionstore.connect(url, namespace) as store:
        history = store.session(SYMBOLS[0], *KEY[1:], history=True)
        for index in order:
            history.put(candle_answer(SYMBOLS[0], index), T0 + index * CANDLE)
    return len(order)


def compute_candles_by_url(url: str, namespace: str, worker: int) -> tuple[int, bool]:
    """``get_or_compute`` every (symbol, candle) in an order of this worker's own; (how
    many times this worker's fn ran, whether every answer was the right one)."""
    pairs = [(symbol, index) for symbol in SYMBOLS for index in range(CANDLES)]
    random.Random(worker).shuffle(pairs)
    calls = 0
    right = True
    with sessionstore.connect(url, namespace) as store:
        for symbol, index in pairs:
            history = store.session(symbol, *KEY[1:], history=True)

            def model(symbol: str = symbol, index: int = index) -> dict[str, Any]:
                nonlocal calls
                calls += 1
                return candle_answer(symbol, index)

            answer = history.get_or_compute(T0 + index * CANDLE, model)
            right = right and answer == candle_answer(symbol, index)
    return calls, right


def compute_forever(url: str, namespace: str, holding: Any) -> None:
    """Take the lease of the version at T0 and never finish (killed meanwhile)."""
    with sessionstore.connect(url, namespace) as store:
        history = store.session(*KEY, history=True)

        def hang() -> None:
            holding.set()
            while True:
                time.sleep(1)

        history.get_or_compute(T0, hang, lease=0.5)


def compute_fork_and_hang(url: str, namespace: str, holding: Any, forked: Any) -> None:
    """Take the lease of the version at T0, fork a child that outlives this process
    (sleeping), and never finish (killed meanwhile)."""
    with sessionstore.connect(url, namespace) as store:
        history = store.session(*KEY, history=True)

        def hang() -> None:
            child = os.fork()
            if child == 0:
                time.sleep(60)
                os._exit(0)
            forked.put(child)
            holding.set()
            while True:
                time.sleep(1)

        history.get_or_compute(T0, hang, lease=0.5)


@pytest.mark.slow
def test_spawned_workers_putting_the_same_candles_out_of_order_lose_no_version(
    shared_url, namespace, spawned
):
    done = list(spawned.map(put_candles_by_url, [shared_url] * 4, [namespace] * 4, range(4)))
    assert done == [CANDLES] * 4
    with sessionstore.connect(shared_url, namespace) as store:
        history = store.session(SYMBOLS[0], *KEY[1:], history=True)
        for index in range(CANDLES):
            assert history.get_data(T0 + index * CANDLE) == candle_answer(SYMBOLS[0], index)
            assert history.get_data(T0 + index * CANDLE + CANDLE - 1) == candle_answer(
                SYMBOLS[0], index
            )


@pytest.mark.slow
def test_spawned_workers_compute_each_shared_candle_once(shared_url, namespace, spawned):
    results = list(spawned.map(compute_candles_by_url, [shared_url] * 4, [namespace] * 4, range(4)))
    assert all(right for _, right in results)
    assert sum(calls for calls, _ in results) == len(SYMBOLS) * CANDLES


@pytest.mark.slow
def test_when_the_computing_process_is_killed_one_waiter_computes(shared_url, namespace):
    context = multiprocessing.get_context("spawn")
    holding = context.Event()
    computer = context.Process(target=compute_forever, args=(shared_url, namespace, holding))
    computer.start()
    try:
        assert holding.wait(60)
        calls: list[int] = []
        results: list[Any] = []

        def model() -> str:
            calls.append(1)
            return "recomputed"

        with sessionstore.connect(shared_url, namespace) as store:

            def wait() -> None:
                history = store.session(*KEY, history=True)
                results.append(history.get_or_compute(T0, model, timeout=60))

            waiters = [threading.Thread(target=wait) for _ in range(3)]
            for waiter in waiters:
                waiter.start()
            os.kill(computer.pid, signal.SIGKILL)
            for waiter in waiters:
                waiter.join()
    finally:
        computer.kill()
        computer.join()
    assert results == ["recomputed"] * 3
    assert len(calls) == 1


@pytest.mark.slow
def test_a_lease_ends_with_its_process_not_with_a_child_it_forked(shared_url, namespace):
    context = multiprocessing.get_context("spawn")
    holding, forked = context.Event(), context.Queue()
    computer = context.Process(
        target=compute_fork_and_hang, args=(shared_url, namespace, holding, forked)
    )
    computer.start()
    child = None
    try:
        assert holding.wait(60)
        child = forked.get(timeout=60)
        os.kill(computer.pid, signal.SIGKILL)
        computer.join()
        with sessionstore.connect(shared_url, namespace) as store:
            history = store.session(*KEY, history=True)
            assert history.get_or_compute(T0, lambda: "recomputed", timeout=10) == "recomputed"
    finally:
        computer.kill()
        computer.join()
        if child is not None:
            os.kill(child, signal.SIGKILL)
