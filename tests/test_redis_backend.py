"""The Redis backend against real redis-server processes: key layout, round trips,
scripts, replay, torn tails, corruption, durability, availability, ACLs, OOM, fork.

Tests that change server state (FUNCTION FLUSH, maxmemory, ACL, kill) start their own
server; the others use the shared ``redis_server`` with a namespace of their own.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from redis.connection import Connection
from redis.crc import key_slot
from support.events import batch_of, stored
from support.redis_helpers import namespace_snapshot
from support.redis_server import RedisServer, free_port

import sessionstore
from sessionstore import keys
from sessionstore.contracts import EventBatch, Stored
from sessionstore.errors import (
    AccessDeniedError,
    CorruptDataError,
    CorruptLogError,
    DurabilityError,
    InvalidArgumentError,
    NotReplicatedError,
    SeqConflictError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    StoreUnavailableError,
    UnsupportedVersionError,
)
from sessionstore.keys import ValueKey
from sessionstore.models import SessionEvent, SessionHeader
from sessionstore.redis import open_redis
from sessionstore.redis.library import FREEING, READ_ONLY, install, library, lua_dir
from sessionstore.redis.options import (
    display,
    resend_window_ms,
    split_own_params,
)
from sessionstore.redis.retry import retry_delay

T0 = 1_718_000_000_000


# --- helpers ----------------------------------------------------------------------------


@pytest.fixture
def ns() -> str:
    return f"rb-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A server of this test's own, for destructive tests."""
    with RedisServer() as own:
        yield own


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def vkey(ns: str, symbol: str = "BTCUSDT", strategy: str = "s") -> ValueKey:
    return ValueKey(ns, symbol, strategy, "binance", "1h", "backtest")


def batch(first: int, count: int, kind: str = "note") -> EventBatch:
    return batch_of(
        [
            stored(seq, kind, T0 + seq, {"n": seq}, f"e{seq}" if seq % 2 else None)
            for seq in range(first, first + count)
        ]
    )


def started(events: Any, session_id: str, count: int) -> SessionHeader:
    """A session of ``count`` events appended one by one: one stream entry each, with
    the ids ``<seq>-1`` the tests below tear, delete and probe."""
    header = SessionHeader(id=session_id, created_at=T0, cwd="/work")
    for seq in range(count):
        assert events.append(session_id, batch(seq, 1), header) == seq + 1
    return header


def snapshot(url: str, ns: str) -> dict[bytes, Any]:
    """Every data key of ``ns`` and its content, to prove nothing changed. The index is
    left out: a creating call refreshes its entry's score first, even when the call
    then finds nothing to write (tests/test_redis_index.py covers it)."""
    client = raw(url)
    try:
        found = namespace_snapshot(client, ns)
    finally:
        client.close()
    return {name: content for name, content in found.items() if name not in index_names(ns)}


def index_names(ns: str) -> set[bytes]:
    return {name.encode() for name in keys.index_keys(ns)}


def preload_scripts(url: str) -> None:
    client = raw(url)
    install(client)
    client.close()


class RoundTrips:
    """Counts requests sent on any redis-py connection (a pipeline is one)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = Connection.send_packed_command

        def counted(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(conn, *args, **kwargs)

        monkeypatch.setattr(Connection, "send_packed_command", counted)

    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        before = self.count
        result = fn(*args, **kwargs)
        return self.count - before, result


# --- options and URLs -------------------------------------------------------------------


def test_opening_does_no_io_and_masks_the_password(open_):
    url = f"redis://user:s3cret@127.0.0.1:{free_port()}/0?password=other&durability=none"
    backends = open_(url, "ns")
    assert "s3cret" not in backends.display_url and "other" not in backends.display_url
    assert backends.display_url.startswith("redis://user:***@127.0.0.1:")


def test_own_query_parameters_are_stripped_before_redis_py_sees_them():
    clean, own = split_own_params("redis://h:1/0?db=2&durability=replicas:2&x=%2F")
    assert clean == "redis://h:1/0?db=2&x=%2F" and own == {"durability": "replicas:2"}
    assert split_own_params("unix:///tmp/r.sock?durability=none") == (
        "unix:///tmp/r.sock",
        {"durability": "none"},
    )
    assert display("unix:///s.sock?db=1&password=pw") == "unix:///s.sock?db=1&password=***"


def test_a_write_too_few_replicas_confirmed_is_unavailable_and_applied(server, ns):
    """``replicas:1`` on a server without replicas: the append and the value write are
    applied, and raise NotReplicatedError, a StoreUnavailableError (may have been
    applied) and a DurabilityError; the same calls again are an applied replay."""
    url = f"{server.url}?durability=replicas:1"
    event = SessionEvent(seq=0, type="t", time=T0)
    with sessionstore.connect(url, ns, timeout=1.0) as store:
        store.events.create(SessionHeader(id="s"))
        for call in (
            lambda: store.events.append("s", [event]),
            lambda: store.session("S", "s", "e", "1h").set_data({"n": 1}, T0),
        ):
            with pytest.raises(NotReplicatedError, match="applied on the primary") as caught:
                call()
            assert isinstance(caught.value, StoreUnavailableError)
            assert isinstance(caught.value, DurabilityError)
            with pytest.raises(NotReplicatedError):
                call()
    with sessionstore.connect(f"{server.url}?durability=none", ns) as reader:
        assert reader.events.read_from("s", 0) == [event]
        assert reader.session("S", "s", "e", "1h").get_data(T0) == {"n": 1}


@pytest.mark.parametrize(
    "options",
    [
        {"durability": "always"},
        {"durability": "replicas:0"},
        {"durability": "replicas:x"},
        {"timeout": 0},
        {"timeout": -1.0},
        {"timeout": "5"},
    ],
)
def test_invalid_options_are_refused(options):
    with pytest.raises(InvalidArgumentError):
        open_redis("redis://127.0.0.1:1/0", "ns", **options)


def test_the_cluster_option_is_read_from_the_url_and_checked():
    clean, own = split_own_params("redis://h:1/0?cluster=yes&durability=none&db=0")
    assert clean == "redis://h:1/0?db=0" and own == {"cluster": "yes", "durability": "none"}
    for url in (
        "redis://127.0.0.1:1/0?cluster=maybe",
        "redis://127.0.0.1:1/0?cluster=yes&cluster=no",
        "redis://127.0.0.1:1/3?cluster=yes",
        "unix:///tmp/r.sock?cluster=yes",
    ):
        with pytest.raises(InvalidArgumentError):
            open_redis(url, "ns")


def test_cluster_detection_costs_one_info_at_first_use_and_none_when_told(
    redis_server, ns, open_, monkeypatch
):
    trips = RoundTrips(monkeypatch)
    first: dict[str, int] = {}
    for query in ("", "?cluster=auto", "?cluster=no"):
        values = open_(redis_server.url + query, ns).values
        first[query], _ = trips(values.read, vkey(ns))  # with the connection's handshake
        assert trips(values.read, vkey(ns)) == (1, None)
    assert first[""] == first["?cluster=auto"] == first["?cluster=no"] + 1  # INFO cluster
    forced = open_(redis_server.url + "?cluster=yes", ns).values
    with pytest.raises(InvalidArgumentError, match="not a Redis Cluster node"):
        forced.read(vkey(ns))


def test_durability_given_twice_must_agree(open_):
    open_("redis://127.0.0.1:1/0?durability=none", "ns", durability="none")
    with pytest.raises(InvalidArgumentError):
        open_redis("redis://127.0.0.1:1/0?durability=none", "ns", durability="fsync")


def test_redis_errors_map_to_the_sessionstore_hierarchy():
    from redis import exceptions as rex

    from sessionstore.errors import SessionStoreError
    from sessionstore.redis.boundary import ErrorBoundary

    boundary = ErrorBoundary("redis://u:***@h:1/0", 0.5)
    cases = [
        (rex.ConnectionError("refused"), StoreUnavailableError),
        (rex.TimeoutError("slow"), StoreUnavailableError),
        (rex.AuthenticationError("invalid username-password pair"), AccessDeniedError),
        (
            rex.ResponseError("NOPERM no permissions to run the 'config|get' command"),
            AccessDeniedError,
        ),
        (
            rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"),
            StoreUnavailableError,
        ),
        (rex.ReadOnlyError("You can't write against a read only replica."), StoreUnavailableError),
        (
            rex.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"),
            CorruptDataError,
        ),
        (rex.ClusterDownError("The cluster is down"), StoreUnavailableError),
        (rex.MasterDownError("Link with MASTER is down"), StoreUnavailableError),
        (rex.ClusterError("TTL exhausted."), StoreUnavailableError),
        (rex.MovedError("3999 127.0.0.1:6381"), StoreUnavailableError),
        (
            rex.TryAgainError("Multiple keys request during rehashing of slot"),
            StoreUnavailableError,
        ),
        (
            rex.SlotNotCoveredError("Slot 3999 is not covered by the cluster."),
            StoreUnavailableError,
        ),
        (rex.RedisClusterException("Redis Cluster cannot be connected."), StoreUnavailableError),
    ]
    for error, expected in cases:
        with pytest.raises(SessionStoreError) as caught, boundary("HSET", "ss:n:val:{k}"):
            raise error
        assert type(caught.value) is expected and caught.value.__cause__ is error
        assert "HSET on ss:n:val:{k}" in str(caught.value)


def test_every_lua_script_documents_its_keys_args_and_reply():
    lua = sorted(p for p in Path(str(lua_dir())).iterdir() if p.suffix == ".lua")
    scripts = [p for p in lua if not p.name.startswith("_")]  # "_*.lua": shared Lua
    assert {p.stem for p in scripts} >= {"value_swap", "history_get", "history_set", "log_append"}
    for path in scripts:
        head = path.read_text().split("\n\n")[0] + path.read_text().split("\n\n")[1]
        assert "KEYS[1] - " in head and "returns" in head, path.name
        assert "redis.call('KEYS'" not in path.read_text()


def _functions(client: redis.Redis, name: str) -> dict[str, list[str]]:
    """The functions of library ``name`` on the server, with their flags."""
    [entry] = [dict(zip(e[::2], e[1::2], strict=True)) for e in client.function_list(name)]
    found = {}
    for function in entry[b"functions"]:
        fields = dict(zip(function[::2], function[1::2], strict=True))
        found[fields[b"name"].decode()] = sorted(flag.decode() for flag in fields[b"flags"])
    return found


def test_the_library_registers_every_script_as_a_function_of_its_version(redis_server):
    client = raw(redis_server.url)
    install(client)
    assert install(client) is False  # there already: "Library ... already exists" is fine
    found = library()
    assert found.name == f"sessionstore_{found.version}"
    assert found.version.startswith(sessionstore.__version__.replace(".", "_") + "_")
    expected = {found.version_function: ["no-writes"]}
    for name in (p.stem for p in Path(str(lua_dir())).glob("[!_]*.lua")):
        flags = ["no-writes"] if name in READ_ONLY else ["allow-oom"] if name in FREEING else []
        expected[f"ss_{found.version}_{name}"] = flags
    assert _functions(client, found.name) == expected
    assert client.fcall_ro(found.version_function, 0) == found.version.encode()
    client.close()


#: What a function body may read of Lua's globals: Redis's Lua library.
LUA_LIBRARY = {
    "redis", "string", "table", "math", "bit", "cjson", "cmsgpack", "struct",
    "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget", "rawset",
    "select", "tonumber", "tostring", "type", "unpack", "getmetatable", "setmetatable",
}  # fmt: skip


def test_no_function_of_the_library_reads_or_writes_a_global_of_its_own():
    """Redis refuses both in a function (and only when the line runs): read from the
    compiled library, every line of every script is checked."""
    from support.lua_globals import chunk_globals

    lua51 = pytest.importorskip("lupa.lua51")
    runtime = lua51.LuaRuntime(encoding=None)
    text = library().source.split(b"\n", 1)[1]  # without the "#!lua" line
    load_chunk = runtime.eval("function(text) return assert(loadstring(text, '=library')) end")
    dump = runtime.eval("string.dump")
    probe = b"local a = x\ny = function() return z end"  # nested functions are read too
    assert chunk_globals(dump(load_chunk(probe))) == ({"x", "z"}, {"y"})
    read, written = chunk_globals(dump(load_chunk(text)))
    assert written == set() and read <= LUA_LIBRARY, (written, read - LUA_LIBRARY)


@pytest.fixture
def lua_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the lua folder that the library is built from, for the test to change."""
    from sessionstore.redis import library as module

    folder = tmp_path / "lua"
    shutil.copytree(str(lua_dir()), folder)
    monkeypatch.setattr(module, "lua_dir", lambda: folder)
    rebuild_library()
    yield folder
    monkeypatch.undo()
    rebuild_library()


