"""Hostile stored data is contained: whatever a tenant writes into its own namespace's keys
(any type, any field, any member and score) or a damaged file or row holds, no call of the
library or the CLI hangs, loops or raises anything but a ``SessionStoreError``; listings
show every undamaged session and value and report the damaged one; stored ids are never
trusted over the key they came from.

Generated with Hypothesis over every key type and field of the Redis layout
(``sessionstore/keys.py``), on a real ``redis-server`` started once for the module, and
over the records of the file and SQLite stores."""

from __future__ import annotations

import contextlib
import json
import math
import pickle
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.redis_server import RedisServer
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionEvent, SessionHeader, SessionStoreError
from sessionstore import keys as layout
from sessionstore.backends.files import FileValues
from sessionstore.cli.app import app
from sessionstore.keys import ValueKey

from .conftest import iterations

T0 = 1_718_000_000_000
SESSIONS = ("a", "b", "c")
#: The session and value every corruption aims at; the others must list unharmed.
DAMAGED_SESSION = "b"
PLAIN = ("P", "s", "e", "1h")
HISTORY = ("H", "s", "e", "1h")
#: A guard against a hang: far beyond what any of these calls takes.
HANG_GUARD_S = 120

SETTINGS = settings(
    max_examples=iterations(normal=20, ci=12, soak=500),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

#: Stored text a tenant may write: numbers out of every range, text that is no number,
#: bytes that are no UTF-8, msgpack that is truncated, reserved, too deep or an extension,
#: another session's id, and anything else.
hostile_bytes = st.one_of(
    st.sampled_from(
        [
            b"",
            b"-1",
            b"0",
            b"1",
            b"2",
            str(2**70).encode(),
            str(-(2**70)).encode(),
            b"9" * 5000,
            b"1e300",
            b"1.5",
            b"nan",
            b"inf",
            b"abc",
            b"\xff\xfe",
            b"a",
            b"c",
            b"\xc1",
            b"\x92\x01",
            b"\x91" * 3000 + b"\xc0",
            b"\xd4\x05\x00",
            b"\xd6\xff\x00\x00\x00\x01",
            msgpack.packb({"v": [1, 2]}),
            b'{"seq":0}',
            b"[]",
        ]
    ),
    st.binary(max_size=12),
    st.integers(min_value=-(2**80), max_value=2**80).map(lambda n: str(n).encode()),
)
hostile_scores = st.one_of(
    st.sampled_from([math.inf, -math.inf, 0.0, -1.0, 2.0**70, 1e300, T0, T0 + 1.0]),
    st.floats(allow_nan=False),
)


def _store_key(*parts: str) -> ValueKey:
    return ValueKey("ns-placeholder", *parts, "backtest")  # type: ignore[arg-type]


def seed(store: sessionstore.Store) -> None:
    """Three sessions of two events each, a plain value and a history of three versions."""
    for n, session_id in enumerate(SESSIONS):
        store.events.create(SessionHeader(id=session_id, created_at=n))
        store.events.append(
            session_id,
            [SessionEvent(seq=i, type="note", time=T0 + i, data={"i": i}) for i in range(2)],
        )
    store.session(*PLAIN).set_data({"plain": 1}, T0)
    history = store.session(*HISTORY, history=True)
    for i in range(3):
        history.set_data({"version": i}, T0 + i)


def _bounded(call: Callable[[], Any]) -> Any:
    """``call()``, in a thread: a hang fails the test instead of stopping the suite."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    assert not worker.is_alive(), f"{call} did not return"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _ours(call: Callable[[], Any]) -> Any:
    """``call()``'s result, or None when it raised a typed ``SessionStoreError``."""
    try:
        return _bounded(call)
    except SessionStoreError as exc:
        assert type(exc) is not SessionStoreError, f"untyped error: {exc!r}"
        return None


def _cli(*args: str) -> tuple[int, str, str]:
    result = _bounded(lambda: CliRunner().invoke(app, list(args)))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    assert "error: unexpected" not in result.stderr, (args, result.stderr)
    return result.exit_code, result.stdout, result.stderr


def check_contained(
    url: str, namespace: str, index_damaged: bool, extra: frozenset[str] | set[str] = frozenset()
) -> None:
    """Every read of the library and the CLI returns or raises a typed error; listings
    show the undamaged sessions and values and never an id the store did not create
    (``extra``: sessions besides :data:`SESSIONS`)."""
    undamaged = {s for s in SESSIONS if s != DAMAGED_SESSION} | set(extra)
    created = set(SESSIONS) | set(extra)
    with sessionstore.connect(url, namespace) as store:
        listed = _ours(store.events.list)
        infos = _ours(store.events.list_info)
        for found in (
            None if listed is None else [h.id for h in listed],
            None if infos is None else [i.header.id for i in infos],
        ):
            if found is None:
                assert index_damaged
                continue
            assert len(found) == len(set(found)) and set(found) <= created, found
            assert index_damaged or undamaged <= set(found), found
        for session_id in SESSIONS:
            _ours(lambda s=session_id: store.events.load(s))
            _ours(lambda s=session_id: store.events.info(s))
            _ours(lambda s=session_id: store.events.read_from(s, 1))
        refs = _ours(store.list_values)
        if refs is not None:
            assert {ref[:4] for ref in refs} <= {PLAIN, HISTORY}, refs
        for parts, history in ((PLAIN, False), (HISTORY, True)):
            session = store.session(*parts, history=history)
            _ours(lambda s=session: s.get_data(T0 + 5))
            _ours(lambda s=session: s.get_data(T0 - 5))
    where = ["--url", url, "-n", namespace, "--json"]
    code, out, _ = _cli("sessions", "list", *where)
    assert code == 0 or (index_damaged and code == 2), out
    if code == 0:
        rows = [json.loads(line) for line in out.splitlines()]
        ids = [row["id"] for row in rows]
        assert len(ids) == len(set(ids)) and set(ids) <= created, ids
        assert index_damaged or undamaged <= set(ids), ids
    code, _, _ = _cli("values", "list", *where)
    assert code == 0 or (index_damaged and code == 2)
    for parts in (PLAIN, HISTORY):
        for extra in ([], ["--history"]):
            code, _, _ = _cli("values", "get", *parts, *extra, *where)
            assert code in (0, 2)
    code, _, _ = _cli("sessions", "verify", *where)
    assert code in (0, 1, 2)


# --- Redis: every key of the layout, every field, any type ---------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=False) as started:
        yield started


def redis_targets(namespace: str) -> dict[str, tuple[str, list[bytes]]]:
    """Each key of a seeded namespace: (its type, the fields or members it holds)."""
    plain, history = (ValueKey(namespace, *p, "backtest") for p in (PLAIN, HISTORY))
    at, versions = layout.history_keys(history)
    meta, events = layout.log_keys(namespace, DAMAGED_SESSION)
    sessions_index, values_index = layout.index_keys(namespace)
    meta_fields = [
        b"id", b"version", b"created_at", b"cwd", b"parent_id", b"fork_seq",
        b"next_seq", b"last_time", b"entries", b"ttl_ms", b"expires_at",
    ]  # fmt: skip
    return {
        layout.value_key(plain): ("hash", [b"v", b"w", b"t"]),
        at: ("zset", [str(T0 + i).encode() for i in range(3)]),
        versions: ("hash", [str(T0 + i).encode() for i in range(3)]),
        layout.seq_key(plain): ("hash", []),
        layout.seq_key(history): ("hash", []),
        meta: ("hash", meta_fields),
        events: ("stream", [b"events"]),
        layout.log_lease_key(namespace, DAMAGED_SESSION): ("hash", [b"owner"]),
        sessions_index: ("zset", [layout.session_member(s).encode() for s in SESSIONS]),
        values_index: ("zset", [layout.value_member(plain, False).encode()]),
    }


@st.composite
def redis_damage(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """1-3 edits of one key: (key index, what, arguments)."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["field", "drop field", "member", "retype", "delete", "entry"]))
        edits.append(
            (
                draw(st.integers(0, 9)),
                what,
                draw(st.integers(0, 20)),
                draw(hostile_bytes),
                draw(hostile_bytes),
                draw(hostile_scores),
                draw(st.sampled_from(["string", "list", "set", "zset", "hash", "stream"])),
            )
        )
    return edits


def _apply(raw: redis.Redis, name: str, kind: str, fields: list[bytes], edit: tuple) -> None:
    with contextlib.suppress(redis.ResponseError):  # an earlier edit changed the key's type
        _edit(raw, name, kind, fields, edit)


def _edit(raw: redis.Redis, name: str, kind: str, fields: list[bytes], edit: tuple) -> None:
    _, what, pick, value, other, score, new_type = edit
    field = fields[pick % len(fields)] if fields and pick < 15 else other
    if what == "delete":
        raw.delete(name)
    elif what == "retype":
        raw.delete(name)
        {
            "string": lambda: raw.set(name, value),
            "list": lambda: raw.rpush(name, value),
            "set": lambda: raw.sadd(name, value),
            "zset": lambda: raw.zadd(name, {value: score}),
            "hash": lambda: raw.hset(name, field or b"f", value),
            "stream": lambda: raw.xadd(name, {field or b"f": value}),
        }[new_type]()
    elif kind == "hash" and what == "drop field":
        raw.hdel(name, field)
    elif kind == "hash":
        raw.hset(name, field or b"f", value)
    elif kind == "zset":
        raw.zadd(name, {field if what == "member" and pick < 15 else value: score})
    elif kind == "stream":
        raw.xadd(name, {field or b"f": value}, id=f"{pick % 4}-{pick}")
        if what == "drop field":
            raw.xtrim(name, maxlen=pick % 3)


@SETTINGS
@given(damage=redis_damage())
def test_hostile_redis_keys_are_contained(server: RedisServer, damage: list[tuple]) -> None:
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    url = f"{server.url}?durability=none"
    with sessionstore.connect(url, namespace) as store:
        seed(store)
    targets = list(redis_targets(namespace).items())
    raw = redis.Redis(port=server.port)
    try:
        damaged = {targets[edit[0]][0] for edit in damage}
        for edit in damage:
            name, (kind, fields) = targets[edit[0]]
            _apply(raw, name, kind, fields, edit)
    finally:
        raw.close()
    index_damaged = any(layout.index_keys(namespace)[0] == name for name in damaged) or any(
        layout.index_keys(namespace)[1] == name for name in damaged
    )
    check_contained(url, namespace, index_damaged)


# --- the cases found by hand, each pinned ------------------------------------------------


@pytest.fixture
def seeded_redis(server: RedisServer) -> Iterator[tuple[str, str, redis.Redis]]:
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    url = f"{server.url}?durability=none"
    with sessionstore.connect(url, namespace) as store:
        seed(store)
    raw = redis.Redis(port=server.port)
    yield url, namespace, raw
    raw.close()


def test_a_history_member_that_differs_from_its_score_ends_every_read(seeded_redis):
    url, namespace, raw = seeded_redis
    at, _ = layout.history_keys(ValueKey(namespace, *HISTORY, "backtest"))
    raw.zadd(at, {str(T0 + 100): T0 + 1})
    with (
        sessionstore.connect(url, namespace) as store,
        pytest.raises(sessionstore.CorruptDataError, match=r"hist:\{H"),
    ):
        store.session(*HISTORY, history=True).get_data(T0 + 1)
    for extra in ([], ["--history"]):
        code, _, err = _cli("values", "get", *HISTORY, *extra, "--url", url, "-n", namespace)
        assert code == 2 and "hist:{H" in err, err


def test_a_next_seq_out_of_range_is_one_corrupt_row_of_the_listing(seeded_redis):
    url, namespace, raw = seeded_redis
    raw.hset(layout.log_keys(namespace, DAMAGED_SESSION)[0], "next_seq", str(2**70))
    code, out, err = _cli("sessions", "list", "--url", url, "-n", namespace, "--json")
    assert code == 0, err
    rows = {row["id"]: row for row in map(json.loads, out.splitlines())}
    assert {"a", "c"} <= set(rows)
    assert rows.get(DAMAGED_SESSION, {"state": "corrupt"})["state"] == "corrupt"
    assert "'b'" in err
    with sessionstore.connect(url, namespace) as store, pytest.raises(sessionstore.CorruptLogError):
        store.events.load(DAMAGED_SESSION)


def test_a_stored_value_that_is_not_msgpack_is_a_typed_error_naming_the_key(seeded_redis):
    url, namespace, raw = seeded_redis
    name = layout.value_key(ValueKey(namespace, *PLAIN, "backtest"))
    for garbage in (b"\xc1", b"\x91" * 3000 + b"\xc0", b"\x92\x01", b"\xd4\x05\x00"):
        raw.hset(name, "v", garbage)
        with (
            sessionstore.connect(url, namespace) as store,
            pytest.raises(sessionstore.CorruptDataError, match=r"val:\{P|P/s/e/1h|'P"),
        ):
            store.session(*PLAIN).get_data(T0)
        code, _, err = _cli("values", "get", *PLAIN, "--url", url, "-n", namespace)
        assert code == 2 and "unexpected" not in err and "damaged" in err, err


def test_a_meta_hash_naming_another_session_never_lists_under_that_id(seeded_redis):
    url, namespace, raw = seeded_redis
    raw.hset(layout.log_keys(namespace, DAMAGED_SESSION)[0], "id", "a")
    with sessionstore.connect(url, namespace) as store:
        assert sorted(h.id for h in store.events.list()) == ["a", "c"]
        assert sorted(i.header.id for i in store.events.list_info()) == ["a", "c"]
        with pytest.raises(sessionstore.CorruptLogError, match="names session"):
            store.events.load(DAMAGED_SESSION)
        assert store.events.load("a").header.id == "a"
    code, out, err = _cli("sessions", "list", "--url", url, "-n", namespace, "--json")
    assert code == 0 and sorted(json.loads(line)["id"] for line in out.splitlines()) == ["a", "c"]
    assert "'b'" in err


# --- the file and SQLite stores: every record and row field, any value ----------------

#: JSON and msgpack values a damaged record may hold in any field.
hostile_values = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(
        [-1, 0, 1, 2**63, 2**70, -(2**70), 1.5, math.inf, "a", "b", "c", "", "x" * 300]
    ),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-3, max_value=2**64), max_size=3),
    st.dictionaries(st.sampled_from(["seq", "id", "a"]), st.integers(), max_size=2),
)
HEADER_FIELDS = ["id", "version", "created_at", "cwd", "parent_id", "fork_seq", "ttl_ms", "extra"]
EVENT_FIELDS = ["seq", "type", "time", "data", "id", "batch_end", "extra"]


def _value_dir(root: Path, namespace: str, parts: tuple[str, ...]) -> Path:
    return FileValues(root).key_dir(ValueKey(namespace, *parts, "backtest"))  # type: ignore[arg-type]


def _msgpack(value: Any) -> bytes:
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return b"\xc1"


@st.composite
def file_damage(draw: st.DrawFn) -> list[tuple[str, Any, Any, Any]]:
    """1-3 edits: (which record, which field or line, the value, raw bytes)."""
    return [
        (
            draw(st.sampled_from(["header", "event", "tail", "whole log", "value", "history"])),
            draw(
                st.sampled_from(
                    HEADER_FIELDS
                    + EVENT_FIELDS
                    + ["key", "when", "payload", "expires_at", "versions"]
                )
            ),
            draw(hostile_values),
            draw(hostile_bytes),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]


def _damage_files(root: Path, namespace: str, store: sessionstore.Store, edit: tuple) -> None:
    which, field, value, raw = edit
    log = Path(store.events.locate(DAMAGED_SESSION) or "")
    lines = log.read_bytes().split(b"\n") + [b"", b"", b""]
    if which in ("header", "event"):
        index = 0 if which == "header" else 1 + len(raw) % 2
        try:
            record = json.loads(lines[index])
        except ValueError:
            record = {}
        if not isinstance(record, dict):
            record = {}
        record[field] = value
        lines[index] = json.dumps(record).encode()
        log.write_bytes(b"\n".join(lines))
    elif which == "tail":
        log.write_bytes(log.read_bytes() + raw)
    elif which == "whole log":
        log.write_bytes(raw)
    else:
        parts, name = (PLAIN, "value.msgpack") if which == "value" else (HISTORY, "history.msgpack")
        path = _value_dir(root, namespace, parts) / name
        try:
            record = msgpack.unpackb(path.read_bytes(), raw=False)
        except (ValueError, OSError):
            record = {}
        record = record if isinstance(record, dict) else {}
        if field in ("key", "when", "payload", "expires_at", "versions"):
            record[field] = value
            path.write_bytes(_msgpack(record))
        else:
            path.write_bytes(raw)


# The file store warns (RuntimeWarning) of each damaged record it ignores: that is its
# contract (tests/test_file_backend.py asserts it); here only the containment is checked,
# and whether a drawn damage warns at all depends on the draw.
@pytest.mark.filterwarnings("ignore:sessionstore. ignoring :RuntimeWarning")
@SETTINGS
@given(damage=file_damage())
def test_hostile_file_records_are_contained(tmp_path_factory, damage) -> None:
    root = tmp_path_factory.mktemp("files") / "store"
    namespace = "ns"
    with sessionstore.connect(root.as_uri(), namespace) as store:
        seed(store)
        for edit in damage:
            _damage_files(root, namespace, store, edit)
    check_contained(root.as_uri(), namespace, index_damaged=False)


#: Every column but the keys (an id there is the key itself: changing it renames the session).
SQLITE_COLUMNS = {
    "log_sessions": [
        "version",
        "created_at",
        "cwd",
        "parent_id",
        "fork_seq",
        "next_seq",
        "ttl_ms",
        "expires_at",
    ],
    "log_events": ["seq", "type", "time", "data", "event_id"],
    "log_leases": ["owner", "expires_at", "epoch"],
    "kv_values": ["when_ms", "payload", "expires_at"],
    "kv_history": ["when_ms", "payload", "expires_at"],
}
sqlite_values = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([2**63 - 1, -(2**63), 1.5, 1e300, "a", "c", "", "x", "not json", "[1]", "{}"]),
    st.text(max_size=8),
    st.binary(max_size=8),
    hostile_bytes,
    st.floats(),
)


@st.composite
def sqlite_damage(draw: st.DrawFn) -> list[tuple[str, str, Any]]:
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        table = draw(st.sampled_from(sorted(SQLITE_COLUMNS)))
        edits.append((table, draw(st.sampled_from(SQLITE_COLUMNS[table])), draw(sqlite_values)))
    return edits


@SETTINGS
@given(damage=sqlite_damage())
def test_hostile_sqlite_rows_are_contained(tmp_path_factory, damage) -> None:
    path = tmp_path_factory.mktemp("sqlite") / "store.db"
    url, namespace = f"sqlite:///{path}", "ns"
    with sessionstore.connect(url, namespace) as store:
        seed(store)
        with store.events.writer(SessionHeader(id="leased")) as writer:
            writer.emit("note", {})
            with sqlite3.connect(path) as db:
                db.execute(
                    "INSERT OR REPLACE INTO log_leases (namespace, session_id, owner, expires_at)"
                    " VALUES (?, ?, 'x', 1)",
                    (namespace, DAMAGED_SESSION),
                )
                for table, column, value in damage:
                    where = {"log_sessions": "id", "kv_values": "1", "kv_history": "1"}
                    sql = f"UPDATE {table} SET {column}=? WHERE {where.get(table, 'session_id')}"
                    with contextlib.suppress(sqlite3.IntegrityError):  # NOT NULL, keys
                        if table.startswith("log_"):
                            db.execute(f"{sql}=?", (value, DAMAGED_SESSION))
                        else:
                            db.execute(sql, (value,))
    check_contained(url, namespace, index_damaged=False, extra={"leased"})


def test_the_damage_errors_travel_between_processes_whole():
    for error in (
        sessionstore.CorruptDataError("ss:n:val:{k}", "it holds a malformed when b'x'"),
        sessionstore.CorruptLogError("s1", "the meta hash names session 'a'", seq=3, line=4),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert copy.where == error.where and copy.detail == error.detail
    assert pickle.loads(pickle.dumps(error)).seq == 3
