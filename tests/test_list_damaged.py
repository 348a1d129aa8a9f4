"""One damaged session never hides the others: ``list`` goes on past a damaged or foreign
header (logging what it skipped), while ``load`` of that session still raises."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import sessionstore
from sessionstore import CorruptLogError, SessionEvent, SessionHeader, UnsupportedVersionError
from sessionstore.store import Store

T = 1_718_000_000_000


def three_sessions(store: Store) -> None:
    for n, session_id in enumerate(["a", "b", "c"]):
        store.events.create(SessionHeader(id=session_id, created_at=n))
        store.events.append(session_id, [SessionEvent(seq=0, type="note", time=T)])


def jsonl_path(store: Store, session_id: str) -> Path:
    return Path(store.events.locate(session_id) or "")


def edit_header_line(store: Store, session_id: str, line: bytes) -> None:
    path = jsonl_path(store, session_id)
    rest = path.read_bytes().split(b"\n", 1)[1]
    path.write_bytes(line + b"\n" + rest)


def sqlite_set(store: Store, tmp_path: Path, assignment: str, session_id: str = "b") -> None:
    with sqlite3.connect(tmp_path / "store.db") as db:
        db.execute(f"UPDATE log_sessions SET {assignment} WHERE id=?", (session_id,))


JSONL_DAMAGE: dict[str, tuple[Callable[[Store], None], type[Exception]]] = {
    "garbled": (lambda s: edit_header_line(s, "b", b'{"id": "b", "vers'), CorruptLogError),
    "not an object": (lambda s: edit_header_line(s, "b", b"[1, 2]"), CorruptLogError),
    "bad field": (
        lambda s: edit_header_line(
            s,
            "b",
            b'{"id":"b","version":1,"created_at":"x","cwd":null,"parent_id":null,"fork_seq":null}',
        ),
        CorruptLogError,
    ),
    "other version": (
        lambda s: edit_header_line(
            s,
            "b",
            b'{"id":"b","version":7,"created_at":1,"cwd":null,"parent_id":null,"fork_seq":null}',
        ),
        UnsupportedVersionError,
    ),
}


@pytest.mark.parametrize("damage", sorted(JSONL_DAMAGE))
def test_jsonl_list_skips_a_damaged_header_and_logs_it(tmp_path, caplog, damage):
    damage_fn, raised = JSONL_DAMAGE[damage]
    with sessionstore.connect((tmp_path / "store").as_uri(), "ns") as store:
        three_sessions(store)
        damage_fn(store)
        with caplog.at_level(logging.WARNING, logger="sessionstore"):
            assert [h.id for h in store.events.list()] == ["a", "c"]
        [record] = [r for r in caplog.records if r.name == "sessionstore"]
        assert record.levelno == logging.WARNING and "b.jsonl" in record.getMessage()
        with pytest.raises(raised):
            store.events.load("b")


def test_jsonl_list_skips_a_log_whose_header_names_another_session(tmp_path, caplog):
    with sessionstore.connect((tmp_path / "store").as_uri(), "ns") as store:
        three_sessions(store)
        line = jsonl_path(store, "a").read_bytes().split(b"\n", 1)[0]
        edit_header_line(store, "b", line)
        with caplog.at_level(logging.WARNING, logger="sessionstore"):
            assert [h.id for h in store.events.list()] == ["a", "c"]
        assert "names session 'a'" in caplog.text
        with pytest.raises(CorruptLogError):
            store.events.load("b")


def test_jsonl_list_shows_a_session_whose_events_are_damaged(tmp_path):
    with sessionstore.connect((tmp_path / "store").as_uri(), "ns") as store:
        three_sessions(store)
        store.events.append("b", [SessionEvent(seq=1, type="note", time=T)])
        path = jsonl_path(store, "b")
        path.write_bytes(path.read_bytes().replace(b'"seq":0', b'"seq":"zero"'))
        assert [h.id for h in store.events.list()] == ["a", "b", "c"]
        with pytest.raises(CorruptLogError):
            store.events.read_from("b", 0)


SQLITE_DAMAGE = {
    "created_at": ("created_at='yesterday'", CorruptLogError),
    "cwd": ("cwd=x'00ff'", CorruptLogError),
    "fork_seq": ("fork_seq=-3", CorruptLogError),
    "version": ("version=7", UnsupportedVersionError),
    "version text": ("version='one'", UnsupportedVersionError),
}


@pytest.mark.parametrize("damage", sorted(SQLITE_DAMAGE))
def test_sqlite_list_skips_a_damaged_header_row_and_logs_it(tmp_path, caplog, damage):
    assignment, raised = SQLITE_DAMAGE[damage]
    with sessionstore.connect(f"sqlite:///{tmp_path / 'store.db'}", "ns") as store:
        three_sessions(store)
        sqlite_set(store, tmp_path, assignment)
        with caplog.at_level(logging.WARNING, logger="sessionstore"):
            assert [h.id for h in store.events.list()] == ["a", "c"]
        [record] = [r for r in caplog.records if r.name == "sessionstore"]
        assert "'b'" in record.getMessage()
        with pytest.raises(raised):
            store.events.load("b")


def test_sqlite_list_shows_a_session_whose_events_are_damaged(tmp_path):
    with sessionstore.connect(f"sqlite:///{tmp_path / 'store.db'}", "ns") as store:
        three_sessions(store)
        with sqlite3.connect(tmp_path / "store.db") as db:
            db.execute("UPDATE log_events SET data='not json' WHERE session_id='b'")
        assert [h.id for h in store.events.list()] == ["a", "b", "c"]
        with pytest.raises(CorruptLogError):
            store.events.load("b")


def test_a_warning_for_a_huge_damaged_header_stays_short(tmp_path, caplog):
    with sessionstore.connect(f"sqlite:///{tmp_path / 'store.db'}", "ns") as store:
        three_sessions(store)
        with sqlite3.connect(tmp_path / "store.db") as db:
            db.execute("UPDATE log_sessions SET created_at=? WHERE id='b'", ("x" * 100_000,))
        with caplog.at_level(logging.WARNING, logger="sessionstore"):
            assert [h.id for h in store.events.list()] == ["a", "c"]
        assert len(caplog.text) < 500
