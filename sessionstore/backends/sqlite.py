"""SQLite backend (``sqlite:///path/to.db``): one database file, shared by processes,
for the values and the event logs of every namespace.

Each operation is one transaction; every read-compare-write starts with
``BEGIN IMMEDIATE``, so concurrent processes serialise on SQLite's write lock instead
of interleaving. The file layout is described in :mod:`.sqlite_schema`; the event logs
live in :mod:`.sqlite_events`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Literal

from ..contracts import Backends, Refused, Stored, ValueBackend
from ..errors import CorruptDataError, CorruptLogError
from ..keys import ValueKey
from ..urls import mask_url
from ..when import now_ms
from .sqlite_db import DEFAULT_TIMEOUT, Database, database_path
from .sqlite_events import SqliteEvents

_KEY = "namespace=? AND symbol=? AND strategy=? AND exchange=? AND frame=? AND mode=?"
#: A row that has not expired by the time given as its parameter.
_LIVE = "(expires_at IS NULL OR expires_at > ?)"
#: The expiry of a history (its newest version's), for the key's parameters.
_NEWEST_EXPIRY = f"SELECT expires_at FROM kv_history WHERE {_KEY} ORDER BY when_ms DESC LIMIT 1"


def open_sqlite(url: str, namespace: str, *, timeout: float | None = None) -> Backends:
    """The backends of ``namespace`` in the database ``url`` names. No I/O until first use.

    ``timeout`` (seconds, default 10) bounds the wait for another process's write lock
    before ``StoreUnavailableError``. A file this process may not write is opened
    read-only (see :mod:`.sqlite_db`): reads work, writes raise ``AccessDeniedError``.
    """
    database = Database(database_path(url), DEFAULT_TIMEOUT if timeout is None else timeout)
    return Backends(
        SqliteValues(database),
        SqliteEvents(database, namespace),
        mask_url(url),
        closers=[database.close],
    )


def namespace_usage(url: str, *, timeout: float | None = None) -> dict[str, dict[str, int]]:
    """Every namespace of the database ``url`` names -> its sessions and unexpired
    values; a database file that does not exist holds none (and is not created)."""
    path = database_path(url)
    if not path.exists():
        return {}
    database = Database(path, DEFAULT_TIMEOUT if timeout is None else timeout)
    found: dict[str, dict[str, int]] = {}
    now = now_ms()
    keys = "namespace, symbol, strategy, exchange, frame, mode"
    queries = (
        ("sessions", "SELECT namespace, COUNT(*) FROM log_sessions GROUP BY namespace"),
        (
            "values",
            # A key may hold a plain record and a history: two values, as listed.
            f"SELECT namespace, COUNT(*) FROM (SELECT {keys}, 0 FROM kv_values WHERE {_LIVE}"
            f" UNION SELECT {keys}, 1 FROM kv_history WHERE {_LIVE}) GROUP BY namespace",
        ),
    )
    try:
        with database.guard(str(path)) as conn:
            for kind, query in queries:
                params = (now, now) if kind == "values" else ()
                for namespace, count in conn.execute(query, params):
                    found.setdefault(str(namespace), {})[kind] = int(count)
    finally:
        database.close()
    return found


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


def _live(expires_at: object, now: int) -> bool:
    """Whether a row with this ``expires_at`` has not expired (as SQL compares it)."""
    return type(expires_at) is not int or expires_at > now


class SqliteValues(ValueBackend):
    """Session values: ``kv_values`` for plain values, ``kv_history`` for versions.

    Keys carry their namespace, so one instance serves any namespace of the file. An
    expired row (for a history: its newest row expired) reads as absent.
    """

    def __init__(self, database: Database) -> None:
        self._db = database

    def read(self, key: ValueKey) -> Stored | None:
        with self._db.guard(key.label()) as conn:
            row = conn.execute(
                f"SELECT when_ms, payload FROM kv_values WHERE {_KEY} AND {_LIVE}",
                (*_key_params(key), now_ms()),
            ).fetchone()
        return _stored(key, row)

    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        with self._db.guard(key.label()) as conn:
            self._write(conn, key, payload, when, ttl_ms, now_ms())

    @staticmethod
    def _write(
        conn: sqlite3.Connection,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        ttl_ms: int | None,
        now: int,
    ) -> None:
        if payload is None:
            conn.execute(f"DELETE FROM kv_values WHERE {_KEY}", _key_params(key))
        else:
            # Without a ttl, a row that has not expired keeps its expiry.
            expires_at = None if ttl_ms is None else now + ttl_ms
            conn.execute(
                "INSERT INTO kv_values (namespace, symbol, strategy, exchange, frame, mode,"
                " when_ms, payload, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (namespace, symbol, strategy, exchange, frame, mode) DO UPDATE"
                " SET when_ms=excluded.when_ms, payload=excluded.payload,"
                " expires_at=IFNULL(excluded.expires_at,"
                " CASE WHEN kv_values.expires_at > ? THEN kv_values.expires_at END)",
                (*_key_params(key), when, payload, expires_at, now),
            )

    def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        with self._db.transaction(key.label(), immediate=True) as conn:
            now = now_ms()
            row = conn.execute(
                f"SELECT when_ms, payload FROM kv_values WHERE {_KEY} AND {_LIVE}",
                (*_key_params(key), now),
            ).fetchone()
            current = _stored(key, row)
            if current != expected:
                return Refused(current)
            self._write(conn, key, payload, when, ttl_ms, now)
            return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        with self._db.guard(key.label()) as conn:
            return self._as_of(conn, key, when, now_ms())

    def expiry(self, key: ValueKey, history: bool) -> int | None:
        table = "kv_history" if history else "kv_values"
        with self._db.guard(key.label()) as conn:
            row = conn.execute(
                f"SELECT MAX(expires_at) FROM {table} WHERE {_KEY} AND {_LIVE}",
                (*_key_params(key), now_ms()),
            ).fetchone()
        found = None if row is None else row[0]
        if found is None:
            return None
        if isinstance(found, bool) or not isinstance(found, int):
            raise CorruptDataError(key.label(), f"it holds an expiry of {found!r:.40}")
        return found

    @staticmethod
    def _as_of(conn: sqlite3.Connection, key: ValueKey, when: int, now: int) -> Stored | None:
        params = _key_params(key)
        row = conn.execute(
            f"SELECT when_ms, payload FROM kv_history WHERE {_KEY} AND when_ms <= ?"
            f" AND IFNULL(({_NEWEST_EXPIRY}) > ?, 1) ORDER BY when_ms DESC LIMIT 1",
            (*params, when, *params, now),
        ).fetchone()
        return _stored(key, row)

    def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        with self._db.transaction(key.label(), immediate=True) as conn:
            self._write_version(conn, key, payload, when, max_versions, ttl_ms, now_ms())

    def put_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        with self._db.transaction(key.label(), immediate=True) as conn:
            now = now_ms()
            self._write_version(conn, key, payload, when, max_versions, ttl_ms, now, reset=False)

    @staticmethod
    def _write_version(
        conn: sqlite3.Connection,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        ttl_ms: int | None,
        now: int,
        *,
        reset: bool = True,
    ) -> None:
        """Record a version; ``reset`` drops every version at or after ``when`` first."""
        params = _key_params(key)
        newest = conn.execute(_NEWEST_EXPIRY, params).fetchone()
        expires_at = None if newest is None or type(newest[0]) is not int else newest[0]
        if expires_at is not None and expires_at <= now:
            # An expired history is absent: the new version starts a new one.
            conn.execute(f"DELETE FROM kv_history WHERE {_KEY}", params)
            expires_at = None
        if ttl_ms is not None:
            expires_at = now + ttl_ms
        later = ">=" if reset else "="
        conn.execute(f"DELETE FROM kv_history WHERE {_KEY} AND when_ms {later} ?", (*params, when))
        # After a reset the new version is the newest and carries the history's expiry;
        # a put may land before the newest, so a new expiry goes on every version.
        conn.execute(
            "INSERT INTO kv_history (namespace, symbol, strategy, exchange, frame, mode,"
            " when_ms, payload, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*params, when, payload, expires_at),
        )
        if not reset and ttl_ms is not None:
            conn.execute(f"UPDATE kv_history SET expires_at=? WHERE {_KEY}", (expires_at, *params))
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
        *,
        ttl_ms: int | None = None,
    ) -> bool:
        with self._db.transaction(key.label(), immediate=True) as conn:
            now = now_ms()
            if self._as_of(conn, key, when, now) != expected:
                return False
            self._write_version(conn, key, payload, when, max_versions, ttl_ms, now)
            return True

    def acquire_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        params = (*_key_params(key), when)
        held = f"SELECT token, expires_at FROM kv_compute_leases WHERE {_KEY} AND when_ms=?"
        # A waiter asks again and again while another holds the lease: it looks without
        # the write lock first, so it does not queue with the holder's writes.
        with self._db.guard(key.label()) as conn:
            row = conn.execute(held, params).fetchone()
        if row is not None and row[0] != token and row[1] > now_ms():
            return False
        with self._db.transaction(key.label(), immediate=True, durable=False) as conn:
            row = conn.execute(held, params).fetchone()
            now = now_ms()
            if row is not None and row[0] != token and row[1] > now:
                return False
            conn.execute(
                "INSERT INTO kv_compute_leases (namespace, symbol, strategy, exchange, frame,"
                " mode, when_ms, token, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (namespace, symbol, strategy, exchange, frame, mode, when_ms)"
                " DO UPDATE SET token=excluded.token, expires_at=excluded.expires_at",
                (*params, token, now + ttl_ms),
            )
            return True

    def renew_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        with self._db.transaction(key.label(), immediate=True, durable=False) as conn:
            now = now_ms()
            renewed = conn.execute(
                f"UPDATE kv_compute_leases SET expires_at=? WHERE {_KEY} AND when_ms=?"
                " AND token=? AND expires_at>?",
                (now + ttl_ms, *_key_params(key), when, token, now),
            )
            return renewed.rowcount == 1

    def release_compute_lease(self, key: ValueKey, when: int, token: str) -> None:
        with self._db.transaction(key.label(), immediate=True, durable=False) as conn:
            self._release(conn, key, when, token)

    @staticmethod
    def _release(conn: sqlite3.Connection, key: ValueKey, when: int, token: str) -> None:
        conn.execute(
            f"DELETE FROM kv_compute_leases WHERE {_KEY} AND when_ms=? AND token=?",
            (*_key_params(key), when, token),
        )

    def put_computed(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        token: str,
        *,
        ttl_ms: int | None = None,
    ) -> Stored | bool:
        with self._db.transaction(key.label(), immediate=True) as conn:
            now = now_ms()
            found = self._as_of(conn, key, when, now)
            if found is not None and found.when == when:
                return found
            busy = conn.execute(
                f"SELECT 1 FROM kv_compute_leases WHERE {_KEY} AND when_ms=? AND token<>?"
                " AND expires_at>?",
                (*_key_params(key), when, token, now),
            ).fetchone()
            if busy is not None:
                return False
            self._write_version(conn, key, payload, when, max_versions, ttl_ms, now, reset=False)
            self._release(conn, key, when, token)
            return True

    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        columns = "symbol, strategy, exchange, frame, mode"
        now = now_ms()
        with self._db.guard(namespace) as conn:
            plain = conn.execute(
                f"SELECT {columns} FROM kv_values WHERE namespace=? AND {_LIVE}",
                (namespace, now),
            ).fetchall()
            # With a lone MAX(), SQLite takes expires_at from the row holding the maximum.
            history = conn.execute(
                f"SELECT {columns}, MAX(when_ms), expires_at FROM kv_history"
                f" WHERE namespace=? GROUP BY {columns}",
                (namespace,),
            ).fetchall()
        found = [(ValueKey(namespace, *row), False) for row in plain]
        live = [row for row in history if _live(row[6], now)]
        return found + [(ValueKey(namespace, *row[:5]), True) for row in live]

    def set_retention(self, key: ValueKey, ttl_ms: int | None) -> bool:
        with self._db.transaction(key.label(), immediate=True) as conn:
            params = _key_params(key)
            now = now_ms()
            expires_at = None if ttl_ms is None else now + ttl_ms
            plain = conn.execute(
                f"UPDATE kv_values SET expires_at=? WHERE {_KEY} AND {_LIVE}",
                (expires_at, *params, now),
            ).rowcount
            newest = conn.execute(_NEWEST_EXPIRY, params).fetchone()
            history = newest is not None and _live(newest[0], now)
            if history:
                conn.execute(
                    f"UPDATE kv_history SET expires_at=? WHERE {_KEY}", (expires_at, *params)
                )
            return bool(plain) or history

    def forget(self, key: ValueKey) -> bool:
        with self._db.transaction(key.label(), immediate=True) as conn:
            params = _key_params(key)
            now = now_ms()
            plain = conn.execute(
                f"SELECT 1 FROM kv_values WHERE {_KEY} AND {_LIVE}", (*params, now)
            ).fetchone()
            newest = conn.execute(_NEWEST_EXPIRY, params).fetchone()
            history = newest is not None and _live(newest[0], now)
            conn.execute(f"DELETE FROM kv_values WHERE {_KEY}", params)
            conn.execute(f"DELETE FROM kv_history WHERE {_KEY}", params)
            return plain is not None or history

    def close(self) -> None:
        self._db.close()
