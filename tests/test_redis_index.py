"""The namespace index on Redis: listings read it instead of SCAN, the index entry is
written before the data, entries whose data is gone are skipped and cleaned lazily, one
damaged session never hides the others, and old stores are indexed by ``doctor --fix``.

Against real redis-server processes (and the shared Redis Cluster).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import key_slot
from support.redis_sentinel import SYNC_AT_ONCE
from support.redis_server import RedisServer
from support.tcp_proxy import TcpProxy
from test_cli import cli

import sessionstore
import sessionstore.aio
from sessionstore import AccessDeniedError, SessionEvent, SessionHeader, keys
from sessionstore.redis.acl import setuser_args
from sessionstore.redis.boundary import ErrorBoundary
from sessionstore.redis.index import REFRESH_MS, audit, range_steps, rebuild
from sessionstore.redis.library import library
from sessionstore.redis.scan import SCAN_COUNT

T0 = 1_718_000_000_000


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A server of this module's own: its command statistics count only these tests."""
    with RedisServer(durable=False) as own:
        yield own


@pytest.fixture
def ns() -> str:
    return f"ix-{uuid.uuid4().hex[:10]}"


def url_of(server: RedisServer) -> str:
    return server.url + "?durability=none"


def admin(server: RedisServer) -> redis.Redis:
    return redis.Redis(port=server.port)


def fill(store: sessionstore.Store, sessions: int = 3, values: int = 2) -> None:
    for index in range(sessions):
        store.events.create(SessionHeader(id=f"s-{index}", created_at=T0 + index))
        store.events.append(f"s-{index}", [SessionEvent(seq=0, type="note", time=T0)])
    for index in range(values):
        store.session(f"SYM{index}", "s", "e", "1h", history=index % 2 == 1).set_data(index, T0)


def listed(store: sessionstore.Store) -> tuple[list[str], list[str]]:
    return [h.id for h in store.events.list()], [v.symbol for v in store.list_values()]


def scans(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))


def age(client: redis.Redis, index: str, member: str) -> None:
    """Make an index entry look written long ago (older than the grace period)."""
    client.zadd(index, {member: 1})


def test_listing_reads_the_index_without_scan_whatever_the_keyspace(server, ns):
    client = admin(server)
    with client.pipeline(transaction=False) as pipe:
        for index in range(5000):  # another namespace's data: not read by the listing
            pipe.hset(f"ss:other-{ns}:val:{{K{index}:s:e:1h:backtest}}", "w", 1)
        pipe.execute()
    with sessionstore.connect(url_of(server), ns) as store:
        fill(store)
        before, commands = scans(client), client.info("stats")["total_commands_processed"]
        assert listed(store) == (["s-0", "s-1", "s-2"], ["SYM0", "SYM1"])
        assert store.events.prune() == 0
        sent = client.info("stats")["total_commands_processed"] - commands
    assert scans(client) == before
    assert sent < 3 * 5 + 10  # a few per entry of this namespace, none per foreign key
    client.close()


def test_every_creating_write_adds_its_index_entry_first(server, ns):
    """A user allowed to write the index keys but only to read the data's: its refused
    writes leave no data, and an index entry where it is a call of its own (a plain
    value takes its entry in its own call on a single server: refused whole, it leaves
    none), so data never exists without its entry."""
    client = admin(server)
    client.execute_command("FUNCTION", "LOAD", "REPLACE", library().source)
    args = setuser_args("half", "pw", ns)
    index_only = keys.namespace_prefix(ns) + f"{keys.INDEX_KIND}:*"
    grants = [f"~{index_only}", f"%R~{keys.namespace_pattern(ns)}"]
    client.execute_command(*[g for a in args for g in (grants if a.startswith("~") else [a])])
    url = f"redis://half:pw@127.0.0.1:{server.port}/0?durability=none"
    with sessionstore.connect(url, ns) as store:
        store.events.create(SessionHeader(id="s-1"))
        for write in (
            lambda: store.session("A", "s", "e", "1h").set_data(1, T0),
            lambda: store.session("A", "s", "e", "1h", ttl=60).set_data(1, T0),
            lambda: store.session("H", "s", "e", "1h", history=True).set_data(1, T0),
            lambda: store.events.append("s-1", [SessionEvent(seq=0, type="n", time=T0)]),
        ):
            with pytest.raises(AccessDeniedError):
                write()
    sessions, values = keys.index_keys(ns)
    assert [m.decode() for m in client.zrange(sessions, 0, -1)] == ["s-1"]
    assert sorted(m.decode() for m in client.zrange(values, 0, -1)) == [
        "hist:{H:s:e:1h:backtest}:at"
    ]
    data = [k for k in client.scan_iter(match=keys.namespace_pattern(ns)) if b":idx:" not in k]
    assert data == []
    client.acl_deluser("half")
    client.close()


