"""The writer slots of a Redis value backend (sessionstore.redis.writerslots): a
slot serves one call at a time, numbers its calls upwards, goes back to the pool only
after a call with a known outcome, and is never shared with a forked child."""

from __future__ import annotations

import os
import threading
import uuid

import pytest
import redis

from sessionstore import keys
from sessionstore.errors import (
    CorruptDataError,
    InvalidArgumentError,
    NotReplicatedError,
    StoreUnavailableError,
)
from sessionstore.keys import ValueKey
from sessionstore.redis import open_redis
from sessionstore.redis.writerslots import WriterSlots


def test_a_slot_numbers_its_calls_upwards_and_serves_one_call_at_a_time():
    slots = WriterSlots()
    with slots.take() as first, slots.take() as second:  # the second while the first runs
        assert second[0] != first[0]
    with slots.take() as again:
        assert again[0] in (first[0], second[0])
        assert again[1] == 2
    assert len(slots.free) == 2


def test_a_slot_whose_call_raised_is_never_used_again():
    slots = WriterSlots()
    with slots.take() as used:
        pass
    with pytest.raises(ConnectionError), slots.take() as lost:
        assert lost == (used[0], 2)
        raise ConnectionError("the reply was lost")
    assert slots.free == []
    with slots.take() as fresh:
        assert fresh[0] != used[0] and fresh[1] == 1


@pytest.mark.parametrize(
    ("error", "kept"),
    [
        (StoreUnavailableError("the reply was lost"), False),
        (NotReplicatedError("applied, one replica of two confirmed"), True),
        (CorruptDataError("ss:ns:val:{k}", "not msgpack"), True),
        (InvalidArgumentError("refused before anything was sent"), True),
        (KeyboardInterrupt(), False),
    ],
    ids=["unavailable", "not-replicated", "corrupt", "invalid", "interrupted"],
)
def test_a_slot_goes_back_exactly_when_its_calls_outcome_is_known(error, kept):
    slots = WriterSlots()
    with pytest.raises(type(error)), slots.take() as mark:
        raise error
    assert slots.free == ([[mark[0], 1]] if kept else [])


def test_a_process_whose_fork_hooks_did_not_run_starts_a_pool_of_its_own(monkeypatch):
    slots = WriterSlots()
    with slots.take() as inherited:
        pass
    outer = slots.take()  # in flight when the process "forks"
    outer_mark = outer.__enter__()
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as a child whose hooks never ran
    with slots.take() as mine:
        assert mine[0] not in (inherited[0], outer_mark[0]) and mine[1] == 1
    outer.__exit__(None, None, None)  # the parent's call ends in the child
    assert [slot[0] for slot in slots.free] == [mine[0]]


def test_threads_never_share_a_slot_in_flight():
    slots = WriterSlots()
    seen: list[tuple[str, int]] = []
    barrier = threading.Barrier(8)

    def call() -> None:
        for n in range(200):
            with slots.take() as mark:
                seen.append(mark)
                if n == 0:  # all eight in flight at once
                    barrier.wait(10)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == len(seen) == 1600  # no slot and number was sent twice


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_with_no_slot_of_its_parent():
    slots = WriterSlots()
    with slots.take():
        pass
    assert len(slots.free) == 1
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if slots.free == [] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(slots.free) == 1


def test_a_backend_writing_from_one_thread_keeps_one_record_per_value(
    redis_server,
):
    namespace = f"slots-{uuid.uuid4().hex[:8]}"
    key = ValueKey(namespace, "BTCUSDT", "s", "binance", "1h", "backtest")
    store = open_redis(redis_server.url, namespace)
    client = redis.Redis(port=redis_server.port)
    try:
        for n in range(50):
            store.values.write(key, bytes([n]), n)
        store.values.write_version(key, b"\x01", 1, None)
        assert store.values.forget(key) is True
        [(slot, record)] = client.hgetall(keys.seq_key(key)).items()
        assert record.split(b":")[0] == b"52" and record.endswith(b":1")
    finally:
        store.close()
        client.close()
