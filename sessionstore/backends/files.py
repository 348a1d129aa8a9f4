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
    <namespace>/leases/<session id>.lock    (see :mod:`.leasefile`)
    <namespace>/.namespace                  the namespace's name, when its folder's is
                                            shortened (see below)

The records and their reading and writing are :mod:`.value_records`.

Nothing below the root is reached through a symbolic link: every call walks the key's
folders from the root without following one, checks each on its descriptor, and opens
each record relative to it (see :mod:`.dirhandle`); a link, or a folder the store could
not have made, raises :class:`~sessionstore.errors.UnsafePathError` naming it (a listing
leaves it out with a warning). Records and locks are created 0600, folders 0700.

A namespace whose folder name is shortened (over :data:`~.fsutil.MAX_NAME_BYTES`) has
its full name in ``<namespace>/.namespace``, written by the first write that finds it
missing, so that :func:`namespace_usage` lists it (a folder without one is named by its
value records).

Records are replaced atomically, so reads take no lock and always see the latest
completed write of any process; writes and read-compare-writes take the key's ``.lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from .. import forksafe
from ..contracts import Backends, Refused, Stored, ValueBackend
from ..errors import UnsafePathError
from ..keys import ValueKey
from ..urls import mask_url
from ..when import now_ms
from .dirhandle import Folder, StoreRoot, namespace_named
from .fsutil import (
    DIGEST_MARK,
    close_unlocked,
    decode_name,
    encode_name,
    exclusive_lock,
    locked_elsewhere,
    os_errors,
    remove_durably,
    remove_stale_temps,
    store_error,
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

logger = logging.getLogger("sessionstore")


def open_files(root: Path, namespace: str, url: str) -> Backends:
    """The backends of a ``file://`` store rooted at ``root``; nothing is touched until used."""
    absolute = Path(os.path.abspath(root))
    store_root = StoreRoot(absolute)
    events = JsonlEvents(absolute, namespace, store_root)
    return Backends(
        values=FileValues(absolute, store_root),
        events=events,
        display_url=mask_url(url),
        closers=[events.close],
    )


def namespace_usage(root: Path) -> dict[str, dict[str, int]]:
    """Every namespace folder under ``root`` -> its sessions (log files) and unexpired
    values. A folder whose name is shortened (see :func:`.encode_name`) is named by the
    namespace it records; one whose name no namespace encodes to is passed over, and so
    are a link and (with a warning on the ``sessionstore`` logger) a folder the store
    could not have made. Creates nothing."""
    found: dict[str, dict[str, int]] = {}
    store_root = StoreRoot(root)
    values = FileValues(root, store_root)
    with os_errors(root):
        listed = store_root.walk(())
        entries = []
        if listed is not None:
            with listed:
                entries = listed.entries()
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            try:
                namespace = _namespace_of(store_root, entry.name)
                if namespace is not None:
                    found[namespace] = _usage(store_root, values, namespace)
            except UnsafePathError as exc:
                logger.warning("sessionstore: namespaces skips %s", exc)
    store_root.close()
    return found


def _usage(store_root: StoreRoot, values: FileValues, namespace: str) -> dict[str, int]:
    """The sessions (log files) and unexpired values of ``namespace``."""
    logs = store_root.namespace(namespace, (LOGS_DIR,))
    sessions = 0
    if logs is not None:
        with logs:
            sessions = sum(entry.name.endswith(LOG_SUFFIX) for entry in logs.entries())
    return {"sessions": sessions, "values": len(values.scan(namespace))}


def _namespace_of(store_root: StoreRoot, name: str) -> str | None:
    """The namespace whose folder is named ``name``: decoded, or for a shortened name
    read from the folder (see :data:`.dirhandle.NAME_FILE`), else (a folder made before the
    store wrote that file) from the first value record that names a namespace
    encoding to ``name``; None when it names none."""
    if DIGEST_MARK not in name:
        return decode_name(name)
    folder = store_root.walk((name,))
    if folder is None:
        return None
    with folder:
        named = namespace_named(folder)
        if named is not None:
            return named
        values = folder.walk((VALUES_DIR,))
    if values is None:
        return None
    now = now_ms()
    with values:
        for held, record in _records(values):
            key = record_key(held, record, now)
            if key is not None and encode_name(key.namespace) == name:
                return key.namespace
    return None


class FileValues(ValueBackend):
    """Session values, one folder per key under ``root`` (see the module docstring).
    ``store_root`` is the root's handle when the store shares one between its backends."""

    def __init__(self, root: Path, store_root: StoreRoot | None = None) -> None:
        self._root = root
        self._dirs = store_root if store_root is not None else StoreRoot(root)
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

    @contextlib.contextmanager
    def _opened(self, key: ValueKey, *, create: bool = False) -> Iterator[Folder | None]:
        """The key's folder, walked from the root without links (see :mod:`.dirhandle`):
        None when it does not exist, unless ``create`` makes it. ``OSError`` inside is
        translated (:func:`.os_errors`)."""
        names = [VALUES_DIR, *(encode_name(part) for part in key.parts)]
        try:
            folder = self._dirs.namespace(key.namespace, names, create=create)
            if folder is None:
                yield None
                return
            with folder:
                yield folder
        except OSError as exc:
            raise store_error(exc, self.key_dir(key)) from exc

    @contextlib.contextmanager
    def _locked(self, key: ValueKey) -> Iterator[Folder]:
        """The key's folder (made if missing) under its ``.lock``."""
        with self._opened(key, create=True) as folder:
            assert folder is not None
            with exclusive_lock(folder, LOCK_FILE):
                yield folder

    def prepare(self, key: ValueKey) -> None:
        """Create the key's folder and remove temp files left there by crashed writers."""
        with self._opened(key, create=True) as folder:
            assert folder is not None
            remove_stale_temps(folder)

    def read(self, key: ValueKey) -> Stored | None:
        with self._opened(key) as folder:
            if folder is None:
                return None
            return live_plain(read_plain(key, folder, VALUE_FILE), now_ms())

    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        with self._locked(key) as folder:
            now = now_ms()
            found = None
            if payload is not None and ttl_ms is None:
                found = read_plain(key, folder, VALUE_FILE)
            write_plain(key, folder, VALUE_FILE, payload, when, new_expiry(ttl_ms, found, now))

    def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        with self._locked(key) as folder:
            now = now_ms()
            found = read_plain(key, folder, VALUE_FILE)
            current = live_plain(found, now)
            if current != expected:
                return Refused(current)
            write_plain(key, folder, VALUE_FILE, payload, when, new_expiry(ttl_ms, found, now))
            return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        with self._opened(key) as folder:
            if folder is None:
                return None
            versions, _ = read_versions(key, folder, HISTORY_FILE, now_ms())
            return as_of(versions, when)

    def expiry(self, key: ValueKey, history: bool) -> int | None:
        now = now_ms()
        with self._opened(key) as folder:
            if folder is None:
                return None
            if history:
                versions, expires = read_versions(key, folder, HISTORY_FILE, now)
                return expires if versions else None
            plain = read_plain(key, folder, VALUE_FILE)
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
        with self._locked(key) as folder:
            now = now_ms()
            found = read_versions(key, folder, HISTORY_FILE, now)
            _add_version(key, folder, found, now, payload, when, max_versions, ttl_ms, reset=reset)

    def _lease(
        self, folder: Folder, when: int, fd: int | None, now: int
    ) -> Literal["free", "ours", "other"]:
        """Who holds the lease file of the version at ``when`` in ``folder`` now: this
        store's ``fd`` (locked on that file, its expiry not passed), another live holder
        (locked elsewhere, its expiry not passed), or nobody. A file's expiry is its
        modification time."""
        name = _lease_name(when)
        try:
            found = folder.stat(name)
        except FileNotFoundError:
            return "free"
        live = found.st_mtime_ns // 1_000_000 > now
        if fd is not None and _same_file(found, os.fstat(fd)):
            return "ours" if live else "free"
        return "other" if live and locked_elsewhere(folder, name) else "free"

    def acquire_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        """The lease is the file ``.compute.<when>``, created exclusively and ``flock``'ed
        by its holder for as long as it holds it, its modification time set to its
        expiry: it ends with the holder's process, or once that time has passed without
        a renewal. Decided under the key's ``.lock``: a file nobody holds locked any
        more, or past its expiry, is taken over."""
        held = self._held.get((key, when, token))
        name = _lease_name(when)
        with self._opened(key, create=True) as folder:
            assert folder is not None
            # A waiter asks again and again while another holds the lease: it looks
            # without the key's lock first, so it does not queue with the holder's writes.
            if self._lease(folder, when, held, now_ms()) == "other":
                return False
            with exclusive_lock(folder, LOCK_FILE):
                state = self._lease(folder, when, held, now_ms())
                if state == "other":
                    return False
                if state == "ours" and held is not None:
                    _set_expiry(held, now_ms() + ttl_ms)
                    return True
                if held is not None:
                    os.close(self._held.pop((key, when, token)))
                try:
                    fd = folder.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL)
                except FileExistsError:
                    folder.unlink(name)
                    fd = folder.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL)
                try:
                    # Blocking: a waiter looking without the key's lock may hold it a moment.
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    os.write(fd, token.encode())
                    _set_expiry(fd, now_ms() + ttl_ms)
                except BaseException:
                    folder.unlink(name)
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
        with self._opened(key) as folder:
            if folder is None or self._lease(folder, when, held, now_ms()) != "ours":
                return False
            _set_expiry(held, now_ms() + ttl_ms)
            return True

    def release_compute_lease(self, key: ValueKey, when: int, token: str) -> None:
        """Walked like every other call: the key's folder may have been swapped while
        ``fn`` ran, and nothing is created or locked through a swapped one (the lease
        then ends with its file's lock, closed here)."""
        if (key, when, token) not in self._held:
            return
        try:
            with self._opened(key) as folder:
                if folder is None:
                    return
                with exclusive_lock(folder, LOCK_FILE):
                    self._release(folder, key, when, token)
        finally:
            fd = self._held.pop((key, when, token), None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    close_unlocked(fd)

    def _release(self, folder: Folder, key: ValueKey, when: int, token: str) -> None:
        """Give up the lease file of ``token`` (under the key's ``.lock``): removed when it
        is still the one at its path, closed in any case."""
        fd = self._held.pop((key, when, token), None)
        if fd is None:
            return
        name = _lease_name(when)
        try:
            with contextlib.suppress(FileNotFoundError):
                if _same_file(folder.stat(name), os.fstat(fd)):
                    folder.unlink(name)
        finally:
            close_unlocked(fd)

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
        with self._locked(key) as folder:
            now = now_ms()
            versions = read_versions(key, folder, HISTORY_FILE, now)
            found = as_of(versions[0], when)
            if found is not None and found.when == when:
                return found
            held = self._held.get((key, when, token))
            if self._lease(folder, when, held, now) == "other":
                return False
            _add_version(
                key, folder, versions, now, payload, when, max_versions, ttl_ms, reset=False
            )
            self._release(folder, key, when, token)
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
        with self._locked(key) as folder:
            now = now_ms()
            versions = read_versions(key, folder, HISTORY_FILE, now)
            if as_of(versions[0], when) != expected:
                return False
            _add_version(
                key, folder, versions, now, payload, when, max_versions, ttl_ms, reset=True
            )
            return True

    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        """Every record below the namespace's values folder, found by walking it
        without links; a link or a foreign folder on the way is passed over with a
        warning, as an unreadable record is."""
        found: list[tuple[ValueKey, bool]] = []
        base = self._root / encode_name(namespace) / VALUES_DIR
        now = now_ms()
        with os_errors(base):
            folder = self._dirs.namespace(namespace, (VALUES_DIR,))
            if folder is None:
                return found
            with folder:
                for held, name in _records(folder):
                    key = record_key(held, name, now)
                    if key is not None and key.namespace == namespace:
                        found.append((key, name == HISTORY_FILE))
        found.sort(key=lambda item: item[1])
        return found

    def set_retention(self, key: ValueKey, ttl_ms: int | None) -> bool:
        with self._opened(key) as folder:
            if folder is None:
                return False
            with exclusive_lock(folder, LOCK_FILE):
                now = now_ms()
                expires_at = None if ttl_ms is None else now + ttl_ms
                plain = read_plain(key, folder, VALUE_FILE)
                live = live_plain(plain, now)
                if live is not None:
                    write_plain(key, folder, VALUE_FILE, live.payload, live.when, expires_at)
                versions, _ = read_versions(key, folder, HISTORY_FILE, now)
                if versions:
                    write_record(key, folder, HISTORY_FILE, versions, expires_at)
                return live is not None or bool(versions)

    def forget(self, key: ValueKey) -> bool:
        with self._opened(key) as folder:
            if folder is None:
                return False
            with exclusive_lock(folder, LOCK_FILE):
                now = now_ms()
                found = False
                for name in (VALUE_FILE, HISTORY_FILE):
                    if folder.exists(name):
                        found = found or not expired(folder, name, now)
                        remove_durably(folder, name)
                return found


def _records(folder: Folder) -> Iterator[tuple[Folder, str]]:
    """(folder, name) of every record file below ``folder``, each folder walked without
    links; a link or a foreign folder is passed over with a warning."""
    for entry in folder.entries():
        if entry.name in (VALUE_FILE, HISTORY_FILE):
            yield folder, entry.name
        elif entry.is_dir(follow_symlinks=False):
            try:
                child = folder.walk((entry.name,))
            except UnsafePathError as exc:
                warnings.warn(f"sessionstore: ignoring {exc}", RuntimeWarning, stacklevel=2)
                continue
            if child is not None:
                with child:
                    yield from _records(child)


def _add_version(
    key: ValueKey,
    folder: Folder,
    found: tuple[list[Version], int | None],
    now: int,
    payload: bytes | None,
    when: int,
    max_versions: int | None,
    ttl_ms: int | None,
    *,
    reset: bool,
) -> None:
    """Record a version in the history file in ``folder`` (under the key's ``.lock``), whose
    versions and expiry as read at ``now`` are ``found``; ``reset`` drops every version
    at or after ``when`` first."""
    versions, expires_at = found
    expiry = expires_at if ttl_ms is None else now + ttl_ms
    write_versions(
        key, folder, HISTORY_FILE, versions, payload, when, max_versions, expiry, reset=reset
    )


def _lease_name(when: int) -> str:
    return f"{COMPUTE_PREFIX}{when}"


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _set_expiry(fd: int, expires_at: int) -> None:
    """Record a lease file's expiry (epoch ms) as its modification time."""
    ns = expires_at * 1_000_000
    os.utime(fd, ns=(ns, ns))
