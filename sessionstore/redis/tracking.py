"""Client-side caching of plain value reads (``?cache=yes``), kept true by the server.

Redis client tracking (``CLIENT TRACKING ON REDIRECT <id>``, Redis 6+): the server
remembers the keys each cached read touched and, when any client changes one, publishes
its name on ``__redis__:invalidate`` to a listening connection of ours. redis-py's own
caching (``cache_config=``) is not used: it refuses servers older than Redis 7.4 and
covers neither the async nor the cluster client.

Two connections per store, made like the store's other connections (same server, or the
primary the sentinels name): one reads (``HMGET``) and one listens. Every cached read
first takes what the listener received (no round trip: a look at its socket), so a write
by any process is seen once its invalidation has arrived. A cached reply is kept only
when the read was made on a tracked connection; a reconnect of either connection (a
restart, a failover, ``CLIENT KILL``) empties the cache before anything is read again.

Only ``read`` is cached. History values (``history_get.lua``, a script) are not.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis

from .retry import RETRIES, retry_delay

CHANNEL = b"__redis__:invalidate"
#: Replies kept at most; the cache is emptied when full.
MAX_ENTRIES = 100_000


class ValueCache:
    """``HMGET key field...`` replies kept in memory while the server says they hold.

    :meth:`hmget` is safe from several threads (one lock: reads that miss the cache
    take turns on the one reading connection). Errors are redis-py's, for the caller's
    boundary to map; after one, both connections are dropped and the cache emptied.
    """

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._entries: dict[str, Any] = {}
        self._reader: Any = None
        self._listener: Any = None
        self._pid = os.getpid()

    def _connection(self) -> Any:
        # RESP2: invalidations come as plain pub/sub messages on the channel, which every
        # parser returns as they are (RESP3 would make them push messages of their own).
        return self._pool.connection_class(**{**self._pool.connection_kwargs, "protocol": 2})

    def _open(self) -> None:
        """Connect the listener, then the reader tracked to it, on the same server."""
        self._drop()
        listener = self._connection()
        listener.connect()
        listener.send_command("CLIENT", "ID")
        listener_id = listener.read_response()
        listener.send_command("SUBSCRIBE", CHANNEL)
        # Some parsers take pub/sub replies for push messages: ask for them as such.
        listener.read_response(push_request=True)
        reader = self._connection()
        reader.connect()
        if (reader.host, reader.port) != (listener.host, listener.port):
            listener.disconnect()
            reader.disconnect()
            raise redis.ConnectionError("the primary changed while the cache connected")
        reader.send_command("CLIENT", "TRACKING", "ON", "REDIRECT", listener_id)
        reader.read_response()
        self._listener, self._reader = listener, reader

    def _drop(self) -> None:
        self._entries.clear()
        for connection in (self._reader, self._listener):
            if connection is not None:
                connection.disconnect()
        self._reader = self._listener = None

    def _drain(self) -> None:
        """Apply every invalidation received so far."""
        listener = self._listener
        while listener.can_read(timeout=0):
            message = listener.read_response(push_request=True)
            if not isinstance(message, list) or message[0] != b"message":
                continue
            names = message[2]
            if names is None:
                self._entries.clear()
            else:
                for name in names:
                    self._entries.pop(name.decode(errors="replace"), None)
        # A reader the server dropped (CLIENT KILL, shutdown) no longer tracks anything.
        if self._reader.can_read(timeout=0):
            raise redis.ConnectionError("the cache's reading connection was closed")

    def hmget(self, name: str, fields: list[bytes]) -> Any:
        """``HMGET name *fields`` (always the same fields), from memory when no
        invalidation of ``name`` came; a connection error or timeout is retried
        ``RETRIES`` times, on new connections, as the store's other calls are."""
        for attempt in range(RETRIES + 1):
            try:
                return self._hmget(name, fields)
            except (redis.ConnectionError, redis.TimeoutError):
                if attempt == RETRIES:
                    raise
            time.sleep(retry_delay(attempt + 1))
        raise AssertionError("unreachable")

    def _hmget(self, name: str, fields: list[bytes]) -> Any:
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: the parent's sockets are not ours to read.
                self._entries.clear()
                self._reader = self._listener = None
                self._lock = threading.Lock()
                self._pid = os.getpid()
            try:
                if self._listener is None:
                    self._open()
                self._drain()
                found = self._entries.get(name)
                if found is not None:
                    return found
                self._reader.send_command("HMGET", name, *fields)
                reply = self._reader.read_response()
                if len(self._entries) >= MAX_ENTRIES:
                    self._entries.clear()
                self._entries[name] = reply
                return reply
            except BaseException:
                self._drop()
                raise

    def forget(self, name: str) -> None:
        """Drop ``name``: a write of this process is seen by its next read at once,
        whether or not its invalidation has arrived yet."""
        self._entries.pop(name, None)

    def __len__(self) -> int:
        return len(self._entries)

    def close(self) -> None:
        with self._lock:
            self._drop()