@pytest.mark.parametrize(
    ("history", "write"),
    [
        (True, lambda value: value.put(1, T0)),
        (True, lambda value: value.set_data(1, T0)),
        (True, lambda value: value.update(lambda old: 1, T0)),
        (True, lambda value: value.get_or_compute(T0, lambda: 1)),
        (False, lambda value: value.set_data(1, T0)),
        (False, lambda value: value.update(lambda old: 1, T0)),
    ],
    ids=["put", "history-set_data", "history-update", "get_or_compute", "set_data", "update"],
)
def test_a_key_too_long_for_the_index_is_refused_before_anything_is_written(
    server, ns, history, write
):
    """Every value write, whether its script takes its index entry or runs after the
    entry's own call: refused whole, with a message of bounded length, nothing stored."""
    with sessionstore.connect(url_of(server), ns) as store:
        value = store.session("K" * 300_000, "s", "e", "1h", history=history)
        with pytest.raises(sessionstore.InvalidArgumentError) as refused:
            write(value)
        assert "at most 262144" in str(refused.value)
        assert len(str(refused.value)) < 500
        assert value.get_data(T0) is None
    client = admin(server)
    assert list(client.scan_iter(match=keys.namespace_pattern(ns))) == []
    client.close()


def test_an_entry_whose_data_is_gone_is_skipped_then_cleaned_after_the_grace(server, ns):
    client = admin(server)
    sessions, values = keys.index_keys(ns)
    with sessionstore.connect(url_of(server), ns) as store:
        fill(store, sessions=3, values=2)
        store.events.delete("s-1")  # deleted
        store.session("SYM0", "s", "e", "1h").delete()
        ttl = store.session("TTL", "s", "e", "1h", ttl=0.05)  # expired by the server
        ttl.set_data(1, T0)
        client.zadd(sessions, {"crashed": int(time.time() * 1000)})  # index first, then a crash
        deadline = time.monotonic() + 10
        while ttl.get_data(T0) is not None:  # until the server expired it
            assert time.monotonic() < deadline, "the value given 0.05 s never expired"
            time.sleep(0.01)
        assert listed(store) == (["s-0", "s-2"], ["SYM1"])
        # Fresh entries stay: their writer may be about to write the data.
        assert client.zscore(sessions, "s-1") is not None
        assert client.zscore(sessions, "crashed") is not None
        for index, member in ((sessions, "s-1"), (values, "val:{SYM0:s:e:1h:backtest}")):
            age(client, index, member)
        assert listed(store) == (["s-0", "s-2"], ["SYM1"])
        assert sorted(m.decode() for m in client.zrange(sessions, 0, -1)) == [
            "crashed",
            "s-0",
            "s-2",
        ]
        assert client.zscore(values, "val:{SYM0:s:e:1h:backtest}") is None
        age(client, sessions, "crashed")
        assert store.events.prune() == 0  # prune clears the sessions index too
        assert client.zscore(sessions, "crashed") is None
        # A session written again after its entry was cleaned is listed again.
        store.events.create(SessionHeader(id="s-1"))
        store.events.append("s-1", [SessionEvent(seq=0, type="note", time=T0)])
        assert sorted(listed(store)[0]) == ["s-0", "s-1", "s-2"]
    client.close()


