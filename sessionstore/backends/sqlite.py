"""SQLite backend (``sqlite:///path/to.db``): one database file, shared by processes,
for the values and the event logs of every namespace.

Each operation is one transaction; every read-compare-write starts with
``BEGIN IMMEDIATE``, so concurrent processes serialise on SQLite's write lock instead
of interleaving. The file layout is described in :mod:`.sqlite_db`; the event logs
live in :mod:`.sqlite_events`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ..connection import Backends
from ..contracts import Stored, ValueBackend
from ..errors import CorruptLogError
from ..keys import ValueKey
from .sqlite_db import DEFAULT_TIMEOUT, Database, database_path
from .sqlite_events import SqliteEvents

_KEY = "namespace=? AND symbol=? AND strategy=? AND exchange=? AND frame=? AND mode=?"


def open_sqlite(url: str, namespace: str, *, timeout: float | None = None) -> Backends:
    """The backends of ``namespace`` in the database ``url`` names. No I/O until first use.

    ``timeout`` (seconds, default 10) bounds the wait for another process's write lock
    before ``StoreUnavailableError``.
    """
    database = Database(database_path(url), DEFAULT_TIMEOUT if timeout is None else timeout)
    return Backends(
        SqliteValues(database),
        SqliteEvents(database, namespace),
        url,
        closers=[database.close],
    )


def _key_params(key: ValueKey) -> tuple[str, ...]:
    return (key.namespace, *key.parts)


def _stored(key: ValueKey, row: Sequence[Any] | None) -> Stored | None:
    """A (when_ms, payload) row as :class:`Stored`; a history clear has payload None."""
    if row is None:
        return None
    when, payload = row
    if type(when) is not int or not (payload is None or isinstance(payload, bytes)):
        raise CorruptLogError(key.label(), f"stored value row has malformed columns: {row!r:.200}")
    return Stored(payload, when)


class SqliteValues(ValueBackend):
    """Session values: ``kv_values`` for plain values, ``kv_history`` for versions.

    Keys carry their namespace, so one instance serves any namespace of the file.
    """

    def __init__(self, database: Database) -> None:
        self._db = database

    def read(self, key: ValueKey) -> Stored | None:
        with self._db.guard(key.label()) as conn:
            row = conn.execute(
                f"SELECT when_ms, payload FROM kv_values WHERE {_KEY}", _key_params(key)
            ).fetchone()
        return _stored(key, row)

    def write(self, key: ValueKey, payload: bytes | None, when: int) -> None:
        with self._db.guard(key.label()) as conn:
            self._write(conn, key, payload, when)

    @staticmethod
    def _write(conn: sqlite3.Connection, key: ValueKey, payload: bytes | None, when: int) -> None:
        if payload is None:
            conn.execute(f"DELETE FROM kv_values WHERE {_KEY}", _key_params(key))
        else:
            conn.execute(
                "INSERT OR REPLACE INTO kv_values (namespace, symbol, strategy, exchange,"
                " frame, mode, when_ms, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*_key_params(key), when, payload),
            )

    def swap(
        self, key: ValueKey, expected: Stored | None, payload: bytes | None, when: int
    ) -> bool:
        with self._db.transaction(key.label(), immediate=True) as conn:
            row = conn.execute(
                f"SELECT when_ms, payload FROM kv_values WHERE {_KEY}", _key_params(key)
            ).fetchone()
            if _stored(key, row) != expected:
                return False
            self._write(conn, key, payload, when)
            return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        with self._db.guard(key.label()) as conn:
            return self._as_of(conn, key, when)

    @staticmethod
    def _as_of(conn: sqlite3.Connection, key: ValueKey, when: int) -> Stored | None:
        row = conn.execute(
            f"SELECT when_ms, payload FROM kv_history WHERE {_KEY} AND when_ms <= ?"
            " ORDER BY when_ms DESC LIMIT 1",
            (*_key_params(key), when),
        ).fetchone()
        return _stored(key, row)

    def write_version(
        self, key: ValueKey, payload: bytes | None, when: int, max_versions: int | None
    ) -> None:
        with self._db.transaction(key.label(), immediate=True) as conn:
            self._write_version(conn, key, payload, when, max_versions)

    @staticmethod
    def _write_version(
        conn: sqlite3.Connection,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
    ) -> None:
        params = _key_params(key)
        conn.execute(f"DELETE FROM kv_history WHERE {_KEY} AND when_ms >= ?", (*params, when))
        conn.execute(
            "INSERT INTO kv_history (namespace, symbol, strategy, exchange, frame, mode,"
            " when_ms, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*params, when, payload),
        )
        if max_versions is not None:
            # Everything older than the max_versions-th newest version goes; with fewer
            # versions the subquery is NULL and nothing matches.
            conn.execute(
                f"DELETE FROM kv_history WHERE {_KEY} AND when_ms < (SELECT when_ms FROM"
                f" kv_history WHERE {_KEY} ORDER BY when_ms DESC LIMIT 1 OFFSET ?)",
                (*params, *params, max_versions - 1),
            )

    def swap_version(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
    ) -> bool:
        with self._db.transaction(key.label(), immediate=True) as conn:
            if self._as_of(conn, key, when) != expected:
                return False
            self._write_version(conn, key, payload, when, max_versions)
            return True

    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        columns = "symbol, strategy, exchange, frame, mode"
        with self._db.guard(namespace) as conn:
            rows = conn.execute(
                f"SELECT DISTINCT {columns}, 0 FROM kv_values WHERE namespace=? UNION "
                f"SELECT DISTINCT {columns}, 1 FROM kv_history WHERE namespace=?",
                (namespace, namespace),
            ).fetchall()
        return [(ValueKey(namespace, *row[:5]), bool(row[5])) for row in rows]

    def forget(self, key: ValueKey) -> bool:
        with self._db.transaction(key.label(), immediate=True) as conn:
            removed = conn.execute(f"DELETE FROM kv_values WHERE {_KEY}", _key_params(key))
            found = removed.rowcount > 0
            removed = conn.execute(f"DELETE FROM kv_history WHERE {_KEY}", _key_params(key))
            return removed.rowcount > 0 or found

    def close(self) -> None:
        self._db.close()
