"""The ``file://`` store: session values as msgpack records, event logs as JSON Lines.

Layout under the root, every name made safe by :func:`~.fsutil.encode_name`::

    <namespace>/values/<symbol>/<strategy>/<exchange>/<frame>/<mode>/
        value.msgpack     plain record   {"key": {...}, "when": int, "payload": bytes,
                                          "expires_at": int (only with a ttl)}
        history.msgpack   all versions   {"key": {...}, "versions": [[when, payload|nil], ...],
                                          "expires_at": int (only with a ttl)}
        .lock             flock'ed around every write and read-compare-write
        .compute.<when>   the lease of get_or_compute on the version at <when>: created
                          exclusively, flock'ed by its holder until released or dead,
                          its modification time its expiry (renewed by its holder)
        .tmp.<pid>.*      a write in progress, or the leftover of a crashed one
    <namespace>/logs/<session id>.jsonl     (see :mod:`.jsonl`)

The records and their reading and writing are :mod:`.value_records`.

Nothing below the root is reached through a symbolic link: each folder is checked and
each record opened without following one (see :mod:`.fsutil`), and a link raises
:class:`~sessionstore.errors.UnsafePathError` naming it (a listing leaves it out with a
warning). Records and locks are created 0600, folders 0700.

Records are replaced atomically, so reads take no lock and always see the latest
completed write of any process; writes and read-compare-writes take the key's ``.lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Literal

from .. import forksafe
from ..contracts import Backends, Refused, Stored, ValueBackend
from ..errors import SessionStoreError
from ..keys import ValueKey
from ..urls import mask_url
from ..when import now_ms
from .fsutil import (
    check_dirs,
    decode_name,
    encode_name,
    exclusive_lock,
    locked_elsewhere,
    make_dirs,
    open_file,
    os_errors,
    remove_durably,
    remove_stale_temps,
)
from .jsonl import JsonlEvents
from .jsonl_format import LOG_SUFFIX, LOGS_DIR
from .value_records import (
    Version,
    as_of,
    expired,
    live_plain,
    new_expiry,
    read_plain,
    read_versions,
    record_key,
    write_plain,
    write_record,
    write_versions,
)

VALUES_DIR = "values"
VALUE_FILE = "value.msgpack"
HISTORY_FILE = "history.msgpack"
LOCK_FILE = ".lock"
#: The lease file of ``get_or_compute`` on the version at a time: ``.compute.<when>``.
COMPUTE_PREFIX = ".compute."


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
            return live_plain(read_plain(key, directory / VALUE_FILE), now_ms())

    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        directory = self._checked_dir(key)
        path = directory / VALUE_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            now = now_ms()
            found = None if payload is None or ttl_ms is not None else read_plain(key, path)
            write_plain(key, path, payload, when, new_expiry(ttl_ms, found, now))

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
            found = read_plain(key, path)
            current = live_plain(found, now)
            if current != expected:
                return Refused(current)
            write_plain(key, path, payload, when, new_expiry(ttl_ms, found, now))
            return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        directory = self._checked_dir(key)
        with os_errors(directory):
            versions, _ = read_versions(key, directory / HISTORY_FILE, now_ms())
            return as_of(versions, when)

    def expiry(self, key: ValueKey, history: bool) -> int | None:
        directory = self._checked_dir(key)
        now = now_ms()
        with os_errors(directory):
            if history:
                versions, expires = read_versions(key, directory / HISTORY_FILE, now)
                return expires if versions else None
            plain = read_plain(key, directory / VALUE_FILE)
            return plain[1] if plain is not None and live_plain(plain, now) is not None else None

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
            found = read_versions(key, path, now)
            _add_version(key, path, found, now, payload, when, max_versions, ttl_ms, reset=reset)

    def _lease_path(self, directory: Path, when: int) -> Path:
        return directory / f"{COMPUTE_PREFIX}{when}"

    def _lease(self, path: Path, fd: int | None, now: int) -> Literal["free", "ours", "other"]:
        """Who holds the lease file ``path`` now: this store's ``fd`` (locked on the file
        at ``path``, its expiry not passed), another live holder (locked elsewhere, its
        expiry not passed), or nobody. A file's expiry is its modification time."""
        try:
            found = os.stat(path)
        except FileNotFoundError:
            return "free"
        live = found.st_mtime_ns // 1_000_000 > now
        if fd is not None and _same_file(found, os.fstat(fd)):
            return "ours" if live else "free"
        return "other" if live and locked_elsewhere(path) else "free"

    def acquire_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        """The lease is the file ``.compute.<when>``, created exclusively and ``flock``'ed
        by its holder for as long as it holds it, its modification time set to its
        expiry: it ends with the holder's process, or once that time has passed without
        a renewal. Decided under the key's ``.lock``: a file nobody holds locked any
        more, or past its expiry, is taken over."""
        directory = self._checked_dir(key)
        path = self._lease_path(directory, when)
        held = self._held.get((key, when, token))
        with os_errors(directory):
            # A waiter asks again and again while another holds the lease: it looks
            # without the key's lock first, so it does not queue with the holder's writes.
            if self._lease(path, held, now_ms()) == "other":
                return False
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            state = self._lease(path, held, now_ms())
            if state == "other":
                return False
            if state == "ours" and held is not None:
                _set_expiry(held, now_ms() + ttl_ms)
                return True
            if held is not None:
                os.close(self._held.pop((key, when, token)))
            try:
                fd = open_file(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                os.unlink(path)
                fd = open_file(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            try:
                # Blocking: a waiter looking without the key's lock may hold it a moment.
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(fd, token.encode())
                _set_expiry(fd, now_ms() + ttl_ms)
            except BaseException:
                os.unlink(path)
                os.close(fd)
                raise
            self._held[(key, when, token)] = fd
            return True

    def renew_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        """Moves the expiry of the lease file this store holds, while it is still the file
        at its path and live. Without the key's ``.lock`` (a renewing process stopped
        while holding it would hold up every write of the key): a holder taking the
        lease over replaces the file, so a renewal racing it only moves the expiry of a
        file nobody looks at any more."""
        held = self._held.get((key, when, token))
        if held is None:
            return False
        directory = self._checked_dir(key)
        with os_errors(directory):
            if self._lease(self._lease_path(directory, when), held, now_ms()) != "ours":
                return False
            _set_expiry(held, now_ms() + ttl_ms)
            return True

    def release_compute_lease(self, key: ValueKey, when: int, token: str) -> None:
        if (key, when, token) not in self._held:
            return
        try:
            # Checked as every other path is: the key's folder may have been swapped
            # while fn ran, and nothing is created or locked through a swapped one.
            directory = self._checked_dir(key)
        except SessionStoreError:
            with contextlib.suppress(OSError):  # the lease then ends with its file's lock
                os.close(self._held.pop((key, when, token)))
            raise
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            self._release(directory, key, when, token)

    def _release(self, directory: Path, key: ValueKey, when: int, token: str) -> None:
        """Give up the lease file of ``token`` (under the key's ``.lock``): removed when it
        is still the one at its path, closed in any case."""
        fd = self._held.pop((key, when, token), None)
        if fd is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                if _same_file(os.stat(self._lease_path(directory, when)), os.fstat(fd)):
                    os.unlink(self._lease_path(directory, when))
        finally:
            os.close(fd)

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
        directory = self._checked_dir(key)
        path = directory / HISTORY_FILE
        with os_errors(directory), exclusive_lock(directory / LOCK_FILE):
            now = now_ms()
            versions = read_versions(key, path, now)
            found = as_of(versions[0], when)
            if found is not None and found.when == when:
                return found
            held = self._held.get((key, when, token))
            if self._lease(self._lease_path(directory, when), held, now) == "other":
                return False
            _add_version(key, path, versions, now, payload, when, max_versions, ttl_ms, reset=False)
            self._release(directory, key, when, token)
            return True

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
            versions = read_versions(key, path, now)
            if as_of(versions[0], when) != expected:
                return False
            _add_version(key, path, versions, now, payload, when, max_versions, ttl_ms, reset=True)
            return True

    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        found: list[tuple[ValueKey, bool]] = []
        base = self._root / encode_name(namespace) / VALUES_DIR
        now = now_ms()
        with os_errors(base):
            check_dirs(self._root, base)
            for name, history in ((VALUE_FILE, False), (HISTORY_FILE, True)):
                for path in base.rglob(name):
                    key = record_key(path, now)
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
            plain = read_plain(key, plain_path) if plain_path.exists() else None
            live = live_plain(plain, now)
            if live is not None:
                write_plain(key, plain_path, live.payload, live.when, expires_at)
            versions, _ = read_versions(key, history_path, now)
            if versions:
                write_record(key, history_path, versions, expires_at)
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
                    found = found or not expired(path, now)
                    remove_durably(path)
            return found


def _add_version(
    key: ValueKey,
    path: Path,
    found: tuple[list[Version], int | None],
    now: int,
    payload: bytes | None,
    when: int,
    max_versions: int | None,
    ttl_ms: int | None,
    *,
    reset: bool,
) -> None:
    """Record a version in the history file ``path`` (under the key's ``.lock``), whose
    versions and expiry as read at ``now`` are ``found``; ``reset`` drops every version
    at or after ``when`` first."""
    versions, expires_at = found
    expiry = expires_at if ttl_ms is None else now + ttl_ms
    write_versions(key, path, versions, payload, when, max_versions, expiry, reset=reset)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _set_expiry(fd: int, expires_at: int) -> None:
    """Record a lease file's expiry (epoch ms) as its modification time."""
    ns = expires_at * 1_000_000
    os.utime(fd, ns=(ns, ns))
