"""The driver errors of the SQLite backend as sessionstore errors (:func:`translate`),
and a rollback that never hides the error that made it necessary."""

from __future__ import annotations

import os
import sqlite3
from contextlib import suppress
from pathlib import Path

from ..errors import (
    AccessDeniedError,
    CorruptLogError,
    InvalidArgumentError,
    SessionStoreError,
    StoreUnavailableError,
)
from .fsutil import BAD_PATH_ERRNOS

#: The driver errors :func:`translate` turns into sessionstore errors.
DRIVER_ERRORS = (sqlite3.Error, OSError, OverflowError)


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the transaction ``conn`` is in, if any; a failed ``ROLLBACK`` is
    passed over, so that it never hides the error that made it necessary."""
    if conn.in_transaction:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


_CORRUPT = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_FORMAT}
_DENIED = {sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_AUTH}


def translate(exc: BaseException, subject: str, path: Path) -> SessionStoreError:
    """The sessionstore error for a driver error raised while serving ``subject``."""
    if isinstance(exc, OverflowError):
        return InvalidArgumentError(f"{subject}: a number does not fit SQLite's 64 bits: {exc}")
    if isinstance(exc, OSError) and exc.errno in BAD_PATH_ERRNOS:
        return InvalidArgumentError(f"SQLite database path {path} is not usable: {exc}")
    if isinstance(exc, PermissionError):
        return AccessDeniedError(f"SQLite database {path}: {exc}")
    if isinstance(exc, OSError):
        return StoreUnavailableError(f"SQLite database {path} is unreachable: {exc}")
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    if primary in _CORRUPT:
        return CorruptLogError(subject, f"SQLite database {path} is damaged: {exc}")
    if primary == sqlite3.SQLITE_ERROR:
        # Our statements are fixed, so a plain SQL error means the tables are not ours.
        return CorruptLogError(
            subject, f"SQLite database {path} does not have the sessionstore schema: {exc}"
        )
    if primary in _DENIED or (primary == sqlite3.SQLITE_CANTOPEN and _denied(path)):
        return AccessDeniedError(f"SQLite database {path}: {exc}")
    return StoreUnavailableError(f"SQLite database {path} is unavailable: {exc}")


def _denied(path: Path) -> bool:
    """Whether a failed open is explained by file permissions."""
    if path.exists():
        return not os.access(path, os.R_OK | os.W_OK)
    parent = path.parent
    return parent.is_dir() and not os.access(parent, os.W_OK | os.X_OK)