def test_cleaning_never_removes_an_entry_a_writer_just_refreshed(server, ns):
    """index_forget.lua compares the score at removal: a writer that added its entry
    again after the listing saw no data keeps it."""
    from sessionstore.redis.index import Listing
    from sessionstore.when import now_ms

    client = admin(server)
    sessions = keys.index_keys(ns)[0]
    client.zadd(sessions, {"old": 1, "refreshed": 1})
    listing = Listing.of(sessions, lambda pipe, member: None)
    listing.take_range([(b"old", 1), (b"refreshed", 1)])
    listing.take_checks(["old", "refreshed"], [{}, {}])  # both seen without data
    client.zadd(sessions, {"refreshed": now_ms()})  # a writer adds it again
    [args] = listing.forget_calls()
    with sessionstore.connect(url_of(server), ns):
        from sessionstore.redis.scripts import run

        assert run(client, "index_forget", [sessions], args) == 1
    assert [m.decode() for m in client.zrange(sessions, 0, -1)] == ["refreshed"]
    client.close()


def test_one_damaged_header_never_hides_the_other_sessions(server, ns, caplog):
    client = admin(server)
    with sessionstore.connect(url_of(server), ns) as store:
        fill(store, sessions=4, values=0)
        bad_field, wrong_type = keys.log_keys(ns, "s-1")[0], keys.log_keys(ns, "s-2")[0]
        client.hset(bad_field, "created_at", "not-a-number")
        client.delete(wrong_type)
        client.set(wrong_type, "not a hash")
        with caplog.at_level(logging.WARNING, logger="sessionstore"):
            assert [h.id for h in store.events.list()] == ["s-0", "s-3"]

            async def go() -> list[str]:
                async with sessionstore.aio.connect(url_of(server), ns) as astore:
                    return [h.id for h in await astore.events.list()]

            assert asyncio.run(go()) == ["s-0", "s-3"]
    skipped = [r.getMessage() for r in caplog.records if r.name == "sessionstore"]
    assert any("'s-1'" in m and "created_at" in m for m in skipped)
    assert any("'s-2'" in m for m in skipped)
    client.close()


def forget_the_index(client: redis.Redis, ns: str) -> None:
    """What a store written before the index existed looks like."""
    client.delete(*keys.index_keys(ns))


def test_an_old_store_is_indexed_by_rebuild(server, ns):
    client = admin(server)
    with sessionstore.connect(url_of(server), ns) as store:
        fill(store, sessions=3, values=2)
        cleared = store.session("CLEARED", "s", "e", "1h")
        cleared.set_data(1, T0)
        cleared.update(lambda v: None, T0)  # a hash left with its swap tokens alone
        forget_the_index(client, ns)
        assert listed(store) == ([], [])
        assert audit(server.url, ns) == audit(server.url, ns)
        missing = audit(server.url, ns)
        assert (missing.sessions, missing.values) == (3, 2)
        added = rebuild(server.url, ns)
        assert (added.sessions, added.values) == (3, 2)
        assert listed(store) == (["s-0", "s-1", "s-2"], ["SYM0", "SYM1"])
        assert rebuild(server.url, ns).total == 0 and audit(server.url, ns).total == 0
    client.close()


def test_rebuild_needs_scan_so_the_least_privilege_user_is_refused(server, ns):
    client = admin(server)
    client.execute_command(*setuser_args("lp-rebuild", "pw", ns))
    url = f"redis://lp-rebuild:pw@127.0.0.1:{server.port}/0"
    for call in (audit, rebuild):
        with pytest.raises(AccessDeniedError):
            call(url, ns)
    client.acl_deluser("lp-rebuild")
    client.close()


def test_doctor_reports_unindexed_data_and_fix_indexes_it(server, ns):
    client = admin(server)
    with sessionstore.connect(url_of(server), ns) as store:
        fill(store, sessions=2, values=1)
        forget_the_index(client, ns)
        url = url_of(server)
        before = cli("doctor", "--url", url, "-n", ns, "--json")
        checks = {c["name"]: c for c in json.loads(before.stdout)["checks"]}
        assert before.returncode == 1 and checks["index"]["status"] == "FAIL"
        assert "doctor --fix" in checks["index"]["detail"]
        fixed = cli("doctor", "--url", url, "-n", ns, "--fix")
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
        assert "indexed 2 session(s) and 1 value(s)" in fixed.stdout
        assert listed(store) == (["s-0", "s-1"], ["SYM0"])
    client.close()


