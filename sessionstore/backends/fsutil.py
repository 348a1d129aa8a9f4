"""File-system helpers shared by the file backends: filename-safe names, durable atomic
writes, directory fsync, ``flock`` locks, leftover temp files and ``OSError`` translation.

The store never follows a symbolic link below its root (it makes none): every file is
opened by :func:`open_file` (``O_NOFOLLOW``, and refused unless it is a regular file) and
every folder is checked by :func:`check_dirs` (``lstat``) before a file in it is opened
or created; either raises :class:`~sessionstore.errors.UnsafePathError` naming the path.
Files are created with mode :data:`FILE_MODE` (0600) and folders with :data:`DIR_MODE`
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
from urllib.parse import unquote

from ..errors import (
    AccessDeniedError,
    InvalidArgumentError,
    SessionStoreError,
    StoreUnavailableError,
    UnsafePathError,
)

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
#: Added to every open by :func:`open_file`: a symbolic link fails (ELOOP) rather than be
#: followed, and a FIFO or a device cannot block the open.
_SAFE_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

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


def open_file(path: str | os.PathLike[str], flags: int) -> int:
    """``path`` opened with ``flags`` (and ``O_NOFOLLOW``; created with :data:`FILE_MODE`
    when ``flags`` has ``O_CREAT``). Raises :class:`UnsafePathError` when ``path`` is a
    symbolic link or not a regular file (nothing is read, written or created through it),
    and ``OSError`` as ``os.open`` does otherwise (``FileNotFoundError`` when absent)."""
    try:
        fd = os.open(path, flags | _SAFE_OPEN, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(os.fspath(path), "a symbolic link") from None
        if exc.errno == errno.EISDIR:
            raise UnsafePathError(os.fspath(path), "a folder, not a file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafePathError(os.fspath(path), "not a regular file")
    return fd


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The whole content of the regular file ``path`` (see :func:`open_file`)."""
    fd = open_file(path, os.O_RDONLY)
    try:
        return read_all(fd)
    finally:
        os.close(fd)


def locked_elsewhere(path: Path) -> bool:
    """Whether another open file description holds an exclusive ``flock`` on the file at
    ``path`` (a live lease's holder: the kernel drops the lock with its process); False
    when there is no such file. It probes with a shared lock, so two probes never take
    each other for a holder."""
    try:
        fd = open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def check_dirs(root: Path, directory: Path) -> None:
    """Raise :class:`UnsafePathError` when a folder of ``directory`` below ``root`` (the
    store's own root, resolved when it was opened) is a symbolic link, not a folder, or
    not one the store could have made: owned by another user, or writable by its group
    or by others (the store makes every folder :data:`DIR_MODE`, its user's own), so
    that someone else could put records in it or swap what is there. Stops at the first
    one missing (:func:`make_dirs` creates them as real folders)."""
    current, user = root, os.geteuid()
    for part in directory.relative_to(root).parts:
        current = current / part
        try:
            found = os.lstat(current)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(found.st_mode):
            raise UnsafePathError(os.fspath(current), "a symbolic link")
        if not stat.S_ISDIR(found.st_mode):
            raise UnsafePathError(os.fspath(current), "not a folder")
        if found.st_uid != user or found.st_mode & FOREIGN_WRITE:
            raise UnsafePathError(os.fspath(current), foreign_folder(found, user))


#: Mode bits that let users other than the owner change a folder's entries.
FOREIGN_WRITE = stat.S_IWGRP | stat.S_IWOTH


def foreign_folder(found: os.stat_result, user: int) -> str:
    """What :func:`check_dirs` says of a folder the store did not make."""
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
    fsynced); concurrent creation by another process is fine."""
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


def temp_path(path: Path) -> Path:
    """A fresh temp file name next to ``path``, carrying this process's pid."""
    return path.with_name(f"{TEMP_PREFIX}{os.getpid()}.{secrets.token_hex(4)}.{path.name}")


def atomic_write(path: Path, data: bytes, temp: Path | None = None) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content, never
    a mix, and the new content survives a crash once this returns. ``temp`` names the
    file written first (default: :func:`temp_path` of ``path``)."""
    temp = temp or temp_path(path)
    fd = open_file(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


def remove_durably(path: Path) -> None:
    """Unlink ``path`` and fsync its directory; nothing to do when it is absent."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the lock file ``path`` (created, with its folders,
    if missing; see :func:`open_file`). Lock files are never removed, so every holder
    locks the same inode."""
    try:
        fd = open_file(path, os.O_RDWR | os.O_CREAT)
    except FileNotFoundError:
        make_dirs(path.parent)
        fd = open_file(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove_stale_temps(directory: Path) -> None:
    """Remove the temp files in ``directory`` left by crashed writers: those whose
    creating process is gone, and any older than :data:`TEMP_MAX_AGE`."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    cutoff = time.time() - TEMP_MAX_AGE
    for entry in entries:
        pid = temp_owner(entry.name)
        if pid is None:
            continue
        try:
            stale = not _alive(pid) or entry.stat(follow_symlinks=False).st_mtime < cutoff
            if stale:
                os.unlink(entry.path)
        except FileNotFoundError:
            continue


def temp_owner(name: str) -> int | None:
    """The pid in a name made by :func:`temp_path`, or None for any other name."""
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
