"""When session values expire: :meth:`sessionstore.Session.records` does not say, so a
copy reads it where each backend keeps it, reading only (Redis: ``PTTL`` of the
value's key; files: the ``expires_at`` of its record; SQLite: the ``expires_at``
column of its rows). ``memory://`` and ``dummy://`` have none to read."""

from __future__ import annotations

from collections.abc import Sequence

from ..connection import REDIS_SCHEMES, file_root, scheme_of
from ..keys import ValueKey
from ..results import ValueRef
from ..when import now_ms


def value_expiries(
    url: str, namespace: str, refs: Sequence[ValueRef], timeout: float | None = None
) -> list[int | None]:
    """The expiry (epoch ms, None: never) of each value of ``refs``, in their order."""
    if not refs:
        return []
    scheme = scheme_of(url)
    if scheme in REDIS_SCHEMES:
        from ..redis.namespace_admin import value_expiries as redis_expiries

        return redis_expiries(url, namespace, [tuple(ref) for ref in refs], timeout)  # type: ignore[misc]
    if scheme == "sqlite":
        return _sqlite_expiries(url, namespace, refs, timeout)
    if scheme in ("", "file"):
        return _file_expiries(url, namespace, refs)
    return [None] * len(refs)


def _file_expiries(url: str, namespace: str, refs: Sequence[ValueRef]) -> list[int | None]:
    from ..backends.files import HISTORY_FILE, VALUE_FILE, FileValues
    from ..backends.value_records import read_plain, read_versions

    values = FileValues(file_root(url))
    found: list[int | None] = []
    for ref in refs:
        key = ValueKey(namespace, *ref[:5])
        folder = values.key_dir(key)
        if ref.history:
            found.append(read_versions(key, folder / HISTORY_FILE, now_ms())[1])
        else:
            plain = read_plain(key, folder / VALUE_FILE)
            found.append(None if plain is None else plain[1])
    return found


def _sqlite_expiries(
    url: str, namespace: str, refs: Sequence[ValueRef], timeout: float | None
) -> list[int | None]:
    from ..backends.sqlite_db import DEFAULT_TIMEOUT, Database, database_path

    path = database_path(url)
    database = Database(path, DEFAULT_TIMEOUT if timeout is None else timeout)
    where = "namespace=? AND symbol=? AND strategy=? AND exchange=? AND frame=? AND mode=?"
    found: list[int | None] = []
    try:
        with database.guard(str(path)) as conn:
            for ref in refs:
                table = "kv_history" if ref.history else "kv_values"
                row = conn.execute(
                    f"SELECT MAX(expires_at) FROM {table} WHERE {where}",  # noqa: S608
                    (namespace, *ref[:5]),
                ).fetchone()
                found.append(None if row is None or row[0] is None else int(row[0]))
    finally:
        database.close()
    return found
