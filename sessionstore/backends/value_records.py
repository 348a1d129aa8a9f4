"""The msgpack records of one key of a ``file://`` store (see :mod:`.files` for the
layout): the plain record ``value.msgpack`` and the history ``history.msgpack``, read,
checked and written.

Records are replaced atomically (temp file, fsync, rename, fsync of the folder), so a
reader always sees a completed write. A record whose stored key is not the key it was
read for (two keys sharing a name on a case-insensitive file system, a copied folder),
or that cannot be read as a record, is ignored with a warning: it reads as absent.

``expires_at`` (wall-clock epoch ms) is stored when the value was written with a ttl; a
record past it reads as absent, and stays on disk until it is written over or forgotten.
Callers hold the key's lock around a write and a read-compare-write.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, TypeGuard

import msgpack

from ..contracts import Stored
from ..errors import UnsafePathError
from ..keys import ValueKey
from .fsutil import atomic_write, read_file, remove_durably

if TYPE_CHECKING:
    from .dirhandle import Folder

#: One version of a history: (when, payload; None for a clear).
Version = tuple[int, bytes | None]
#: A plain record as stored (its expiry, None for never, beside it).
Plain = tuple[Stored, int | None]


def expired(folder: Folder, name: str, now: int) -> bool:
    """Whether the record ``name`` in ``folder`` is readable and past its expiry."""
    try:
        record = msgpack.unpackb(read_file(folder, name), raw=False)
    except (OSError, ValueError, TypeError, UnsafePathError):
        return False
    expires_at = record.get("expires_at") if isinstance(record, dict) else None
    return _is_int(expires_at) and expires_at <= now


def record_key(folder: Folder, name: str, now: int) -> ValueKey | None:
    """The key the record ``name`` in ``folder`` says it belongs to; None when it has
    expired, and (with a warning) when unreadable."""
    try:
        record = msgpack.unpackb(read_file(folder, name), raw=False)
        fields = record["key"]
        key = ValueKey(*(fields[field] for field in _KEY_FIELDS))
    except FileNotFoundError:
        return None
    except UnsafePathError as exc:
        _ignore(folder, name, str(exc))
        return None
    except (ValueError, TypeError, KeyError) as exc:
        _ignore(folder, name, f"not a record with a key ({exc!r:.200})")
        return None
    valid, expires_at = _expires_at(folder, name, record)
    return key if valid and _live(expires_at, now) else None


_KEY_FIELDS = ("namespace", "symbol", "strategy", "exchange", "frame", "mode")


def _key_record(key: ValueKey) -> dict[str, str]:
    return {
        "namespace": key.namespace,
        "symbol": key.symbol,
        "strategy": key.strategy,
        "exchange": key.exchange,
        "frame": key.frame,
        "mode": key.mode,
    }


def _pack(record: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(record, use_bin_type=True)
    return packed


def _ignore(folder: Folder, name: str, why: str) -> None:
    warnings.warn(
        f"sessionstore: ignoring {folder.join(name)}: {why}", RuntimeWarning, stacklevel=2
    )


def _load(key: ValueKey, folder: Folder, name: str) -> dict[str, Any] | None:
    """The record ``name`` stored in ``folder`` for ``key``; None when absent, unreadable
    or another key's (the last two with a warning)."""
    try:
        raw = read_file(folder, name)
    except FileNotFoundError:
        return None
    try:
        record = msgpack.unpackb(raw, raw=False)
    except (ValueError, TypeError) as exc:
        _ignore(folder, name, f"not a msgpack record ({exc})")
        return None
    if not isinstance(record, dict):
        _ignore(folder, name, "not a msgpack map")
        return None
    stored_key = record.get("key")
    if stored_key != _key_record(key):
        _ignore(folder, name, f"it holds the record of {stored_key!r:.300}, not of {key.label()!r}")
        return None
    return record


def _expires_at(folder: Folder, name: str, record: dict[str, Any]) -> tuple[bool, int | None]:
    """(valid, the record's expiry): absent is valid and None; anything but an int is
    invalid, with a warning."""
    expires_at = record.get("expires_at")
    if expires_at is None or _is_int(expires_at):
        return True, expires_at
    _ignore(folder, name, "its 'expires_at' is not an int")
    return False, None