def rebuild_library() -> None:
    """Forget the library built so far: the next use reads the lua folder again."""
    from sessionstore.redis import library as module

    for cache in (module._sources, module.library, module.scripts):
        cache.cache_clear()


def test_the_library_version_changes_whenever_a_script_does(lua_copy):
    before = library().version
    with (lua_copy / "log_delete.lua").open("a") as script_file:
        script_file.write("-- changed\n")
    rebuild_library()
    assert library().version != before
    assert library().version.split("_")[:-1] == before.split("_")[:-1]


def test_a_script_relying_on_script_mode_is_refused_as_a_function(lua_copy):
    (lua_copy / "value_swap.lua").write_text("redis.replicate_commands()\nreturn 1\n")
    with pytest.raises(SessionStoreError, match="value_swap.lua cannot be a function"):
        library()


# --- key layout -------------------------------------------------------------------------


def test_the_key_layout_is_readable_with_redis_cli(redis_server, ns):
    with sessionstore.connect(redis_server.url, ns) as store:
        store.session("BTCUSDT", "llm", "binance", "1h").set_data({"signal": "buy"}, T0)
        store.session("BTCUSDT", "llm", "binance", "4h", history=True).set_data(1, T0)
        store.events.create(SessionHeader(id="run-1", created_at=T0))
        store.events.append("run-1", [sessionstore.SessionEvent(seq=0, type="note", time=T0)])
    client = raw(redis_server.url)
    prefix = f"ss:{ns}:"
    value = client.hgetall(f"{prefix}val:{{BTCUSDT:llm:binance:1h:backtest}}")
    assert value == {b"v": value[b"v"], b"w": str(T0).encode()}
    found = sorted(k.decode() for k in client.scan_iter(match=f"{prefix}*BTCUSDT*"))
    assert found == [
        f"{prefix}hist:{{BTCUSDT:llm:binance:4h:backtest}}:at",
        f"{prefix}hist:{{BTCUSDT:llm:binance:4h:backtest}}:v",
        f"{prefix}seq:{{BTCUSDT:llm:binance:1h:backtest}}",
        f"{prefix}seq:{{BTCUSDT:llm:binance:4h:backtest}}",
        f"{prefix}val:{{BTCUSDT:llm:binance:1h:backtest}}",
    ]
    meta = client.hgetall(f"{prefix}log:{{run-1}}:meta")
    [(entry_id, fields)] = client.xrange(f"{prefix}log:{{run-1}}:events")
    assert entry_id == b"0-1"
    event = b'{"seq":0,"type":"note","time":%d,"data":{}}' % T0
    assert fields == {b"events": b"[" + event + b"]"}
    assert meta == {
        b"id": b"run-1",
        b"version": b"1",
        b"created_at": str(T0).encode(),
        b"next_seq": b"1",
        b"last_time": str(T0).encode(),
        b"entries": b"1",
        b"bytes": str(len(fields[b"events"])).encode(),
        b"bytes_to": b"1",
    }
    client.close()


def test_a_log_without_a_byte_count_is_estimated_from_its_two_ends(redis_server, ns):
    """A log materialised before appends counted its bytes (no ``bytes`` field) is
    measured from its first and last 50 entries below ``next_seq`` (a torn tail left
    out): exactly when they are all of it, else their mean times its entries; appends
    leave it uncounted, and drop a count that an append of a client of an older
    version left stale; a damaged count is measured around."""
    client = raw(redis_server.url)
    with sessionstore.connect(redis_server.url, ns) as store:
        for session_id, count in (("short", 90), ("long", 400)):
            meta, stream = keys.log_keys(ns, session_id)
            store.events.create(SessionHeader(id=session_id))
            for seq in range(count):
                store.events.append(session_id, [SessionEvent(seq=seq, type="n", time=T0)])
            counted = store.events.stored_bytes(session_id)
            assert counted == sum(len(f[b"events"]) for _, f in client.xrange(stream))
            client.hdel(meta, "bytes")
            client.xadd(stream, {"events": b"[" + b"x" * 10_000 + b"]"}, id=f"{count}-1")
            client.config_resetstat()
            found = store.events.stored_bytes(session_id)
            assert client.info("commandstats")["cmdstat_xrange"]["calls"] == 1
            if count <= 100:
                assert found == counted
            else:
                assert abs(found - counted) < counted * 0.05
        store.events.append("long", [SessionEvent(seq=400, type="n", time=T0)])
        assert client.hmget(meta, "bytes", "bytes_to") == [None, None]
        # Counted, then appended to by a client of an older version, which does not count:
        # the count is stale, the size estimated, and the next append drops the count.
        store.events.create(SessionHeader(id="mixed"))
        store.events.append("mixed", [SessionEvent(seq=0, type="n", time=T0)])
        meta, stream = keys.log_keys(ns, "mixed")
        client.xadd(stream, {"events": b"[" + b"o" * 1000 + b"]"}, id="1-1")
        client.hset(meta, mapping={"next_seq": 2, "entries": 2})
        assert store.events.stored_bytes("mixed") == sum(
            len(f[b"events"]) for _, f in client.xrange(stream)
        )
        store.events.append("mixed", [SessionEvent(seq=2, type="n", time=T0)])
        assert client.hmget(meta, "bytes", "bytes_to") == [None, None]
        # A damaged count, or next_seq, is measured around: a size is never refused.
        store.events.create(SessionHeader(id="bad"))
        store.events.append("bad", [SessionEvent(seq=0, type="n", time=T0)])
        meta, stream = keys.log_keys(ns, "bad")
        exact = store.events.stored_bytes("bad")
        for field, damage in (("bytes", "-1"), ("next_seq", "x"), ("entries", "1e3")):
            client.hset(meta, field, damage)
            assert store.events.stored_bytes("bad") == exact, field
    client.close()


