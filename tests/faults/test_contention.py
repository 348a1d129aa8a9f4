"""Contention: many processes on one session log and one value, nothing lost or torn."""

from __future__ import annotations

import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor

import pytest
from conftest import BACKENDS, url_for

import sessionstore
from sessionstore import SeqConflictError, SessionEvent, SessionHeader

from .conftest import iterations

T0 = 1_718_000_000_000
PROCESSES = 8
KEY = ("BTCUSDT", "contention", "binance", "1m")


def append_many(url: str, namespace: str, worker: int, count: int) -> int:
    """Append ``count`` single-event batches, retrying at the seq a conflict names."""
    conflicts = 0
    with sessionstore.connect(url, namespace) as store:
        next_seq = 0
        for n in range(count):
            while True:
                event = SessionEvent(
                    seq=next_seq, type="work", time=T0, data={"worker": worker, "n": n}
                )
                try:
                    next_seq = store.events.append("hot", [event])
                    break
                except SeqConflictError as conflict:
                    conflicts += 1
                    next_seq = conflict.expected
    return conflicts


def increment_many(url: str, namespace: str, count: int) -> None:
    with sessionstore.connect(url, namespace) as store:
        session = store.session(*KEY)
        for _ in range(count):
            session.update(lambda v: (v or 0) + 1, T0)


def write_and_read(url: str, namespace: str, worker: int, count: int) -> int:
    """Last-writer-wins writes at random whens; every read must pair value and when."""
    rng = random.Random(worker)
    torn = 0
    with sessionstore.connect(url, namespace) as store:
        session = store.session(*KEY, mode="live")
        for _ in range(count):
            when = T0 + rng.randrange(1000)
            session.set_data({"worker": worker, "when": when}, when)
            probe = T0 + rng.randrange(1000)
            seen = session.get_data(probe)
            if seen is not None and seen["when"] > probe:
                torn += 1
    return torn


def shared_backends() -> list[str]:
    return [b for b in BACKENDS if b != "memory"]


@pytest.fixture(params=shared_backends())
def url(request, tmp_path):
    return url_for(request.param, request, tmp_path)


def pool() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(PROCESSES, mp_context=multiprocessing.get_context("spawn"))


@pytest.mark.slow
def test_concurrent_appenders_end_contiguous_with_each_workers_order_kept(url, namespace):
    per_worker = iterations(normal=500, ci=500, soak=2000)
    with sessionstore.connect(url, namespace) as store:
        store.events.create(SessionHeader(id="hot"))
        store.events.append("hot", [SessionEvent(seq=0, type="start", time=T0)])
    with pool() as executor:
        list(
            executor.map(
                append_many,
                [url] * PROCESSES,
                [namespace] * PROCESSES,
                range(PROCESSES),
                [per_worker] * PROCESSES,
            )
        )
    with sessionstore.connect(url, namespace) as store:
        events = store.events.load("hot").events
    assert [e.seq for e in events] == list(range(PROCESSES * per_worker + 1))
    for worker in range(PROCESSES):
        assert [e.data["n"] for e in events if e.data.get("worker") == worker] == list(
            range(per_worker)
        )


@pytest.mark.slow
def test_concurrent_updates_lose_no_increment(url, namespace):
    per_worker = iterations(normal=500, ci=500, soak=2000)
    with pool() as executor:
        list(
            executor.map(
                increment_many, [url] * PROCESSES, [namespace] * PROCESSES, [per_worker] * PROCESSES
            )
        )
    with sessionstore.connect(url, namespace) as store:
        assert store.session(*KEY).get_data(T0) == PROCESSES * per_worker


@pytest.mark.slow
def test_last_writer_wins_never_pairs_a_value_with_another_writes_when(url, namespace):
    per_worker = iterations(normal=300, ci=200, soak=2000)
    with pool() as executor:
        torn = list(
            executor.map(
                write_and_read,
                [url] * PROCESSES,
                [namespace] * PROCESSES,
                range(PROCESSES),
                [per_worker] * PROCESSES,
            )
        )
    assert sum(torn) == 0
