"""A ``sqlite:///`` URL pointed at a database sessionstore did not create: every call is
refused with a typed error, and the file is left byte for byte as it was (no WAL switch,
no table, no ``user_version`` stamp, no ``-wal`` or ``-shm`` file)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import sessionstore
from sessionstore import InvalidArgumentError, SessionEvent, SessionHeader, StoreUnavailableError
from sessionstore.backends.sqlite_schema import SCHEMA_VERSION

T0 = 1_718_000_000_000


def _make_database(path: Path, script: str) -> bytes:
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(script)
    db.close()
    return path.read_bytes()


def _assert_untouched(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before
    for suffix in ("-wal", "-shm", "-journal"):
        assert not Path(f"{path}{suffix}").exists(), suffix


def _append(store: sessionstore.Store) -> None:
    store.events.create(SessionHeader(id="s-1"))
    store.events.append("s-1", [SessionEvent(seq=0, type="note", time=T0)])


def _calls(store: sessionstore.Store) -> list:
    session = store.session("A", "s", "e", "1h")
    return [
        lambda: session.set_data({"x": 1}, T0),
        lambda: _append(store),
        lambda: session.get_data(T0),
        lambda: store.events.list(),
    ]


OTHER_APP = """
    PRAGMA journal_mode=DELETE;
    CREATE TABLE invoices (id INTEGER PRIMARY KEY, customer TEXT, total REAL);
    INSERT INTO invoices VALUES (1, 'acme', 12.5), (2, 'globex', 99.0);
    PRAGMA user_version = 7;
"""


def test_another_applications_database_is_refused_and_left_byte_identical(tmp_path):
    path = tmp_path / "app.db"
    before = _make_database(path, OTHER_APP)
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("delete",)
    with sessionstore.connect(f"sqlite:///{path}", "ns") as store:
        for call in _calls(store):
            with pytest.raises(InvalidArgumentError, match="not a sessionstore database"):
                call()
    _assert_untouched(path, before)


@pytest.mark.parametrize(
    "script",
    [
        # user_version 0 (the value of a new file) but someone else's tables.
        "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me');",
        # Only some of our table names, under another application's version number.
        "CREATE TABLE kv_values (x); PRAGMA user_version = 1;",
        # Only a view and an index: any schema object makes the file not empty.
        "CREATE TABLE t (a); CREATE INDEX t_a ON t (a); CREATE VIEW v AS SELECT a FROM t;",
        # A negative user_version with our tables: not a version we ever wrote.
        "CREATE TABLE kv_values (a); CREATE TABLE kv_history (a); CREATE TABLE log_sessions (a);"
        " CREATE TABLE log_events (a); PRAGMA user_version = -1;",
    ],
)
def test_any_file_not_shaped_like_ours_is_refused_before_a_write(tmp_path, script):
    path = tmp_path / "other.db"
    before = _make_database(path, script)
    with sessionstore.connect(f"sqlite:///{path}", "ns") as store:
        for call in _calls(store)[:2]:
            with pytest.raises(InvalidArgumentError):
                call()
    _assert_untouched(path, before)


def _ours_then(path: Path, *statements: str) -> None:
    """A database sessionstore made (holding one value), then changed by ``statements``."""
    with sessionstore.connect(f"sqlite:///{path}", "ns") as store:
        store.session("A", "s", "e", "1h").set_data(1, T0)
    db = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        db.execute(statement)
    db.close()


def test_a_newer_sessionstore_schema_is_unavailable_and_left_unchanged(tmp_path):
    path = tmp_path / "newer.db"
    _ours_then(path, "PRAGMA journal_mode=DELETE", f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    with (
        sessionstore.connect(f"sqlite:///{path}", "ns") as store,
        pytest.raises(StoreUnavailableError, match="schema version"),
    ):
        store.session("A", "s", "e", "1h").set_data(2, T0)
    _assert_untouched(path, before)


def test_an_empty_file_is_taken_as_a_new_database(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with sessionstore.connect(f"sqlite:///{path}", "ns") as store:
        store.session("A", "s", "e", "1h").set_data(1, T0)
        assert store.session("A", "s", "e", "1h").get_data(T0) == 1
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    db.close()


def test_our_database_with_an_extra_table_of_the_user_is_still_ours(tmp_path):
    path = tmp_path / "ours.db"
    _ours_then(path, "CREATE TABLE my_notes (body TEXT)")
    with sessionstore.connect(f"sqlite:///{path}", "ns") as store:
        assert store.session("A", "s", "e", "1h").get_data(T0) == 1
