"""The tables of the SQLite file behind ``sqlite://`` stores (see :mod:`.sqlite_db`), their
creation and their migration.

========================  =================================================================
table                     rows
========================  =================================================================
``kv_values``             one plain value per key: ``when_ms``, msgpack ``payload``,
                          ``expires_at`` (NULL: never)
``kv_history``            one version per (key, ``when_ms``); ``payload`` NULL = a clear;
                          the newest version's ``expires_at`` is the whole history's
``log_sessions``          one header per session, ``next_seq`` (committed last), the
                          retention ``ttl_ms`` and ``expires_at`` (NULL: never)
``log_events``            one event per (session, ``seq``); ``data`` is canonical JSON
``log_leases``            the writer's lease of a session: its ``owner`` token (``''``
                          once released), ``expires_at`` (0 once released) and
                          ``epoch``, the newest lease's fencing token; kept after the
                          lease ends, removed with the session
``kv_compute_leases``     the lease of ``get_or_compute`` on the version of a key at
                          ``when_ms``: its holder's ``token`` and ``expires_at``; removed
                          when the holder is done
========================  =================================================================

An event row at or past its session's ``next_seq`` is a torn tail, never part of the log.
Expiry times are wall-clock epoch ms. ``PRAGMA user_version`` is the schema version: a
file of an older version is migrated (columns added) by the first connection to open it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import InvalidArgumentError, StoreUnavailableError
from .sqlite_errors import rollback

#: Written to ``PRAGMA user_version`` when the tables are created or migrated.
SCHEMA_VERSION = 5

_KEY_COLUMNS = """
    namespace TEXT NOT NULL,
    symbol TEXT NOT NULL,
    strategy TEXT NOT NULL,
    exchange TEXT NOT NULL,
    frame TEXT NOT NULL,
    mode TEXT NOT NULL"""

_COMPUTE_LEASES = f"""CREATE TABLE IF NOT EXISTS kv_compute_leases ({_KEY_COLUMNS},
    when_ms INTEGER NOT NULL,
    token TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, symbol, strategy, exchange, frame, mode, when_ms)
) WITHOUT ROWID"""

# The log columns carry no NOT NULL / type constraints on purpose: a damaged row must
# still be readable so that it is reported as CorruptLogError, not as a driver error.
# log_events keeps its rowid although its primary key is then a separate index: a
# WITHOUT ROWID table keeps at most about a quarter of a page of each row in its b-tree
# (a rowid table nearly a whole page), and events of a few KB would overflow.
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS kv_values ({_KEY_COLUMNS},
    when_ms INTEGER NOT NULL,
    payload BLOB NOT NULL,
    expires_at INTEGER,
    PRIMARY KEY (namespace, symbol, strategy, exchange, frame, mode)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv_history ({_KEY_COLUMNS},
    when_ms INTEGER NOT NULL,
    payload BLOB,
    expires_at INTEGER,
    PRIMARY KEY (namespace, symbol, strategy, exchange, frame, mode, when_ms)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_sessions (
    namespace TEXT NOT NULL,
    id TEXT NOT NULL,
    version INTEGER,
    created_at INTEGER,
    cwd TEXT,
    parent_id TEXT,
    fork_seq INTEGER,
    next_seq INTEGER,
    ttl_ms INTEGER,
    expires_at INTEGER,
    PRIMARY KEY (namespace, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_events (
    namespace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT,
    time INTEGER,
    data TEXT,
    event_id TEXT,
    PRIMARY KEY (namespace, session_id, seq)
);
CREATE TABLE IF NOT EXISTS log_leases (
    namespace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, session_id)
) WITHOUT ROWID;
{_COMPUTE_LEASES};
"""

#: The statements that bring a file of schema version ``n`` to ``n + 1``, by ``n``.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE kv_values ADD COLUMN expires_at INTEGER",
        "ALTER TABLE kv_history ADD COLUMN expires_at INTEGER",
        "ALTER TABLE log_sessions ADD COLUMN ttl_ms INTEGER",
        "ALTER TABLE log_sessions ADD COLUMN expires_at INTEGER",
    ),
    2: (
        "CREATE TABLE IF NOT EXISTS log_leases (namespace TEXT NOT NULL,"
        " session_id TEXT NOT NULL, owner TEXT NOT NULL, expires_at INTEGER NOT NULL,"
        " PRIMARY KEY (namespace, session_id)) WITHOUT ROWID",
    ),
    3: (_COMPUTE_LEASES,),
    4: ("ALTER TABLE log_leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0",),
}

#: The tables every schema version has: a file holding them is ours.
_TABLES = frozenset({"kv_values", "kv_history", "log_sessions", "log_events"})


def snapshot_schema_version(conn: sqlite3.Connection, path: Path) -> int:
    """:func:`schema_version` read in one read transaction: another process creating
    the schema at this moment is seen before or after, never half way."""
    conn.execute("BEGIN")
    try:
        return schema_version(conn, path)
    finally:
        rollback(conn)


def ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables of a new file, or migrate those of an older schema version,
    in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read again under the write lock: another process may have just done it.
        version = schema_version(conn, path)
        if version == SCHEMA_VERSION:
            conn.execute("COMMIT")
            return
        if version == 0:
            # executescript would COMMIT first; run the statements one by one instead.
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
        else:
            for step in range(version, SCHEMA_VERSION):
                for statement in _MIGRATIONS[step]:
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def schema_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version: 0 for an empty file (no schema, ``user_version`` 0),
    else that of a file holding this library's tables. Reads only.

    Raises :class:`InvalidArgumentError` for any other file (another application's
    database) and :class:`StoreUnavailableError` for a schema version this library
    cannot read; neither is changed.
    """
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    empty = version == 0 and not names
    if not empty and not (isinstance(version, int) and version > 0 and names >= _TABLES):
        shown = ", ".join(sorted(names)[:8]) or "none"
        raise InvalidArgumentError(
            f"SQLite database {path} is not a sessionstore database (user_version "
            f"{version!r:.20}, tables: {shown:.300}); it was left unchanged: point "
            "sqlite:/// at a new file or one sessionstore created"
        )
    if version > SCHEMA_VERSION:
        raise StoreUnavailableError(
            f"SQLite database {path} has schema version {version}; "
            f"this sessionstore reads version {SCHEMA_VERSION}"
        )
    return int(version)
