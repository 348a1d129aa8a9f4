"""Connection options, the redis-py clients, and the one place Redis errors are mapped.

Opening does no I/O: redis-py connects on first use. Every call has a bounded
duration: ``timeout`` seconds to connect and to wait for a reply, and two retries with
a short back-off on a connection error or timeout, after which the call raises
:class:`StoreUnavailableError`. The pool reconnects by itself on a later call once the
server is back, and is reset in a forked child.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    MasterDownError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ..connection import mask_url
from ..errors import (
    AccessDeniedError,
    InvalidArgumentError,
    SessionStoreError,
    StoreUnavailableError,
)
from .durability import Durability, parse_durability

DEFAULT_TIMEOUT = 5.0
#: Query parameters of the URL that sessionstore reads itself; redis-py never sees them.
OWN_PARAMS = ("durability",)
RETRIES = 2
_BACKOFF = {"cap": 0.5, "base": 0.05}
_PASSWORD_PARAM = re.compile(r"(?i)((?:^|[?&])password=)[^&#]*")


@dataclass(frozen=True)
class RedisOptions:
    """What :func:`parse_options` makes of ``open_redis``'s arguments."""

    #: The URL handed to redis-py (sessionstore's own query parameters removed).
    url: str
    #: The URL to show: passwords masked.
    display_url: str
    timeout: float
    durability: Durability


def display(url: str) -> str:
    """``url`` with every password masked: in the user-info part and in ``?password=``."""
    return _PASSWORD_PARAM.sub(r"\1***", mask_url(url))


def parse_options(url: str, timeout: float | None, durability: str | None) -> RedisOptions:
    """Validate the options; ``durability`` may come from the argument or ``?durability=``.

    Raises :class:`InvalidArgumentError` for a bad timeout, an unknown durability, or a
    durability given both ways with different values.
    """
    shown = display(url)
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidArgumentError(f"timeout must be a positive number of seconds, not {timeout!r}")
    clean, own = split_own_params(url)
    from_url = own.get("durability")
    if durability is not None and from_url is not None and durability != from_url:
        raise InvalidArgumentError(
            f"durability={durability!r} contradicts ?durability={from_url} in {shown!r}"
        )
    chosen = durability if durability is not None else from_url
    return RedisOptions(clean, shown, float(timeout), parse_durability(chosen))


def split_own_params(url: str) -> tuple[str, dict[str, str]]:
    """(``url`` without sessionstore's query parameters, those parameters).

    The other parameters are kept byte for byte, for redis-py to read.
    """
    head, sep, query = url.partition("?")
    if not sep:
        return url, {}
    query, hash_sep, fragment = query.partition("#")
    kept: list[str] = []
    own: dict[str, str] = {}
    for item in query.split("&"):
        name, _, value = item.partition("=")
        if name in OWN_PARAMS:
            if name in own:
                raise InvalidArgumentError(f"?{name}= is given twice in {display(url)!r}")
            own[name] = value
        elif item:
            kept.append(item)
    rest = "&".join(kept)
    return head + ("?" + rest if rest else "") + hash_sep + fragment, own


def _client_kwargs(options: RedisOptions) -> dict[str, Any]:
    return {
        "socket_connect_timeout": options.timeout,
        "socket_timeout": options.timeout,
        "decode_responses": False,
    }


def sync_client(options: RedisOptions) -> redis.Redis:
    """A redis-py client for ``options``; no I/O."""
    retry = Retry(ExponentialBackoff(**_BACKOFF), RETRIES)
    try:
        return redis.Redis.from_url(options.url, retry=retry, **_client_kwargs(options))
    except ValueError as exc:
        raise InvalidArgumentError(f"invalid Redis URL {options.display_url!r}: {exc}") from exc


def async_client(options: RedisOptions) -> redis.asyncio.Redis:
    """A ``redis.asyncio`` client for ``options``; no I/O."""
    retry = redis.asyncio.retry.Retry(ExponentialBackoff(**_BACKOFF), RETRIES)
    try:
        return redis.asyncio.Redis.from_url(options.url, retry=retry, **_client_kwargs(options))
    except ValueError as exc:
        raise InvalidArgumentError(f"invalid Redis URL {options.display_url!r}: {exc}") from exc


_DENIED_MARKS = ("NOPERM", "WRONGPASS", "NOAUTH")
_OOM_MARK = "OOM command not allowed"
_UNAVAILABLE_MARKS = ("READONLY", "MASTERDOWN", "LOADING")


class ErrorBoundary:
    """Turns redis-py errors into sessionstore errors, naming the command and the key.

    ``with boundary("HMGET", key): ...`` wraps one call (sync or awaited): connection
    errors and timeouts become :class:`StoreUnavailableError`, refused credentials or
    ACLs :class:`AccessDeniedError`, a server out of memory :class:`StoreUnavailableError`,
    anything else :class:`SessionStoreError`; the redis-py error is chained.
    """

    def __init__(self, display_url: str, timeout: float) -> None:
        self.display_url = display_url
        self.timeout = timeout

    @contextmanager
    def __call__(self, command: str, key: str | None = None) -> Iterator[None]:
        try:
            yield
        except RedisError as exc:
            raise self.translate(exc, command, key) from exc

    def translate(self, exc: RedisError, command: str, key: str | None) -> SessionStoreError:
        """The sessionstore error for ``exc`` raised by ``command`` on ``key``."""
        text = str(exc)
        what = f"{command} on {key}" if key else command
        where = f"the Redis server at {self.display_url}"
        if isinstance(
            exc, AuthenticationError | AuthorizationError | NoPermissionError
        ) or any(mark in text for mark in _DENIED_MARKS):
            return AccessDeniedError(f"access was denied by {where} for {what}: {text}")
        if isinstance(exc, OutOfMemoryError) or _OOM_MARK in text:
            return StoreUnavailableError(
                f"{where} is out of memory (used memory > maxmemory, no eviction) and "
                f"refused {what}; nothing was written: free memory or raise maxmemory. ({text})"
            )
        if isinstance(exc, RedisConnectionError | RedisTimeoutError):
            return StoreUnavailableError(
                f"{where} is unavailable: {what} failed after {RETRIES} retries "
                f"(timeout {self.timeout:g} s): {text}"
            )
        if isinstance(exc, ReadOnlyError | MasterDownError) or text.startswith(_UNAVAILABLE_MARKS):
            return StoreUnavailableError(f"{where} cannot serve {what} right now: {text}")
        return SessionStoreError(f"{where} failed {what}: {text}")