def test_on_a_cluster_the_index_is_one_slot_and_lists_every_primary(redis_cluster, ns):
    sessions, values = keys.index_keys(ns)
    assert key_slot(sessions.encode()) == key_slot(values.encode())
    with sessionstore.connect(redis_cluster.url + "?durability=none", ns) as store:
        fill(store, sessions=6, values=6)
        slots = {key_slot(keys.log_keys(ns, f"s-{i}")[0].encode()) for i in range(6)}
        assert len(slots) > 1
        store.events.delete("s-3")
        assert listed(store)[0] == ["s-0", "s-1", "s-2", "s-4", "s-5"]
        assert len(listed(store)[1]) == 6
        client = redis.cluster.RedisCluster.from_url(redis_cluster.url)
        try:
            forget_the_index(client, ns)
            assert listed(store) == ([], [])
            added = rebuild(redis_cluster.url, ns)
            assert (added.sessions, added.values) == (5, 6)
            assert len(listed(store)[0]) == 5
        finally:
            client.close()


@pytest.mark.parametrize("history", [False, True])
def test_a_hot_values_entry_is_written_once_then_refreshed_only_once_old(server, ns, history):
    index = keys.index_keys(ns)[1]
    with sessionstore.connect(url_of(server), namespace=ns) as store:
        session = store.session("HOT", "s", "e", "1h", history=history)
        session.set_data(0, T0)
        [(member, first)] = admin(server).zrange(index, 0, -1, withscores=True)
        time.sleep(0.01)
        for n in range(1, 5):
            session.set_data(n, T0 + n)
            session.update(lambda v: v + 1, T0 + n)
        # The server leaves an entry younger than REFRESH_MS as it is.
        assert admin(server).zscore(index, member) == first
        admin(server).zadd(index, {member: first - REFRESH_MS - 1})
        session.set_data(9, T0 + 9)
        assert admin(server).zscore(index, member) >= first
    with sessionstore.connect(url_of(server), namespace=ns) as reader:
        assert [ref.symbol for ref in reader.list_values()] == ["HOT"]


def write_all(store: sessionstore.Store, tag: str) -> None:
    """A session and a plain and a history value, each written twice (the second write
    finds its entry in place)."""
    store.events.create(SessionHeader(id=f"s-{tag}", created_at=T0))
    store.events.append(f"s-{tag}", [SessionEvent(seq=0, type="note", time=T0)])
    for history in (False, True):
        session = store.session(f"{tag}-{int(history)}", "s", "e", "1h", history=history)
        session.set_data(1, T0)
        session.set_data(2, T0 + 1)


def test_writes_after_a_restart_without_persistence_are_listed_at_once(ns):
    with RedisServer(durable=False) as own, sessionstore.connect(url_of(own), ns) as store:
        write_all(store, "A")
        own.stop()
        own.start()
        assert listed(store) == ([], [])
        write_all(store, "A")
        write_all(store, "B")
        assert listed(store) == (["s-A", "s-B"], ["A-0", "A-1", "B-0", "B-1"])


def test_writes_after_a_lagging_replica_is_promoted_are_listed_at_once(ns):
    """The replica stops following after the first writes, then replaces the primary
    behind the same address: the entries the process wrote since are missing there."""
    with (
        RedisServer(*SYNC_AT_ONCE, durable=False) as primary,
        RedisServer(durable=False) as replica,
    ):
        follower, leader = admin(replica), admin(primary)
        follower.replicaof("127.0.0.1", primary.port)
        with TcpProxy(primary.port) as proxy:
            url = f"{proxy.url}?durability=none"
            with sessionstore.connect(url, ns) as store:
                write_all(store, "A")
                deadline = time.monotonic() + 10
                while leader.wait(1, 100) < 1 and time.monotonic() < deadline:
                    pass  # until the replica's first sync is done and it has the writes
                follower.replicaof("NO", "ONE")
                write_all(store, "B")
                proxy.upstream = ("127.0.0.1", replica.port)
                proxy.stall()
                proxy.resume()  # closes every connection to the old primary
                assert listed(store) == (["s-A"], ["A-0", "A-1"])
                write_all(store, "B")
                write_all(store, "C")
                assert listed(store) == (
                    ["s-A", "s-B", "s-C"],
                    ["A-0", "A-1", "B-0", "B-1", "C-0", "C-1"],
                )
        follower.close()
        leader.close()


