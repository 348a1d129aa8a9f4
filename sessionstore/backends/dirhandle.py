"""Folders of a file store reached from its root without following a link: every file
operation of the ``file://`` backends goes through a :class:`Folder`.

A :class:`Folder` is a directory descriptor walked one name at a time from the store's
root, each step opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the one before and
checked on the descriptor (``fstat``): a symbolic link, something that is not a folder,
and a folder the store could not have made (owned by another user, or writable by its
group or by others; the store makes every folder :data:`~.fsutil.DIR_MODE`, its user's
own) raise :class:`~sessionstore.errors.UnsafePathError` naming the path (its owner
and mode for a foreign folder). Files are then opened, created, renamed, removed and
``stat``-ed relative to that descriptor, their final name never followed either. So a
folder swapped for a link, or for someone else's folder, between a check and an open
is never used: what was checked is what is used, and nothing is ever read from or
written into a folder reached through a link.

The root itself is the user's choice (resolved when the store was opened) and is not
checked. :class:`StoreRoot` opens its descriptor once per process and reuses it while
the root's path still names that folder (one ``stat`` a call; a root replaced
meanwhile is opened anew). A forked child keeps using the inherited descriptor (it
never reads a directory through it, so no offset is shared). :meth:`StoreRoot.close`
closes it once no walk uses it; the next call opens it again.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import weakref
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

from .. import forksafe
from ..errors import UnsafePathError
from .fsutil import (
    DIGEST_MARK,
    DIR_MODE,
    FILE_MODE,
    FOREIGN_WRITE,
    atomic_write,
    encode_name,
    foreign_folder,
    make_dirs,
    read_file,
)

#: How a folder is opened: never through a link, never inherited by an exec'd program.
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Added to every file open: a symbolic link fails (ELOOP) rather than be followed, and a
#: FIFO or a device cannot block the open.
_SAFE_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: How often a walk creates a folder that disappears before it is opened, at most.
_CREATE_ATTEMPTS = 100
#: The file in a namespace folder whose name is shortened (see :func:`.encode_name`)
#: that holds the namespace's full name, so that a listing can name it.
NAME_FILE = ".namespace"
#: How many namespaces' folder names a :class:`StoreRoot` remembers.
_REMEMBERED_NAMES = 64


def _named(exc: OSError, path: str) -> OSError:
    """``exc`` again, naming the full ``path`` instead of a name relative to a folder."""
    return OSError(exc.errno, exc.strerror or str(exc), path)


class Folder:
    """A folder open as the descriptor ``fd``, reached from the store's root without a
    link and checked (see the module docstring); ``path`` names it in messages. A
    context manager: leaving it closes the descriptor. Every method raises ``OSError``
    naming the full path of the file it was about."""

    __slots__ = ("fd", "path")

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def join(self, name: str) -> str:
        """The path of the entry ``name``, for messages."""
        return f"{self.path}/{name}"

    def walk(self, names: Iterable[str], *, create: bool = False) -> Folder | None:
        """The folder ``names`` below this one, as a new handle (this one stays open);
        None when one is missing, unless ``create`` makes it (a real folder, 0700, its
        parent fsynced). Raises :class:`UnsafePathError` for a link, a non-folder or a
        foreign folder on the way."""
        current = self
        try:
            for name in names:
                found = current._child(name, create)
                if current is not self:
                    current.close()
                if found is None:
                    return None
                current = found
        except BaseException:
            if current is not self:
                current.close()
            raise
        if current is self:
            return Folder(self._open_dir("."), self.path)
        return current

    def _child(self, name: str, create: bool) -> Folder | None:
        path = self.join(name)
        for _ in range(_CREATE_ATTEMPTS):
            try:
                fd = os.open(name, _DIR_OPEN, dir_fd=self.fd)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    os.mkdir(name, DIR_MODE, dir_fd=self.fd)
                except FileExistsError as exc:
                    # Made meanwhile by another writer (then open it), or a link.
                    refused = self._refusal(name, exc)
                    if isinstance(refused, UnsafePathError):
                        raise refused from None
                    continue
                except OSError as exc:
                    raise _named(exc, path) from None
                self.fsync()
                continue
            except OSError as exc:
                raise self._refusal(name, exc) from None
            return _checked(fd, path)
        # Each folder made here was gone before it could be opened: someone who may
        # write in this folder keeps moving them away.
        raise UnsafePathError(path, "a folder that kept being moved away as it was made")

    def _open_dir(self, name: str) -> int:
        try:
            return os.open(name, _DIR_OPEN, dir_fd=self.fd)
        except OSError as exc:
            raise _named(exc, self.join(name)) from None

    def _refusal(self, name: str, exc: OSError) -> Exception:
        """Why ``name`` could not be opened (or made) as a folder: a link or something
        else than a folder is there, or was (``ENOTDIR`` or ``ELOOP``: refused whatever
        is there by now), a foreign folder (one the user may not even read), or ``exc``
        itself (an ``OSError``, not a refusal)."""
        path = self.join(name)
        try:
            found = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            found = None
        if found is not None and stat.S_ISLNK(found.st_mode):
            return UnsafePathError(path, "a symbolic link")
        if found is not None and not stat.S_ISDIR(found.st_mode):
            return UnsafePathError(path, "not a folder")
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return UnsafePathError(path, "a symbolic link or not a folder when it was opened")
        if found is not None and _foreign(found):
            return UnsafePathError(path, foreign_folder(found, os.geteuid()))
        return _named(exc, path)

    def open(self, name: str, flags: int) -> int:
        """The file ``name`` opened with ``flags`` (and ``O_NOFOLLOW``; created with
        :data:`~.fsutil.FILE_MODE` when ``flags`` has ``O_CREAT``). Raises
        :class:`UnsafePathError` when it is a symbolic link or not a regular file
        (nothing is read, written or created through it), and ``OSError`` as
        ``os.open`` does otherwise (``FileNotFoundError`` when absent)."""
        try:
            fd = os.open(name, flags | _SAFE_OPEN, FILE_MODE, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(self.join(name), "a symbolic link") from None
            if exc.errno == errno.EISDIR:
                raise UnsafePathError(self.join(name), "a folder, not a file") from None
            raise _named(exc, self.join(name)) from None
        try:
            mode = os.fstat(fd).st_mode
        except BaseException:
            os.close(fd)
            raise
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise UnsafePathError(self.join(name), "not a regular file")
        return fd

    def stat(self, name: str) -> os.stat_result:
        """The ``lstat`` of ``name`` (``FileNotFoundError`` when absent)."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError as exc:
            raise _named(exc, self.join(name)) from None

    def exists(self, name: str) -> bool:
        try:
            self.stat(name)
        except FileNotFoundError:
            return False
        return True

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError as exc:
            raise _named(exc, self.join(name)) from None

    def replace(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target`` in this folder, replacing ``target``."""
        try:
            os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as exc:
            raise _named(exc, self.join(target)) from None

    def fsync(self) -> None:
        """Make this folder's entries (creations, renames, unlinks) durable."""
        os.fsync(self.fd)

    def entries(self) -> list[os.DirEntry[str]]:
        """The entries of this folder (read through a descriptor of its own, so two
        listings never share an offset)."""
        fd = self._open_dir(".")
        try:
            return list(os.scandir(fd))
        finally:
            os.close(fd)


def _foreign(found: os.stat_result) -> bool:
    return found.st_uid != os.geteuid() or bool(found.st_mode & FOREIGN_WRITE)


def _checked(fd: int, path: str) -> Folder:
    """``fd`` as a :class:`Folder` once it is one the store could have made; closed
    and refused otherwise."""
    try:
        found = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if _foreign(found):
        os.close(fd)
        raise UnsafePathError(path, foreign_folder(found, os.geteuid()))
    return Folder(fd, path)


class StoreRoot:
    """The root folder of a file store at ``path``, its descriptor kept open (see the
    module docstring); the way to every :class:`Folder` below it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._shown = os.fspath(path)
        #: Namespaces' folder names, as :func:`.encode_name` makes them (a few).
        self._encoded: dict[str, str] = {}
        #: Every root descriptor open: the current one last, older ones (of a root that
        #: was replaced) until no walk uses them.
        self._fds: list[int] = []
        self._ident: tuple[int, int] | None = None
        self._walks = 0
        self._closing = False
        self._lock = threading.Lock()
        self._closer = weakref.finalize(self, _close_fds, self._fds)
        forksafe.renew_locks(self, "_lock")
        forksafe.at_fork(self, "_forked")

    def _forked(self) -> None:
        """In a forked child no walk of the parent's threads goes on."""
        self._walks = 0

    def walk(self, names: Iterable[str], *, create: bool = False) -> Folder | None:
        """The folder ``names`` (file names) below the root, as :meth:`Folder.walk`; the
        root's own folder for no names. None when the root is missing, unless
        ``create`` makes it (with its missing parents)."""
        fd = self._enter(create)
        if fd is None:
            return None
        try:
            return Folder(fd, self._shown).walk(names, create=create)
        finally:
            self._leave()

    def namespace(
        self, namespace: str, names: Iterable[str] = (), *, create: bool = False
    ) -> Folder | None:
        """The folder ``names`` in the folder of ``namespace``, as :meth:`walk`. A
        namespace folder made with a shortened name gets :data:`NAME_FILE`, so that a
        listing can name its namespace."""
        encoded = self._encoded.get(namespace)
        if encoded is None:
            if len(self._encoded) >= _REMEMBERED_NAMES:
                self._encoded.clear()
            encoded = self._encoded[namespace] = encode_name(namespace)
        folder = self.walk((encoded,), create=create)
        if folder is None:
            return None
        with folder:
            if create and DIGEST_MARK in encoded:
                _name_namespace(folder, namespace)
            return folder.walk(names, create=create)

    def _enter(self, create: bool) -> int | None:
        """The root's descriptor, counted as in use until :meth:`_leave`."""
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            if not create:
                return None
            make_dirs(self.path)
            found = os.stat(self.path)
        with self._lock:
            if not self._fds or self._ident != (found.st_dev, found.st_ino):
                fd = os.open(self.path, _DIR_OPEN & ~os.O_NOFOLLOW)
                opened = os.fstat(fd)
                self._fds.append(fd)
                self._ident = (opened.st_dev, opened.st_ino)
            self._walks += 1
            self._closing = False
            return self._fds[-1]

    def _leave(self) -> None:
        with self._lock:
            self._walks -= 1
            if self._walks:
                return
            if self._closing:
                self._closing = False
                _close_fds(self._fds)
                self._ident = None
            elif len(self._fds) > 1:
                current = self._fds.pop()
                _close_fds(self._fds)
                self._fds.append(current)

    def close(self) -> None:
        """Close the root's descriptor once no walk uses it (the next call opens it
        again)."""
        with self._lock:
            if self._walks:
                self._closing = True
                return
            _close_fds(self._fds)
            self._ident = None


def _close_fds(fds: list[int]) -> None:
    closing = list(fds)
    fds.clear()
    for fd in closing:
        with suppress(OSError):
            os.close(fd)


def _name_namespace(folder: Folder, namespace: str) -> None:
    """Write :data:`NAME_FILE` in ``folder`` unless it is there already."""
    if folder.exists(NAME_FILE):
        return
    atomic_write(folder, NAME_FILE, namespace.encode("utf-8", "surrogatepass"))


def namespace_named(folder: Folder) -> str | None:
    """The namespace whose shortened folder ``folder`` is, as its
    :data:`NAME_FILE` says; None without one that encodes to the folder's name."""
    try:
        text = read_file(folder, NAME_FILE).decode("utf-8", "surrogatepass")
    except (FileNotFoundError, UnicodeDecodeError, UnsafePathError):
        return None
    return text if encode_name(text) == os.path.basename(folder.path) else None
