"""Client-side caching of plain value reads (``?cache=yes``), kept true by the server.

Redis client tracking (``CLIENT TRACKING ON REDIRECT <id>``, Redis 6+): the server
remembers the keys each cached read touched and, when any client changes one, publishes
its name on ``__redis__:invalidate`` to a listening connection of ours. redis-py's own
caching (``cache_config=``) is not used: it refuses servers older than Redis 7.4 and
covers neither the async nor the cluster client.

Two connections per store, made like the store's other connections (same server, or the
primary the sentinels name): one reads (``HMGET``) and one listens. Consistency: every
read first looks whether either socket holds anything (one ``poll``, no round trip);
when one does, the invalidations are applied (or the closed connection noticed) before
the read is answered. So a write by another process is seen by every read that starts
after its invalidation reached this process's socket: usually within a fraction of a
millisecond on one host, one hop later across a network. The server may send the writer
its reply before it sends us the invalidation, so a read right after another process's
acknowledged write may still see the previous value. A write through this store is
seen by this process's next read at once, whether or not its invalidation has arrived.
A cached reply is kept only when the read was made on a tracked connection; a reconnect
of either connection (a restart, a failover, ``CLIENT KILL``, the server's idle
``timeout``) empties the cache before anything is read again, and so does ``os.fork``
in the child.

A hit costs a ``poll`` of two sockets and a dict lookup, and takes no lock (it goes the
locked way when a drain ran meanwhile); a miss takes the lock (misses take turns on the
one reading connection).

Only plain values are cached (``HMGET``). History values (``history_get.lua``, a
script) are not: each of their reads asks the server.
"""

from __future__ import annotations

import select
import threading
import time
from typing import Any

import redis

from .. import forksafe
from .retry import RETRIES, retry_delay

CHANNEL = b"__redis__:invalidate"
#: Replies kept at most; the cache is emptied when full.
MAX_ENTRIES = 100_000


class _Entry:
    """One name's cached reply; ``reply`` is None until the read that made it returns.

    An invalidation or a write of this process removes the entry from the cache; a read
    still in flight then fills an entry nobody can find, so a reply that an invalidation
    overtook is never served.
    """

    __slots__ = ("reply",)

    def __init__(self) -> None:
        self.reply: Any = None


class ValueCache:
    """``HMGET key field...`` replies kept in memory while the server says they hold.

    :meth:`lookup` and :meth:`hmget` are safe from several threads. Errors are
    redis-py's, for the caller's boundary to map; after one, both connections are
    dropped and the cache emptied.
    """

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._reader: Any = None
        self._listener: Any = None
        #: Watches both sockets while they are open; None when they are not.
        self._poller: Any = None
        #: Odd while :meth:`_drain` applies what it took off the socket; bumped twice by
        #: each drain, so a hit that saw it change may have read an entry being dropped.
        self._draining = 0
        forksafe.renew_locks(self, "_lock")
        forksafe.at_fork(self, "_forked")

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
        poller = select.poll()
        for connection in (listener, reader):
            poller.register(_socket_of(connection), select.POLLIN)
        self._listener, self._reader = listener, reader
        self._poller = poller

    def _drop(self) -> None:
        # Hits stop first (they find no poller), then the entries go, then the sockets.
        self._poller = None
        self._entries.clear()
        for connection in (self._reader, self._listener):
            if connection is not None:
                connection.disconnect()
        self._reader = self._listener = None

    def _forked(self) -> None:
        """In a forked child: the parent's sockets are not ours to read or close."""
        self._poller = None
        self._entries = {}
        self._reader = self._listener = None

    def _drain(self) -> None:
        """Apply every invalidation received so far (under the lock). Leaves nothing
        buffered in the listener's parser, so that a quiet socket means no invalidation."""
        listener = self._listener
        self._draining += 1
        try:
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
        finally:
            self._draining += 1
        # A reader the server dropped (CLIENT KILL, shutdown, idle timeout) no longer
        # tracks anything. No read of ours is in flight here: misses hold the lock.
        if self._reader.can_read(timeout=0):
            raise redis.ConnectionError("the cache's reading connection was closed")

    def lookup(self, name: str) -> Any:
        """The cached ``HMGET`` reply of ``name``, or None (not cached, or not connected:
        :meth:`hmget` asks the server). No round trip and never raises; a connection
        found closed is dropped."""
        # A drain takes invalidations off the socket before it drops their entries: a
        # quiet socket proves nothing while one runs, or if one ran during this lookup.
        seen = self._draining
        poller = self._poller
        try:
            quiet = not seen & 1 and poller is not None and not poller.poll(0)
        except RuntimeError:  # another thread is polling the same object right now
            quiet = False
        if not quiet:
            return self._lookup_after_drain(name)
        entry = self._entries.get(name)
        if self._draining != seen:
            return self._lookup_after_drain(name)
        return None if entry is None else entry.reply

    def _lookup_after_drain(self, name: str) -> Any:
        with self._lock:
            if self._poller is None:
                return None
            try:
                self._drain()
            except Exception:  # noqa: BLE001 - the next read reconnects and reports
                self._drop()
                return None
            entry = self._entries.get(name)
            return None if entry is None else entry.reply

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
            try:
                if self._poller is None:
                    self._open()
                else:
                    self._drain()
                entry = self._entries.get(name)
                if entry is not None and entry.reply is not None:
                    return entry.reply
                if len(self._entries) >= MAX_ENTRIES:
                    self._entries.clear()
                entry = self._entries[name] = _Entry()
                self._reader.send_command("HMGET", name, *fields)
                reply = self._reader.read_response()
            except BaseException:
                self._drop()
                raise
            entry.reply = reply
            return reply

    def forget(self, name: str) -> None:
        """Drop ``name``: a write of this process is seen by its next read at once,
        whether or not its invalidation has arrived yet (a read of ``name`` in flight
        meanwhile is not kept)."""
        self._entries.pop(name, None)

    def __len__(self) -> int:
        return len(self._entries)

    def close(self) -> None:
        with self._lock:
            self._drop()


def _socket_of(connection: Any) -> Any:
    # redis-py has no public accessor for a connection's socket. Only its readiness is
    # looked at here (never read or written): its parser owns the bytes.
    return connection._sock
