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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .contracts import EventBackend, ValueBackend
from .errors import InvalidArgumentError
from .urls import mask_url

ENV_URL = "SESSIONSTORE_URL"
DEFAULT_DIR = ".sessionstore"
REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass
class AsyncBackends:
    """A native async pair: objects with the methods of :class:`ValueBackend` and
    :class:`EventBackend` as coroutines (same names, same arguments)."""

    values: Any
    events: Any
    aclose: Callable[[], Awaitable[None]]


@dataclass
class Backends:
    """What ``connect`` opens: the two backends and how to show and close them."""

    values: ValueBackend
    events: EventBackend
    display_url: str
    #: Builds the native async pair, when the backend has one (else threads are used).
    make_async: Callable[[], AsyncBackends] | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in self.closers:
            close()


def resolve_url(url: str | os.PathLike[str] | None) -> str:
    """The URL to use: the argument, else ``$SESSIONSTORE_URL``, else ``./.sessionstore``."""
    if url is None:
        url = os.environ.get(ENV_URL) or (Path.cwd() / DEFAULT_DIR).as_uri()
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise InvalidArgumentError(f"url must be a non-empty string or path, not {url!r:.80}")
    return url


def scheme_of(url: str) -> str:
    head, sep, _ = url.partition("://")
    return head.lower() if sep else ""


def file_root(url: str) -> Path:
    """The folder of a ``file://`` URL or a plain path, made absolute."""
    if scheme_of(url) == "file":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgumentError(f"file URLs must be local: {url!r}")
        path = Path(unquote(parts.path))
    else:
        path = Path(url)
    return path.expanduser().resolve()


def open_backends(url: str, namespace: str, options: dict[str, Any]) -> Backends:
    """Open the backends ``url`` names, for ``namespace``."""
    scheme = scheme_of(url)
    if scheme in REDIS_SCHEMES:
        from .redis.backend import open_redis

        return open_redis(url, namespace, **options)
    _refuse_options(scheme or "file", options)
    if scheme == "memory":
        from .backends.memory import MemoryEvents, MemoryValues

        return Backends(MemoryValues(), MemoryEvents(), url)
    if scheme == "dummy":
        from .backends.dummy import DummyEvents, DummyValues

        return Backends(DummyValues(), DummyEvents(), url)
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
    unknown = {name for name, value in options.items() if value is not None}
    unknown -= {"timeout"}
    if unknown:
        raise InvalidArgumentError(
            f"option(s) {', '.join(sorted(unknown))} do not apply to {scheme}:// stores"
        )
