"""RetentionContract: expiring event-log sessions and values, for every backend and both APIs.

Expiry is waited for, never raced: a test polls ("eventually", up to 10 s) for what must
happen once a ttl has passed, and it only counts on something not having expired yet
when its ttl is a minute or more, or when it has measured that less than the ttl went by
since the write that renewed it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import pytest
from support import artifacts

import sessionstore
from sessionstore import (
    InvalidArgumentError,
    SessionEvent,
    SessionHeader,
    SessionNotFoundError,
    keys,
)
from sessionstore.backends.jsonl import JsonlEvents
from sessionstore.backends.sqlite_schema import SCHEMA_VERSION

#: The short retention of these tests, in seconds.
TTL = 0.25
#: How long "eventually" waits before failing.
PATIENCE = 10.0
T0 = 1_718_000_000_000
KEY = ("BTCUSDT", "llm-momentum", "binance", "1h")


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {PATIENCE} s: {what}")
        time.sleep(0.02)


def ev(seq: int) -> SessionEvent:
    return SessionEvent(seq=seq, type="note", time=T0 + seq, data={"n": seq})


def header(session_id: str) -> SessionHeader:
    return SessionHeader(id=session_id, cwd="/srv/agent", created_at=T0)


def started(store: Any, session_id: str, count: int = 2, **create: Any) -> None:
    store.events.create(header(session_id), **create)
    store.events.append(session_id, [ev(seq) for seq in range(count)])


def listed(*stores: Any) -> set[str]:
    return {h.id for store in stores for h in store.events.list()}


def is_redis(backend: str) -> bool:
    return backend in artifacts.REDIS


# --- event logs --------------------------------------------------------------------------


def test_expired_sessions_go_whole_and_the_others_stay(open_store, backend, store_url, namespace):
    plain = open_store()
    timed = open_store(ttl=TTL)  # memory:// is private to one connect, so this is its own
    first_write = time.monotonic()
    started(timed, "exp-store-ttl")
    started(plain, "exp-own-ttl", ttl=TTL)
    with plain.events.writer(header("exp-writer"), ttl=TTL) as writer:
        writer.emit("note")
    started(timed, "keep-overridden", ttl=60)
    started(plain, "keep-no-ttl")
    last_write = time.monotonic()
    before = artifacts.footprint(backend, store_url, namespace)
    in_time = time.monotonic() - first_write < 0.8 * TTL  # else some may be gone already
    assert backend == "memory" or not in_time or any("exp-" in item for item in before)

    time.sleep(max(0.0, last_write + TTL - time.monotonic()))
    if not is_redis(backend):
        # Expired, but nothing was pruned yet: still there as a whole.
        assert [e.seq for e in plain.events.load("exp-own-ttl").events] == [0, 1]

    removed = 0

    def expired_ones_are_gone() -> bool:
        nonlocal removed
        removed += plain.events.prune() + timed.events.prune()
        remaining = artifacts.footprint(backend, store_url, namespace)
        return not any(i.startswith("exp-") for i in listed(plain, timed)) and not any(
            "exp-" in item for item in remaining
        )

    eventually(expired_ones_are_gone, "the expired sessions are gone")
    assert removed == (0 if is_redis(backend) else 3)
    assert listed(plain, timed) == {"keep-overridden", "keep-no-ttl"}
    assert artifacts.footprint(backend, store_url, namespace) == [
        item for item in before if "exp-" not in item
    ]
    for session_id in ("exp-store-ttl", "exp-own-ttl", "exp-writer"):
        with pytest.raises(SessionNotFoundError):
            plain.events.load(session_id)
    assert [e.seq for e in timed.events.load("keep-overridden").events] == [0, 1]
    assert [e.seq for e in plain.events.load("keep-no-ttl").events] == [0, 1]
    assert plain.events.prune() + timed.events.prune() == 0


BAD_TTLS = [0, -1, -0.5, float("nan"), float("inf"), 1e300, "1", True, [1]]


def test_set_ttl_gives_a_stored_session_a_retention_and_takes_it_away(
    store, backend, store_url, namespace
):
    started(store, "exp-later")
    started(store, "keep-persisted", ttl=TTL)
    started(store, "keep-long")
    assert store.events.info("exp-later").expires_at is None
    before = time.time() * 1000
    expires_at = store.events.set_ttl("exp-later", TTL)
    assert before + TTL * 1000 - 50 <= expires_at <= time.time() * 1000 + TTL * 1000 + 50
    assert store.events.info("exp-later").expires_at == expires_at
    assert store.events.set_ttl("keep-persisted", None) is None
    assert store.events.info("keep-persisted").expires_at is None
    long = store.events.set_ttl("keep-long", 3600)
    assert {i.header.id: i.expires_at for i in store.events.list_info()}["keep-long"] == long
    # Nothing else of a session changes; its later appends renew it as a ttl given at
    # creation does, and keep the events.
    assert [e.seq for e in store.events.load("keep-long").events] == [0, 1]
    store.events.append("keep-long", [ev(2)])
    assert store.events.info("keep-long").expires_at >= long
    assert [e.seq for e in store.events.load("keep-long").events] == [0, 1, 2]

    def expired_one_is_gone() -> bool:
        store.events.prune()
        return listed(store) == {"keep-persisted", "keep-long"}

    eventually(expired_one_is_gone, "the session given a retention expired")
    assert [e.seq for e in store.events.load("keep-persisted").events] == [0, 1]
    with pytest.raises(SessionNotFoundError):
        store.events.set_ttl("exp-later", 60)
    with pytest.raises(SessionNotFoundError):
        store.events.set_ttl("never-stored", 60)
    for bad in BAD_TTLS:
        with pytest.raises(InvalidArgumentError):
            store.events.set_ttl("keep-long", bad)
    assert store.events.info("keep-long").expires_at is not None


def test_a_bad_ttl_is_an_invalid_argument_everywhere(
    store, open_store, backend, store_url, namespace
):
    for bad in BAD_TTLS:
        with pytest.raises(InvalidArgumentError):
            open_store(ttl=bad)
        with pytest.raises(InvalidArgumentError):
            store.session(*KEY, ttl=bad)
        with pytest.raises(InvalidArgumentError):
            store.session(*KEY, history=True, ttl=bad)
        with pytest.raises(InvalidArgumentError):
            store.events.create(header("s"), ttl=bad)
        with pytest.raises(InvalidArgumentError):
            store.events.writer(header("s"), ttl=bad)
    assert artifacts.footprint(backend, store_url, namespace) == []
    # Nothing was registered by the refused calls; whole and fractional seconds work.
    started(store, "s", ttl=1)
    started(open_store(ttl=0.5), "t")
    store.session(*KEY, ttl=2.5).set_data("v", T0)
    assert store.session(*KEY).get_data(T0) == "v"


# --- values ------------------------------------------------------------------------------


def test_set_ttl_gives_a_stored_value_a_retention_and_takes_it_away(store):
    plain = store.session("P", "s", "e", "1h")
    history = store.session("H", "s", "e", "1h", history=True)
    timed = store.session("T", "s", "e", "1h", ttl=TTL)
    kept = store.session("K", "s", "e", "1h")
    plain.set_data({"signal": "buy"}, T0)
    history.put("v1", T0)
    history.put("v2", T0 + 10)
    timed.set_data("timed", T0)
    kept.set_data("kept", T0)
    assert store.session("NONE", "s", "e", "1h").set_ttl(60) is False
    assert plain.set_ttl(TTL) is True and history.set_ttl(TTL) is True
    assert timed.set_ttl(None) is True  # its handle's ttl applies to its writes only
    assert kept.set_ttl(3600) is True and kept.set_ttl(None) is True
    eventually(
        lambda: plain.get_data(T0) is None and history.get_data(T0 + 10) is None,
        "the values given a retention expired",
    )
    assert history.get_data(T0) is None
    assert timed.get_data(T0) == "timed" and kept.get_data(T0) == "kept"
    assert {ref.symbol for ref in store.list_values()} >= {"T", "K"}
    assert plain.set_ttl(60) is False  # gone: nothing to give a retention
    for bad in BAD_TTLS:
        with pytest.raises(InvalidArgumentError):
            kept.set_ttl(bad)
    assert kept.get_data(T0) == "kept"


def test_records_say_when_a_value_expires(store):
    """``records()`` gives the expiry of the plain record and of the history, on the
    backend's clock, and None for what never expires (or is not there)."""
    plain = store.session("P", "s", "e", "1h", ttl=3600)
    history = store.session("H", "s", "e", "1h", history=True, ttl=7200)
    forever = store.session("F", "s", "e", "1h")
    before = int(time.time() * 1000)
    plain.set_data(1, T0)
    history.put("v", T0)
    forever.set_data(2, T0)
    after = int(time.time() * 1000)
    slack = 5_000  # the server's clock against this one's
    found = plain.records()
    assert before + 3_600_000 - slack <= found.expires_at <= after + 3_600_000 + slack
    assert found.plain_expires_at == found.expires_at and found.history_expires_at is None
    found = history.records()
    assert before + 7_200_000 - slack <= found.expires_at <= after + 7_200_000 + slack
    assert found.history_expires_at == found.expires_at and found.plain_expires_at is None
    assert forever.records().expires_at is None
    assert store.session("NONE", "s", "e", "1h").records().expires_at is None
    assert forever.set_ttl(60) is True
    assert forever.records().expires_at is not None
    assert forever.set_ttl(None) is True and forever.records().expires_at is None


