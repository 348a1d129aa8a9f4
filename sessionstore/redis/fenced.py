"""The connections of a Sentinel service's primary, which obey the store's
:class:`~.failover.FailoverWatch` (see :mod:`.failover`): none is made while the
sentinels fail the service over, one made before a change of the watch's generation is
dropped before its next command, and a reply read on it is discarded (``ConnectionError``:
the call may or may not have been applied); a primary found demoted drops the connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio.connection
from redis.connection import SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .boundary import demoted
from .compat import AsyncSentinelPrimary, SentinelPrimary
from .failover import FailoverWatch


def _stale_reply() -> RedisConnectionError:
    return RedisConnectionError(
        "the sentinels began a failover while this reply was awaited: the call may or "
        "may not have been applied on the old primary"
    )


def _demoted_error(host: Any, port: Any, exc: ResponseError) -> RedisConnectionError:
    return RedisConnectionError(f"the primary at {host}:{port} is no longer one ({exc})")


class FencedConnection(SentinelPrimary):
    """A connection to a Sentinel service's primary that obeys its :class:`FailoverWatch`
    (``failover_watch=`` among the pool's connection arguments)."""

    def __init__(self, **kwargs: Any) -> None:
        self.failover_watch: FailoverWatch = kwargs.pop("failover_watch")
        self.stamp = -1
        super().__init__(**kwargs)

    def primary_address(self) -> tuple[Any, Any]:
        watch = self.failover_watch
        watch.start()
        stamp = watch.generation
        reason = watch.fence()
        if reason is not None:
            raise RedisConnectionError(reason)
        address = watch.address(self.connection_pool.get_master_address())
        self.stamp = stamp
        return address

    def connected(self) -> None:
        self.failover_watch.made(self)

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        stale = self.stamp != self.failover_watch.generation
        if self.is_open and stale and not self.resolved:
            self.disconnect()
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            reply = super().read_response(*args, **kwargs)
        except ResponseError as exc:
            if not demoted(exc):
                raise
            host, port = self.host, self.port
            self.disconnect()
            raise _demoted_error(host, port, exc) from exc
        if self.stamp != self.failover_watch.generation:
            self.disconnect()
            raise _stale_reply()
        return reply


class FencedSSLConnection(FencedConnection, SSLConnection):
    """:class:`FencedConnection` over TLS."""


class AsyncFencedConnection(AsyncSentinelPrimary):
    """:class:`FencedConnection` for ``redis.asyncio``."""

    def __init__(self, **kwargs: Any) -> None:
        self.failover_watch: FailoverWatch = kwargs.pop("failover_watch")
        self.stamp = -1
        super().__init__(**kwargs)

    async def primary_address(self) -> tuple[Any, Any]:
        watch = self.failover_watch
        if watch.stopped:
            await asyncio.to_thread(watch.start)
        stamp = watch.generation
        reason = watch.fence()
        if reason is not None:
            raise RedisConnectionError(reason)
        address = watch.address(await self.connection_pool.get_master_address())
        self.stamp = stamp
        return address

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        stale = self.stamp != self.failover_watch.generation
        if self.is_open and stale and not self.resolved:
            await self.disconnect()
        await super().send_packed_command(command, check_health)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            reply = await super().read_response(*args, **kwargs)
        except ResponseError as exc:
            if not demoted(exc):
                raise
            host, port = self.host, self.port
            await self.disconnect()
            raise _demoted_error(host, port, exc) from exc
        if self.stamp != self.failover_watch.generation:
            await self.disconnect()
            raise _stale_reply()
        return reply


class AsyncFencedSSLConnection(AsyncFencedConnection, redis.asyncio.connection.SSLConnection):
    """:class:`AsyncFencedConnection` over TLS."""