def test_key_parts_cannot_collide_or_escape_the_namespace(redis_server, ns, open_):
    values = open_(redis_server.url, ns).values
    tricky = [
        vkey(ns, "a:b", "c"),
        vkey(ns, "a", "b:c"),
        vkey(ns, "{x}"),
        vkey(ns, "x"),
        vkey(ns, "*"),
        vkey(ns, "%2A"),
        vkey(ns, "a b"),
    ]
    for index, key in enumerate(tricky):
        values.write(key, bytes([index + 1]), T0)
    assert [values.read(k) for k in tricky] == [Stored(bytes([i + 1]), T0) for i in range(7)]
    names = [keys.value_key(k) for k in tricky]
    assert len(set(names)) == len(names)
    for name in names:
        assert name.startswith(keys.namespace_prefix(ns))
        assert name.count("{") == 1 and name.count("}") == 1 and "*" not in name
    client = raw(redis_server.url)
    found = {n.decode() for n in client.scan_iter(match=keys.namespace_pattern(ns))}
    assert found == {*names, *(keys.seq_key(k) for k in tricky), keys.index_keys(ns)[1]}
    client.close()


def test_a_glob_namespace_matches_only_itself(redis_server, open_):
    base = uuid.uuid4().hex[:8]
    for namespace in (f"{base}*", f"{base}x"):
        open_(redis_server.url, namespace).values.write(vkey(namespace), b"\x01", T0)
    client = raw(redis_server.url)
    matched = set(client.scan_iter(match=keys.namespace_pattern(f"{base}*")))
    values_index = keys.index_keys(f"{base}*")[1]
    mine = vkey(f"{base}*")
    assert matched == {
        keys.value_key(mine).encode(),
        keys.seq_key(mine).encode(),
        values_index.encode(),
    }
    client.close()


# --- values -----------------------------------------------------------------------------


def test_each_value_call_is_one_round_trip(redis_server, ns, open_, monkeypatch):
    values = open_(redis_server.url, ns).values
    key = vkey(ns)
    values.swap(key, None, b"\x01", T0)
    values.write_version(key, b"\x01", T0, 3)
    preload_scripts(redis_server.url)
    trips = RoundTrips(monkeypatch)
    assert trips(values.read, key) == (1, Stored(b"\x01", T0))
    assert trips(values.write, key, b"\x02", T0 + 1) == (1, None)
    assert trips(values.swap, key, Stored(b"\x02", T0 + 1), b"\x03", T0 + 2) == (1, True)
    assert trips(values.write, key, None, T0) == (1, None)
    assert trips(values.read, key) == (1, None)
    assert trips(values.read_as_of, key, T0 + 5) == (1, Stored(b"\x01", T0))
    assert trips(values.write_version, key, None, T0 + 5, 3) == (1, None)
    assert trips(values.swap_version, key, Stored(None, T0 + 5), b"\x04", T0 + 6, 3) == (1, True)


def test_each_event_call_is_one_round_trip_after_the_durability_check(
    redis_server, ns, open_, monkeypatch
):
    backends = open_(redis_server.url, ns)
    events = backends.events
    backends.values.read(vkey(ns))  # connects the pool's one connection
    preload_scripts(redis_server.url)
    trips = RoundTrips(monkeypatch)
    assert trips(events.exists, "s") == (1, False)
    assert trips(events.append, "s", batch(0, 3), SessionHeader(id="s"))[0] == 2  # + CONFIG GET
    assert trips(events.append, "s", batch(3, 2), None) == (1, 5)
    assert trips(events.append, "s", batch(3, 2), None) == (1, 5)
    assert len(trips(events.read, "s")[1][1]) == 5
    assert trips(events.read, "s", 2, repair=True)[0] == 1


def test_history_trims_and_drops_later_versions_with_their_values(redis_server, ns, open_):
    values = open_(redis_server.url, ns).values
    key = vkey(ns)
    for step in range(5):
        values.write_version(key, bytes([step + 1]), T0 + step, 3)
    at, held = keys.history_keys(key)
    client = raw(redis_server.url)
    assert client.zrange(at, 0, -1) == [str(T0 + s).encode() for s in (2, 3, 4)]
    assert sorted(client.hkeys(held)) == [str(T0 + s).encode() for s in (2, 3, 4)]
    values.write_version(key, None, T0 + 3, None)
    assert client.zrange(at, 0, -1) == [str(T0 + s).encode() for s in (2, 3)]
    assert client.hgetall(held) == {str(T0 + 2).encode(): b"\x03", str(T0 + 3).encode(): b""}
    assert values.read_as_of(key, T0 + 10) == Stored(None, T0 + 3)
    assert values.read_as_of(key, T0 + 1) is None
    client.close()


def test_a_swap_sent_again_with_its_slot_and_number_is_applied_once(redis_server, ns):
    from sessionstore.redis import scripts
    from sessionstore.redis.valueformat import Mark, plain_keys, swap_args

    client = raw(redis_server.url)
    names = plain_keys(vkey(ns))

    def swap(expected: Stored | None, payload: bytes | None, mark: Mark) -> Any:
        args = swap_args(expected, payload, T0, mark, 60_000)
        return scripts.run(client, "value_swap", names, args)

    def number(slot: str) -> bytes:
        return client.hget(names[1], slot).split(b":")[0]

    assert swap(None, b"\x01", ("a", 1)) == b"OK"
    first = snapshot(redis_server.url, ns)
    assert swap(None, b"\x01", ("a", 1)) == b"OK"  # redis-py resends after a lost reply
    assert snapshot(redis_server.url, ns) == first
    # a conflict reports the record found, and records nothing
    assert swap(None, b"\x01", ("a", 2)) == [b"CONFLICT", b"\x01", str(T0).encode()]
    assert number("a") == b"1"
    assert swap(Stored(b"\x01", T0), b"\x02", ("b", 1)) == b"OK"
    assert swap(Stored(b"\x02", T0), None, ("c", 1)) == b"OK"
    assert client.exists(names[0]) == 0  # a clear leaves no hash behind
    # 30 swaps of one slot and a delete later, every earlier call is still recognised
    assert open_redis(redis_server.url, ns).values.forget(vkey(ns)) is False
    current: Stored | None = None
    for step in range(30):
        assert swap(current, bytes([step + 10]), ("e", step + 1)) == b"OK"
        current = Stored(bytes([step + 10]), T0)
    for mark in (("a", 1), ("b", 1), ("c", 1), ("e", 1), ("e", 30)):
        assert swap(None, b"\x01", mark) == b"OK"
    assert client.hgetall(names[0]) == {b"v": bytes([39]), b"w": str(T0).encode()}
    # One record per slot, however many calls it made: a b c e (the delete removed
    # nothing, so it recorded nothing: its resend would remove what is there then).
    assert client.hlen(names[1]) == 4 and number("e") == b"30"
    # The hash lives as long as its longest-lived record.
    assert 60_000 <= client.pttl(names[1]) <= 2 * 60_000
    client.close()


