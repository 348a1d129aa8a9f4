"""From a URL to a pair of backends (values, events).

=========================================  =============================================
URL                                        backend
=========================================  =============================================
``redis://``, ``rediss://``, ``unix://``   Redis (hashes for values, Streams for logs)
``memory://``                              in process; each ``connect`` is private
``file:///abs/dir`` or a plain path        files: one record per value, JSONL per log
``sqlite:///path/to.db``                   one SQLite database for values and logs
``dummy://``                               stores nothing
no URL                                     ``$SESSIONSTORE_URL``, else ``./.sessionstore``
=========================================  =============================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .arguments import check_namespace, check_timeout, check_ttl
from .backends.fsutil import local_path
from .contracts import Backends
from .errors import InvalidArgumentError, SessionStoreError, StoreNotFoundError
from .urls import mask_url, query_names, reject_unknown_params

ENV_URL = "SESSIONSTORE_URL"
DEFAULT_DIR = ".sessionstore"
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")


@dataclass(frozen=True)
class ConnectArgs:
    """What ``connect`` was called with, made portable: enough for another process to
    open the same store (see :meth:`sessionstore.Store.__reduce__`).

    ``url`` is the resolved URL with its password, a file or SQLite path made absolute
    (so a worker with another working directory opens the same folder or database). It
    is never shown: :meth:`__repr__` masks it.
    """

    url: str
    namespace: str
    timeout: float | None = None
    durability: str | None = None
    ttl: float | None = None
    cache: bool | None = None

    @classmethod
    def of(
        cls,
        url: str,
        namespace: str,
        timeout: float | None,
        durability: str | None,
        ttl: float | None,
        cache: bool | None = None,
    ) -> ConnectArgs:
        """The args of a ``connect`` whose ``url`` was resolved and opened already."""
        return cls(portable_url(url), namespace, timeout, durability, ttl, cache)

    @property
    def travels(self) -> bool:
        """False for ``memory://``: its data lives in the process that opened it."""
        return scheme_of(self.url) != "memory"

    def __repr__(self) -> str:
        return (
            f"ConnectArgs({mask_url(self.url)!r}, namespace={self.namespace!r}, "
            f"timeout={self.timeout!r}, durability={self.durability!r}, ttl={self.ttl!r})"
        )


def travel_args(args: ConnectArgs | None, what: str) -> ConnectArgs:
    """The args a pickled ``what`` (a store, or a handle of one) carries; raises
    :class:`SessionStoreError` when it cannot travel: a ``memory://`` store (the receiver
    would get an empty store of its own) or one not opened by ``connect``."""
    if args is None:
        raise SessionStoreError(
            f"this {what} was not opened by connect(), so another process cannot reopen it"
        )
    if not args.travels:
        raise SessionStoreError(
            f"a memory:// {what} cannot be pickled: its data lives in this process only, "
            "and another process would get an empty store of its own; share a file://, "
            "sqlite:// or redis:// store between processes"
        )
    return args


def portable_url(url: str) -> str:
    """``url`` with a relative file or SQLite path made absolute; other URLs unchanged.
    Only for a URL :func:`open_backends` accepted."""
    scheme = scheme_of(url)
    if scheme in ("", "file"):
        return file_root(url).as_uri()
    if scheme == "sqlite":
        from .backends.sqlite_db import database_path

        return f"sqlite:///{database_path(url)}"
    return url


def resolve_url(url: str | os.PathLike[str] | None) -> str:
    """The URL to use: the argument, else ``$SESSIONSTORE_URL``, else ``./.sessionstore``."""
    if url is None:
        url = os.environ.get(ENV_URL) or (Path.cwd() / DEFAULT_DIR).as_uri()
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        # Never the value itself: a URL given as bytes may hold a password.
        raise InvalidArgumentError(f"url must be a non-empty str or path, not {_kind(url)}")
    return url


def check_exists(url: str) -> None:
    """Raise :class:`StoreNotFoundError` when ``url`` names a file or SQLite store whose
    path does not exist (a relative ``sqlite:///`` path resolves against the working
    directory). Other stores are not looked at."""
    scheme = scheme_of(url)
    if scheme == "sqlite":
        from .backends.sqlite_db import database_path

        path = database_path(url)
    elif scheme in ("", "file"):
        path = file_root(url)
    else:
        return
    if not path.exists():
        raise StoreNotFoundError(
            f"there is no store at {path} (what {mask_url(url)!r} resolves to); what only"
            " reads a store creates none: check the path, or write to it first"
        )