def test_a_value_written_through_a_ttl_handle_expires(store, backend, store_url, namespace):
    plain = store.session("P", "s", "e", "1h", ttl=TTL)
    history = store.session("H", "s", "e", "1h", history=True, ttl=TTL)
    updated = store.session("U", "s", "e", "1h", ttl=TTL)
    lasting = store.session("L", "s", "e", "1h", ttl=60)
    forever = store.session("F", "s", "e", "1h")
    started_at = time.monotonic()
    plain.set_data({"signal": "buy"}, T0)
    history.set_data("v1", T0)
    history.set_data("v2", T0 + 10)
    assert updated.update(lambda value: (value or 0) + 1, T0) == 1
    # A write without a ttl keeps the expiry an earlier write gave the value.
    store.session("K", "s", "e", "1h", ttl=TTL).set_data("timed", T0)
    store.session("K", "s", "e", "1h").set_data("untimed", T0)
    kept_in_time = time.monotonic() - started_at < 0.8 * TTL
    lasting.set_data("lasting", T0)
    forever.set_data("forever", T0)
    assert lasting.get_data(T0) == "lasting"

    expiring = [plain, history, updated]
    if kept_in_time:
        expiring.append(store.session("K", "s", "e", "1h"))
    eventually(
        lambda: all(s.get_data(T0 + 20) is None for s in expiring),
        "the values written through a ttl handle read as None",
    )
    assert history.get_data(T0) is None
    assert lasting.get_data(T0) == "lasting" and forever.get_data(T0) == "forever"
    listed_values = {ref.symbol for ref in store.list_values()}
    assert {"L", "F"} <= listed_values and not {"P", "H", "U"} & listed_values
    assert plain.delete() is False and history.delete() is False
    if is_redis(backend):
        # The server dropped every key, both keys of the history together.
        remaining = artifacts.footprint(backend, store_url, namespace)
        assert not [k for k in remaining if "{P:" in k or "{H:" in k or "{U:" in k]

    # An expired history is absent as a whole: a new write starts a new one.
    fresh = store.session("H", "s", "e", "1h", history=True)
    fresh.set_data("v3", T0 + 5)
    assert fresh.get_data(T0 + 20) == "v3" and fresh.get_data(T0) is None
    updated_again = store.session("U", "s", "e", "1h")
    assert updated_again.update(lambda value: (value or 0) + 1, T0) == 1