def test_records_past_their_deadline_are_dropped_once_the_hash_passes_its_bound(
    redis_server, ns, monkeypatch
):
    from sessionstore.redis import scripts
    from sessionstore.redis.valueformat import ANY, plain_keys, swap_args

    monkeypatch.setattr(keys, "SEQ_FIELDS", 3)
    client = raw(redis_server.url)
    names = plain_keys(vkey(ns))

    def write(payload: bytes, slot: str, window: int, number: int = 1) -> Any:
        args = swap_args(ANY, payload, T0, (slot, number), window)
        return scripts.run(client, "value_swap", names, args)

    assert write(b"\x01", "long", 60_000) == b"OK"
    # Windows long enough that a loaded machine's four writes all stay within them.
    for n in range(4):  # past the bound, but no record has passed its deadline
        assert write(b"\x02", f"short{n}", 400) == b"OK"
    assert client.hlen(names[1]) == 5
    # A record's deadline: the next second after it was applied, plus its window.
    wait_past(client, (server_ms(client) // 1000 + 1) * 1000 + 400)
    assert write(b"\x03", "short0", 50, 2) == b"OK"  # adds no field: nothing dropped
    assert client.hlen(names[1]) == 5
    assert write(b"\x04", "new", 50) == b"OK"
    assert set(client.hkeys(names[1])) == {b"long", b"short0", b"new"}
    assert write(b"\x05", "long", 60_000) == b"OK"  # the long call's resend: recognised
    assert client.hgetall(names[0]) == {b"v": b"\x04", b"w": str(T0).encode()}
    # A hash of short records only expires soon after their windows.
    other = plain_keys(vkey(ns, "other"))
    assert scripts.run(client, "value_swap", other, swap_args(ANY, b"\x01", T0, ("s", 1), 50))
    assert 0 < client.pttl(other[1]) <= 100
    wait_past(client, server_ms(client) + client.pttl(other[1]))
    assert client.exists(other[1]) == 0
    assert client.hgetall(other[0]) == {b"v": b"\x01", b"w": str(T0).encode()}
    client.close()


def test_a_hot_value_remembers_one_record_per_writer_slot_not_per_write(redis_server, ns):
    """10,000 writes of one value from 4 slots (as 4 threads of one process would send
    them) keep 4 records; the first write of each slot is still recognised after them."""
    from sessionstore.redis import scripts
    from sessionstore.redis.valueformat import ANY, plain_keys, swap_args

    client = raw(redis_server.url)
    names = plain_keys(vkey(ns))
    function = scripts.script("value_swap").function
    scripts.run(client, "value_swap", names, swap_args(ANY, b"\x00", T0, ("warm", 1), 60_000))
    pipe = client.pipeline(transaction=False)
    for n in range(10_000):
        mark = (f"slot{n % 4}", n // 4 + 1)
        args = swap_args(ANY, n.to_bytes(2, "big"), T0 + n, mark, 60_000)
        pipe.execute_command("FCALL", function, 2, *names, *args)
    assert pipe.execute() == [b"OK"] * 10_000
    assert client.hlen(names[1]) == 5
    assert client.memory_usage(names[1]) < 1024
    for slot in range(4):
        resend = swap_args(ANY, b"\x01", T0, (f"slot{slot}", 1), 60_000)
        assert scripts.run(client, "value_swap", names, resend) == b"OK"
    last = {b"v": (9_999).to_bytes(2, "big"), b"w": b"%d" % (T0 + 9_999)}
    assert client.hgetall(names[0]) == last
    client.close()


def test_a_resend_is_recognised_after_many_other_clients_wrote(redis_server, ns, open_):
    """200 other backends (each its own slots) write the value after a call whose reply
    was lost: its resend is still recognised, and writes nothing over theirs."""
    from sessionstore.redis import scripts
    from sessionstore.redis.valueformat import ANY, plain_keys, swap_args

    client = raw(redis_server.url)
    key = vkey(ns)
    names = plain_keys(key)
    first = swap_args(ANY, b"\x01", T0, ("lost", 1), 60_000)
    assert scripts.run(client, "value_swap", names, first) == b"OK"
    for n in range(200):
        open_(redis_server.url, ns).values.write(key, b"\x02", T0 + n)
    before = snapshot(redis_server.url, ns)
    resend = swap_args(ANY, b"\x01", T0, ("lost", 1), 60_000)
    assert scripts.run(client, "value_swap", names, resend) == b"OK"
    assert snapshot(redis_server.url, ns) == before
    assert open_(redis_server.url, ns).values.read(key) == Stored(b"\x02", T0 + 199)
    client.close()


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_past(client: redis.Redis, ms: int) -> None:
    """Return once the server's clock is past ``ms`` (epoch ms)."""
    while server_ms(client) <= ms:
        time.sleep(0.005)


@pytest.mark.parametrize("first", ["value_swap", "history_set", "value_forget"])
def test_a_record_is_kept_for_its_own_window_whatever_the_windows_of_later_writes(
    redis_server, ns, monkeypatch, first
):
    """A record carries its own window: writes and deletes sent later with a shorter
    window drop only records past their deadline, and never shorten the expiry of the
    seq hash."""
    from sessionstore.redis import scripts
    from sessionstore.redis.valueformat import (
        ANY,
        forget_args,
        forget_keys,
        history_set_args,
        history_set_keys,
        plain_keys,
        swap_args,
    )

    monkeypatch.setattr(keys, "SEQ_FIELDS", 3)
    client = raw(redis_server.url)
    key = vkey(ns)
    seq = keys.seq_key(key)

    def send(name: str, slot: str, window: int) -> Any:
        mark = (slot, 1)
        if name == "value_swap":
            args = swap_args(ANY, slot.encode(), T0, mark, window)
            return scripts.run(client, name, plain_keys(key), args)
        if name == "history_set":
            args = history_set_args(slot.encode(), T0, None, None, False, mark, window)
            return scripts.run(client, name, history_set_keys(key), args)
        return scripts.run(client, name, forget_keys(key), forget_args(mark, window))

    # Something to remove: a delete that removes nothing records nothing.
    client.hset(plain_keys(key)[0], mapping={"v": b"\x01", "w": str(T0)})
    before = server_ms(client) // 1000
    send(first, "long", 60_000)
    [(kept, record)] = client.hgetall(seq).items()
    number, applied, window = record.split(b":")[:3]
    assert number == b"1" and window == b"60000"
    assert before <= int(applied) <= server_ms(client) // 1000
    for name in ("value_swap", "history_set", "value_forget"):
        send(name, f"short-{name}", 50)
    assert client.pttl(seq) > 50_000  # not shortened to the later writes' window
    # every "short-" record is past its deadline
    wait_past(client, (server_ms(client) // 1000 + 1) * 1000 + 50)
    for name in ("value_swap", "history_set", "value_forget"):
        send(name, f"later-{name}", 50)
    slots = {m.decode() for m in client.hkeys(seq)}
    assert slots == {"long", "later-value_swap", "later-history_set", "later-value_forget"}
    assert client.hget(seq, kept) == record
    assert client.pttl(seq) > 50_000
    # The long call's resend is recognised: it writes nothing over the later calls.
    snapshot_before = snapshot(redis_server.url, ns)
    send(first, "long", 60_000)
    assert snapshot(redis_server.url, ns) == snapshot_before
    client.close()


def test_the_resend_window_covers_every_retry_of_a_call():
    from sessionstore.redis.options import MIN_RESEND_WINDOW_MS
    from sessionstore.redis.retry import RETRIES

    assert resend_window_ms(0.01) == MIN_RESEND_WINDOW_MS
    for timeout in (1.0, 5.0, 30.0):
        longest_call_ms = (RETRIES + 1) * (2 * timeout + retry_delay(RETRIES)) * 1000
        assert resend_window_ms(timeout) >= 2 * longest_call_ms


def test_a_history_write_sent_again_with_its_slot_and_number_is_applied_once(
    redis_server, ns, open_
):
    from sessionstore.redis import scripts
    from sessionstore.redis.valueformat import Mark, history_set_args, history_set_keys

    values = open_(redis_server.url, ns).values
    key = vkey(ns)
    values.write_version(key, b"\x01", T0, None)
    names = history_set_keys(key)
    client = raw(redis_server.url)

    def swap(expected: Stored | None, payload: bytes | None, when: int, mark: Mark) -> Any:
        args = history_set_args(payload, when, 3, expected, True, mark, 60_000)
        return scripts.run(client, "history_set", names, args)

    def write(payload: bytes, when: int, mark: Mark) -> Any:
        args = history_set_args(payload, when, 3, None, False, mark, 60_000)
        return scripts.run(client, "history_set", names, args)

    assert swap(Stored(b"\x01", T0), b"\x02", T0 + 1, ("h", 1)) == b"OK"
    first = snapshot(redis_server.url, ns)
    assert swap(Stored(b"\x01", T0), b"\x02", T0 + 1, ("h", 1)) == b"OK"
    assert snapshot(redis_server.url, ns) == first
    assert swap(Stored(b"\x01", T0), b"\x02", T0 + 1, ("h", 2)) == b"CONFLICT"
    assert sorted(client.hkeys(names[1])) == [str(T0).encode(), str(T0 + 1).encode()]
    assert write(b"\x03", T0 + 1, ("w", 1)) == b"OK"
    values.write_version(key, b"\x04", T0 + 1, 3)
    values.forget(key)
    values.write_version(key, b"\x05", T0 + 1, 3)
    # resends of the compared and of the uncompared write: applied, nothing written
    assert swap(Stored(b"\x01", T0), b"\x02", T0 + 1, ("h", 1)) == b"OK"
    assert write(b"\x03", T0 + 1, ("w", 1)) == b"OK"
    assert values.read_as_of(key, T0 + 5) == Stored(b"\x05", T0 + 1)
    assert values.read_as_of(key, T0) is None
    client.close()


def test_a_history_put_sent_again_with_its_slot_and_number_is_applied_once(redis_server, ns, open_):
    from sessionstore.redis import scripts
    from sessionstore.redis.valueformat import history_set_args, history_set_keys

    values = open_(redis_server.url, ns).values
    key = vkey(ns)
    names = history_set_keys(key)
    client = raw(redis_server.url)

    def put(payload: bytes, when: int, slot: str) -> Any:
        args = history_set_args(payload, when, 3, None, "put", (slot, 1), 60_000)
        return scripts.run(client, "history_set", names, args)

    assert put(b"\x01", T0 + 10, "p1") == b"OK"
    assert put(b"\x02", T0, "p2") == b"OK"
    assert values.read_as_of(key, T0 + 10) == Stored(b"\x01", T0 + 10)
    values.put_version(key, b"\x03", T0 + 10, 3)
    values.forget(key)
    values.put_version(key, b"\x04", T0 + 10, 3)
    # resends, after other puts and a delete: applied, nothing written
    assert put(b"\x01", T0 + 10, "p1") == b"OK"
    assert put(b"\x02", T0, "p2") == b"OK"
    assert values.read_as_of(key, T0 + 20) == Stored(b"\x04", T0 + 10)
    assert values.read_as_of(key, T0 + 5) is None
    client.close()


def test_a_computed_put_sent_again_with_its_slot_and_number_is_applied_once(
    redis_server, ns, open_
):
    """compute_put.lua: a resend of a call that wrote (and released its lease) returns
    OK, not the version it finds; its keys share one slot."""
    from sessionstore.redis import scripts
    from sessionstore.redis.valueformat import compute_put_args, compute_put_keys

    values = open_(redis_server.url, ns).values
    key = vkey(ns)
    names = compute_put_keys(key, T0)
    assert len({key_slot(name.encode()) for name in names}) == 1
    client = raw(redis_server.url)

    def put(payload: bytes, token: str, slot: str) -> Any:
        args = compute_put_args(payload, T0, 3, token, (slot, 1), 60_000)
        return scripts.run(client, "compute_put", names, args)

    assert values.acquire_compute_lease(key, T0, "a", 60_000) is True
    assert put(b"\x01", "a", "c1") == b"OK"
    assert client.exists(names[3]) == 0  # the lease went with the write
    first = snapshot(redis_server.url, ns)
    assert put(b"\x01", "a", "c1") == b"OK"  # the resend: applied, nothing written
    assert snapshot(redis_server.url, ns) == first
    assert put(b"\x02", "b", "c2") == [b"FOUND", b"\x01"]
    assert values.acquire_compute_lease(key, T0 + 1, "b", 60_000) is True
    assert values.put_computed(key, b"\x03", T0 + 1, 3, "a") is False
    assert values.read_as_of(key, T0 + 1) == Stored(b"\x01", T0)
    client.close()


def test_a_compute_lease_is_one_key_of_the_values_slot_with_the_holders_token(
    redis_server, ns, open_
):
    values = open_(redis_server.url, ns).values
    key = vkey(ns)
    name = keys.compute_lease_key(key, T0)
    assert key_slot(name.encode()) == key_slot(keys.history_keys(key)[0].encode())
    assert name.startswith(keys.namespace_prefix(ns))
    client = raw(redis_server.url)
    assert values.acquire_compute_lease(key, T0, "holder", 60_000) is True
    assert client.get(name) == b"holder" and 0 < client.pttl(name) <= 60_000
    assert values.acquire_compute_lease(key, T0, "other", 60_000) is False
    assert values.acquire_compute_lease(key, T0, "holder", 60_000) is True
    values.release_compute_lease(key, T0, "other")
    assert client.get(name) == b"holder"
    values.release_compute_lease(key, T0, "holder")
    assert client.exists(name) == 0
    assert values.acquire_compute_lease(key, T0, "other", 60_000) is True
    client.close()


def test_values_written_with_the_older_token_field_read_and_write_as_before(
    redis_server, ns, open_
):
    """Hashes of the older layout hold a field ``t`` with the tokens of their latest
    swaps, space separated; they must keep working."""
    values = open_(redis_server.url, ns).values
    key = vkey(ns)
    name = keys.value_key(key)
    at, held = keys.history_keys(key)
    client = raw(redis_server.url)
    client.hset(name, mapping={"v": b"\x01", "w": str(T0), "t": "x1 x2"})
    client.zadd(at, {str(T0): T0})
    client.hset(held, mapping={str(T0): b"\x01", "t": "y1"})
    assert values.read(key) == Stored(b"\x01", T0)
    assert values.read_as_of(key, T0) == Stored(b"\x01", T0)
    assert values.swap(key, Stored(b"\x01", T0), b"\x02", T0) is True
    assert values.read(key) == Stored(b"\x02", T0)
    values.write(key, b"\x03", T0 + 1)
    assert values.read(key) == Stored(b"\x03", T0 + 1)
    assert values.swap_version(key, Stored(b"\x01", T0), b"\x02", T0 + 1, 2) is True
    values.write_version(key, b"\x03", T0 + 2, 2)
    assert values.read_as_of(key, T0 + 5) == Stored(b"\x03", T0 + 2)
    assert sorted(client.zrange(at, 0, -1)) == [str(T0 + 1).encode(), str(T0 + 2).encode()]
    values.write(key, None, T0)  # a clear drops the older field too: no hash is left
    assert client.exists(name) == 0 and values.read(key) is None
    client.hset(name, mapping={"v": b"\x01", "w": str(T0), "t": "x1"})
    assert values.forget(key) is True
    assert client.exists(name, at, held) == 0
    client.close()


def test_a_value_cleared_by_a_swap_is_neither_listed_nor_found(redis_server, ns):
    key = ValueKey(ns, "BTCUSDT", "s", "e", "1h", "backtest")
    name = keys.value_key(key)
    with sessionstore.connect(redis_server.url, ns) as store:
        session = store.session("BTCUSDT", "s", "e", "1h")
        session.set_data(1, T0)
        assert session.update(lambda v: None, T0) is None
        assert raw(redis_server.url).exists(name) == 0
        assert session.get_data(T0) is None and store.list_values() == []
        assert session.delete() is False
        # the tokens stay for resends, within the resend window
        assert set(snapshot(redis_server.url, ns)) == {keys.seq_key(key).encode()}


@pytest.fixture
def lost_replies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Append a script name to lose the reply of its next FCALL, after the server ran it
    (redis-py then sends it again, as after a dropped connection or a timeout)."""
    from sessionstore.redis.library import script

    pending: list[str] = []
    original = redis.Redis.parse_response

    def parse(self: Any, connection: Any, command: str, *args: Any, **options: Any) -> Any:
        reply = original(self, connection, command, *args, **options)
        sent = getattr(connection, "last_sent", b"")
        calling = command in ("FCALL", "FCALL_RO") and pending
        if calling and script(pending[0]).function.encode() in sent:
            pending.pop(0)
            connection.disconnect()
            raise redis.ConnectionError("the reply was lost")
        return reply

    original_send = Connection.send_packed_command

    def send(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        # A single command or a pipeline (its ZADD of the index entry, then FCALL).
        self.last_sent = command if isinstance(command, bytes) else b"".join(command)
        return original_send(self, command, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "parse_response", parse)
    monkeypatch.setattr(Connection, "send_packed_command", send)
    return pending


@pytest.mark.parametrize("history", [False, True])
def test_update_applies_fn_once_when_the_swap_reply_is_lost(
    redis_server, ns, lost_replies, history
):
    calls = []

    def bump(value: Any) -> int:
        calls.append(value)
        return (value or 0) + 1

    with sessionstore.connect(redis_server.url, ns) as store:
        session = store.session("BTCUSDT", "s", "e", "1h", history=history)
        session.set_data(10, T0)
        lost_replies.append("history_set" if history else "value_swap")
        assert session.update(bump, T0) == 11
        assert not lost_replies and calls == [10]
        assert session.get_data(T0) == 11
        lost_replies.append("history_set" if history else "value_swap")
        assert session.update(lambda v: None, T0) is None
        assert not lost_replies and session.get_data(T0) is None
        assert session.update(bump, T0) == 1


def test_the_functions_are_reloaded_after_function_flush(server, ns, open_):
    backends = open_(server.url, ns)
    values, events = backends.values, backends.events
    key = vkey(ns)
    assert values.swap(key, None, b"\x01", T0)
    started(events, "s", 1)
    client = raw(server.url)
    client.function_flush()
    assert values.swap(key, Stored(b"\x01", T0), b"\x02", T0)
    assert values.read_as_of(key, T0) is None
    assert events.append("s", batch(1, 1), None) == 2
    client.function_flush()

    async def go() -> None:
        pair = backends.make_async()
        try:
            assert await pair.values.swap(key, Stored(b"\x02", T0), b"\x03", T0)
            client.function_flush()
            assert await pair.events.append("s", batch(2, 1), None) == 3
        finally:
            await pair.aclose()

    asyncio.run(go())
    client.close()


# --- event logs -------------------------------------------------------------------------


def test_a_replayed_append_after_a_lost_reply_is_a_success(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    header = started(events, "s", 2)
    meta, stream = keys.log_keys(ns, "s")
    assert events.append("s", batch(2, 3), None) == 5
    before = snapshot(redis_server.url, ns)
    assert events.append("s", batch(2, 3), None) == 5
    assert events.append("s", batch(0, 2), header) == 5
    assert snapshot(redis_server.url, ns) == before
    changed = batch_of([stored(3, "other", T0 + 3, {"n": 3}, "e3")])
    with pytest.raises(SeqConflictError) as caught:
        events.append("s", changed, None)
    assert (caught.value.expected, caught.value.got) == (5, 3)
    with pytest.raises(SeqConflictError):
        events.append("s", batch(4, 2), None)
    with pytest.raises(SeqConflictError):
        events.append("s", batch(6, 1), None)
    assert snapshot(redis_server.url, ns) == before


def test_header_checks(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    with pytest.raises(SessionNotFoundError):
        events.append("s", batch(0, 1), None)
    header = started(events, "s", 1)
    with pytest.raises(SessionExistsError):
        events.append("s", batch(1, 1), SessionHeader(id="s", created_at=T0, cwd="/else"))
    with pytest.raises(SessionExistsError):
        events.append("s", batch(1, 1), SessionHeader(id="s", created_at=T0))
    assert events.append("s", batch(1, 1), header) == 2
    meta = keys.log_keys(ns, "s")[0]
    raw(redis_server.url).hset(meta, "version", 7)
    with pytest.raises(UnsupportedVersionError):
        events.append("s", batch(2, 1), None)
    for read in (events.read, events.info):  # each names the log's key
        with pytest.raises(UnsupportedVersionError, match=re.escape(meta)):
            read("s")


def test_an_append_after_a_tail_deleted_by_hand_lowers_the_stale_last_id(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    started(events, "s", 3)
    _, stream = keys.log_keys(ns, "s")
    client = raw(redis_server.url)
    client.xadd(stream, {"seq": 3, "type": "torn", "time": 1, "data": "{}"}, id="3-1")
    client.xdel(stream, "3-1")  # XDEL keeps the stream's last id at 3-1
    assert events.append("s", batch(3, 2), None) == 5
    assert [e.seq for e in events.read("s")[1]] == [0, 1, 2, 3, 4]
    client.close()


def test_a_gap_hidden_by_a_torn_tail_is_corruption_not_a_tail(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    started(events, "s", 3)
    _, stream = keys.log_keys(ns, "s")
    client = raw(redis_server.url)
    client.xdel(stream, keys.stream_id(1))
    client.xadd(stream, {"seq": 3, "type": "torn", "time": 1, "data": "{}"}, id="3-1")
    assert client.xlen(stream) == 3  # as many entries as next_seq
    before = snapshot(redis_server.url, ns)
    with pytest.raises(CorruptLogError, match="end at or past next_seq 3: a gap before it"):
        events.append("s", batch(3, 1), None)
    assert snapshot(redis_server.url, ns) == before
    client.close()


def test_a_replay_compares_every_field_and_id(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    started(events, "s", 1)
    assert events.append("s", batch(1, 4), None) == 5
    before = snapshot(redis_server.url, ns)
    assert events.append("s", batch(1, 4), None) == 5, "an applied replay"
    for changed in (
        batch_of([stored(2, "note", T0 + 2, {"n": 2}, "e2")]),  # an id where there was none
        batch_of([stored(3, "note", T0 + 3, {"n": 3}, None)]),  # no id where there was one
        batch_of([stored(3, "note", T0 + 3, {"n": 3}, "")]),  # another id
        batch_of([stored(3, "note", T0 + 4, {"n": 3}, "e3")]),  # another time
    ):
        with pytest.raises(SeqConflictError) as caught:
            events.append("s", changed, None)
        assert caught.value.expected == 5
    assert snapshot(redis_server.url, ns) == before


def test_repair_never_cuts_what_a_concurrent_append_committed(redis_server, ns, open_):
    from sessionstore.redis import scripts

    backends = open_(redis_server.url, ns)
    started(backends.events, "s", 2)
    names = keys.log_keys(ns, "s")
    backends.events.append("s", batch(2, 1), None)
    client = raw(redis_server.url)
    assert scripts.run(client, "log_cut_tail", names, ["2", "1-99"]) == [b"CHANGED", b"3"]
    client.close()
    assert [e.seq for e in backends.events.read("s")[1]] == [0, 1, 2]


def test_long_logs_are_read_in_chunks_and_the_tail_is_probed(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    header = SessionHeader(id="long", created_at=T0)
    assert events.append("long", batch(0, 2500), header) == 2500
    assert [e.seq for e in events.read("long")[1]] == list(range(2500))
    assert [e.seq for e in events.read("long", 1200, limit=1500)[1]] == list(range(1200, 2500))
    assert [e.seq for e in events.read("long", 999, limit=2)[1]] == [999, 1000]
    assert events.read("long", 2500)[1] == [] and events.read("long", 10, limit=0)[1] == []
    assert events.read("long", 10**30)[1] == []
    with pytest.raises(SessionNotFoundError):
        events.read("absent", 10**30)
    _, stream = keys.log_keys(ns, "long")
    client = raw(redis_server.url)
    client.xadd(stream, {"seq": 2500, "type": "x", "time": 1, "data": "{}"}, id="2500-1")
    assert len(events.read("long", 0, limit=10, repair=True)[1]) == 10
    assert client.xlen(stream) == 3, "entries of 1000, 1000 and 500 events"
    client.close()


def _rewrite(url: str, ns: str, session_id: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
    _, stream = keys.log_keys(ns, session_id)
    client = raw(url)
    client.delete(stream)
    for entry_id, fields in entries:
        client.xadd(stream, fields, id=entry_id)
    client.close()


def _entry(at: int, **changes: Any) -> tuple[str, dict[str, Any]]:
    fields = {"seq": at, "type": "note", "time": T0, "data": "{}", **changes}
    return keys.stream_id(at), {k: v for k, v in fields.items() if v is not None}


@pytest.mark.parametrize(
    ("entries", "seq"),
    [
        ([_entry(0), _entry(2)], 1),
        ([_entry(0), _entry(1), ("1-2", _entry(1)[1]), _entry(2)], 1),
        ([_entry(0), _entry(1, data=None), _entry(2)], 1),
        ([_entry(0), _entry(1, data="{not json"), _entry(2)], 1),
        ([_entry(0), _entry(1, time="soon"), _entry(2)], 1),
        ([_entry(0), _entry(1, seq=7), _entry(2)], 1),
        ([_entry(0), _entry(1)], 2),
        ([_entry(0), ("1-5", _entry(1)[1]), _entry(2)], 1),
    ],
    ids=["gap", "duplicate", "no-data", "bad-json", "bad-time", "bad-seq", "short", "bad-id"],
)
def test_damage_before_next_seq_raises_and_nothing_is_rewritten(
    redis_server, ns, open_, entries, seq
):
    events = open_(redis_server.url, ns).events
    started(events, "s", 3)
    _rewrite(redis_server.url, ns, "s", entries)
    before = snapshot(redis_server.url, ns)
    with pytest.raises(CorruptLogError) as caught:
        events.read("s", repair=True)
    assert caught.value.seq == seq and caught.value.session_id == "s"
    assert snapshot(redis_server.url, ns) == before


def test_a_gap_refuses_the_append_too(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    started(events, "s", 4)
    raw(redis_server.url).xdel(keys.log_keys(ns, "s")[1], keys.stream_id(1))
    before = snapshot(redis_server.url, ns)
    with pytest.raises(CorruptLogError):
        events.append("s", batch(4, 1), None)
    assert snapshot(redis_server.url, ns) == before


def test_damage_seen_while_the_session_is_deleted_is_not_reported_as_damage():
    from sessionstore.redis.logparse import LogRead

    plan = LogRead("s", 0, None)
    meta = {b"id": b"s", b"version": b"1", b"created_at": b"1", b"next_seq": b"3"}
    plan.take_meta(meta)
    with pytest.raises(CorruptLogError):
        plan.take([])
    assert plan.same_meta(dict(meta)) and not plan.same_meta({})


def test_exists_list_and_delete(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    assert events.locate("s") is None and not events.exists("s") and events.list() == []
    headers = [started(events, f"s{i}", 1) for i in range(3)]
    assert events.exists("s1")
    assert sorted(events.list(), key=lambda h: h.id) == headers
    events.delete("s1")
    assert not events.exists("s1")
    assert snapshot(redis_server.url, ns).keys() == {
        k.encode()
        for i in (0, 2)
        for k in (*keys.log_keys(ns, f"s{i}"), keys.log_digest_key(ns, f"s{i}"))
    }
    with pytest.raises(SessionNotFoundError):
        events.delete("s1")
    with pytest.raises(SessionNotFoundError):
        events.read("s1")


# --- durability -------------------------------------------------------------------------


def test_a_server_without_fsync_is_refused_for_event_log_writes_only(open_):
    with RedisServer(durable=False) as lax:
        started(open_(lax.url, "ns", durability="none").events, "old", 2)
        backends = open_(lax.url, "ns")
        events = backends.events
        assert events.exists("old") and [h.id for h in events.list()] == ["old"]
        assert len(events.read("old")[1]) == 2
        for write in (
            lambda: events.append("s", batch(0, 1), SessionHeader(id="s")),
            lambda: events.delete("old"),
        ):
            with pytest.raises(DurabilityError) as caught:
                write()
            message = str(caught.value)
            assert "appendfsync always" in message and "replicas:N" in message
            assert "none" in message
        _, stream = keys.log_keys("ns", "old")
        raw(lax.url).xadd(stream, {"seq": 2, "type": "x", "time": 1, "data": "{}"}, id="2-1")
        with pytest.raises(DurabilityError):
            events.read("old", repair=True)  # the cut of a torn tail is a write
        assert len(events.read("old")[1]) == 2 and not events.exists("s")
        backends.values.write(vkey("ns"), b"\x01", T0)
        client = raw(lax.url)
        client.config_set("appendonly", "yes")
        client.config_set("appendfsync", "always")
        assert events.append("old", batch(2, 1), None) == 3
        client.close()
        lax.kill()  # a graceful stop would wait for the AOF rewrite CONFIG SET started


@pytest.mark.parametrize("how", ["argument", "url"])
def test_durability_none_skips_the_check(open_, how):
    with RedisServer(durable=False) as lax:
        if how == "argument":
            events = open_(lax.url, "ns", durability="none").events
        else:
            events = open_(lax.url + "?durability=none", "ns").events
        started(events, "s", 2)
        assert len(events.read("s")[1]) == 2


def test_fsync_for_a_user_without_config_raises_and_says_what_to_do(server, open_):
    """No warning and carrying on: the first write raises, nothing is written, and
    ``durability="aof"`` works for the same user."""
    client = raw(server.url)
    client.acl_setuser(
        "app", enabled=True, passwords=["+pw"], keys=["ss:*"], commands=["+@all", "-config"]
    )
    url = f"redis://app:pw@127.0.0.1:{server.port}/0"
    events = open_(url, "ns").events
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # checked again on the next write
            with pytest.raises(DurabilityError) as caught:
                started(events, "s", 1)
    message = str(caught.value)
    assert "CONFIG GET" in message and "sessionstore doctor" in message
    # The one remedy that fits this user (the server may well be durable): the message
    # and its hint say durability=aof and nothing else.
    assert "durability='aof'" in message and "replicas:N" not in message
    assert caught.value.hint is not None and "?durability=aof" in caught.value.hint
    assert "none" not in caught.value.hint
    assert ":pw@" not in message and not events.exists("s")
    started(open_(url + "?durability=aof", "ns").events, "s", 1)
    client.close()


def test_durability_aof_reads_info_persistence(open_):
    """``aof``: AOF on and its last write ok, by INFO persistence; an AOF switched off
    is refused, naming the server, and turning it on is enough."""
    with RedisServer(durable=False) as lax:
        events = open_(lax.url + "?durability=aof", "ns").events
        with pytest.raises(DurabilityError, match="aof_enabled:0") as caught:
            started(events, "s", 1)
        assert "127.0.0.1" in str(caught.value) and not events.exists("s")
        client = raw(lax.url)
        client.config_set("appendonly", "yes")  # appendfsync stays everysec: trusted
        started(events, "s", 1)
        assert events.exists("s")
        client.close()
        lax.kill()  # a graceful stop would wait for the AOF rewrite CONFIG SET started


def test_replicas_durability_waits_for_acknowledgements(server, open_):
    raw(server.url).config_set("repl-diskless-sync-delay", 0)
    with RedisServer("--replicaof", "127.0.0.1", str(server.port), durable=False) as replica:
        client = raw(replica.url)
        deadline = time.monotonic() + 10
        while client.info("replication")["master_link_status"] != "up":
            assert time.monotonic() < deadline, "the replica did not connect"
            time.sleep(0.05)
        one = open_(server.url, "ns", durability="replicas:1").events
        started(one, "s", 2)
        assert client.xlen(keys.log_keys("ns", "s")[1]) == 2
        two = open_(server.url + "?durability=replicas:2", "ns", timeout=0.5).events
        with pytest.raises(DurabilityError) as caught:
            two.append("s", batch(2, 1), None)
        assert "applied on the primary" in str(caught.value)
        assert len(one.read("s")[1]) == 3
        client.close()


# --- availability, access, memory -------------------------------------------------------


def test_an_unreachable_server_raises_in_bounded_time_then_recovers(open_, monkeypatch):
    """A refused call is bounded by its back-off (a refusal waits for no timeout): the
    waits between its attempts are counted instead of slept."""
    port = free_port()
    backends = open_(f"redis://:s3cret@127.0.0.1:{port}/0", "ns", timeout=0.5)
    for call in (lambda: backends.values.read(vkey("ns")), lambda: backends.events.exists("s")):
        backoff: list[float] = []
        with monkeypatch.context() as patched, pytest.raises(StoreUnavailableError) as caught:
            patched.setattr(time, "sleep", backoff.append)
            call()
        assert sum(backoff) <= 1.0, f"back-offs of {backoff} s"
        assert isinstance(caught.value.__cause__, redis.ConnectionError)
        assert "s3cret" not in str(caught.value) and "unavailable" in str(caught.value)
    with RedisServer(port=port) as back:
        raw(back.url).config_set("requirepass", "s3cret")
        backends.values.write(vkey("ns"), b"\x01", T0)
        assert backends.values.read(vkey("ns")) == Stored(b"\x01", T0)


def test_a_killed_server_is_unavailable_then_back_with_its_data(open_):
    first = RedisServer().start()
    try:
        backends = open_(first.url, "ns", timeout=0.5)
        started(backends.events, "s", 2)
        first.kill()
        with pytest.raises(StoreUnavailableError):
            backends.events.read("s")
        with RedisServer(port=first.port, data_dir=first.dir):
            assert len(backends.events.read("s")[1]) == 2
            assert backends.events.append("s", batch(2, 1), None) == 3
    finally:
        first.cleanup()


def test_async_unavailable_server(open_):
    backends = open_(f"redis://127.0.0.1:{free_port()}/0", "ns", timeout=0.5)

    async def go() -> None:
        pair = backends.make_async()
        try:
            with pytest.raises(StoreUnavailableError):
                await pair.values.read(vkey("ns"))
            with pytest.raises(StoreUnavailableError):
                await pair.events.list()
        finally:
            await pair.aclose()

    asyncio.run(go())


def test_refused_credentials_and_keys_raise_access_denied(server, open_):
    client = raw(server.url)
    client.acl_setuser(
        "narrow", enabled=True, passwords=["+pw"], keys=["other:*"], commands=["+@all"]
    )
    wrong = open_(f"redis://narrow:nope@127.0.0.1:{server.port}/0", "ns").values
    with pytest.raises(AccessDeniedError) as caught:
        wrong.read(vkey("ns"))
    assert "denied" in str(caught.value) and "nope" not in str(caught.value)
    narrow = open_(f"redis://narrow:pw@127.0.0.1:{server.port}/0", "ns", durability="none")
    key = vkey("ns")
    for call in (
        lambda: narrow.values.read(key),
        lambda: narrow.values.swap(key, None, b"\x01", T0),
        lambda: narrow.events.append("s", batch(0, 1), SessionHeader(id="s")),
    ):
        with pytest.raises(AccessDeniedError) as caught:
            call()
        assert "denied" in str(caught.value) and "ss:ns:" in str(caught.value)
        assert ":pw@" not in str(caught.value)
    client.close()


def test_out_of_memory_refuses_writes_and_leaves_nothing_partial(server, open_):
    backends = open_(server.url, "ns")
    values, events = backends.values, backends.events
    key = vkey("ns")
    values.write(key, b"\x01", T0)
    values.write_version(key, b"\x01", T0, None)
    values.swap(key, Stored(b"\x01", T0), b"\x01", T0)
    started(events, "s", 2)
    client = raw(server.url)
    before = snapshot(server.url, "ns")
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    try:
        for call in (
            lambda: values.write(key, b"\x02", T0 + 1),
            lambda: values.swap(key, Stored(b"\x01", T0), b"\x02", T0 + 1),
            lambda: values.write_version(key, b"\x02", T0, None),
            lambda: values.swap_version(key, None, b"\x02", T0 - 1, 1),
            lambda: events.append("s", batch(2, 3), None),
            lambda: events.append("new", batch(0, 3), SessionHeader(id="new")),
        ):
            with pytest.raises(StoreUnavailableError, match="out of memory"):
                call()
        assert snapshot(server.url, "ns") == before
        assert values.read(key) == Stored(b"\x01", T0)
        assert len(events.read("s")[1]) == 2
        # What only removes data (flagged allow-oom) still runs: memory can be freed.
        assert values.forget(key) is True
        events.delete("s")
        assert values.read(key) is None and not events.exists("s")
    finally:
        client.config_set("maxmemory", 0)
    started(events, "s", 2)
    assert events.append("s", batch(2, 1), None) == 3
    client.close()


# --- processes and the async flavour ----------------------------------------------------


def test_a_forked_child_keeps_using_the_store(redis_server, ns):
    with sessionstore.connect(redis_server.url, ns) as store:
        session = store.session("BTCUSDT", "s", "e", "1h")
        session.set_data({"n": 1}, T0)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                session.update(lambda v: {"n": v["n"] + 1}, T0)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert session.update(lambda v: {"n": v["n"] + 1}, T0) == {"n": 3}


def test_the_async_pair_mirrors_the_sync_one(redis_server, ns, open_):
    backends = open_(redis_server.url, ns)
    key = vkey(ns)

    async def go() -> None:
        pair = backends.make_async()
        try:
            values, events = pair.values, pair.events
            await values.prepare(key)
            assert await values.read(key) is None
            await values.write(key, b"\x01", T0)
            assert await values.swap(key, Stored(b"\x01", T0), b"\x02", T0)
            await values.write_version(key, b"\x01", T0, 2)
            assert await values.swap_version(key, Stored(b"\x01", T0), None, T0 + 1, 2)
            assert await values.read_as_of(key, T0 + 1) == Stored(None, T0 + 1)
            header = SessionHeader(id="a", created_at=T0)
            assert await events.append("a", batch(0, 3), header) == 3
            assert await events.append("a", batch(1, 2), None) == 3
            assert await events.exists("a") and await events.locate("a") is None
            assert (await events.read("a", 1, limit=1))[1] == batch(1, 1).events
            assert await events.list() == [header]
            await events.delete("a")
            with pytest.raises(SessionNotFoundError):
                await events.read("a")
        finally:
            await pair.aclose()

    asyncio.run(go())
    assert backends.values.read(key) == Stored(b"\x02", T0)


def test_a_unix_socket_url(tmp_path, open_):
    sock = tmp_path / "r.sock"
    with RedisServer("--unixsocket", str(sock), "--unixsocketperm", "700") as own:
        assert own
        backends = open_(f"unix://{sock}?db=0&durability=fsync", "ns")
        started(backends.events, "s", 1)
        assert backends.events.exists("s")


def test_calls_queued_behind_a_failed_first_use_fail_with_it(tmp_path):
    """Concurrent first calls against a server that drops every connection: one
    detection runs (with its retries); the calls waiting behind it share its failure
    instead of each running its own."""
    import socket
    import threading

    from sessionstore.redis.retry import RETRIES

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted = []

    def drop_every_connection() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=drop_every_connection, daemon=True).start()
    url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    errors = []
    with sessionstore.connect(url, "queued", timeout=2) as store:
        session = store.session("BTCUSDT", "s", "e", "1h")

        def call() -> None:
            try:
                session.get_data(T0)
            except sessionstore.StoreUnavailableError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=call) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    listener.close()
    assert len(errors) == 8
    assert len(accepted) <= 2 * (RETRIES + 1)


def test_follow_blocks_on_the_stream_instead_of_polling(redis_server, ns):
    """``follow`` waits with XREAD BLOCK on Redis: a writer's events reach a follower
    that polls only once an hour."""
    import threading

    client = raw(redis_server.url)
    before = client.info("commandstats").get("cmdstat_xread", {}).get("calls", 0)
    with sessionstore.connect(redis_server.url, ns) as store:
        store.events.create(SessionHeader(id="live"))
        store.events.append("live", [SessionEvent(seq=0, type="note", time=T0)])

        def write_later() -> None:
            with sessionstore.connect(redis_server.url, ns) as writer:
                for seq in (1, 2):
                    writer.events.append("live", [SessionEvent(seq=seq, type="note", time=T0)])

        seen = []
        for event in store.events.follow("live", 0, poll=3599):
            seen.append(event.seq)
            if event.seq == 0:
                threading.Thread(target=write_later).start()
            if event.seq == 2:
                break
    assert seen == [0, 1, 2]
    assert client.info("commandstats")["cmdstat_xread"]["calls"] > before
    client.close()


# --- the stream layout: entries of several events, and logs of the first layout ----------


def _first_layout(url: str, ns: str, session_id: str, written: list[SessionEvent]) -> None:
    """Store ``written`` as the first layout did: one entry ``<seq>-1`` per event with the
    fields seq, type, time, data and id, and a meta hash without ``entries``."""
    meta, stream = keys.log_keys(ns, session_id)
    client = raw(url)
    for event in written:
        fields = {"seq": event.seq, "type": event.type, "time": event.time}
        fields["data"] = orjson.dumps(event.data)
        if event.id is not None:
            fields["id"] = event.id
        client.xadd(stream, fields, id=f"{event.seq}-1")
    header = {"id": session_id, "version": "1", "created_at": str(T0), "cwd": "/work"}
    last = {"next_seq": len(written), "last_time": written[-1].time}
    client.hset(meta, mapping={**header, **last})
    client.close()


def test_a_log_of_the_first_layout_loads_and_takes_appends_and_replays(redis_server, ns, open_):
    """A log of the first layout loads and takes appends; its old events have no digest,
    so a batch repeating them conflicts, and the events appended since replay."""
    odd = stored(2, 'a"b\\c\n\x01/é', T0 + 2, {"n": 2, "s": "x\ty"})
    old = [*batch(0, 2).events, odd, *batch(3, 2).events]
    _first_layout(redis_server.url, ns, "old", old)
    events = open_(redis_server.url, ns).events
    assert events.read("old")[1] == old
    assert events.read("old", 3, limit=1)[1] == old[3:4]
    with pytest.raises(SeqConflictError):
        events.append("old", batch_of(old[1:4]), None)
    with pytest.raises(SeqConflictError):
        events.append("old", batch_of([stored(2, "other", T0 + 2, {"n": 2})]), None)
    assert events.append("old", batch(5, 3), None) == 8
    assert events.read("old")[1] == [*old, *batch(5, 3).events]
    assert events.append("old", batch(5, 2), None) == 8, "a replay of events of this layout"
    with pytest.raises(SeqConflictError):
        events.append("old", batch_of([old[4], *batch(5, 2).events]), None)
    assert events.read("old", 4, limit=2)[1] == [old[4], *batch(5, 1).events]


def test_a_long_batch_is_stored_as_entries_of_at_most_a_thousand_events(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    assert events.append("big", batch(0, 2500), SessionHeader(id="big", created_at=T0)) == 2500
    client = raw(redis_server.url)
    stream = keys.log_keys(ns, "big")[1]
    assert [entry_id for entry_id, _ in client.xrange(stream)] == [
        b"999-1000",
        b"1999-1000",
        b"2499-500",
    ]
    for start in (0, 1, 998, 999, 1000, 1998, 2499):
        assert events.read("big", start, limit=3)[1] == batch(start, min(3, 2500 - start)).events
    assert events.append("big", batch(990, 20), None) == 2500, "a replay across two entries"
    changed = [*batch(990, 19).events, stored(1009, "note", T0, {"n": 1009})]
    with pytest.raises(SeqConflictError):
        events.append("big", batch_of(changed), None)
    client.close()


def test_waiting_for_events_does_not_wake_for_an_entry_already_read(redis_server, ns, open_):
    events = open_(redis_server.url, ns).events
    events.append("w", batch(0, 3), SessionHeader(id="w", created_at=T0))
    waiter = threading.Thread(target=events.wait_for_events, args=("w", 3, 30))
    client = raw(redis_server.url)
    waiter.start()
    deadline = time.monotonic() + 30
    while client.info("clients")["blocked_clients"] == 0:  # until the wait blocks
        assert waiter.is_alive(), "woken by the entry holding seqs 0-2"
        assert time.monotonic() < deadline, "the wait never blocked"
        time.sleep(0.01)
    events.append("w", batch(3, 1), None)
    waiter.join(30)
    assert not waiter.is_alive(), "not woken by the event at seq 3"
    client.close()


def test_one_event_appended_after_a_tail_deleted_by_hand_lowers_the_stale_last_id(
    redis_server, ns, open_
):
    events = open_(redis_server.url, ns).events
    started(events, "s", 3)
    _, stream = keys.log_keys(ns, "s")
    client = raw(redis_server.url)
    client.xadd(stream, {"events": "[]"}, id="3-1")
    client.xdel(stream, "3-1")  # XDEL keeps the stream's last id at 3-1
    assert events.append("s", batch(3, 1), None) == 4
    assert [e.seq for e in events.read("s")[1]] == [0, 1, 2, 3]
    client.close()
