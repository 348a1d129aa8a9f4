"""A writer's lease is fenced for good: a writer paused past its lease, whose lease
another writer took over and released since, never takes it back and never writes
again (real lease expiry, against real servers); and two writers never hold one lease
of a fresh ``memory://`` store, however many threads race to open it."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from conftest import url_for

import sessionstore
from sessionstore import SessionBusyError, SessionHeader


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis"])
def test_a_paused_writer_whose_lease_was_taken_over_never_takes_it_back(
    backend, request, tmp_path, namespace
):
    h = SessionHeader(id="w")
    with sessionstore.connect(url_for(backend, request, tmp_path), namespace) as store:
        a = store.events.writer(h, lease=0.3)
        a.emit("note", {"by": "a"})
        a.flush()
        with a._drain_lock:  # A is paused: nothing renews its lease, which expires
            time.sleep(0.45)
            store.events.writer(h).close()  # B takes it over, writes nothing, releases it
        # A wakes up: its renewal, long due, finds a newer epoch and takes nothing back.
        a.emit("note", {"by": "a", "n": 1})
        for _ in range(2):
            with pytest.raises(SessionBusyError):
                a.flush()
        c = store.events.writer(h)  # A never blocks a new writer
        c.emit("note", {"by": "c"})
        c.close()
        with pytest.raises(SessionBusyError):
            a.close()
        assert [e.data for e in store.events.read_from("w", 0)] == [{"by": "a"}, {"by": "c"}]


#: How many times threads race to take the lease of a fresh memory:// session.
TRIES = 10_000
THREADS = 4


def test_threads_opening_a_fresh_memory_session_never_both_hold_its_lease():
    """The lease table of a fresh ``memory://`` backend is made on first use: the
    threads that race to take the first lease all land in the same one. (Threads switch
    as often as the interpreter allows, so that a race shows within the tries.)"""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        assert count_doubly_held() == 0
    finally:
        sys.setswitchinterval(interval)


def count_doubly_held() -> int:
    """How many of :data:`TRIES` fresh ``memory://`` stores had their lease taken by
    more than one of :data:`THREADS` threads racing to take it first."""
    round_start = threading.Barrier(THREADS + 1)
    round_end = threading.Barrier(THREADS + 1)
    backends: list = [None]
    taken: list[int] = [0] * THREADS

    def racer(n: int) -> None:
        for _ in range(TRIES):
            round_start.wait()
            taken[n] = backends[0].acquire_lease("s", f"owner-{n}", 10_000)
            round_end.wait()

    threads = [threading.Thread(target=racer, args=(n,), daemon=True) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    doubly_held = 0
    for _ in range(TRIES):
        store = sessionstore.connect("memory://", "ns")
        backends[0] = store.events._backend
        round_start.wait()
        round_end.wait()
        doubly_held += sum(1 for epoch in taken if epoch) != 1
        store.close()
    for thread in threads:
        thread.join()
    return doubly_held
