"""Session values on Redis: ``get_data``, ``set_data`` and ``update`` against raw redis-py.

* get_data / set_data: ``session.get_data(when)`` / ``set_data(value, when)`` against
  ``HMGET key v w`` + ``msgpack.unpackb`` (with the same look-ahead comparison of ``w``)
  / ``HSET key v <msgpack> w <when>``, with the same value and the same msgpack options.
* get_data, ?cache=yes, unchanged value: ``session.get_data(when)`` of a value nobody
  changes, on a store opened with ``?cache=yes`` (answered from memory, kept true by
  client tracking: each read polls the two tracking sockets, looks the record up, applies
  look-ahead and unpacks a fresh copy of the value), against raw ``HMGET key v w`` +
  ``msgpack.unpackb``; the target is 10x the raw read.
* update: ``session.update(bump, when)`` against the usual optimistic transaction:
  ``WATCH key``, ``HMGET``, unpack, ``bump``, pack, ``MULTI`` / ``HSET`` / ``EXEC``, retried
  on ``WatchError``. In 1 process, and in 4 processes all updating the same value (every
  repetition checks that no increment was lost).
"""

from __future__ import annotations

import uuid
from typing import Any

import msgpack
import redis
from redis.exceptions import WatchError

import sessionstore

from . import workload
from .harness import Result, Sizes, Timed, compare, compare_rates, parallel, result
from .redis_log import NAMESPACE

AREA = "Redis values"
SETTINGS = "Redis, AOF off"
WHEN = workload.T0 + 60_000


def _session(store: sessionstore.Store, tag: str) -> sessionstore.Session:
    return store.session("BTCUSDT", strategy=f"bench-{tag}", exchange="binance", frame="1h")


def _raw_key() -> str:
    return f"raw:val:{{{uuid.uuid4().hex[:12]}}}"


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _unpack(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


def raw_get(client: redis.Redis, key: str, when: int) -> Any:
    payload, stored_when = client.hmget(key, ("v", "w"))
    if payload is None or int(stored_when) > when:
        return None
    return _unpack(payload)


def raw_update(client: redis.Redis, key: str, fn: Any, when: int) -> Any:
    """GET-modify-SET of the hash under WATCH, retried until no other writer intervened."""
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)
                payload, _ = pipe.hmget(key, ("v", "w"))
                new = fn(None if payload is None else _unpack(payload))
                pipe.multi()
                pipe.hset(key, mapping={"v": _pack(new), "w": when})
                pipe.execute()
                return new
            except WatchError:
                continue


def get_set_results(url: str, sizes: Sizes) -> list[Result]:
    calls = sizes.calls
    value = workload.value()
    with sessionstore.connect(url, namespace=NAMESPACE) as store:
        client = redis.Redis.from_url(url)
        try:
            session, key = _session(store, "getset"), _raw_key()
            session.set_data(value, WHEN)
            client.hset(key, mapping={"v": _pack(value), "w": WHEN})
            assert session.get_data(WHEN) == raw_get(client, key, WHEN) == value

            def ours_get() -> Timed:
                def run() -> int:
                    for _ in range(calls):
                        session.get_data(WHEN)
                    return calls

                return run

            def raw_get_side() -> Timed:
                def run() -> int:
                    for _ in range(calls):
                        raw_get(client, key, WHEN)
                    return calls

                return run

            def ours_set() -> Timed:
                def run() -> int:
                    for offset in range(calls):
                        session.set_data(value, WHEN + offset)
                    return calls

                return run

            def raw_set() -> Timed:
                def run() -> int:
                    for offset in range(calls):
                        client.hset(key, mapping={"v": _pack(value), "w": WHEN + offset})
                    return calls

                return run

            get_samples = compare(ours_get, raw_get_side, sizes.reps, sizes.blocks)
            set_samples = compare(ours_set, raw_set, sizes.reps, sizes.blocks)
            cached_samples = _cached_get_samples(url, value, client, key, sizes)
        finally:
            client.close()
    return [
        result(AREA, "get_data", "raw HMGET + msgpack", get_samples, "ops/s", 0.90, SETTINGS),
        result(
            AREA,
            "get_data, ?cache=yes, unchanged value",
            "raw HMGET + msgpack",
            cached_samples,
            "ops/s",
            10.0,
            SETTINGS,
        ),
        result(AREA, "set_data", "raw HSET of msgpack", set_samples, "ops/s", 0.90, SETTINGS),
    ]


def _cached_get_samples(
    url: str, value: Any, client: redis.Redis, key: str, sizes: Sizes
) -> tuple[list[float], list[float]]:
    calls = sizes.calls
    cached_url = url + ("&" if "?" in url else "?") + "cache=yes"
    with sessionstore.connect(cached_url, namespace=NAMESPACE) as store:
        session = _session(store, "cached")
        session.set_data(value, WHEN)
        assert session.get_data(WHEN) == value

        def ours() -> Timed:
            def run() -> int:
                for _ in range(calls):
                    session.get_data(WHEN)
                return calls

            return run

        def raw() -> Timed:
            def run() -> int:
                for _ in range(calls):
                    raw_get(client, key, WHEN)
                return calls

            return run

        return compare(ours, raw, sizes.reps, sizes.blocks)


# update ------------------------------------------------------------------------------------

UPDATE_BASELINE = "raw WATCH / MULTI / EXEC, retried"


def _ours_updates(session: sessionstore.Session, count: int) -> Timed:
    def run() -> int:
        for _ in range(count):
            session.update(workload.bump, WHEN)
        return count

    return run


def _raw_updates(client: redis.Redis, key: str, count: int) -> Timed:
    def run() -> int:
        for _ in range(count):
            raw_update(client, key, workload.bump, WHEN)
        return count

    return run


def update_results(url: str, sizes: Sizes) -> list[Result]:
    """``update`` in 1 process (interleaved blocks), then in 4 processes on one value."""
    checker = redis.Redis.from_url(url)
    store = sessionstore.connect(url, namespace=NAMESPACE)
    try:
        session, key = _session(store, uuid.uuid4().hex[:12]), _raw_key()
        single = compare(
            lambda: _ours_updates(session, sizes.updates),
            lambda: _raw_updates(checker, key, sizes.updates),
            sizes.reps,
            sizes.blocks,
        )
        done = sizes.updates * (1 + sizes.reps * sizes.blocks)
        assert session.get_data(WHEN)["counter"] == raw_get(checker, key, WHEN)["counter"] == done
        count = sizes.parallel_updates

        def ours() -> float:
            tag = uuid.uuid4().hex[:12]

            def job(index: int) -> Timed:
                mine = _session(sessionstore.connect(url, namespace=NAMESPACE), tag)
                mine.get_data(WHEN)  # connect
                return _ours_updates(mine, count)

            rate = parallel(job, 4)
            assert _session(store, tag).get_data(WHEN)["counter"] == 4 * count
            return rate

        def raw() -> float:
            key = _raw_key()

            def job(index: int) -> Timed:
                client = redis.Redis.from_url(url)
                client.ping()
                return _raw_updates(client, key, count)

            rate = parallel(job, 4)
            assert raw_get(checker, key, WHEN)["counter"] == 4 * count
            return rate

        four = compare_rates(ours, raw, sizes.reps)
    finally:
        store.close()
        checker.close()
    return [
        result(AREA, "update, 1 process", UPDATE_BASELINE, single, "ops/s", 1.2, SETTINGS),
        result(
            AREA,
            "update, 4 processes on the same value",
            UPDATE_BASELINE,
            four,
            "ops/s",
            1.2,
            SETTINGS + "; every repetition checks no increment was lost",
        ),
    ]
