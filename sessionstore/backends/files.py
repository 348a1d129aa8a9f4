"""The ``file://`` store: session values as msgpack records, event logs as JSON Lines.

Layout under the root, every name made safe by :func:`~.fsutil.encode_name`::

    <namespace>/values/<symbol>/<strategy>/<exchange>/<frame>/<mode>/
        value.msgpack     plain record   {"key": {...}, "when": int, "payload": bytes}
        history.msgpack   all versions   {"key": {...}, "versions": [[when, payload|nil], ...]}
        .lock             flock'ed around every write and read-compare-write
        .tmp.<pid>.*      a write in progress, or the leftover of a crashed one
    <namespace>/logs/<session id>.jsonl     (see :mod:`.jsonl`)

Records are replaced atomically (temp file, fsync, rename, fsync of the folder), so reads
take no lock and always see the latest completed write of any process. A record whose
stored key is not the key it was read for (two keys sharing a name on a case-insensitive
file system, a copied folder) is ignored with a warning: it reads as absent.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, TypeGuard

import msgpack

from ..connection import Backends
from ..contracts import Stored, ValueBackend
from ..keys import ValueKey
from .fsutil import (
    atomic_write,
    encode_name,
    exclusive_lock,
    make_dirs,
    os_errors,
    remove_durably,
    remove_stale_temps,
)
from .jsonl import JsonlEvents

VALUES_DIR = "values"
VALUE_FILE = "value.msgpack"
HISTORY_FILE = "history.msgpack"
LOCK_FILE = ".lock"

Version = tuple[int, bytes | None]


def open_files(root: Path, namespace: str, url: str) -> Backends:
    """The backends of a ``file://`` store rooted at ``root``; nothing is touched until used."""
    absolute = Path(os.path.abspath(root))
    return Backends(
        values=FileValues(absolute),
        events=JsonlEvents(absolute, namespace),
        display_url=url,
    )


class FileValues(ValueBackend):
    """Session values, one folder per key under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def key_dir(self, key: ValueKey) -> Path:
        """The folder holding ``key``'s records. No I/O."""
        names = (encode_name(part) for part in key.parts)
        return self._root.joinpath(encode_name(key.namespace), VALUES_DIR, *names)

    def prepare(self, key: ValueKey) -> None:
        """Create the key's folder and remove temp files left there by crashed writers."""
        directory = self.key_dir(key)
        with os_errors(directory):
            make_dirs(directory)
            remove_stale_temps(directory)

    def read(self, key: ValueKey) -> Stored | None:
        directory = self.key_dir(key)
        with os_errors(directory):
            return _read_plain(key, directory / VALUE_FILE)

    def write(self, key: ValueKey, payload: bytes | None, when: int) -> None:
        directory = self.key_dir(key)
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            _write_plain(key, directory / VALUE_FILE, payload, when)

    def swap(
        self, key: ValueKey, expected: Stored | None, payload: bytes | None, when: int
    ) -> bool:
        directory = self.key_dir(key)
        path = directory / VALUE_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            if _read_plain(key, path) != expected:
                return False
            _write_plain(key, path, payload, when)
            return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        directory = self.key_dir(key)
        with os_errors(directory):
            return _as_of(_read_versions(key, directory / HISTORY_FILE), when)

    def write_version(
        self, key: ValueKey, payload: bytes | None, when: int, max_versions: int | None
    ) -> None:
        directory = self.key_dir(key)
        path = directory / HISTORY_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            versions = _read_versions(key, path)
            _write_versions(key, path, versions, payload, when, max_versions)

    def swap_version(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
    ) -> bool:
        directory = self.key_dir(key)
        path = directory / HISTORY_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            versions = _read_versions(key, path)
            if _as_of(versions, when) != expected:
                return False
            _write_versions(key, path, versions, payload, when, max_versions)
            return True


    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        found: list[tuple[ValueKey, bool]] = []
        base = self._root / encode_name(namespace) / VALUES_DIR
        with os_errors(base):
            for name, history in ((VALUE_FILE, False), (HISTORY_FILE, True)):
                for path in base.rglob(name):
                    key = _stored_key(path)
                    if key is not None and key.namespace == namespace:
                        found.append((key, history))
        return found

    def forget(self, key: ValueKey) -> bool:
        directory = self.key_dir(key)
        if not directory.is_dir():
            return False
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            found = False
            for name in (VALUE_FILE, HISTORY_FILE):
                if (directory / name).exists():
                    remove_durably(directory / name)
                    found = True
            return found


def _stored_key(path: Path) -> ValueKey | None:
    """The key a record says it belongs to; None (with a warning) when unreadable."""
    try:
        record = msgpack.unpackb(path.read_bytes(), raw=False)
        fields = record["key"]
        return ValueKey(*(fields[name] for name in _KEY_FIELDS))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError) as exc:
        _ignore(path, f"not a record with a key ({exc!r:.200})")
        return None


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


def _ignore(path: Path, why: str) -> None:
    warnings.warn(f"sessionstore: ignoring {path}: {why}", RuntimeWarning, stacklevel=2)


def _load(key: ValueKey, path: Path) -> dict[str, Any] | None:
    """The record stored at ``path`` for ``key``; None when absent, unreadable or another
    key's (the last two with a warning)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        record = msgpack.unpackb(raw, raw=False)
    except (ValueError, TypeError) as exc:
        _ignore(path, f"not a msgpack record ({exc})")
        return None
    if not isinstance(record, dict):
        _ignore(path, "not a msgpack map")
        return None
    stored_key = record.get("key")
    if stored_key != _key_record(key):
        _ignore(path, f"it holds the record of {stored_key!r:.300}, not of {key.label()!r}")
        return None
    return record


def _read_plain(key: ValueKey, path: Path) -> Stored | None:
    record = _load(key, path)
    if record is None:
        return None
    when, payload = record.get("when"), record.get("payload")
    if not _is_int(when) or not isinstance(payload, bytes):
        _ignore(path, "the record lacks an int 'when' or a bytes 'payload'")
        return None
    return Stored(payload, when)


def _write_plain(key: ValueKey, path: Path, payload: bytes | None, when: int) -> None:
    if payload is None:
        remove_durably(path)
    else:
        atomic_write(path, _pack({"key": _key_record(key), "when": when, "payload": payload}))


def _read_versions(key: ValueKey, path: Path) -> list[Version]:
    """Every stored version of ``key``, oldest first."""
    record = _load(key, path)
    if record is None:
        return []
    raw = record.get("versions")
    if not isinstance(raw, list) or not all(_is_version(item) for item in raw):
        _ignore(path, "the record lacks a list of [when, payload] versions")
        return []
    return sorted({item[0]: item[1] for item in raw}.items())


def _is_version(item: object) -> bool:
    return (
        isinstance(item, list)
        and len(item) == 2
        and _is_int(item[0])
        and (item[1] is None or isinstance(item[1], bytes))
    )


def _as_of(versions: list[Version], when: int) -> Stored | None:
    found = None
    for at, payload in versions:
        if at > when:
            break
        found = Stored(payload, at)
    return found


def _write_versions(
    key: ValueKey,
    path: Path,
    versions: list[Version],
    payload: bytes | None,
    when: int,
    max_versions: int | None,
) -> None:
    kept = [version for version in versions if version[0] < when]
    kept.append((when, payload))
    if max_versions is not None:
        kept = kept[-max_versions:]
    record = {"key": _key_record(key), "versions": [list(version) for version in kept]}
    atomic_write(path, _pack(record))


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
