"""Fork safety: a child forked while threads of the parent are inside the store never
deadlocks and keeps working; a writer refuses to work in a child and the parent's
writer carries on.

Every case forks dozens of times while background threads keep the locks busy; each
child must finish its own work before a deadline (it is killed and the test fails
otherwise).
"""

from __future__ import annotations

import faulthandler
import fcntl
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import pytest
from conftest import url_for

import sessionstore
from sessionstore import SessionEvent, SessionHeader, SessionStoreError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

#: Forks per case (more in the long run).
FORKS = 200 if os.environ.get("SESSIONSTORE_SOAK") else 30
#: How long a child may take; a deadlocked one never finishes.
DEADLINE = 20.0
T0 = 1_718_000_000_000
KEY = ("BTCUSDT", "fork", "binance", "1m")


#: Built once: the background threads never run pydantic's validation, whose native
#: code keeps locks of its own that a fork can inherit held (not ours to reset).
TICKS = [SessionEvent(seq=n, type="tick", time=T0) for n in range(100)]
HOT = [SessionHeader(id=f"hot-{n}") for n in range(20)]
PENDING = SessionHeader(id="pending")


def run_in_child(work: Callable[[], None], deadline: float = DEADLINE) -> None:
    """Fork, run ``work`` in the child and wait for it: fail when it raises, and kill it
    and fail when it is still running after ``deadline`` seconds."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 0
        try:
            os.close(read_end)
            # A stuck child reports where it is stuck before the parent kills it.
            faulthandler.dump_traceback_later(deadline - 3, exit=True, file=write_end)
            work()
        except BaseException:  # noqa: BLE001 - reported to the parent through the pipe
            code = 1
            os.write(write_end, traceback.format_exc().encode()[-4000:])
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        end = time.monotonic() + deadline
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > end:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                stuck = os.read(read_end, 16000).decode(errors="replace")
                pytest.fail(f"a forked child did not finish within {deadline} s:\n{stuck}")
            time.sleep(0.002)
        report = os.read(read_end, 16000).decode(errors="replace")
    finally:
        os.close(read_end)
    code = os.waitstatus_to_exitcode(status)
    assert code == 0, f"the forked child failed ({code}), stuck or raising:\n{report}"


@contextmanager
def busy(*jobs: Callable[[int], None]) -> Iterator[list[int]]:
    """Run each job in a background thread, over and over, until the block ends; yields
    how many rounds each thread made (checked: they made progress)."""
    stop = threading.Event()
    rounds = [0] * len(jobs)
    errors: list[BaseException] = []

    def loop(job: Callable[[int], None], slot: int) -> None:
        try:
            while not stop.is_set():
                job(rounds[slot])
                rounds[slot] += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    workers = [
        threading.Thread(target=loop, args=(job, n), daemon=True) for n, job in enumerate(jobs)
    ]
    for worker in workers:
        worker.start()
    try:
        yield rounds
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    assert not errors, errors
    assert all(r > 0 for r in rounds), rounds


def fork_many(child: Callable[[int], None]) -> None:
    for n in range(FORKS):
        run_in_child(lambda n=n: child(n))
        time.sleep(0.001 * (n % 5))  # fork at different points of the threads' work


# --- memory:// used by threads ----------------------------------------------------------


def test_child_forked_while_threads_use_a_memory_store_keeps_working():
    with sessionstore.connect("memory://", "fork") as store:
        hot = store.session(*KEY)

        def values(n: int) -> None:
            hot.set_data({"n": n}, T0 + n)
            hot.update(lambda v: v, T0 + n)

        def logs(n: int) -> None:
            header, seq = HOT[n // 100 % len(HOT)], n % 100
            if seq == 0:
                if n >= 100 * len(HOT):
                    store.events.delete(header.id)
                store.events.create(header)
            store.events.append(header.id, [TICKS[seq]])
            store.events.create(PENDING)
            store.events.delete(PENDING.id)

        def child(n: int) -> None:
            # The parent's threads were mid-operation; the child's copy is whole.
            seen = hot.get_data(T0 + 10**9)
            assert seen is None or set(seen) == {"n"}
            for header in store.events.list()[-2:]:
                events = store.events.read_from(header.id, 0)
                assert [e.seq for e in events] == list(range(len(events)))
            # And its own work goes through every lock the threads were using.
            own = store.session("CHILD", "fork", "binance", "1m")
            own.set_data(n, T0)
            assert own.update(lambda v: v + 1, T0) == n + 1
            store.events.create(SessionHeader(id=f"child-{n}"))
            store.events.append(f"child-{n}", [SessionEvent(seq=0, type="own", time=T0)])
            assert store.events.read_from(f"child-{n}", 0)[0].type == "own"
            store.events.create(SessionHeader(id=f"pending-child-{n}"))

        with busy(values, logs):
            fork_many(child)
        # The parent kept working and saw nothing of the children.
        assert store.session("CHILD", "fork", "binance", "1m").get_data(T0) is None
        assert not [h.id for h in store.events.list() if h.id.startswith("child-")]


# --- Redis used by threads -----------------------------------------------------------------


def test_child_forked_while_threads_use_a_redis_store_keeps_working(redis_server, namespace):
    with sessionstore.connect(redis_server.url, namespace) as store:
        hot = store.session(*KEY)
        hot.set_data(0, T0)

        def values(n: int) -> None:
            hot.update(lambda v: (v or 0) + 1, T0)
            hot.get_data(T0)

        def logs(header: SessionHeader, n: int) -> None:
            if n == 0:
                store.events.create(header)
            store.events.append(header.id, [TICKS[n % 100].model_copy(update={"seq": n})])

        def child(n: int) -> None:
            assert isinstance(hot.get_data(T0), int)
            own = store.session("CHILD", "fork", "binance", "1m")
            own.set_data(n, T0)
            assert own.get_data(T0) == n
            store.events.create(SessionHeader(id=f"child-{n}"))
            store.events.append(f"child-{n}", [SessionEvent(seq=0, type="own", time=T0)])
            assert [e.type for e in store.events.load(f"child-{n}").events] == ["own"]

        jobs = (values, values, partial(logs, HOT[0]), partial(logs, HOT[1]))
        with busy(*jobs) as rounds:
            fork_many(child)
        # The parent's threads kept working: every increment is there.
        assert hot.get_data(T0) == sum(rounds[:2])
        children = {h.id for h in store.events.list() if h.id.startswith("child-")}
        assert children == {f"child-{n}" for n in range(FORKS)}


# --- the write-behind writer ---------------------------------------------------------------


class Untakeable:
    """A lock whose taking fails the test."""

    def acquire(self, *args: object, **kwargs: object) -> bool:
        raise AssertionError("a lock was taken")

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("backend", ["memory", "file", "redis", "sqlite"])
def test_writer_refuses_in_a_forked_child_and_the_parents_carries_on(
    backend, request, tmp_path, namespace
):
    """A child forked while the parent's writer drains gets ``SessionStoreError`` at once
    from ``emit``, ``flush`` and ``close`` of that writer, and nothing of it is written;
    a writer the child opens itself works; the parent's writer loses nothing."""
    url = url_for(backend, request, tmp_path)
    with sessionstore.connect(url, namespace) as store:
        writer = store.events.writer(SessionHeader(id="parent"), window=0.002)
        emitted = 0

        def child(n: int) -> None:
            attempts: list[Callable[[], object]] = [
                lambda: writer.emit("child", {"n": n}),
                writer.flush,
                writer.close,
            ]
            # At once: the refusal takes no lock (one a parent's thread held at the fork
            # would never be released here).
            writer._drain_lock = writer._buffer._lock = Untakeable()
            for attempt in attempts:
                with pytest.raises(SessionStoreError, match="belongs to the process that opened"):
                    attempt()
            with store.events.writer(SessionHeader(id=f"child-{n}")) as own:
                own.emit("own", {"n": n})
            assert [e.type for e in store.events.load(f"child-{n}").events] == ["own"]

        for n in range(FORKS):
            # A burst, then the fork while the background drain writes it out.
            for _ in range(50):
                writer.emit("tick", {"n": emitted})
                emitted += 1
            time.sleep(0.001 * (n % 6))
            run_in_child(lambda n=n: child(n))
        writer.emit("last")
        writer.close()
        events = store.events.load("parent").events
    assert [e.seq for e in events] == list(range(emitted + 1))
    assert [e.data.get("n") for e in events[:-1]] == list(range(emitted))
    assert {e.type for e in events[:-1]} == {"tick"} and events[-1].type == "last"