def test_on_a_cluster_an_index_lost_on_its_node_is_written_again_by_the_next_write(
    redis_cluster, ns
):
    with sessionstore.connect(redis_cluster.url + "?durability=none", ns) as store:
        write_all(store, "A")
        client = redis.cluster.RedisCluster.from_url(redis_cluster.url)
        try:
            forget_the_index(client, ns)  # what the index's node restarted empty holds
        finally:
            client.close()
        write_all(store, "B")
        for history in (False, True):
            store.session(f"A-{int(history)}", "s", "e", "1h", history=history).set_data(3, T0)
        assert listed(store) == (["s-B"], ["A-0", "A-1", "B-0", "B-1"])


def _calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_listing_pages_through_an_index_its_tenant_flooded(server, ns):
    """A tenant may fill its own index by hand (50,000 entries, none of them data): its
    listing, as the least-privilege user, reads the index a bounded page a call, never
    the whole index in one command, and lists what exists."""
    client = admin(server)
    client.execute_command("FUNCTION", "LOAD", "REPLACE", library().source)
    client.execute_command(*setuser_args("flood", "pw", ns))
    url = f"redis://flood:pw@127.0.0.1:{server.port}/0?durability=none"
    with sessionstore.connect(url, ns) as store:
        fill(store)
        sessions, _ = keys.index_keys(ns)
        later = (int(time.time()) + 3600) * 1000  # too young for a listing to clean
        for start in range(0, 50_000, 10_000):
            client.zadd(sessions, {f"planted-{n}": later for n in range(start, start + 10_000)})
        zranges = _calls(client, "zrange")
        assert listed(store)[0] == ["s-0", "s-1", "s-2"]
        assert _calls(client, "zrange") - zranges >= 50_000 // SCAN_COUNT
    client.acl_deluser("flood")
    client.close()


def _entries(count: int) -> dict[str, int]:
    return {f"e-{n:05}": T0 + n // 3 for n in range(count)}  # ties in threes


def _run_steps(steps: Any, first: redis.Redis, rest: redis.Redis, between: Any = None) -> Any:
    """Drive ``steps`` (partials of a client's methods): the first on ``first``, the
    others on ``rest``, ``between()`` called once after the first."""
    reply, calls = None, 0
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as done:
            return done.value
        target = first if calls == 0 else rest
        reply = getattr(target, step.func.__name__)(*step.args, **step.keywords)
        calls += 1
        if calls == 1 and between is not None:
            between()


def test_a_listing_whose_pages_come_from_another_server_midway_lists_every_entry(ns):
    """A failover or a slot moved between two pages: the next page comes from another
    server holding the same index, and continues where the last one ended (ranks are the
    data's; a scan cursor is its server's own)."""
    with RedisServer(durable=False) as one, RedisServer(durable=False) as other:
        index = keys.index_keys(ns)[0]
        a, b = redis.Redis(port=one.port), redis.Redis(port=other.port)
        for client in (a, b):
            client.zadd(index, _entries(3_000))
        found = _run_steps(range_steps(a, ErrorBoundary("test", 1.0), index), a, b)
        assert found == b.zrange(index, 0, -1, withscores=True)
        a.close(), b.close()


def test_entries_added_or_removed_before_the_page_read_start_the_reading_again(server, ns):
    client = admin(server)
    index = keys.index_keys(ns)[0]
    client.zadd(index, _entries(3_000))

    def churn() -> None:  # before the page read up to: ranks shift
        client.zrem(index, "e-00000")
        client.zadd(index, {"e-00001": T0 + 10**6, "new": T0 - 1})

    found = _run_steps(
        range_steps(client, ErrorBoundary("test", 1.0), index), client, client, churn
    )
    assert found == client.zrange(index, 0, -1, withscores=True)
    members = [member for member, _ in found]
    assert len(members) == len(set(members)) == 3_000 - 1 + 1
    client.close()