def scheme_of(url: str) -> str:
    head, sep, _ = url.partition("://")
    return head.lower() if sep else ""


def file_root(url: str) -> Path:
    """The folder of a ``file://`` URL or a plain path, made absolute (``~`` expanded,
    symbolic links resolved). No I/O but reading links; nothing is created.

    A plain path is taken as it is (``?`` and ``#`` included). A ``file://`` URL must be
    local (no host but ``localhost``) and carry no query parameter and no fragment; its
    path is percent-decoded. Raises :class:`InvalidArgumentError` for those, and for a path
    that cannot name a folder (see :func:`~.backends.fsutil.local_path`).
    """
    shown = mask_url(url)
    if scheme_of(url) != "file":
        return local_path(url, shown)
    rest = url.partition("://")[2]
    # Split by hand: urlsplit silently drops tabs and newlines, which would name another folder.
    authority_end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    host, rest = rest[:authority_end], rest[authority_end:]
    if host not in ("", "localhost"):
        raise InvalidArgumentError(
            f"file URLs must be local (no host but localhost): {shown!r}; "
            "use file:///absolute/dir or a plain path"
        )
    rest, hash_sep, _ = rest.partition("#")
    path, query_sep, _ = rest.partition("?")
    if query_sep:
        reject_unknown_params(query_names(shown), (), shown)
        raise InvalidArgumentError(f"file URLs take no query string: {shown!r}")
    if hash_sep:
        raise InvalidArgumentError(
            f"file URLs take no fragment: {shown!r} (write a # in a folder name as %23)"
        )
    return local_path(unquote(path), shown)


@dataclass(frozen=True)
class Opened:
    """What ``connect`` (sync or async) opened: the backends, the sessions' retention in
    ms and the portable args of the call."""

    backends: Backends
    ttl_ms: int | None
    args: ConnectArgs


def open_store(
    url: str | os.PathLike[str] | None,
    namespace: str,
    timeout: float | None,
    durability: str | None,
    ttl: float | None,
    cache: bool | None,
) -> Opened:
    """Check ``connect``'s arguments and open the backends (no I/O); raises
    ``InvalidArgumentError`` for a bad one (a ``timeout`` that is not seconds in
    (0, :data:`~.arguments.MAX_TIMEOUT`] included, whatever the backend)."""
    resolved = resolve_url(url)
    ttl_ms = check_ttl(ttl)
    if timeout is not None:
        check_timeout("timeout", timeout)
    options: dict[str, Any] = {"timeout": timeout, "durability": durability, "cache": cache}
    backends = open_backends(resolved, check_namespace(namespace), options)
    args = ConnectArgs.of(resolved, namespace, timeout, durability, ttl, cache)
    return Opened(backends, ttl_ms, args)


def open_backends(url: str, namespace: str, options: dict[str, Any]) -> Backends:
    """Open the backends ``url`` names, for ``namespace``."""
    scheme = scheme_of(url)
    if scheme in REDIS_SCHEMES:
        from .redis.backend import open_redis

        return open_redis(url, namespace, **options)
    _refuse_options(scheme or "file", options)
    if scheme in ("memory", "dummy"):
        # Neither reads a parameter: a query string is a mistake, not something to ignore.
        shown = mask_url(url)
        reject_unknown_params(query_names(shown), (), shown)
    if scheme == "memory":
        from .backends.memory import MemoryEvents, MemoryValues

        return Backends(MemoryValues(), MemoryEvents(), mask_url(url))
    if scheme == "dummy":
        from .backends.dummy import DummyEvents, DummyValues

        return Backends(DummyValues(), DummyEvents(), mask_url(url))
    if scheme == "sqlite":
        from .backends.sqlite import open_sqlite

        return open_sqlite(url, namespace, timeout=options.get("timeout"))
    if scheme in ("", "file"):
        from .backends.files import open_files

        return open_files(file_root(url), namespace, url)
    raise InvalidArgumentError(
        f"unknown URL scheme {scheme!r} in {mask_url(url)!r}: use redis://, rediss://, "
        "unix://, memory://, file://, sqlite:// or dummy://"
    )


def _refuse_options(scheme: str, options: dict[str, Any]) -> None:
    unknown = {name for name, value in options.items() if value is not None and value is not False}
    unknown -= {"timeout"}
    if unknown:
        raise InvalidArgumentError(
            f"option(s) {', '.join(sorted(unknown))} do not apply to {scheme}:// stores"
        )


def _kind(url: object) -> str:
    """What a refused ``url`` was, without its value: its type, and "empty" for ''."""
    return "an empty str" if url == "" else type(url).__name__