# --- renewal -----------------------------------------------------------------------------


def _paused(since: float) -> bool:
    """Whether most of a ttl went by since ``since``: what was renewed then may have
    rightly expired, so nothing can be concluded."""
    return time.monotonic() - since > 0.8 * TTL


def _both_outlive_their_ttl(store: Any, other: Any, attempt: int) -> bool:
    """Append to a session and write a value through a ttl handle every fraction of the
    ttl until both are older than it, checking (after a prune) before each write that
    both are still there. True once they outlived their ttl; False when the machine
    paused for most of a ttl (then nothing is proven)."""
    session_id = f"renewed-{attempt}"
    started(store, session_id, count=1, ttl=TTL)
    value = store.session(f"R{attempt}", "s", "e", "1h", ttl=TTL)
    value.set_data(0, T0)
    born = last = time.monotonic()
    writes = 1
    while last - born < 1.2 * TTL:
        time.sleep(TTL / 5)
        store.events.prune()
        present, found = session_id in listed(store), value.get_data(T0)
        if _paused(last):
            return False
        assert present and found == writes - 1
        try:
            other.events.append(session_id, [ev(writes)])
        except SessionNotFoundError:
            if _paused(last):
                return False
            raise
        value.set_data(writes, T0)
        last = time.monotonic()
        writes += 1
    assert [e.seq for e in store.events.load(session_id).events] == list(range(writes))
    return True


