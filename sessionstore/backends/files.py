"""The ``file://`` store: session values as msgpack records, event logs as JSON Lines.

Layout under the root, every name made safe by :func:`~.fsutil.encode_name`::

    <namespace>/values/<symbol>/<strategy>/<exchange>/<frame>/<mode>/
        value.msgpack     plain record   {"key": {...}, "when": int, "payload": bytes,
                                          "expires_at": int (only with a ttl)}
        history.msgpack   all versions   {"key": {...}, "versions": [[when, payload|nil], ...],
                                          "expires_at": int (only with a ttl)}
        .lock             flock'ed around every write and read-compare-write
        .compute.<when>   the lease of get_or_compute on the version at <when>: created
                          exclusively, flock'ed by its holder until released or dead
        .tmp.<pid>.*      a write in progress, or the leftover of a crashed one
    <namespace>/logs/<session id>.jsonl     (see :mod:`.jsonl`)

Nothing below the root is reached through a symbolic link: each folder is checked and
each record opened without following one (see :mod:`.fsutil`), and a link raises
:class:`~sessionstore.errors.UnsafePathError` naming it (a listing leaves it out with a
warning). Records and locks are created 0600, folders 0700.

Records are replaced atomically (temp file, fsync, rename, fsync of the folder), so reads
take no lock and always see the latest completed write of any process. A record whose
stored key is not the key it was read for (two keys sharing a name on a case-insensitive
file system, a copied folder) is ignored with a warning: it reads as absent.

``expires_at`` (wall-clock epoch ms) is stored when the value was written with a ttl; a
record past it reads as absent, and stays on disk until it is written over or forgotten.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import warnings
from pathlib import Path
from typing import Any, Literal, TypeGuard

import msgpack

from .. import forksafe
from ..contracts import Backends, Refused, Stored, ValueBackend
from ..errors import UnsafePathError
from ..keys import ValueKey
from ..urls import mask_url
from ..when import now_ms
from .fsutil import (
    atomic_write,
    check_dirs,
    decode_name,
    encode_name,
    exclusive_lock,
    locked_elsewhere,
    make_dirs,
    open_file,
    os_errors,
    read_file,
    remove_durably,
    remove_stale_temps,
)
from .jsonl import JsonlEvents
from .jsonl_format import LOG_SUFFIX, LOGS_DIR

VALUES_DIR = "values"
VALUE_FILE = "value.msgpack"
HISTORY_FILE = "history.msgpack"
LOCK_FILE = ".lock"
#: The lease file of ``get_or_compute`` on the version at a time: ``.compute.<when>``.
COMPUTE_PREFIX = ".compute."

Version = tuple[int, bytes | None]
#: A plain record as stored (its expiry, None for never, beside it).
Plain = tuple[Stored, int | None]


def open_files(root: Path, namespace: str, url: str) -> Backends:
    """The backends of a ``file://`` store rooted at ``root``; nothing is touched until used."""
    absolute = Path(os.path.abspath(root))
    events = JsonlEvents(absolute, namespace)
    return Backends(
        values=FileValues(absolute),
        events=events,
        display_url=mask_url(url),
        closers=[events.close],
    )


def namespace_usage(root: Path) -> dict[str, dict[str, int]]:
    """Every namespace folder under ``root`` -> its sessions (log files) and unexpired
    values; a folder whose name no namespace encodes to is passed over. Creates nothing."""
    found: dict[str, dict[str, int]] = {}
    with os_errors(root):
        try:
            entries = list(os.scandir(root))
        except FileNotFoundError:
            return found
    values = FileValues(root)
    for entry in entries:
        namespace = decode_name(entry.name)
        if namespace is None or not entry.is_dir(follow_symlinks=False):
            continue
        logs = Path(entry.path) / LOGS_DIR
        with os_errors(logs):
            try:
                sessions = sum(name.endswith(LOG_SUFFIX) for name in os.listdir(logs))
            except (FileNotFoundError, NotADirectoryError):
                sessions = 0
        found[namespace] = {"sessions": sessions, "values": len(values.scan(namespace))}
    return found


