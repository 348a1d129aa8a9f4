"""Reads of large batches defer garbage collection, and never leave the collector off
(a LangGraph saver's list of a long thread too).

Every read that builds events (``load``, ``read_from``, ``read_records_from``) on SQLite,
files and Redis: far fewer collections start while it builds 10,000 events than with
deferring switched off; the collector is on after it (after one that failed on damage
too), stays off when the application switched it off (before or during a read), is on
again after threads reading side by side, and in a child forked while a batch deferred it.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import url_for

import sessionstore
from sessionstore import gcdefer
from sessionstore.errors import CorruptLogError

COUNT = 10_000
BACKENDS = ("sqlite", "file", "redis")
READS = ("load", "read_from", "read_records_from")


@pytest.fixture(params=BACKENDS)
def long_log(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[tuple]:
    """A store holding session "long" of COUNT events with nested data (tracked objects)."""
    url = url_for(request.param, request, tmp_path)
    with sessionstore.connect(url, namespace) as store:
        store.events.create(sessionstore.SessionHeader(id="long", created_at=1))
        for first in range(0, COUNT, 1000):
            batch = [
                {"seq": seq, "type": "note", "time": seq, "data": {"items": [seq, {"n": seq}]}}
                for seq in range(first, first + 1000)
            ]
            store.events.append("long", batch)
        yield request.param, url, store


def _collecting() -> bool:
    """Whether collections start on their own (the collector on, a first threshold)."""
    return gc.isenabled() and gc.get_threshold()[0] > 0


def _read(store: sessionstore.Store, how: str) -> int:
    if how == "load":
        return len(store.events.load("long").events)
    return len(getattr(store.events, how)("long", 0))


@contextmanager
def _collections() -> Iterator[list[int]]:
    """The generations of the collections that start within the block."""
    started: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.collect()
    gc.callbacks.append(note)
    try:
        yield started
    finally:
        gc.callbacks.remove(note)


@pytest.mark.parametrize("how", READS)
def test_a_large_read_starts_far_fewer_collections(
    long_log: tuple, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, store = long_log
    with _collections() as deferred:
        assert _read(store, how) == COUNT
    monkeypatch.setattr(gcdefer, "DEFER_FROM", 10**12)
    with _collections() as undeferred:
        assert _read(store, how) == COUNT
    assert _collecting()
    assert len(undeferred) >= 10, undeferred
    assert len(deferred) * 4 <= len(undeferred), (deferred, undeferred)


def test_a_collector_switched_off_stays_off(long_log: tuple) -> None:
    _, _, store = long_log
    gc.disable()
    try:
        for how in READS:
            _read(store, how)
            assert not gc.isenabled(), how
    finally:
        gc.enable()


def test_threads_reading_side_by_side_leave_the_collector_on(long_log: tuple) -> None:
    _, url, store = long_log
    failures: list[BaseException] = []

    def reader(how: str) -> None:
        try:
            with sessionstore.connect(url, store.namespace) as mine:
                for _ in range(2):
                    assert _read(mine, how) == COUNT
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=reader, args=(how,)) for how in READS * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert _collecting()
    assert not gcdefer._deferring


def test_a_read_refused_for_damage_leaves_the_collector_on(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with sessionstore.connect(f"sqlite:///{path}", "ns") as store:
        store.events.create(sessionstore.SessionHeader(id="long", created_at=1))
        for first in range(0, 2000, 1000):
            store.events.append("long", [{"seq": s, "type": "note", "time": s, "data": {}}
                                         for s in range(first, first + 1000)])  # fmt: skip
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM log_events WHERE seq = 1500")
    reopened = sessionstore.connect(f"sqlite:///{path}", "ns")
    with reopened as store, pytest.raises(CorruptLogError) as caught:
        store.events.read_from("long", 0)
    assert caught.value.seq == 1500
    assert _collecting()
    assert not gcdefer._deferring


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_a_batch_defers_collection_has_it_on() -> None:
    read, write = os.pipe()
    with gcdefer.deferred_collection(gcdefer.DEFER_FROM):
        assert not _collecting()
        pid = os.fork()
        if pid == 0:  # the child
            os.write(write, b"on" if _collecting() and not gcdefer._deferring else b"off")
            os._exit(0)
    os.close(write)
    told = os.read(read, 8)
    os.close(read)
    os.waitpid(pid, 0)
    assert told == b"on"
    assert _collecting()


def test_small_batches_leave_the_collector_as_it_is() -> None:
    thresholds = gc.get_threshold()
    with gcdefer.deferred_collection(gcdefer.DEFER_FROM - 1):
        assert _collecting()
    with gcdefer.deferred_collection(gcdefer.DEFER_FROM):
        assert not _collecting()
        with gcdefer.deferred_collection(gcdefer.DEFER_FROM):  # nested: the outer owns it
            assert not _collecting()
        assert not _collecting()
    assert _collecting() and gc.get_threshold() == thresholds


def test_a_collector_switched_off_while_a_batch_defers_collection_stays_off() -> None:
    try:
        with gcdefer.deferred_collection(gcdefer.DEFER_FROM):
            gc.disable()  # the application's, from any thread
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert _collecting()


def test_a_langgraph_list_of_a_long_thread_starts_far_fewer_collections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("langgraph.checkpoint.conformance")
    from integrations.test_langgraph import put, thread

    from sessionstore.integrations.langgraph import SessionStoreSaver

    saver = SessionStoreSaver("memory://")
    parent = None
    for _ in range(1_000):
        parent = put(saver, "t", parent)
    with _collections() as deferred:
        assert len(list(saver.list(thread("t")))) == 1_000
    monkeypatch.setattr(gcdefer, "DEFER_FROM", 10**12)
    with _collections() as undeferred:
        assert len(list(saver.list(thread("t")))) == 1_000
    assert _collecting()
    assert len(undeferred) >= 10, undeferred
    assert len(deferred) * 4 <= len(undeferred), (deferred, undeferred)
