"""The SQLite file behind ``sqlite://`` stores: its URL and its connections.

One database file holds the values and the event logs of every namespace; each table
has a ``namespace`` column and every statement filters on it. The file runs in WAL
mode with ``synchronous=FULL``, so a committed transaction survives a power loss.

The tables and their migrations are :mod:`.sqlite_schema`, the mapping of driver errors
:mod:`.sqlite_errors`.

A file this process may not write (its mode, its folder's, a read-only file system or an
immutable file: ``os.access``) is opened read-only (``?mode=ro``): listings, loads and
value reads work, and every write raises ``AccessDeniedError`` naming the file. WAL needs
the ``-shm`` file; when SQLite can neither open nor create it, the file is opened
``immutable=1``, as SQLite documents for read-only WAL databases (it then must not change
while open: no process can write it either, short of changing its permissions). A
read-only file must already have this library's current schema (it cannot be migrated).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from .. import forksafe
from ..errors import (
    AccessDeniedError,
    DurabilityError,
    InvalidArgumentError,
    StoreUnavailableError,
)
from ..urls import mask_url, query_names, reject_unknown_params
from .fsutil import FILE_MODE, local_path, make_dirs
from .sqlite_errors import DRIVER_ERRORS, rollback, translate
from .sqlite_schema import SCHEMA_VERSION, ensure_schema, snapshot_schema_version

#: Seconds a statement waits for another process's write lock before giving up.
DEFAULT_TIMEOUT = 10.0
#: The longest a fork waits for a write transaction of another thread (seconds): one
#: waiting for another process's lock (up to the timeout) is not waited out.
FORK_WAIT = 2.0

_USAGE = "use sqlite:///relative/path.db or sqlite:////absolute/path.db"


def database_path(url: str) -> Path:
    """The absolute database path of a ``sqlite:///...`` URL (taken as written: no
    percent-decoding), resolved now against the working directory. Creates nothing.

    Raises :class:`InvalidArgumentError` for a URL with a host, a query parameter, no path
    or an in-memory database (which other processes could not share), and for a path no
    file operation could use (see :func:`~.fsutil.local_path`).
    """
    shown = mask_url(url)
    scheme, _, rest = url.partition("://")
    if scheme.lower() != "sqlite" or not rest.startswith("/"):
        raise InvalidArgumentError(f"not a local SQLite URL: {shown!r}; {_USAGE}")
    raw = rest[1:]
    if "?" in raw:
        # The database reads no parameter: a misspelt option must not be ignored.
        reject_unknown_params(query_names(shown), (), shown)
        raise InvalidArgumentError(f"SQLite URLs take no query string: {shown!r}")
    if not raw or raw == ":memory:" or raw.startswith("file:"):
        raise InvalidArgumentError(
            f"{shown!r} names no database file (an in-memory database cannot be shared); " + _USAGE
        )
    return local_path(raw, shown)


# Connections a forked child inherited: SQLite must neither use nor close them there,
# so they are kept referenced until the process ends.
_INHERITED: list[sqlite3.Connection] = []


def create_private(path: Path) -> None:
    """Create the database file ``path``, when it is missing, readable and writable by
    its owner alone (:data:`~.fsutil.FILE_MODE`, whatever the umask): SQLite then gives
    its ``-wal`` and ``-shm`` files the same mode. An existing file is left as it is."""
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE))


class Database:
    """One SQLite database file shared by a store's value and event backends.

    Every thread gets its own connection and a forked child opens fresh ones; no
    connection ever crosses a thread boundary mid-use or a process boundary at all.
    The directory, the file and the tables are created on first use. Before a fork the
    forking thread's idle connection is closed, and the child gets new locks (another
    thread may have held one at the fork: in the child nobody would release it); see
    :mod:`sessionstore.forksafe`.
    """

    def __init__(self, path: Path, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        self._lock = threading.Lock()
        #: Held by a thread of this process from ``BEGIN IMMEDIATE`` to its end: the
        #: threads of one process queue here and start the moment the lock is free,
        #: instead of sleeping in SQLite's busy handler (1 ms to 100 ms a time).
        self.writing = threading.Lock()
        self._local = threading.local()
        self._pid = os.getpid()
        self._generation = 0
        self._connections: list[tuple[threading.Thread, sqlite3.Connection]] = []
        #: The connections a thread is using (between :meth:`acquire` and
        #: :meth:`release`: how many times), and those :meth:`close` left to their thread
        #: to close at its release (closing one while another thread runs a statement on
        #: it crashes the process).
        self._in_use: dict[sqlite3.Connection, int] = {}
        self._closing: set[sqlite3.Connection] = set()
        #: The thread in an immediate transaction (holding ``writing``), if any.
        self.writer: int | None = None
        #: The forking thread that holds ``writing`` across its fork, if any.
        self._fork_holder: int | None = None
        forksafe.renew_locks(self, "_lock", "writing")
        forksafe.before_fork(self, "hold_writes_for_fork")
        forksafe.before_fork(self, "close_idle_before_fork")
        forksafe.after_fork_in_parent(self, "release_writes_after_fork")
        forksafe.at_fork(self, "_forked")

    def acquire(self) -> sqlite3.Connection:
        """This thread's connection, opened (and the schema created) on first use, and
        marked in use until :meth:`release`."""
        local = self._local
        pid = os.getpid()
        with self._lock:
            conn: sqlite3.Connection | None = getattr(local, "conn", None)
            if conn is None or local.owner != (pid, self._generation):
                if self._pid != pid:
                    _INHERITED.extend(c for _, c in self._connections)
                    self._connections, self._pid = [], pid
                    self._in_use, self._closing = {}, set()
                self._close_orphans()
                conn = self._connect()
                self._connections.append((threading.current_thread(), conn))
                local.conn, local.owner = conn, (pid, self._generation)
            self._in_use[conn] = self._in_use.get(conn, 0) + 1
        return conn

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, not marked in use (what a test inspects)."""
        conn = self.acquire()
        self.release(conn)
        return conn

    def release(self, conn: sqlite3.Connection) -> None:
        """The end of a use :meth:`acquire` began; a connection :meth:`close` closed
        meanwhile is closed at the end of its last use."""
        with self._lock:
            uses = self._in_use.pop(conn, 1) - 1
            if uses:
                self._in_use[conn] = uses
                return
            if conn not in self._closing:
                return
            self._closing.discard(conn)
        with suppress(sqlite3.Error):
            conn.close()

    def _close_orphans(self) -> None:
        """Close the connections of threads that have ended (they are idle for good)."""
        alive = []
        for thread, conn in self._connections:
            if thread.is_alive():
                alive.append((thread, conn))
            else:
                with suppress(sqlite3.Error):
                    conn.close()
        self._connections = alive

    def read_only(self) -> bool:
        """Whether the file exists and this process may not write it or its folder (so
        SQLite could not write its journal files either); see the module doc."""
        path = self.path
        return path.exists() and not (
            os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
        )

    def _connect(self) -> sqlite3.Connection:
        if self.read_only():
            return self._connect_read_only()
        make_dirs(self.path.parent)
        create_private(self.path)
        # isolation_level=None: transactions are begun explicitly (BEGIN IMMEDIATE);
        # check_same_thread=False only so close() may close other threads' connections.
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            # First, before anything that writes (the WAL switch included): a file that is
            # not ours, or of a newer schema, must be left exactly as it was.
            version = snapshot_schema_version(conn, self.path)
            mode = self._switch_to_wal(conn)
            if str(mode).lower() != "wal":
                raise DurabilityError(
                    f"SQLite database {self.path} cannot use WAL journaling (got {mode!r})"
                )
            conn.execute("PRAGMA synchronous=FULL")
            if version != SCHEMA_VERSION:
                ensure_schema(conn, self.path)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """A read-only connection (see the module doc): ``mode=ro``, else, when SQLite
        cannot open the WAL's ``-shm`` file, ``immutable=1``. Raises
        :class:`AccessDeniedError` for a file of another schema version (it cannot be
        created or migrated)."""
        base = f"file:{quote(os.fspath(self.path))}?mode=ro"
        for uri in (base, base + "&immutable=1"):
            conn = sqlite3.connect(
                uri, uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            try:
                version = snapshot_schema_version(conn, self.path)
            except sqlite3.OperationalError as exc:
                conn.close()
                if (exc.sqlite_errorcode & 0xFF) != sqlite3.SQLITE_CANTOPEN:
                    raise
                continue
            except BaseException:
                conn.close()
                raise
            if version != SCHEMA_VERSION:
                conn.close()
                raise AccessDeniedError(
                    f"SQLite database {self.path} is read-only and has schema version "
                    f"{version}, not {SCHEMA_VERSION}: it cannot be "
                    f"{'created' if version == 0 else 'migrated'} here"
                )
            return conn
        raise AccessDeniedError(f"SQLite database {self.path} is read-only and cannot be opened")

    def _switch_to_wal(self, conn: sqlite3.Connection) -> object:
        """``PRAGMA journal_mode=WAL``, retried while another process holds the lock it
        needs (SQLite does not wait on its busy timeout for it), up to ``timeout``."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
                return mode
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.01)

    def guard(self, subject: str) -> Guard:
        """This thread's connection (autocommit: each statement is its own transaction),
        with every driver error translated; ``subject`` names what a CorruptLogError is about."""
        return Guard(self, subject)

    def transaction(self, subject: str, *, immediate: bool, durable: bool = True) -> Transaction:
        """One transaction, committed when the block ends and rolled back if it raises.

        ``immediate=True`` takes the write lock up front, so read-compare-write blocks of
        concurrent processes run one after the other (waiting up to ``timeout``).
        ``durable=False`` commits without waiting for the disk (``synchronous=NORMAL``
        for this transaction: every other process sees it at once, a power loss may
        undo it), for state that means nothing once every process is gone.
        """
        return Transaction(self, subject, "BEGIN IMMEDIATE" if immediate else "BEGIN", durable)

    def hold_writes_for_fork(self) -> None:
        """Wait for the write transaction another thread is in to end (at most
        :data:`FORK_WAIT` seconds) and keep others from starting until the fork is done:
        a child forked in the middle of one inherits SQLite's in-process record of its
        lock, which nothing in the child ever releases, and could never write the file.
        A transaction still waiting for another process's lock when that wait ends is
        forked over (it holds no SQLite lock yet unless it has just got it)."""
        me = threading.get_ident()
        if self.writer == me:
            return  # this thread's own: it cannot end while this thread forks
        if self.writing.acquire(timeout=min(self.timeout, FORK_WAIT)):
            self._fork_holder = me

    def release_writes_after_fork(self) -> None:
        """In the parent after the fork: let transactions start again (the lock held by
        this forking thread, if any: threads may fork at once)."""
        if self._fork_holder == threading.get_ident():
            self._fork_holder = None
            self.writing.release()

    def _forked(self) -> None:
        """In the child (its ``writing`` lock renewed): no transaction of its own runs."""
        self._fork_holder = None
        self.writer = None

    def close_idle_before_fork(self) -> None:
        """Close this thread's connection unless it is in a transaction, so that a
        forked child starts without any SQLite state for this file."""
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None or local.owner != (os.getpid(), self._generation):
            return
        with self._lock:
            if conn.in_transaction or conn in self._in_use:
                return
            self._connections = [(t, c) for t, c in self._connections if c is not conn]
        with suppress(sqlite3.Error):
            conn.close()
        local.conn = None

    def close(self) -> None:
        """Close every connection this process opened, each one a thread is using at
        the end of that use; later use opens new ones."""
        with self._lock:
            if self._pid == os.getpid():
                for _, conn in self._connections:
                    if conn in self._in_use:
                        self._closing.add(conn)
                        continue
                    with suppress(sqlite3.Error):
                        conn.close()
            else:
                _INHERITED.extend(c for _, c in self._connections)
            self._connections = []
            self._generation += 1


class Guard:
    """``with database.guard(subject) as conn``: see :meth:`Database.guard`.

    A class rather than a generator-based context manager: it is entered once per
    operation, and ``contextlib`` costs several times as much."""

    __slots__ = ("_db", "_subject", "_conn")

    def __init__(self, database: Database, subject: str) -> None:
        self._db = database
        self._subject = subject
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection:
        try:
            conn = self._conn = self._db.acquire()
        except DRIVER_ERRORS as exc:
            raise translate(exc, self._subject, self._db.path) from exc
        return conn

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            self._db.release(self._conn)
            self._conn = None
        if isinstance(exc, DRIVER_ERRORS):
            raise translate(exc, self._subject, self._db.path) from exc


class Transaction:
    """``with database.transaction(subject, immediate=...) as conn``: see
    :meth:`Database.transaction`; a class for the same reason as :class:`Guard`. An
    immediate transaction holds the database's ``writing`` lock from its ``BEGIN`` to
    its end."""

    __slots__ = ("_db", "_subject", "_begin", "_durable", "_conn", "_lock")

    def __init__(self, database: Database, subject: str, begin: str, durable: bool) -> None:
        self._db = database
        self._subject = subject
        self._begin = begin
        self._durable = durable
        self._conn: sqlite3.Connection | None = None
        self._lock: threading.Lock | None = None

    def __enter__(self) -> sqlite3.Connection:
        database = self._db
        if self._begin == "BEGIN IMMEDIATE":
            lock = database.writing
            if not lock.acquire(timeout=database.timeout):
                raise StoreUnavailableError(
                    f"SQLite database {database.path} is unavailable: another thread of "
                    f"this process held its write lock for {database.timeout:g} s"
                )
            self._lock = lock
            database.writer = threading.get_ident()
        try:
            conn = self._conn = database.acquire()
            if not self._durable:
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(self._begin)
        except BaseException as exc:
            self._release()
            if isinstance(exc, DRIVER_ERRORS):
                raise translate(exc, self._subject, database.path) from exc
            raise
        return conn

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self._end(exc)
        finally:
            self._release()

    def _end(self, exc: BaseException | None) -> None:
        conn = self._conn
        assert conn is not None
        if exc is None:
            try:
                conn.execute("COMMIT")
                return
            except BaseException as failed:
                rollback(conn)
                if isinstance(failed, DRIVER_ERRORS):
                    raise translate(failed, self._subject, self._db.path) from failed
                raise
        rollback(conn)
        if isinstance(exc, DRIVER_ERRORS):
            raise translate(exc, self._subject, self._db.path) from exc

    def _release(self) -> None:
        """Give the connection back as every other transaction expects it (durable
        commits) and free the write lock."""
        conn, self._conn = self._conn, None
        try:
            if not self._durable and conn is not None:
                conn.execute("PRAGMA synchronous=FULL")
        finally:
            if conn is not None:
                self._db.release(conn)
            if self._lock is not None:
                self._db.writer = None
                self._lock.release()
                self._lock = None
