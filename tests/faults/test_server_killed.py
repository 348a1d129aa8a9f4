"""Part 2 of the fault suite: the Redis server SIGKILLed during appends, then restarted.

The server runs with ``appendonly yes`` and ``appendfsync always`` on a data dir of its
own. A thread appends random batches through one store object as fast as it can; the
test SIGKILLs redis-server at a random moment, checks that calls made meanwhile raise
:class:`StoreUnavailableError` (cause chained), restarts the server on the same dir and
port, and waits for the appender to make progress again. Then:

* every acknowledged event is there (``appendfsync always`` makes an acknowledged append
  durable; an append whose reply was lost in the kill is retried and recognised as
  applied, not written twice);
* the client came back by itself: the same store object, no reconnect call;
* the functions library the client loaded at its first call came back with the AOF: the
  restarted server has it, so no call needed it loaded again.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
import redis
from support.redis_server import RedisServer

import sessionstore
from sessionstore import SessionHeader, StoreUnavailableError
from sessionstore.redis.library import library

from . import figures
from .conftest import iterations
from .figures import figures_run  # noqa: F401 - used by pytestmark
from .test_writer_killed import (
    SESSION,
    T0,
    Workload,
    check_acknowledged,
    check_balanced,
    check_batches,
    check_closers,
    ends_mid_turn,
)

PATIENCE = 30.0
KEY = ("BTCUSDT", "server-killed", "binance", "1m")

pytestmark = pytest.mark.usefixtures("figures_run")


class Appender(threading.Thread):
    """Appends random batches through ``store``; a batch refused as unavailable is
    retried, as is, until it is acknowledged (for up to :data:`PATIENCE` seconds)."""

    def __init__(self, store: sessionstore.Store, seed: int) -> None:
        super().__init__(name="appender", daemon=True)
        self.store = store
        self.rng = random.Random(seed)
        self.work = Workload(f"a{seed}", self.rng)
        self.acks: list[tuple[str, int, int]] = []
        self.refused = 0
        self.error: BaseException | None = None
        self.halt = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        next_seq, number = 0, 0
        try:
            while not self.halt.is_set():
                size = self.rng.randint(1, 20)
                batch_id = f"b{number}"
                batch = self.work.batch(next_seq, size, batch_id)
                deadline = time.monotonic() + PATIENCE
                while True:
                    try:
                        next_seq = self.store.events.append(SESSION, batch)
                        break
                    except StoreUnavailableError as exc:
                        assert isinstance(exc.__cause__, redis.RedisError)
                        self.refused += 1
                        if time.monotonic() > deadline or self.halt.is_set():
                            raise
                        time.sleep(0.01)
                with self.progress:
                    self.acks.append((batch_id, size, next_seq))
                    self.progress.notify_all()
                number += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            with self.progress:
                self.progress.notify_all()

    def wait_for(self, count: int) -> None:
        """Until at least ``count`` batches are acknowledged."""
        with self.progress:
            ok = self.progress.wait_for(
                lambda: len(self.acks) >= count or self.error is not None, PATIENCE
            )
        if self.error is not None:
            raise AssertionError("the appender failed") from self.error
        assert ok, f"no progress within {PATIENCE} s ({len(self.acks)} batches)"


def test_a_killed_server_loses_no_acknowledged_event_and_the_same_store_comes_back():
    kills = iterations(normal=5, ci=3, soak=50)
    rng = random.Random()
    namespace = f"srv-{uuid.uuid4().hex[:10]}"
    server = RedisServer(durable=True).start()
    store = sessionstore.connect(server.url, namespace, timeout=0.5)
    appender = Appender(store, rng.randrange(1 << 30))
    try:
        value = store.session(*KEY)
        value.set_data({"kills": 0}, T0)
        store.events.create(SessionHeader(id=SESSION, created_at=T0))
        appender.start()
        appender.wait_for(1)
        recorded = 0
        for kill in range(kills):
            time.sleep(rng.uniform(0.0, 0.2))
            server.kill()
            # During the outage, every call through the same store is refused, chained.
            refused = 0
            for call in (
                lambda: value.get_data(T0),
                lambda: value.set_data({"kills": -1}, T0),
                lambda: store.events.read_from(SESSION, 0),
            ):
                try:
                    call()
                except StoreUnavailableError as exc:
                    assert isinstance(exc.__cause__, redis.RedisError)
                    refused += 1
            assert refused == 3
            acked_at_kill = len(appender.acks)
            time.sleep(rng.uniform(0.0, 0.1))
            server.start()  # same dir, same port: the AOF is replayed
            appender.wait_for(acked_at_kill + 2)
            client = redis.Redis(port=server.port)
            try:
                # The library was replayed from the AOF with the data.
                assert client.fcall_ro(library().version_function, 0) == library().version.encode()
                assert "cmdstat_function|load" not in client.info("commandstats")
            finally:
                client.close()
            with appender.progress:
                acks = list(appender.acks)
            committed = store.events.read_from(SESSION, 0)
            lost = check_acknowledged(committed, acks)
            figures.record(
                "server_killed",
                "redis",
                kills=1,
                faults=1,
                lost=lost,
                outage_calls=refused,
                acked_events=sum(size for _, size, _ in acks[recorded:]),
            )
            recorded = len(acks)
            assert lost == 0, f"{lost} acknowledged events lost in kill {kill}"
            check_batches(committed)
            # Values come back too, through the same store.
            assert value.get_data(T0) == {"kills": kill}
            assert value.update(lambda v: {"kills": v["kills"] + 1}, T0) == {"kills": kill + 1}
        appender.halt.set()
        appender.join(PATIENCE)
        assert appender.error is None, appender.error
        figures.record("server_killed", "redis", refused_calls=appender.refused)
        # A fresh client sees what the restarted server holds: every acknowledged event,
        # whole batches, and a log that load balances.
        with sessionstore.connect(server.url, namespace, timeout=2) as fresh:
            committed = fresh.events.read_from(SESSION, 0)
            assert check_acknowledged(committed, appender.acks) == 0
            check_batches(committed)
            loaded = fresh.events.load(SESSION)
            check_closers(committed, loaded.events)
            check_balanced(loaded.events)
            assert fresh.session(*KEY).get_data(T0) == {"kills": kills}
    finally:
        appender.halt.set()
        appender.join(PATIENCE)
        store.close()
        server.cleanup()


def test_an_aof_torn_inside_the_last_append_keeps_whole_batches_only():
    """A crash while Redis writes its AOF can only tear the last block, whose reply was
    never sent (``appendfsync always``). A script's writes are one MULTI/EXEC block, and
    Redis (``aof-load-truncated yes``, the default) drops a block cut short: the log comes
    back without that whole batch, never with part of it."""
    rng = random.Random()
    namespace = f"aof-{uuid.uuid4().hex[:10]}"
    server = RedisServer(durable=True).start()
    try:
        work = Workload("aof", rng)
        with sessionstore.connect(server.url, namespace) as store:
            store.events.create(SessionHeader(id=SESSION, created_at=T0))
            committed: list = []
            while len(committed) < 12 or not ends_mid_turn(committed):
                batch = work.batch(len(committed), rng.randint(1, 5), f"b{len(committed)}")
                store.events.append(SESSION, batch)
                committed += batch
            last = work.batch(len(committed), rng.randint(2, 6), "last")
            store.events.append(SESSION, last)
        server.kill()
        [aof] = list((server.dir / "appendonlydir").glob("*.incr.aof"))
        full = aof.read_bytes()
        block = full.rindex(b"*1\r\n$5\r\nMULTI\r\n")
        inside = range(block, len(full))
        offsets = sorted(rng.sample(inside, min(len(inside), iterations(30, 10, len(inside)))))
        for offset in offsets:
            aof.write_bytes(full[:offset])
            server.start()
            with sessionstore.connect(server.url, namespace) as store:
                stored = store.events.read_from(SESSION, 0)
                assert stored == committed, f"AOF cut at {offset}: {len(stored)} events"
                check_closers(committed, store.events.load(SESSION).events)
            server.kill()
        figures.record(
            "server_killed",
            "redis",
            faults=len(offsets),
            inputs=len(offsets),
            acked_events=len(committed),
            torn_aof_restarts=len(offsets),
        )
        aof.write_bytes(full)
        server.start()
        with sessionstore.connect(server.url, namespace) as store:
            assert store.events.read_from(SESSION, 0) == committed + last
    finally:
        server.cleanup()