def test_child_forked_while_another_thread_writes_sqlite_can_write_it(tmp_path, namespace):
    """The fork waits for the write transaction another thread is in: a child forked in
    its middle would inherit SQLite's in-process record of its lock, which nothing in
    the child releases ("database is locked" for every write of the child)."""
    from sessionstore.backends.sqlite_db import Database

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with sessionstore.connect(url, namespace) as store:
        store.session(*KEY).set_data(0, T0)  # the file and its tables exist
    database = Database(tmp_path / "store.db")
    inside, forked = threading.Event(), threading.Event()

    def writing() -> None:
        with database.transaction("held", immediate=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS held (n INTEGER)")
            conn.execute("INSERT INTO held VALUES (1)")
            inside.set()
            forked.wait(0.5)  # the fork waits for this transaction: it never comes

    def child() -> None:
        with sessionstore.connect(url, namespace) as own:
            own.session(*KEY).set_data(1, T0 + 1)
            own.events.create(SessionHeader(id="child"))
            own.events.append("child", [SessionEvent(seq=0, type="note", time=T0)])
            assert own.session(*KEY).get_data(T0 + 1) == 1

    thread = threading.Thread(target=writing)
    thread.start()
    assert inside.wait(30)
    run_in_child(child)
    forked.set()
    thread.join()
    database.close()
    with sessionstore.connect(url, namespace) as store:
        assert [e.type for e in store.events.load("child").events] == ["note"]


def test_threads_forking_at_once_each_let_go_only_of_the_sqlite_lock_they_took(
    tmp_path, monkeypatch
):
    """Two threads' fork handlers on one database: the first takes its write lock, the
    second waits for it in vain (bounded); each after-fork handler lets go only of what
    its own thread took, so the lock is free once both forks are done."""
    from sessionstore.backends import sqlite_db

    monkeypatch.setattr(sqlite_db, "FORK_WAIT", 0.1)
    database = sqlite_db.Database(tmp_path / "store.db")
    first_holds, second_done = threading.Event(), threading.Event()

    def first() -> None:
        database.hold_writes_for_fork()
        first_holds.set()
        assert second_done.wait(30)
        database.release_writes_after_fork()

    def second() -> None:
        assert first_holds.wait(30)
        database.hold_writes_for_fork()  # gives up after FORK_WAIT
        database.release_writes_after_fork()
        assert database.writing.locked(), "the second fork let go of the first's lock"
        second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not database.writing.locked()
    database.close()


@contextmanager
def idle_child() -> Iterator[None]:
    """A child forked now that does nothing (a pool's worker waiting for work) for as
    long as the block runs; killed at its end."""
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_file_lock_held_at_a_fork_is_free_once_its_holder_lets_go(tmp_path):
    """A ``flock`` belongs to its open file description, which a child forked while
    another thread held it shares: the holder unlocks it, closing alone would leave it
    held for as long as the child lives."""
    from sessionstore.backends.dirhandle import Folder
    from sessionstore.backends.fsutil import exclusive_lock

    fd = os.open(tmp_path, os.O_RDONLY)
    folder = Folder(fd, str(tmp_path))
    inside, done = threading.Event(), threading.Event()

    def holding() -> None:
        with exclusive_lock(folder, "key.lock"):
            inside.set()
            done.wait(10)

    thread = threading.Thread(target=holding)
    thread.start()
    assert inside.wait(10)
    with idle_child():
        done.set()
        thread.join(10)
        probe = os.open(tmp_path / "key.lock", os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: no BlockingIOError
        finally:
            os.close(probe)
    os.close(fd)


def test_a_writers_lease_ends_at_its_close_whatever_children_were_forked(tmp_path, namespace):
    url = str(tmp_path / "store")
    header = SessionHeader(id="s", created_at=T0)
    with sessionstore.connect(url, namespace) as store:
        writer = store.events.writer(header)
        writer.emit("note", {})
        with idle_child():
            writer.close()
            assert not store.events.info("s").busy
            with store.events.writer(header) as again:
                again.emit("note", {})
        assert [e.type for e in store.events.load("s").events] == ["note", "note"]


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_a_writer_does_not_travel_and_says_so(backend, tmp_path, namespace):
    import pickle

    url = str(tmp_path / "store") if backend == "file" else f"sqlite:///{tmp_path / 's.db'}"
    with sessionstore.connect(url, namespace) as store:
        writer = store.events.writer(SessionHeader(id="s", created_at=T0))
        with pytest.raises(sessionstore.SessionStoreError, match="'s' stays in the process"):
            pickle.dumps(writer)
        writer.close()
        assert pickle.loads(pickle.dumps(store)).namespace == namespace
