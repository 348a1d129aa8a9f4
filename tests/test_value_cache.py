"""``?cache=yes``: value reads answered from memory, kept true by Redis client tracking.

Each test runs its own ``redis-server`` so that ``INFO commandstats`` counts only its calls.
History values are not cached (their read is a script); they stay correct with the cache on.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from support.redis_server import RedisServer

import sessionstore
from sessionstore import InvalidArgumentError

T1 = 1_700_000_000_000
T2 = T1 + 60_000
KEY = ("BTCUSDT", "cache", "binance", "1m")
#: How long an invalidation may take to reach the reading process.
ARRIVAL = 2.0


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=False) as started:
        yield started


def hmget_calls(server: RedisServer) -> int:
    client = redis.Redis(port=server.port)
    try:
        return int(client.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))
    finally:
        client.close()


def eventually(read, expected) -> None:  # noqa: ANN001
    deadline = time.monotonic() + ARRIVAL
    while (found := read()) != expected:
        assert time.monotonic() < deadline, f"still {found!r}, not {expected!r}"
        time.sleep(0.01)


def test_a_repeated_read_of_an_unchanged_value_does_not_reach_the_server(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        before = hmget_calls(server)
        for _ in range(50):
            assert value.get_data(T1) == {"n": 1}
        assert hmget_calls(server) - before == 1


def _write_elsewhere(url: str, n: int) -> None:
    with sessionstore.connect(url, "t-cache") as store:
        store.session(*KEY).set_data({"n": n}, T1)


def test_a_write_by_another_process_invalidates_the_cached_read(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        worker = multiprocessing.get_context("spawn").Process(
            target=_write_elsewhere, args=(server.url, 2)
        )
        worker.start()
        worker.join(30)
        assert worker.exitcode == 0
        eventually(lambda: value.get_data(T1), {"n": 2})
        # A write through this store is seen at once.
        value.set_data({"n": 3}, T1)
        assert value.get_data(T1) == {"n": 3}


def test_a_reconnect_empties_the_cache(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        admin = redis.Redis(port=server.port)
        try:
            # Drop every client connection; then change the value with tracking gone.
            admin.client_kill_filter(_type="normal", skipme=True)
            admin.client_kill_filter(_type="pubsub", skipme=True)
            with sessionstore.connect(server.url, "t-cache") as other:
                other.session(*KEY).set_data({"n": 2}, T1)
        finally:
            admin.close()
        before = hmget_calls(server)
        assert value.get_data(T1) == {"n": 2}
        assert hmget_calls(server) - before == 1


def test_a_restarted_server_empties_the_cache(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache", timeout=1) as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T1)
        assert value.get_data(T1) == {"n": 1}
        server.stop()
        server.start()
        assert value.get_data(T1) is None  # AOF off: the restarted server is empty


def test_look_ahead_applies_to_a_cached_record(server):
    with sessionstore.connect(server.url + "?cache=yes", "t-cache") as store:
        value = store.session(*KEY)
        value.set_data({"n": 1}, T2)
        assert value.get_data(T1) is None  # fresh
        assert value.get_data(T1) is None  # cached
        assert value.get_data(T2) == {"n": 1}
        before = hmget_calls(server)
        assert value.get_data(T1) is None and value.get_data(T2) == {"n": 1}
        assert hmget_calls(server) == before


def test_history_values_are_not_cached_and_stay_correct(server):
    url = server.url + "?cache=yes"
    with (
        sessionstore.connect(url, "t-cache") as store,
        sessionstore.connect(server.url, "t-cache") as other,
    ):
        mine = store.session(*KEY, history=True)
        theirs = other.session(*KEY, history=True)
        mine.set_data({"n": 1}, T1)
        assert mine.get_data(T2) == {"n": 1}
        theirs.set_data({"n": 2}, T2)
        assert mine.get_data(T2) == {"n": 2} and mine.get_data(T1) == {"n": 1}


def test_the_async_client_refuses_the_cache(server):
    from sessionstore import aio

    with pytest.raises(InvalidArgumentError, match="cache"):
        store = aio.connect(server.url + "?cache=yes", f"t-{uuid.uuid4().hex[:8]}")
        import asyncio

        asyncio.run(store.session(*KEY).get_data(T1))


def test_a_bad_cache_value_is_refused():
    with pytest.raises(InvalidArgumentError, match="cache"):
        sessionstore.connect("redis://127.0.0.1:1/0?cache=maybe", "t-cache")


def test_connect_cache_true_is_the_url_option_and_travels(server, tmp_path):
    import pickle

    with sessionstore.connect(server.url, "t-cache", cache=True) as store:
        value = store.session(*KEY)
        value.set_data({"n": 2}, T1)
        before = hmget_calls(server)
        for _ in range(20):
            assert value.get_data(T1) == {"n": 2}
        assert hmget_calls(server) - before == 1
        with pickle.loads(pickle.dumps(store)) as travelled:
            handle = travelled.session(*KEY)
            before = hmget_calls(server)
            for _ in range(20):
                assert handle.get_data(T1) == {"n": 2}
            assert hmget_calls(server) - before == 1
    with pytest.raises(InvalidArgumentError, match="cache"):
        sessionstore.connect((tmp_path / "files").as_uri(), cache=True)
    sessionstore.connect((tmp_path / "files").as_uri(), cache=False).close()
