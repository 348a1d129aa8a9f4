"""The statements of the SQLite event log's hot paths, counted on the connection, and the
guarantees each shortcut keeps: a read is one SELECT (one snapshot), an append to a
remembered session one UPDATE (position, header, ttl, torn tail and lease checked in it)
and its INSERTs, a repairing read without a torn tail takes no write lock."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from support import sqlite_trace
from support.events import batch_of, stored

from sessionstore import (
    CorruptLogError,
    SessionBusyError,
    SessionHeader,
    UnsupportedVersionError,
)
from sessionstore.backends.sqlite_db import Database
from sessionstore.backends.sqlite_events import SqliteEvents
from sessionstore.leases import Lease
from sessionstore.models import SessionEvent

NS = "ns-a"
T0 = 1_718_000_000_000
APPEND = ["BEGIN IMMEDIATE", "UPDATE log_sessions", "INSERT INTO", "COMMIT"]


@pytest.fixture
def database(tmp_path: Path):
    db = Database(tmp_path / "s.db")
    yield db
    db.close()


@pytest.fixture
def events(database: Database) -> SqliteEvents:
    return SqliteEvents(database, NS)


def raw(database: Database, sql: str, params: tuple = ()) -> list[tuple]:
    """Run ``sql`` on a separate, plain connection (as an outside tool would)."""
    with closing(sqlite3.connect(database.path)) as conn, conn:
        return conn.execute(sql, params).fetchall()


def event(seq: int) -> SessionEvent:
    return stored(seq, "note", T0 + seq, f'{{"i":{seq}}}')


def traced(database: Database, action) -> list[str]:
    """The first two words of each statement this thread's connection runs in ``action()``."""
    return sqlite_trace.traced(database, action, words=2)


def started(events: SqliteEvents, count: int, session_id: str = "s-1") -> SessionHeader:
    header = SessionHeader(id=session_id, created_at=T0, cwd="/work")
    events.append(session_id, batch_of([event(i) for i in range(count)]), header)
    return header


def test_a_read_is_one_select_and_a_repair_without_a_torn_tail_takes_no_lock(events, database):
    header = started(events, 5)
    for repair in (False, True):
        found: list[object] = []

        def read(found: list[object] = found, repair: bool = repair) -> None:
            found.append(events.read("s-1", 2, repair=repair))

        assert traced(database, read) == ["SELECT -2,"]
        assert found == [(header, [event(2), event(3), event(4)])]
    ran = traced(database, lambda: events.read("s-1", 1, limit=2))
    assert ran == ["SELECT -2,"]
    assert traced(database, lambda: events.read("s-1", 9)) == ["SELECT -2,"]


def test_a_torn_tail_is_left_out_and_a_repair_cuts_it_under_the_write_lock(events, database):
    header = started(events, 3)
    raw(database, "INSERT INTO log_events VALUES (?, 's-1', 3, 'torn', 1, '{}', NULL)", (NS,))
    raw(database, "INSERT INTO log_events VALUES (?, 's-1', 9, 'torn', 1, '{}', NULL)", (NS,))
    assert events.read("s-1") == (header, [event(0), event(1), event(2)])
    assert events.read("s-1", 3) == (header, [])
    assert raw(database, "SELECT COUNT(*) FROM log_events") == [(5,)]
    ran = traced(database, lambda: events.read("s-1", 1, repair=True))
    assert ran == ["SELECT -2,", "BEGIN IMMEDIATE", "SELECT -2,", "DELETE FROM", "COMMIT"]
    assert raw(database, "SELECT seq FROM log_events ORDER BY seq") == [(0,), (1,), (2,)]


def test_an_append_is_one_update_and_still_cuts_a_torn_tail(events, database):
    started(events, 2)
    assert traced(database, lambda: events.append("s-1", batch_of([event(2)]), None)) == APPEND
    # A torn tail fails the UPDATE: the row is read, judged and the tail cut first.
    raw(database, "INSERT INTO log_events VALUES (?, 's-1', 5, 'torn', 1, '{}', NULL)", (NS,))
    ran = traced(database, lambda: events.append("s-1", batch_of([event(3)]), None))
    assert ran[:3] == ["BEGIN IMMEDIATE", "UPDATE log_sessions", "SELECT version,"], ran
    assert "DELETE FROM" in ran
    assert raw(database, "SELECT seq FROM log_events ORDER BY seq") == [(i,) for i in range(4)]
    assert traced(database, lambda: events.append("s-1", batch_of([event(4)]), None)) == APPEND


def test_a_writer_append_is_fenced_within_its_update(events, database):
    started(events, 1)
    epoch = events.acquire_lease("s-1", "a", 30_000)
    mine = Lease("a", epoch)
    ran = traced(database, lambda: events.append("s-1", batch_of([event(1)]), None, lease=mine))
    assert ran == APPEND
    # Another writer takes the lease over (it lapsed): the remembered session's append
    # is refused and writes nothing.
    raw(database, "UPDATE log_leases SET expires_at = 1")
    assert events.acquire_lease("s-1", "b", 30_000) > epoch
    before = raw(database, "SELECT * FROM log_events ORDER BY seq")
    with pytest.raises(SessionBusyError):
        events.append("s-1", batch_of([event(2)]), None, lease=mine)
    assert raw(database, "SELECT * FROM log_events ORDER BY seq") == before
    assert raw(database, "SELECT next_seq FROM log_sessions") == [(2,)]


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("UPDATE log_sessions SET created_at = 'yesterday'", CorruptLogError),
        ("UPDATE log_sessions SET cwd = CAST(cwd AS BLOB)", CorruptLogError),
        ("UPDATE log_sessions SET next_seq = -1", CorruptLogError),
        ("UPDATE log_sessions SET next_seq = 'many'", CorruptLogError),
        ("UPDATE log_sessions SET version = 7", UnsupportedVersionError),
    ],
)
def test_a_header_read_before_is_checked_again_on_every_read(events, database, sql, error):
    """A read reuses a header it validated only while the row holds the same columns."""
    started(events, 3)
    events.read("s-1")
    raw(database, sql)
    for repair in (False, True):
        with pytest.raises(error):
            events.read("s-1", repair=repair)


def test_a_read_sees_the_committed_log_while_another_connection_writes(events, database):
    header = started(events, 2)
    with closing(sqlite3.connect(database.path, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE log_sessions SET next_seq = 3")
        writer.execute("INSERT INTO log_events VALUES (?, 's-1', 2, 'note', 1, '{}', NULL)", (NS,))
        for repair in (False, True):
            assert events.read("s-1", repair=repair) == (header, [event(0), event(1)])
        writer.execute("COMMIT")
    assert [e.seq for e in events.read("s-1", repair=True)[1]] == [0, 1, 2]