def test_every_append_and_every_write_through_a_ttl_handle_renew_the_expiry(
    store, open_store, backend
):
    # Appends by any store renew a session; memory:// has only the one store.
    other = store if backend == "memory" else open_store()
    for attempt in range(3):
        if _both_outlive_their_ttl(store, other, attempt):
            return
    pytest.fail("every attempt was interrupted by a pause longer than the ttl")


# --- how each backend keeps the ttl --------------------------------------------------------


def test_redis_expires_both_keys_of_a_log_and_of_a_history_at_the_same_moment(
    redis_server, namespace
):
    import redis

    with sessionstore.connect(redis_server.url, namespace, ttl=60) as store:
        started(store, "s")
        store.session(*KEY, history=True, ttl=30).set_data("v", T0)
    admin = redis.Redis(port=redis_server.port)
    try:
        meta, stream = keys.log_keys(namespace, "s")
        at, values = keys.history_keys(keys.ValueKey(namespace, *KEY, "backtest"))
        assert admin.hget(meta, "ttl_ms") == b"60000"
        assert admin.pexpiretime(meta) == admin.pexpiretime(stream) > 0
        assert admin.pexpiretime(at) == admin.pexpiretime(values) > 0
    finally:
        admin.close()


def test_a_jsonl_header_carries_the_ttl_and_load_returns_the_plain_header(tmp_path):
    with sessionstore.connect(tmp_path.as_uri(), "ns") as store:
        started(store, "s", ttl=3600)
        path = store.events.locate("s")
        assert store.events.load("s").header == header("s")
        assert store.events.list() == [header("s")]
    with open(path, "rb") as file:
        first = json.loads(file.readline())
    assert first["ttl_ms"] == 3_600_000
    assert {k: v for k, v in first.items() if k != "ttl_ms"} == header("s").model_dump()
    # Pruning goes by the file's mtime, the time of the last append.
    events = JsonlEvents(tmp_path, "ns")
    assert events.prune(int(time.time() * 1000)) == 0
    assert events.prune(int(time.time() * 1000) + 3_600_000) == 1
    assert events.list() == []


def test_a_sqlite_file_of_the_previous_schema_is_migrated_and_keeps_working(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE kv_values (namespace TEXT NOT NULL, symbol TEXT NOT NULL,
                strategy TEXT NOT NULL, exchange TEXT NOT NULL, frame TEXT NOT NULL,
                mode TEXT NOT NULL, when_ms INTEGER NOT NULL, payload BLOB NOT NULL,
                PRIMARY KEY (namespace, symbol, strategy, exchange, frame, mode)) WITHOUT ROWID;
            CREATE TABLE kv_history (namespace TEXT NOT NULL, symbol TEXT NOT NULL,
                strategy TEXT NOT NULL, exchange TEXT NOT NULL, frame TEXT NOT NULL,
                mode TEXT NOT NULL, when_ms INTEGER NOT NULL, payload BLOB,
                PRIMARY KEY (namespace, symbol, strategy, exchange, frame, mode, when_ms))
                WITHOUT ROWID;
            CREATE TABLE log_sessions (namespace TEXT NOT NULL, id TEXT NOT NULL,
                version INTEGER, created_at INTEGER, cwd TEXT, parent_id TEXT,
                fork_seq INTEGER, next_seq INTEGER, PRIMARY KEY (namespace, id)) WITHOUT ROWID;
            CREATE TABLE log_events (namespace TEXT NOT NULL, session_id TEXT NOT NULL,
                seq INTEGER NOT NULL, type TEXT, time INTEGER, data TEXT, event_id TEXT,
                PRIMARY KEY (namespace, session_id, seq));
            INSERT INTO kv_values VALUES ('ns', 'A', 's', 'e', '1h', 'backtest', 5, X'a178');
            INSERT INTO log_sessions VALUES ('ns', 'old', 1, 7, NULL, NULL, NULL, 1);
            INSERT INTO log_events VALUES ('ns', 'old', 0, 'note', 9, '{}', NULL);
            PRAGMA user_version = 1;
            """
        )
    db.close()
    with sessionstore.connect(f"sqlite:///{path}", "ns") as store:
        assert store.session("A", "s", "e", "1h").get_data(5) == "x"
        assert [e.seq for e in store.events.load("old").events] == [0]
        store.events.append("old", [SessionEvent(seq=1, type="note", time=10)])
        started(store, "new", ttl=60)
        assert store.events.prune() == 0
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        rows = db.execute("SELECT id, ttl_ms FROM log_sessions ORDER BY id").fetchall()
    db.close()
    assert rows == [("new", 60_000), ("old", None)]
