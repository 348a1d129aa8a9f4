"""File-system helpers shared by the file backends: filename-safe names, durable atomic
writes, directory fsync, ``flock`` locks, leftover temp files and ``OSError`` translation.

The store never follows a symbolic link below its root (it makes none): every file
operation goes through a :class:`~.dirhandle.Folder`, a folder walked from the root
without links and checked on its descriptor, and the helpers here take one and a name
in it. Files are created with mode :data:`FILE_MODE` (0600) and folders with :data:`DIR_MODE`
(0700): the umask can only narrow them.

POSIX only: locking relies on ``fcntl.flock``, which holds per open file description, so
two threads of one process exclude each other just like two processes do.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import stat
import string
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from ..errors import (
    AccessDeniedError,
    InvalidArgumentError,
    SessionStoreError,
    StoreUnavailableError,
)

if TYPE_CHECKING:
    from .dirhandle import Folder

#: Encoded names longer than this (in UTF-8 bytes) are shortened to a prefix plus a digest.
MAX_NAME_BYTES = 150
#: Name of an empty string: a lone ``%`` is never produced by escaping.
EMPTY_NAME = "%"
#: Separates a shortened prefix from its digest; ``~`` is always escaped, so it is unambiguous.
DIGEST_MARK = "~"
#: Leftover temp files older than this many seconds are removed whoever created them.
TEMP_MAX_AGE = 3600.0
TEMP_PREFIX = ".tmp."

#: ``OSError`` numbers that say the path itself is unusable, not the disk or the permissions.
BAD_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP})
#: Shown of a path in an error message, at most (a longer one is cut).
_SHOWN_CHARS = 300

#: The mode of every file the store creates (records, logs, locks, leases).
FILE_MODE = 0o600
#: The mode of every folder the store creates.
DIR_MODE = 0o700

_KEPT_ASCII = frozenset(string.ascii_letters + string.digits + "_-")
_READ_CHUNK = 1 << 20


def encode_name(text: str) -> str:
    """A file name for ``text``: distinct texts give distinct names, and no name is
    ``""``, ``"."``, ``".."`` or contains ``/``.

    ASCII letters, digits, ``_``, ``-`` and non-ASCII letters stay readable; every other
    character (``.``, ``%`` and ``/`` included) is percent-escaped as UTF-8 bytes. A name
    over :data:`MAX_NAME_BYTES` becomes a readable prefix, ``~`` and the sha256 of ``text``.
    """
    tokens = [_encode_char(char) for char in text]
    name = "".join(tokens)
    if not name:
        return EMPTY_NAME
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    budget = MAX_NAME_BYTES - len(DIGEST_MARK) - len(digest)
    prefix: list[str] = []
    for token in tokens:
        budget -= len(token.encode())
        if budget < 0:
            break
        prefix.append(token)
    return "".join(prefix) + DIGEST_MARK + digest


def decode_name(name: str) -> str | None:
    """The text :func:`encode_name` made ``name`` of; None for a name it could not have
    made, or a shortened one (its end is a digest)."""
    if DIGEST_MARK in name:
        return None
    try:
        text = unquote(name, errors="strict")
    except UnicodeDecodeError:
        return None
    return text if encode_name(text) == name else None


def _encode_char(char: str) -> str:
    if char in _KEPT_ASCII or (not char.isascii() and char.isalpha()):
        return char
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))


def local_path(text: str, shown: str) -> Path:
    """``text`` as an absolute path: ``~`` expanded, relative to the working directory,
    symbolic links resolved. Reads links but creates nothing.

    Raises :class:`InvalidArgumentError` naming ``shown`` (the path or its masked URL) for
    a path that no file operation could use: one holding a NUL byte or a character the
    file system encoding cannot carry, an unknown ``~user``, symbolic links that loop, a
    name longer than the file system allows or a path longer than the system's limit.
    """
    where = f"{shown!r:.{_SHOWN_CHARS}}"
    if "\0" in text:
        raise InvalidArgumentError(f"the path of {where} holds a NUL byte")
    try:
        os.fsencode(text)
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"the path of {where} cannot be encoded for the file system: {exc.reason}"
        ) from exc
    try:
        path = Path(text).expanduser().resolve()
    except RuntimeError as exc:
        # pathlib's words for a symlink loop and for a ~ with no home directory.
        raise InvalidArgumentError(f"the path of {where} cannot be resolved: {exc}") from exc
    except ValueError as exc:
        raise InvalidArgumentError(f"the path of {where} is not usable: {exc}") from exc
    except OSError as exc:
        if exc.errno in BAD_PATH_ERRNOS:
            raise InvalidArgumentError(f"the path of {where} is not usable: {exc}") from exc
        raise store_error(exc, text) from exc
    name_max, path_max = _limits(path)
    if len(os.fsencode(path)) >= path_max:
        raise InvalidArgumentError(
            f"the path of {where} is longer than this system's limit ({path_max} bytes)"
        )
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            raise InvalidArgumentError(
                f"the path of {where} has a name longer than the file system allows "
                f"({name_max} bytes): {part!r:.80}"
            )
    return path


def _limits(path: Path) -> tuple[int, int]:
    """(longest name, longest path) in bytes on the file system that holds ``path``,
    asked of its nearest existing ancestor (255 and 4096 when it cannot say)."""
    existing = path
    while not os.path.exists(existing) and existing.parent != existing:
        existing = existing.parent
    limits = []
    for name, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        try:
            limits.append(os.pathconf(existing, name))
        except (OSError, ValueError):
            limits.append(default)
    return limits[0], limits[1]


def store_error(exc: OSError, path: str | os.PathLike[str]) -> SessionStoreError:
    """The library error for ``exc``: refused permission is :class:`AccessDeniedError`, a
    path that cannot be used (a name too long, symbolic links that loop)
    :class:`InvalidArgumentError`, anything else (missing folder, full disk, I/O error,
    ...) :class:`StoreUnavailableError`."""
    where = os.fsdecode(exc.filename) if exc.filename else os.fspath(path)
    reason = exc.strerror or str(exc)
    if exc.errno in BAD_PATH_ERRNOS:
        return InvalidArgumentError(
            f"file store path {where!r:.{_SHOWN_CHARS}} is not usable: {reason}"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return AccessDeniedError(f"file store access denied at {where}: {reason}")
    return StoreUnavailableError(f"file store unavailable at {where}: {reason}")


@contextmanager
def os_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Translate any ``OSError`` raised inside into :func:`store_error`, chained."""
    try:
        yield
    except OSError as exc:
        raise store_error(exc, path) from exc