class FileValues(ValueBackend):
    """Session values, one folder per key under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        #: The compute leases held here: (key, when, token) -> the locked lease file.
        self._held: dict[tuple[ValueKey, int, str], int] = {}
        forksafe.at_fork(self, "_forget_held")

    def _forget_held(self) -> None:
        """In a forked child: close the inherited lease files, so that a lease ends with
        the process holding it and not with the last of its children (the lock stays
        the parent's, on its own descriptor)."""
        held, self._held = self._held, {}
        for fd in held.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def key_dir(self, key: ValueKey) -> Path:
        """The folder holding ``key``'s records. No I/O."""
        names = (encode_name(part) for part in key.parts)
        return self._root.joinpath(encode_name(key.namespace), VALUES_DIR, *names)

    def _checked_dir(self, key: ValueKey) -> Path:
        """:meth:`key_dir`, once no folder of it is a link (see :func:`.check_dirs`)."""
        directory = self.key_dir(key)
        with os_errors(directory):
            check_dirs(self._root, directory)
        return directory

    def prepare(self, key: ValueKey) -> None:
        """Create the key's folder and remove temp files left there by crashed writers."""
        directory = self._checked_dir(key)
        with os_errors(directory):
            make_dirs(directory)
            remove_stale_temps(directory)

    def read(self, key: ValueKey) -> Stored | None:
        directory = self._checked_dir(key)
        with os_errors(directory):
            return _live_plain(_read_plain(key, directory / VALUE_FILE), now_ms())

    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        directory = self._checked_dir(key)
        path = directory / VALUE_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            now = now_ms()
            found = None if payload is None or ttl_ms is not None else _read_plain(key, path)
            _write_plain(key, path, payload, when, _expiry(ttl_ms, found, now))

    def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        directory = self._checked_dir(key)
        path = directory / VALUE_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            now = now_ms()
            found = _read_plain(key, path)
            current = _live_plain(found, now)
            if current != expected:
                return Refused(current)
            _write_plain(key, path, payload, when, _expiry(ttl_ms, found, now))
            return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        directory = self._checked_dir(key)
        with os_errors(directory):
            versions, _ = _read_versions(key, directory / HISTORY_FILE, now_ms())
            return _as_of(versions, when)

    def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        self._store_version(key, payload, when, max_versions, ttl_ms, reset=True)

    def put_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        self._store_version(key, payload, when, max_versions, ttl_ms, reset=False)

    def _store_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        ttl_ms: int | None,
        *,
        reset: bool,
    ) -> None:
        directory = self._checked_dir(key)
        path = directory / HISTORY_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            now = now_ms()
            versions, expires_at = _read_versions(key, path, now)
            expiry = expires_at if ttl_ms is None else now + ttl_ms
            _write_versions(key, path, versions, payload, when, max_versions, expiry, reset=reset)

    def acquire_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        """The lease is the file ``.compute.<when>``, created exclusively and ``flock``'ed
        by its holder for as long as it holds it: it ends with the holder's process, so
        ``ttl_ms`` is not used. Decided under the key's ``.lock``: a file nobody holds
        locked any more was left by a holder that died, and is taken over."""
        if (key, when, token) in self._held:
            return True
        directory = self._checked_dir(key)
        path = directory / f"{COMPUTE_PREFIX}{when}"
        with os_errors(directory):
            # A waiter asks again and again while another holds the lease: it looks
            # without the key's lock first, so it does not queue with the holder's writes.
            if locked_elsewhere(path):
                return False
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            try:
                fd = open_file(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                if locked_elsewhere(path):
                    return False
                os.unlink(path)
                fd = open_file(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            try:
                # Blocking: a waiter looking without the key's lock may hold it a moment.
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(fd, token.encode())
            except BaseException:
                os.unlink(path)
                os.close(fd)
                raise
            self._held[(key, when, token)] = fd
            return True

    def release_compute_lease(self, key: ValueKey, when: int, token: str) -> None:
        fd = self._held.pop((key, when, token), None)
        if fd is None:
            return
        directory = self.key_dir(key)
        path = directory / f"{COMPUTE_PREFIX}{when}"
        try:
            with (
                os_errors(directory),
                exclusive_lock(directory / LOCK_FILE),
                contextlib.suppress(FileNotFoundError),
            ):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    os.unlink(path)
        finally:
            os.close(fd)

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
        directory = self._checked_dir(key)
        path = directory / HISTORY_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            now = now_ms()
            versions, expires_at = _read_versions(key, path, now)
            if _as_of(versions, when) != expected:
                return False
            expiry = expires_at if ttl_ms is None else now + ttl_ms
            _write_versions(key, path, versions, payload, when, max_versions, expiry)
            return True

    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        found: list[tuple[ValueKey, bool]] = []
        base = self._root / encode_name(namespace) / VALUES_DIR
        now = now_ms()
        with os_errors(base):
            check_dirs(self._root, base)
            for name, history in ((VALUE_FILE, False), (HISTORY_FILE, True)):
                for path in base.rglob(name):
                    key = _stored_key(path, now)
                    if key is not None and key.namespace == namespace:
                        found.append((key, history))
        return found

    def set_retention(self, key: ValueKey, ttl_ms: int | None) -> bool:
        directory = self._checked_dir(key)
        if not directory.is_dir():
            return False
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            now = now_ms()
            expires_at = None if ttl_ms is None else now + ttl_ms
            plain_path, history_path = directory / VALUE_FILE, directory / HISTORY_FILE
            plain = _read_plain(key, plain_path) if plain_path.exists() else None
            live = _live_plain(plain, now)
            if live is not None:
                _write_plain(key, plain_path, live.payload, live.when, expires_at)
            versions, _ = _read_versions(key, history_path, now)
            if versions:
                _write_record(key, history_path, versions, expires_at)
            return live is not None or bool(versions)

    def forget(self, key: ValueKey) -> bool:
        directory = self._checked_dir(key)
        if not directory.is_dir():
            return False
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            now = now_ms()
            found = False
            for name in (VALUE_FILE, HISTORY_FILE):
                path = directory / name
                if path.exists():
                    found = found or not _expired(path, now)
                    remove_durably(path)
            return found


def _expired(path: Path, now: int) -> bool:
    """Whether the record at ``path`` is readable and past its expiry."""
    try:
        record = msgpack.unpackb(read_file(path), raw=False)
    except (OSError, ValueError, TypeError, UnsafePathError):
        return False
    expires_at = record.get("expires_at") if isinstance(record, dict) else None
    return _is_int(expires_at) and expires_at <= now


def _stored_key(path: Path, now: int) -> ValueKey | None:
    """The key a record says it belongs to; None when it has expired, and (with a
    warning) when unreadable."""
    try:
        record = msgpack.unpackb(read_file(path), raw=False)
        fields = record["key"]
        key = ValueKey(*(fields[name] for name in _KEY_FIELDS))
    except FileNotFoundError:
        return None
    except UnsafePathError as exc:
        _ignore(path, str(exc))
        return None
    except (ValueError, TypeError, KeyError) as exc:
        _ignore(path, f"not a record with a key ({exc!r:.200})")
        return None
    valid, expires_at = _expires_at(path, record)
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


def _ignore(path: Path, why: str) -> None:
    warnings.warn(f"sessionstore: ignoring {path}: {why}", RuntimeWarning, stacklevel=2)


def _load(key: ValueKey, path: Path) -> dict[str, Any] | None:
    """The record stored at ``path`` for ``key``; None when absent, unreadable or another
    key's (the last two with a warning)."""
    try:
        raw = read_file(path)
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


def _expires_at(path: Path, record: dict[str, Any]) -> tuple[bool, int | None]:
    """(valid, the record's expiry): absent is valid and None; anything but an int is
    invalid, with a warning."""
    expires_at = record.get("expires_at")
    if expires_at is None or _is_int(expires_at):
        return True, expires_at
    _ignore(path, "its 'expires_at' is not an int")
    return False, None


def _read_plain(key: ValueKey, path: Path) -> Plain | None:
    """The plain record of ``key`` and its expiry, expired or not; None when absent or
    unreadable."""
    record = _load(key, path)
    if record is None:
        return None
    when, payload = record.get("when"), record.get("payload")
    if not _is_int(when) or not isinstance(payload, bytes):
        _ignore(path, "the record lacks an int 'when' or a bytes 'payload'")
        return None
    valid, expires_at = _expires_at(path, record)
    return (Stored(payload, when), expires_at) if valid else None


def _live(expires_at: int | None, now: int) -> bool:
    return expires_at is None or expires_at > now


def _live_plain(found: Plain | None, now: int) -> Stored | None:
    """The record of a :func:`_read_plain` result unless it has expired."""
    return found[0] if found is not None and _live(found[1], now) else None


def _expiry(ttl_ms: int | None, found: Plain | None, now: int) -> int | None:
    """The expiry of a record written now over ``found``: ``ttl_ms`` from now, else
    ``found``'s while it has not expired."""
    if ttl_ms is not None:
        return now + ttl_ms
    if found is not None and _live(found[1], now):
        return found[1]
    return None


def _write_plain(
    key: ValueKey, path: Path, payload: bytes | None, when: int, expires_at: int | None
) -> None:
    if payload is None:
        remove_durably(path)
        return
    record: dict[str, Any] = {"key": _key_record(key), "when": when, "payload": payload}
    if expires_at is not None:
        record["expires_at"] = expires_at
    atomic_write(path, _pack(record))


def _read_versions(key: ValueKey, path: Path, now: int) -> tuple[list[Version], int | None]:
    """Every stored version of ``key``, oldest first, and the history's expiry; none
    once it has expired."""
    record = _load(key, path)
    if record is None:
        return [], None
    raw = record.get("versions")
    if not isinstance(raw, list) or not all(_is_version(item) for item in raw):
        _ignore(path, "the record lacks a list of [when, payload] versions")
        return [], None
    valid, expires_at = _expires_at(path, record)
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
    _write_record(key, path, kept, expires_at)


def _write_record(
    key: ValueKey, path: Path, versions: list[Version], expires_at: int | None
) -> None:
    """Replace the history record of ``key`` by ``versions`` (oldest first)."""
    record: dict[str, Any] = {
        "key": _key_record(key),
        "versions": [list(version) for version in versions],
    }
    if expires_at is not None:
        record["expires_at"] = expires_at
    atomic_write(path, _pack(record))


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
