"""The SQLite backend on real database files: URL handling, the file's settings,
namespaces, value and history semantics, event-log damage, error mapping, and
several processes sharing one file."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import stat
import threading
from contextlib import closing
from pathlib import Path

import pytest
from support.events import batch_of, stored
from support.sqlite_trace import traced

import sessionstore
from sessionstore import (
    AccessDeniedError,
    CorruptLogError,
    InvalidArgumentError,
    SeqConflictError,
    SessionExistsError,
    SessionHeader,
    SessionNotFoundError,
    StoreUnavailableError,
    UnsupportedVersionError,
)
from sessionstore.backends.sqlite import SqliteValues, open_sqlite
from sessionstore.backends.sqlite_db import Database, database_path
from sessionstore.backends.sqlite_events import SqliteEvents
from sessionstore.backends.sqlite_schema import SCHEMA_VERSION
from sessionstore.contracts import Stored
from sessionstore.keys import ValueKey
from sessionstore.models import SessionEvent

NS = "ns-a"
KEY = ValueKey(NS, "BTCUSDT", "momentum", "binance", "1h", "backtest")
T0 = 1_718_000_000_000


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


@pytest.fixture
def database(db_path: Path):
    db = Database(db_path)
    yield db
    db.close()


@pytest.fixture
def values(database: Database) -> SqliteValues:
    return SqliteValues(database)


@pytest.fixture
def events(database: Database) -> SqliteEvents:
    return SqliteEvents(database, NS)


def raw(db_path: Path, sql: str, params: tuple = (), text: type = str) -> list[tuple]:
    """Run ``sql`` on a separate, plain connection (as an outside tool would), text read
    as ``text`` (bytes: damage may have left text that is not UTF-8)."""
    with closing(sqlite3.connect(db_path)) as conn, conn:
        conn.text_factory = text
        return conn.execute(sql, params).fetchall()


def event(seq: int, data: str = "{}", type_: str = "note") -> SessionEvent:
    return stored(seq, type_, T0 + seq, data)


def started(events: SqliteEvents, session_id: str, count: int) -> SessionHeader:
    header = SessionHeader(id=session_id, created_at=T0)
    events.append(session_id, batch_of([event(i, f'{{"i":{i}}}') for i in range(count)]), header)
    return header


def log_rows(db_path: Path, session_id: str = "s-1") -> list[tuple]:
    return raw(
        db_path,
        "SELECT * FROM log_events WHERE namespace=? AND session_id=? ORDER BY seq",
        (NS, session_id),
        bytes,
    ) + raw(db_path, "SELECT * FROM log_sessions WHERE namespace=? AND id=?", (NS, session_id))


# --- URLs and the database file ---------------------------------------------------------


def test_a_relative_url_is_resolved_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with sessionstore.connect("sqlite:///nested/dir/rel.db", NS) as store:
        store.session("A", "s", "e", "1h").set_data(1, T0)
    assert (tmp_path / "nested" / "dir" / "rel.db").is_file()


def test_four_slashes_and_three_plus_an_absolute_path_name_the_same_file(tmp_path):
    path = tmp_path / "abs.db"
    assert database_path(f"sqlite:////{str(path).lstrip('/')}") == path
    assert database_path(f"sqlite:///{path}") == path


@pytest.mark.parametrize(
    "url",
    ["sqlite:///:memory:", "sqlite://", "sqlite:///", "sqlite://host/x.db", "sqlite:///x.db?a=1"],
)
def test_urls_naming_no_shareable_file_are_refused(url):
    with pytest.raises(InvalidArgumentError):
        sessionstore.connect(url, NS)


def test_first_use_creates_the_directory_wal_file_and_schema(tmp_path):
    path = tmp_path / "a" / "b" / "s.db"
    store = sessionstore.connect(url_of(path), NS)
    assert not path.exists()
    store.session("A", "s", "e", "1h").set_data("v", T0)
    store.close()
    assert raw(path, "PRAGMA journal_mode") == [("wal",)]
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    tables = {name for (name,) in raw(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"kv_values", "kv_history", "log_sessions", "log_events"} <= tables


def test_connections_use_full_synchronous_and_a_busy_timeout(database):
    conn = database.connection()
    assert conn.execute("PRAGMA synchronous").fetchone() == (2,)
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (10_000,)


def test_lease_transactions_skip_the_disk_wait_and_leave_appends_durable(database, events):
    """A lease commits with synchronous=NORMAL; every transaction after it, appends
    first, is back at FULL, also after a lease transaction that failed."""
    seen: list[int] = []

    def level() -> int:
        return database.connection().execute("PRAGMA synchronous").fetchone()[0]

    with database.transaction("s", immediate=True, durable=False):
        seen.append(level())
    assert events.acquire_lease("s", "owner-a", 30_000)
    seen.append(level())
    with pytest.raises(LookupError), database.transaction("s", immediate=True, durable=False):
        raise LookupError("failed inside the transaction")
    seen.append(level())
    events.release_lease("s", "owner-a")
    seen.append(level())
    assert seen == [1, 2, 2, 2]
    # Released: the row stays, free, keeping the lease's epoch (see fencing).
    assert raw(database.path, "SELECT owner, expires_at FROM log_leases") == [("", 0)]


def test_threads_of_one_process_queue_for_the_write_lock(db_path):
    """An immediate transaction holds the database's in-process write lock; a thread
    that cannot get it within the timeout gets StoreUnavailableError naming the file,
    and nothing is written."""
    database = Database(db_path, timeout=0.2)
    values = SqliteValues(database)
    held = threading.Event()
    done = threading.Event()

    def hold() -> None:
        with database.transaction("other", immediate=True):
            assert database.writing.locked()
            held.set()
            done.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        with pytest.raises(StoreUnavailableError, match=str(db_path)):
            values.write(KEY, b"x", T0)
    finally:
        done.set()
        thread.join()
    assert not database.writing.locked()
    assert values.read(KEY) is None
    values.write(KEY, b"x", T0)
    assert values.read(KEY) == Stored(b"x", T0)
    database.close()


def test_each_thread_gets_its_own_connection(database):
    seen: list[sqlite3.Connection] = []
    thread = threading.Thread(target=lambda: seen.append(database.connection()))
    thread.start()
    thread.join()
    assert seen[0] is not database.connection()


def test_data_survives_closing_and_reopening(db_path):
    with sessionstore.connect(url_of(db_path), NS) as store:
        store.session("A", "s", "e", "1h").set_data({"x": 1}, T0)
        store.events.create(SessionHeader(id="s-1", created_at=T0))
        store.events.append("s-1", [{"seq": 0, "type": "t", "time": T0, "data": {"k": 1}}])
    with sessionstore.connect(url_of(db_path), NS) as store:
        assert store.session("A", "s", "e", "1h").get_data(T0) == {"x": 1}
        assert [e.data for e in store.events.read_from("s-1", 0)] == [{"k": 1}]


def test_namespaces_in_one_file_never_see_each_other(db_path):
    with (
        sessionstore.connect(url_of(db_path), "one") as one,
        sessionstore.connect(url_of(db_path), "two") as two,
    ):
        one.session("A", "s", "e", "1h").set_data("mine", T0)
        one.session("A", "s", "e", "1h", history=True).set_data("old", T0)
        one.events.create(SessionHeader(id="s-1"))
        one.events.append("s-1", [{"seq": 0, "type": "t", "time": 1}])
        assert two.session("A", "s", "e", "1h").get_data(T0) is None
        assert two.session("A", "s", "e", "1h", history=True).get_data(T0) is None
        assert two.events.list() == []
        with pytest.raises(SessionNotFoundError):
            two.events.read_from("s-1", 0)
        with pytest.raises(SessionNotFoundError):
            two.events.delete("s-1")
        two.events.create(SessionHeader(id="s-1"))
        two.events.append("s-1", [{"seq": 0, "type": "other", "time": 2}])
        assert [e.type for e in one.events.read_from("s-1", 0)] == ["t"]


# --- values -----------------------------------------------------------------------------


def test_write_replaces_and_none_deletes_the_row(values, db_path):
    assert values.read(KEY) is None
    values.write(KEY, b"one", T0)
    values.write(KEY, b"two", T0 - 5)
    assert values.read(KEY) == Stored(b"two", T0 - 5)
    values.write(KEY, None, T0)
    assert values.read(KEY) is None
    assert raw(db_path, "SELECT COUNT(*) FROM kv_values") == [(0,)]


def test_swap_compares_the_whole_stored_record(values):
    assert values.swap(KEY, None, b"a", T0)
    assert not values.swap(KEY, None, b"b", T0)
    assert not values.swap(KEY, Stored(b"a", T0 + 1), b"b", T0)
    assert not values.swap(KEY, Stored(b"x", T0), b"b", T0)
    assert values.read(KEY) == Stored(b"a", T0)
    assert values.swap(KEY, Stored(b"a", T0), None, T0 + 1)
    assert values.read(KEY) is None


def test_read_as_of_gives_the_newest_version_at_or_before_when(values):
    for when, payload in [(10, b"a"), (20, None), (30, b"c")]:
        values.write_version(KEY, payload, when, None)
    assert values.read_as_of(KEY, 9) is None
    assert values.read_as_of(KEY, 10) == Stored(b"a", 10)
    assert values.read_as_of(KEY, 25) == Stored(None, 20)
    assert values.read_as_of(KEY, 99) == Stored(b"c", 30)


def test_write_version_drops_versions_at_or_after_when(values):
    for when in (10, 20, 30):
        values.write_version(KEY, str(when).encode(), when, None)
    values.write_version(KEY, b"new", 20, None)
    assert values.read_as_of(KEY, 99) == Stored(b"new", 20)
    assert values.read_as_of(KEY, 19) == Stored(b"10", 10)


def test_write_version_keeps_only_the_newest_max_versions(values, db_path):
    for when in (10, 20, 30, 40):
        values.write_version(KEY, b"v", when, 2)
    assert raw(db_path, "SELECT when_ms FROM kv_history ORDER BY when_ms") == [(30,), (40,)]
    values.write_version(KEY, b"v", 35, 1)
    assert raw(db_path, "SELECT when_ms FROM kv_history") == [(35,)]


def test_swap_version_compares_the_version_visible_at_when(values):
    values.write_version(KEY, b"a", 10, None)
    values.write_version(KEY, b"b", 30, None)
    assert not values.swap_version(KEY, Stored(b"b", 30), b"x", 20, None)
    assert values.swap_version(KEY, Stored(b"a", 10), b"x", 20, None)
    # write_version semantics: the version at 30 was dropped
    assert values.read_as_of(KEY, 99) == Stored(b"x", 20)
    assert values.swap_version(KEY, None, b"first", 5, None)
    assert values.read_as_of(KEY, 99) == Stored(b"first", 5)


def test_update_through_the_facade_from_many_threads_loses_nothing(db_path):
    with sessionstore.connect(url_of(db_path), NS) as store:
        session = store.session("A", "s", "e", "1h")

        def bump() -> None:
            for _ in range(50):
                session.update(lambda v: (v or 0) + 1, T0)

        threads = [threading.Thread(target=bump) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert session.get_data(T0) == 400


# --- event logs -------------------------------------------------------------------------


def test_locate_is_none_and_exists_follows_the_session_row(events):
    assert events.locate("s-1") is None
    assert not events.exists("s-1")
    started(events, "s-1", 1)
    assert events.exists("s-1")


def test_append_needs_an_existing_session_or_a_header(events, db_path):
    with pytest.raises(SessionNotFoundError):
        events.append("s-1", batch_of([event(0)]), None)
    assert raw(db_path, "SELECT COUNT(*) FROM log_events") == [(0,)]


def test_append_with_another_header_is_refused(events, db_path):
    started(events, "s-1", 1)
    before = log_rows(db_path)
    other = SessionHeader(id="s-1", created_at=T0 + 1)
    with pytest.raises(SessionExistsError):
        events.append("s-1", batch_of([event(1)]), other)
    assert log_rows(db_path) == before
    same = SessionHeader(id="s-1", created_at=T0)
    assert events.append("s-1", batch_of([event(1)]), same) == 2


def test_append_returns_the_next_seq_and_refuses_a_wrong_seq(events):
    header = started(events, "s-1", 2)
    assert events.append("s-1", batch_of([event(2), event(3)]), None) == 4
    with pytest.raises(SeqConflictError):
        events.append("s-1", batch_of([event(5)]), None)
    stored_events = [event(0, '{"i":0}'), event(1, '{"i":1}'), event(2), event(3)]
    assert events.read("s-1") == (header, stored_events)


def test_an_identical_replay_writes_nothing_and_a_different_one_conflicts(events, db_path):
    started(events, "s-1", 3)
    before = log_rows(db_path)
    assert events.append("s-1", batch_of([event(1, '{"i":1}'), event(2, '{"i":2}')]), None) == 3
    with pytest.raises(SeqConflictError):
        events.append("s-1", batch_of([event(1, '{"i":1}'), event(2, '{"i":9}')]), None)
    with pytest.raises(SeqConflictError):
        events.append("s-1", batch_of([event(2, '{"i":2}'), event(3)]), None)
    assert log_rows(db_path) == before


def test_read_honours_from_seq_and_limit(events):
    started(events, "s-1", 6)
    assert [e.seq for e in events.read("s-1", 2, limit=3)[1]] == [2, 3, 4]
    assert [e.seq for e in events.read("s-1", 4)[1]] == [4, 5]
    assert events.read("s-1", 9)[1] == []
    assert events.read("s-1", 0, limit=0)[1] == []


def tear(db_path: Path, seq: int, session_id: str = "s-1") -> None:
    raw(
        db_path,
        "INSERT INTO log_events VALUES (?, ?, ?, 'torn', 1, '{}', NULL)",
        (NS, session_id, seq),
    )


def test_append_cuts_a_torn_tail_whose_rows_are_not_contiguous(events, db_path):
    """Every row past ``next_seq`` is the tail, whatever its seq (the contract itself:
    tests/conformance/test_events.py)."""
    started(events, "s-1", 2)
    tear(db_path, 2)
    tear(db_path, 7)
    assert events.append("s-1", batch_of([event(2, '{"new":true}')]), None) == 3
    assert raw(db_path, "SELECT seq, type FROM log_events ORDER BY seq")[2:] == [(2, "note")]


def test_orphan_rows_of_an_unmaterialised_session_are_a_torn_tail(events, db_path):
    assert not events.exists("s-1")  # creates the schema
    tear(db_path, 0)
    header = SessionHeader(id="s-1", created_at=T0)
    assert events.append("s-1", batch_of([event(0)]), header) == 1
    assert events.read("s-1") == (header, [event(0)])


@pytest.mark.parametrize(
    ("sql", "seq"),
    [
        ("DELETE FROM log_events WHERE seq = 1", 1),
        ("UPDATE log_events SET data = 'not json' WHERE seq = 2", 2),
        ("UPDATE log_events SET data = '[1, 2]' WHERE seq = 0", 0),
        ("UPDATE log_events SET type = NULL WHERE seq = 1", 1),
        ("UPDATE log_events SET time = NULL WHERE seq = 2", 2),
        ("UPDATE log_events SET data = NULL WHERE seq = 1", 1),
        # Text that is not UTF-8 (the driver fails the whole statement on it).
        ("UPDATE log_events SET data = CAST(X'7B2261223A22FF227D' AS TEXT) WHERE seq = 2", 2),
        ("UPDATE log_events SET type = CAST(X'C328' AS TEXT) WHERE seq = 1", 1),
        ("UPDATE log_events SET event_id = CAST(X'FF' AS TEXT) WHERE seq = 0", 0),
    ],
)
def test_damage_before_the_end_is_corruption_and_nothing_is_rewritten(events, db_path, sql, seq):
    started(events, "s-1", 4)
    raw(db_path, sql)
    tear(db_path, 4)
    before = log_rows(db_path)
    for repair in (False, True):
        with pytest.raises(CorruptLogError) as caught:
            events.read("s-1", repair=repair)
        assert caught.value.seq == seq and caught.value.session_id == "s-1"
    assert log_rows(db_path) == before


def test_a_lost_event_is_found_by_read_and_an_append_leaves_it_as_it_was(events, db_path):
    started(events, "s-1", 4)
    raw(db_path, "DELETE FROM log_events WHERE seq = 2")
    seqs = "SELECT seq FROM log_events ORDER BY seq"
    assert events.append("s-1", batch_of([event(4)]), None) == 5
    assert raw(db_path, seqs) == [(0,), (1,), (3,), (4,)]
    after = log_rows(db_path)
    for repair in (False, True):
        with pytest.raises(CorruptLogError) as caught:
            events.read("s-1", repair=repair)
        assert caught.value.seq == 2
    with pytest.raises(CorruptLogError) as caught:
        events.append("s-1", batch_of([event(2)]), None)
    assert caught.value.seq == 2
    assert log_rows(db_path) == after


def test_an_append_reads_no_event_rows_whatever_the_log_length(events, database):
    started(events, "s-1", 200)
    appended: list[int] = []
    statements = traced(
        database,
        lambda: appended.append(events.append("s-1", batch_of([event(200), event(201)]), None)),
        words=None,
    )
    assert appended == [202]
    on_events = [s for s in statements if "log_events" in s]
    assert on_events, statements
    assert not [s for s in on_events if s.lstrip().upper().startswith("SELECT")], on_events
    assert [e.seq for e in events.read("s-1", 198)[1]] == [198, 199, 200, 201]


def remembered(events: SqliteEvents, session_id: str, count: int, **create) -> SessionHeader:
    """What :func:`started` stores (``count`` >= 2), in two appends: ``events`` has then
    read the session row back, so that its next append is the one-UPDATE kind."""
    header = SessionHeader(id=session_id, created_at=T0)
    events.append(session_id, batch_of([event(0, '{"i":0}')]), header, **create)
    rest = [event(i, f'{{"i":{i}}}') for i in range(1, count)]
    assert events.append(session_id, batch_of(rest), None) == count
    assert session_id in events._known
    return header


ONE_UPDATE = ["BEGIN IMMEDIATE", "UPDATE log_sessions SET", "INSERT INTO log_events", "COMMIT"]
READS_THE_ROW = ["BEGIN IMMEDIATE", "SELECT version, created_at,"]


def test_an_append_to_a_remembered_session_is_one_update_and_inserts(events, database):
    started(events, "s-1", 1)
    # The instance that created the session remembers what it wrote.
    ran = traced(database, lambda: events.append("s-1", batch_of([event(1)]), None))
    assert ran == ONE_UPDATE
    # Another instance (another process) reads the row once, then remembers it.
    other = SqliteEvents(database, NS)
    ran = traced(database, lambda: other.append("s-1", batch_of([event(2)]), None))
    assert ran[:2] == READS_THE_ROW, ran
    ran = traced(database, lambda: other.append("s-1", batch_of([event(3)]), None))
    assert ran == ONE_UPDATE
    # ... or reads the log first: the read remembers the row too.
    third = SqliteEvents(database, NS)
    assert [e.seq for e in third.read("s-1", 3)[1]] == [3]
    ran = traced(database, lambda: third.append("s-1", batch_of([event(4)]), None))
    assert ran == ONE_UPDATE
    # A replay or a conflict matches no row; then the row is read and the batch judged.
    ran = traced(database, lambda: events.append("s-1", batch_of([event(4)]), None))
    assert ran[1:3] == ["UPDATE log_sessions SET", "SELECT version, created_at,"], ran
    assert [e.seq for e in events.read("s-1")[1]] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("size", [1, 2, 3, 63, 64, 65, 100, 129, 300])
def test_batches_of_any_size_land_whole_and_in_order(events, db_path, size):
    header = remembered(events, "s-1", 2)
    batch = [
        stored(seq, f"t{seq % 7}", T0 - seq, f'{{"n":{seq}}}', None if seq % 3 else f"id-{seq}")
        for seq in range(2, 2 + size)
    ]
    assert events.append("s-1", batch_of(list(batch)), None) == 2 + size
    assert events.append("s-1", batch_of(list(batch)), None) == 2 + size  # an applied replay
    rows = raw(
        db_path,
        "SELECT seq, type, time, data, event_id FROM log_events WHERE namespace=? ORDER BY seq",
        (NS,),
    )
    assert rows[2:] == [(e.seq, e.type, e.time, f'{{"n":{e.seq}}}', e.id) for e in batch]
    written = [event(0, '{"i":0}'), event(1, '{"i":1}'), *batch]
    assert events.read("s-1") == (header, written)


def test_a_remembered_session_changed_by_another_process_is_judged_from_its_row(
    events, database, db_path
):
    remembered(events, "s-1", 2)
    other = SqliteEvents(database, NS)
    # Another process appended: a conflict, and nothing written.
    assert other.append("s-1", batch_of([event(2)]), None) == 3
    before = log_rows(db_path)
    with pytest.raises(SeqConflictError):
        events.append("s-1", batch_of([event(2, '{"mine":1}')]), None)
    assert log_rows(db_path) == before
    # ... or deleted the session: it is gone for this instance too.
    other.delete("s-1")
    with pytest.raises(SessionNotFoundError):
        events.append("s-1", batch_of([event(3)]), None)
    # ... or created it anew with another header: appends follow the new row.
    remembered(events, "s-1", 2)
    renewed = SessionHeader(id="s-1", created_at=T0 + 5, cwd="/elsewhere")
    raw(db_path, "DELETE FROM log_events")
    raw(db_path, "DELETE FROM log_sessions")
    assert other.append("s-1", batch_of([event(0), event(1)]), renewed) == 2
    with pytest.raises(SessionExistsError):
        events.append("s-1", batch_of([event(2)]), SessionHeader(id="s-1", created_at=T0))
    assert events.append("s-1", batch_of([event(2)]), None) == 3
    assert events.read("s-1")[0] == renewed
    assert raw(db_path, "SELECT next_seq FROM log_sessions") == [(3,)]


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("UPDATE log_sessions SET created_at = 'yesterday'", CorruptLogError),
        ("UPDATE log_sessions SET created_at = 1.5", CorruptLogError),
        ("UPDATE log_sessions SET cwd = x'2f78'", CorruptLogError),
        ("UPDATE log_sessions SET fork_seq = -3", CorruptLogError),
        ("UPDATE log_sessions SET next_seq = 'many'", CorruptLogError),
        ("UPDATE log_sessions SET ttl_ms = -5", CorruptLogError),
        ("UPDATE log_sessions SET ttl_ms = 'soon'", CorruptLogError),
        ("UPDATE log_sessions SET version = 7", UnsupportedVersionError),
    ],
)
@pytest.mark.parametrize("ttl_ms", [None, 60_000])
def test_damage_to_a_remembered_session_row_is_still_refused(events, db_path, sql, error, ttl_ms):
    remembered(events, "s-1", 2, ttl_ms=ttl_ms)
    raw(db_path, sql)
    before = log_rows(db_path)
    with pytest.raises(error):
        events.append("s-1", batch_of([event(2)]), None)
    assert log_rows(db_path) == before


def test_expiry_moves_only_for_a_session_with_a_ttl(events, database, db_path):
    remembered(events, "timed", 2, ttl_ms=60_000)
    remembered(events, "plain", 2)
    expiry = "SELECT ttl_ms, expires_at FROM log_sessions WHERE id=?"
    ((ttl, first),) = raw(db_path, expiry, ("timed",))
    assert ttl == 60_000
    raw(db_path, "UPDATE log_sessions SET expires_at = 5 WHERE id='timed'")
    # The ttl given to an append of an existing session is ignored: the stored one counts.
    ran = traced(database, lambda: events.append("timed", batch_of([event(2)]), None, ttl_ms=1))
    assert ran == ONE_UPDATE
    ((ttl, moved),) = raw(db_path, expiry, ("timed",))
    assert ttl == 60_000 and moved >= first
    ran = traced(database, lambda: events.append("plain", batch_of([event(2)]), None, ttl_ms=1))
    assert ran == ONE_UPDATE
    assert raw(db_path, expiry, ("plain",)) == [(None, None)]
    # A stray expiry on a session without a ttl is cleared, as every append did before.
    raw(db_path, "UPDATE log_sessions SET expires_at = 5 WHERE id='plain'")
    assert events.append("plain", batch_of([event(3)]), None) == 4
    assert raw(db_path, expiry, ("plain",)) == [(None, None)]
    assert events.prune(T0 * 2) == 1
    assert [h.id for h in events.list()] == ["plain"]
    assert "timed" not in events._known


def test_a_failed_append_of_a_remembered_session_leaves_the_database_unchanged(events, db_path):
    remembered(events, "s-1", 2)
    before = log_rows(db_path)
    batch = [event(2), event(3), stored(4, "t", 2**64, "{}")]
    with pytest.raises(InvalidArgumentError):
        events.append("s-1", batch_of(batch), None)
    assert log_rows(db_path) == before
    assert events.append("s-1", batch_of(batch[:2]), None) == 4


def test_a_transaction_rolls_back_and_translates_driver_errors(database, db_path):
    count = "SELECT COUNT(*) FROM log_sessions"
    insert = "INSERT INTO log_sessions (namespace, id) VALUES ('n', 'x')"
    with pytest.raises(RuntimeError), database.transaction("x", immediate=True) as conn:
        conn.execute(insert)
        raise RuntimeError("boom")
    assert raw(db_path, count) == [(0,)]
    with (
        pytest.raises(CorruptLogError) as caught,
        database.transaction("x", immediate=False) as conn,
    ):
        conn.execute(insert)
        conn.execute("SELECT nothing FROM no_such_table")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert not database.connection().in_transaction
    with database.transaction("x", immediate=True) as conn:
        conn.execute(insert)
    assert raw(db_path, count) == [(1,)]
    with pytest.raises(CorruptLogError), database.guard("x") as conn:
        conn.execute("SELECT nothing FROM no_such_table")


def test_a_stored_header_of_another_version_is_unsupported(events, db_path):
    started(events, "s-1", 1)
    raw(db_path, "UPDATE log_sessions SET version = 7")
    with pytest.raises(UnsupportedVersionError) as caught:
        events.read("s-1")
    assert caught.value.found == 7
    with pytest.raises(UnsupportedVersionError):
        events.append("s-1", batch_of([event(1)]), None)


def test_a_malformed_stored_header_is_corruption(events, db_path):
    started(events, "s-1", 1)
    raw(db_path, "UPDATE log_sessions SET created_at = 'yesterday'")
    with pytest.raises(CorruptLogError):
        events.read("s-1")


def test_a_stored_header_that_is_not_utf8_is_corruption_and_list_skips_it(events, db_path):
    started(events, "s-1", 1)
    kept = started(events, "s-2", 1)
    raw(db_path, "UPDATE log_sessions SET cwd = CAST(X'2FFF' AS TEXT) WHERE id = 's-1'")
    with pytest.raises(CorruptLogError, match="cwd") as caught:
        events.read("s-1")
    assert caught.value.session_id == "s-1"
    with pytest.raises(CorruptLogError, match="cwd"):
        events.info("s-1")
    assert events.list() == [kept]
    assert [info.header for info in events.list_info()] == [kept]
    # A blob where text belongs is refused alike, whether or not a row beside it holds
    # text that is not UTF-8 (which makes the driver read the statement again).
    started(events, "s-3", 1)
    raw(db_path, "UPDATE log_sessions SET cwd = X'2F77' WHERE id = 's-3'")
    assert events.list() == [kept]
    raw(db_path, "UPDATE log_sessions SET cwd = '/w' WHERE id = 's-1'")
    assert sorted(header.id for header in events.list()) == ["s-1", "s-2"]


def test_list_reads_the_session_rows_of_the_namespace(events, database, db_path):
    a = started(events, "a", 1)
    b = started(events, "b", 2)
    started(SqliteEvents(database, "elsewhere"), "c", 1)
    assert sorted(events.list(), key=lambda h: h.id) == [a, b]


def test_delete_removes_the_session_and_all_its_events(events, db_path):
    started(events, "s-1", 3)
    started(events, "s-2", 1)
    tear(db_path, 3)
    events.delete("s-1")
    assert log_rows(db_path, "s-1") == []
    assert events.exists("s-2")
    with pytest.raises(SessionNotFoundError):
        events.delete("s-1")


def test_an_oversized_number_is_an_invalid_argument_and_writes_nothing(db_path):
    with sessionstore.connect(url_of(db_path), NS) as store:
        store.events.create(SessionHeader(id="s-1"))
        with pytest.raises(InvalidArgumentError):
            store.events.append("s-1", [{"seq": 0, "type": "t", "time": 2**64}])
        assert store.events.list() == []


# --- driver errors ----------------------------------------------------------------------


def test_a_file_that_is_not_a_database_is_reported_corrupt(db_path):
    db_path.write_bytes(b"this is not an sqlite database, just some text" * 100)
    store = sessionstore.connect(url_of(db_path), NS)
    with pytest.raises(CorruptLogError) as caught:
        store.events.read_from("s-1", 0)
    store.close()
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


def test_an_unreachable_location_is_unavailable(tmp_path):
    (tmp_path / "file").write_text("in the way")
    store = sessionstore.connect(url_of(tmp_path / "file" / "s.db"), NS)
    with pytest.raises(StoreUnavailableError) as caught:
        store.session("A", "s", "e", "1h").get_data(T0)
    store.close()
    assert isinstance(caught.value.__cause__, OSError)


def test_a_write_lock_held_beyond_the_timeout_is_unavailable(db_path):
    backends = open_sqlite(url_of(db_path), NS, timeout=0.05)
    backends.values.read(KEY)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            backends.values.swap(KEY, None, b"x", T0)
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        with pytest.raises(StoreUnavailableError):
            backends.events.append("s-1", batch_of([event(0)]), SessionHeader(id="s-1"))
    finally:
        blocker.rollback()
        blocker.close()
    assert backends.values.swap(KEY, None, b"x", T0)
    backends.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_a_read_only_database_is_access_denied(db_path):
    with sessionstore.connect(url_of(db_path), NS) as store:
        store.session("A", "s", "e", "1h").set_data(1, T0)
    db_path.chmod(0o444)
    try:
        with (
            sessionstore.connect(url_of(db_path), NS) as store,
            pytest.raises(AccessDeniedError),
        ):
            store.session("A", "s", "e", "1h").set_data(2, T0)
    finally:
        db_path.chmod(0o644)


# --- several processes ------------------------------------------------------------------


def _increment(store: sessionstore.Store, start: multiprocessing.synchronize.Event) -> None:
    start.wait()
    session = store.session("A", "s", "e", "1h")
    for _ in range(500):
        session.update(lambda v: (v or 0) + 1, T0)


@pytest.mark.slow
def test_four_processes_incrementing_through_update_lose_nothing(db_path):
    context = multiprocessing.get_context("fork")
    start = context.Event()
    # The store is opened and used before forking: each child must open its own
    # connection rather than reuse the parent's.
    store = sessionstore.connect(url_of(db_path), NS)
    store.session("A", "s", "e", "1h").set_data(0, T0)
    workers = [context.Process(target=_increment, args=(store, start)) for _ in range(4)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join()
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    assert store.session("A", "s", "e", "1h").get_data(T0) == 2000
    store.close()


def _append_batches(url: str, worker: int, start: multiprocessing.synchronize.Event) -> None:
    start.wait()
    with sessionstore.connect(url, NS) as store:
        for batch in range(40):
            while True:
                next_seq = len(store.events.read_from("s-1", 0))
                data = {"w": worker, "b": batch}
                events = [
                    {"seq": next_seq + i, "type": "t", "time": T0, "data": data} for i in range(3)
                ]
                try:
                    store.events.append("s-1", events)
                except SeqConflictError:
                    continue
                break


@pytest.mark.slow
def test_concurrent_appenders_land_whole_batches_or_conflict(db_path):
    url = url_of(db_path)
    with sessionstore.connect(url, NS) as store:
        store.events.create(SessionHeader(id="s-1"))
        store.events.append("s-1", [{"seq": 0, "type": "start", "time": T0}])
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    workers = [context.Process(target=_append_batches, args=(url, w, start)) for w in range(4)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join()
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    with sessionstore.connect(url, NS) as store:
        log = store.events.load("s-1").events
    assert [e.seq for e in log] == list(range(1 + 4 * 40 * 3))
    batches = [(e.data["w"], e.data["b"]) for e in log[1:]]
    runs = [batches[i : i + 3] for i in range(0, len(batches), 3)]
    assert all(len(set(run)) == 1 for run in runs)
    assert sorted(run[0] for run in runs) == sorted((w, b) for w in range(4) for b in range(40))


def _open_and_write(url: str, barrier, worker: int) -> None:  # noqa: ANN001 - a process target
    store = sessionstore.connect(url, namespace="race")
    barrier.wait(timeout=30)
    store.session(f"S{worker}", "s", "e", "1h").set_data(worker, 5)
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_processes_opening_one_new_database_at_once_all_succeed(tmp_path, round_):
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'new.db'}"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(6)
    workers = [context.Process(target=_open_and_write, args=(url, barrier, n)) for n in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0] * 6
    with sessionstore.connect(url, namespace="race") as store:
        assert sorted(ref.symbol for ref in store.list_values()) == [f"S{n}" for n in range(6)]


def test_the_database_and_its_folders_are_private_whatever_the_umask(tmp_path):
    """Created under umask 000, the database file and SQLite's -wal and -shm files are
    0600 and the folders made for them 0700: no other user reads or writes the store."""
    path = tmp_path / "made" / "here" / "store.db"
    old = os.umask(0)
    try:
        with sessionstore.connect(f"sqlite:///{path}", namespace="ns") as store:
            store.session("A", "s", "e", "1h").set_data({"v": 1}, 0)
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.iterdir()}
    finally:
        os.umask(old)
    assert {"store.db", "store.db-wal", "store.db-shm"} <= set(modes)
    assert set(modes.values()) == {0o600}, modes
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