def read_file(folder: Folder, name: str) -> bytes:
    """The whole content of the regular file ``name`` in ``folder`` (see
    :meth:`.dirhandle.Folder.open`)."""
    fd = folder.open(name, os.O_RDONLY)
    try:
        return read_all(fd)
    finally:
        os.close(fd)


def locked_elsewhere(folder: Folder, name: str) -> bool:
    """Whether another open file description holds an exclusive ``flock`` on the file
    ``name`` in ``folder`` (a live lease's holder: the kernel drops the lock with its
    process); False when there is no such file. It probes with a shared lock, so two
    probes never take each other for a holder."""
    try:
        fd = folder.open(name, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


#: Mode bits that let users other than the owner change a folder's entries.
FOREIGN_WRITE = stat.S_IWGRP | stat.S_IWOTH


def foreign_folder(found: os.stat_result, user: int) -> str:
    """What :meth:`.dirhandle.Folder.walk` says of a folder the store did not make."""
    mode = f"mode {stat.S_IMODE(found.st_mode):04o}"
    whose = "yours" if found.st_uid == user else f"owned by uid {found.st_uid}, not {user}"
    return (
        f"a folder the store did not make ({whose}, {mode}): others could write in it;"
        " remove it, or make it this user's own with mode 0700"
    )


def fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` (creations, renames, unlinks) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents durably (each new entry's parent is
    fsynced); concurrent creation by another process is fine. For folders the user chose
    (a store's root, a database's folder): the folders below a file store's root are
    made by :meth:`.dirhandle.Folder.walk`."""
    missing: list[Path] = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        with suppress(FileExistsError):
            os.mkdir(path, DIR_MODE)
        fsync_dir(path.parent)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (a short write continues; a full disk raises)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int) -> bytes:
    """Everything in the file open as ``fd``, from offset 0, whatever its position."""
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, max(_READ_CHUNK, os.fstat(fd).st_size - offset), offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def temp_name(name: str) -> str:
    """A fresh temp file name next to the file ``name``, carrying this process's pid."""
    return f"{TEMP_PREFIX}{os.getpid()}.{secrets.token_hex(4)}.{name}"


def atomic_write(folder: Folder, name: str, data: bytes, temp: str | None = None) -> None:
    """Replace the file ``name`` in ``folder`` with ``data`` so that readers see the old
    or the new content, never a mix, and the new content survives a crash once this
    returns. ``temp`` names the file written first (default: :func:`temp_name`)."""
    temp = temp or temp_name(name)
    fd = folder.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        folder.replace(temp, name)
    except BaseException:
        with suppress(OSError):
            folder.unlink(temp)
        raise
    folder.fsync()


def remove_durably(folder: Folder, name: str) -> None:
    """Unlink ``name`` and fsync ``folder``; nothing to do when it is absent."""
    try:
        folder.unlink(name)
    except FileNotFoundError:
        return
    folder.fsync()


@contextmanager
def exclusive_lock(folder: Folder, name: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the lock file ``name`` in ``folder`` (created if
    missing; see :meth:`.dirhandle.Folder.open`). Lock files are never removed, so every holder
    locks the same inode."""
    fd = folder.open(name, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        close_unlocked(fd)


def close_unlocked(fd: int) -> None:
    """Let go of the ``flock`` ``fd`` holds, then close it. A lock belongs to the open
    file description, which a child forked while it was held refers to as well: closing
    alone would leave it held for as long as that child lives (its own copy, which no
    code of the child closes, keeps it), and every other taker of it waiting."""
    with suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def remove_stale_temps(folder: Folder) -> None:
    """Remove the temp files in ``folder`` left by crashed writers: those whose
    creating process is gone, and any older than :data:`TEMP_MAX_AGE`."""
    cutoff = time.time() - TEMP_MAX_AGE
    for entry in folder.entries():
        pid = temp_owner(entry.name)
        if pid is None:
            continue
        try:
            stale = not _alive(pid) or folder.stat(entry.name).st_mtime < cutoff
            if stale:
                folder.unlink(entry.name)
        except FileNotFoundError:
            continue


def temp_owner(name: str) -> int | None:
    """The pid in a name made by :func:`temp_name`, or None for any other name."""
    if not name.startswith(TEMP_PREFIX):
        return None
    pid = name[len(TEMP_PREFIX) :].partition(".")[0]
    return int(pid) if pid.isdigit() and pid.isascii() else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        # Signalling pid 0 would address our whole process group: never a real owner.
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True
