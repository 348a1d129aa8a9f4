"""Removing a whole namespace, on every backend: :func:`delete_namespace`
(``sessionstore namespaces delete``).

What goes is everything of the namespace and nothing else:

- Redis: every key beginning with ``ss:<namespace>:`` (the namespace escaped as
  :mod:`sessionstore.keys` writes it, so no other namespace's key matches), found with
  ``SCAN`` on every primary: an admin's URL (see
  :mod:`sessionstore.redis.namespace_admin`). Index, lease and bookkeeping keys go too.
- files: the namespace's folder under the root, with every record, log, lock and lease
  file in it (links are removed, never followed).
- SQLite: the namespace's rows of every table that has a ``namespace`` column, in one
  transaction.

A namespace where a writer holds a lease (:attr:`~sessionstore.SessionInfo.busy`;
on Redis also a lease key of a session not written yet) is refused with
:class:`NamespaceBusyError` unless ``force``.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from .connection import REDIS_SCHEMES, file_root, mask_url, resolve_url, scheme_of
from .errors import InvalidArgumentError, SessionStoreError
from .store import connect

#: Where SQLite keeps what is not a namespace's: tables without this column are left alone.
_NAMESPACE_COLUMN = "namespace"


class NamespaceBusyError(SessionStoreError):
    """A writer holds a lease in the namespace: deleting it would pull the log from
    under a live writer. ``sessions`` names the sessions."""

    def __init__(self, namespace: str, sessions: list[str]) -> None:
        self.namespace, self.sessions = namespace, sessions
        shown = ", ".join(repr(s) for s in sessions[:5]) + (" ..." if len(sessions) > 5 else "")
        super().__init__(
            f"a writer holds a lease in namespace {namespace!r} ({shown}): stop it first, or force"
        )


@dataclass(frozen=True, slots=True)
class DeleteReport:
    """What :func:`delete_namespace` removed: the sessions and values the namespace
    listed, and what the backend held of it (``removed`` of ``unit``: Redis keys,
    files and folders, or SQLite rows)."""

    namespace: str
    sessions: int
    values: int
    removed: int
    unit: str


def delete_namespace(
    url: str | os.PathLike[str] | None,
    namespace: str,
    *,
    force: bool = False,
    timeout: float | None = None,
) -> DeleteReport:
    """Remove every session, value and piece of bookkeeping of ``namespace`` in the
    store ``url`` names, and nothing of any other namespace (see the module docstring).
    Raises :class:`NamespaceBusyError` while a writer holds a lease there, unless
    ``force``; ``InvalidArgumentError`` for a store that keeps nothing (``memory://``,
    ``dummy://``). On Redis it needs ``SCAN``: the least-privilege user gets
    ``AccessDeniedError``."""
    resolved = resolve_url(url)
    scheme = scheme_of(resolved)
    if scheme not in (*REDIS_SCHEMES, "sqlite", "file", ""):
        raise InvalidArgumentError(f"{mask_url(resolved)} keeps nothing to delete")
    with connect(resolved, namespace, timeout=timeout) as store:
        infos = store.events.list_info()
        sessions, values = len(infos), len(store.list_values())
        busy = [info.header.id for info in infos if info.busy]
    if scheme in REDIS_SCHEMES:
        from .keys import namespace_prefix
        from .redis.namespace_admin import delete_namespace as delete_keys
        from .redis.namespace_admin import namespace_keys

        prefix = namespace_prefix(namespace) + "log:"
        busy += sorted(
            name[len(prefix) :]
            for name in namespace_keys(resolved, namespace, timeout)
            if name.startswith(prefix) and name.endswith(":lease")
        )
        _refuse_busy(namespace, busy, force)
        removed, unit = delete_keys(resolved, namespace, timeout), "keys"
    elif scheme == "sqlite":
        _refuse_busy(namespace, busy, force)
        removed, unit = _delete_rows(resolved, namespace, timeout), "rows"
    else:
        _refuse_busy(namespace, busy, force)
        removed, unit = _delete_folder(file_root(resolved), namespace), "files and folders"
    return DeleteReport(namespace, sessions, values, removed, unit)


def _refuse_busy(namespace: str, busy: list[str], force: bool) -> None:
    if busy and not force:
        raise NamespaceBusyError(namespace, sorted(set(busy)))


def _delete_folder(root: Path, namespace: str) -> int:
    from .backends.fsutil import encode_name, os_errors

    folder = root / encode_name(namespace)
    with os_errors(folder):
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            return 0
        if not stat.S_ISDIR(mode):
            raise InvalidArgumentError(f"{folder} is not a folder: left as it is")
        count = sum(len(dirs) + len(files) for _, dirs, files in os.walk(folder)) + 1
        shutil.rmtree(folder)
    return count


def _delete_rows(url: str, namespace: str, timeout: float | None) -> int:
    from .backends.sqlite_db import DEFAULT_TIMEOUT, Database, database_path

    path = database_path(url)
    if not path.exists():
        return 0
    database = Database(path, DEFAULT_TIMEOUT if timeout is None else timeout)
    removed = 0
    try:
        with database.transaction(str(path), immediate=True) as conn:
            tables = [
                str(row[0])
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            for table in tables:
                columns = {str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')}
                if _NAMESPACE_COLUMN in columns:
                    cursor = conn.execute(
                        f'DELETE FROM "{table}" WHERE {_NAMESPACE_COLUMN} = ?',  # noqa: S608
                        (namespace,),
                    )
                    removed += max(cursor.rowcount, 0)
    finally:
        database.close()
    return removed