def read_plain(key: ValueKey, folder: Folder, name: str) -> Plain | None:
    """The plain record of ``key`` (the file ``name`` in ``folder``) and its expiry,
    expired or not; None when absent or unreadable."""
    record = _load(key, folder, name)
    if record is None:
        return None
    when, payload = record.get("when"), record.get("payload")
    if not _is_int(when) or not isinstance(payload, bytes):
        _ignore(folder, name, "the record lacks an int 'when' or a bytes 'payload'")
        return None
    valid, expires_at = _expires_at(folder, name, record)
    return (Stored(payload, when), expires_at) if valid else None


def _live(expires_at: int | None, now: int) -> bool:
    return expires_at is None or expires_at > now


def live_plain(found: Plain | None, now: int) -> Stored | None:
    """The record of a :func:`read_plain` result unless it has expired."""
    return found[0] if found is not None and _live(found[1], now) else None


def new_expiry(ttl_ms: int | None, found: Plain | None, now: int) -> int | None:
    """The expiry of a record written now over ``found``: ``ttl_ms`` from now, else
    ``found``'s while it has not expired."""
    if ttl_ms is not None:
        return now + ttl_ms
    if found is not None and _live(found[1], now):
        return found[1]
    return None


def write_plain(
    key: ValueKey,
    folder: Folder,
    name: str,
    payload: bytes | None,
    when: int,
    expires_at: int | None,
) -> None:
    if payload is None:
        remove_durably(folder, name)
        return
    record: dict[str, Any] = {"key": _key_record(key), "when": when, "payload": payload}
    if expires_at is not None:
        record["expires_at"] = expires_at
    atomic_write(folder, name, _pack(record))


def read_versions(
    key: ValueKey, folder: Folder, name: str, now: int
) -> tuple[list[Version], int | None]:
    """Every stored version of ``key`` (the history ``name`` in ``folder``), oldest
    first, and the history's expiry; none once it has expired."""
    record = _load(key, folder, name)
    if record is None:
        return [], None
    raw = record.get("versions")
    if not isinstance(raw, list) or not all(_is_version(item) for item in raw):
        _ignore(folder, name, "the record lacks a list of [when, payload] versions")
        return [], None
    valid, expires_at = _expires_at(folder, name, record)
    if not valid or not _live(expires_at, now):
        return [], None
    return sorted({item[0]: item[1] for item in raw}.items()), expires_at


def _is_version(item: object) -> bool:
    return (
        isinstance(item, list)
        and len(item) == 2
        and _is_int(item[0])
        and (item[1] is None or isinstance(item[1], bytes))
    )


def as_of(versions: list[Version], when: int) -> Stored | None:
    found = None
    for at, payload in versions:
        if at > when:
            break
        found = Stored(payload, at)
    return found


def write_versions(
    key: ValueKey,
    folder: Folder,
    name: str,
    versions: list[Version],
    payload: bytes | None,
    when: int,
    max_versions: int | None,
    expires_at: int | None,
    *,
    reset: bool = True,
) -> None:
    """Record a version; ``reset`` drops every version at or after ``when`` first."""
    if reset:
        kept = [version for version in versions if version[0] < when]
    else:
        kept = [version for version in versions if version[0] != when]
    kept.append((when, payload))
    kept.sort(key=lambda version: version[0])
    if max_versions is not None:
        kept = kept[-max_versions:]
    write_record(key, folder, name, kept, expires_at)


def write_record(
    key: ValueKey, folder: Folder, name: str, versions: list[Version], expires_at: int | None
) -> None:
    """Replace the history record of ``key`` by ``versions`` (oldest first)."""
    record: dict[str, Any] = {
        "key": _key_record(key),
        "versions": [list(version) for version in versions],
    }
    if expires_at is not None:
        record["expires_at"] = expires_at
    atomic_write(folder, name, _pack(record))


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
