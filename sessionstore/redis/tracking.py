"""Client-side caching of plain value reads (``?cache=yes``), never more than
:data:`BOUND` behind the server.

**What holds.** A read answered from memory returns what the server held at some moment
no earlier than :data:`BOUND` (100 ms) before the read began: it never misses a write
acknowledged to any client more than ``BOUND`` earlier, and never returns a value past
its ttl. Otherwise the read asks the server. A write through this store is seen by this
process's next read at once. A reconnect (a restart, a failover, ``CLIENT KILL``, the
server's idle ``timeout``) empties the cache before anything is read again, and so does
``os.fork`` in the child.

**The ttl.** Every read sends ``HMGET`` and ``PTTL`` of the key in one transaction
(``MULTI``/``EXEC``, one round trip); the reply is not served once the key's remaining
time, counted from when the read was sent (so never later than the server's expiry),
has passed. Redis invalidates an expired key
only when it actually deletes it, which may be long after.

**Tracked** (a user allowed ``CLIENT ID``, ``CLIENT TRACKING``, ``SUBSCRIBE`` and to set
the namespace's mark, the default user for one): Redis client tracking
(``CLIENT TRACKING ON REDIRECT <id>``, Redis 6+). The server remembers the keys each cached read
touched and, when any client changes one, publishes its name on ``__redis__:invalidate``
to a listening connection of ours. Two connections per store, made like the store's
other connections (same server, or the primary the sentinels name): one reads and one
listens. Every read first looks whether either socket holds anything (one ``poll``, no
round trip); when one does, the invalidations are applied (or the closed connection
noticed) before the read is answered, so a write by another process is usually seen
within a fraction of a millisecond. The heartbeat bounds the rest: while reads come, the
listener is sent ``PING <n>`` at most every ``BOUND / 2``; the server answers on that
connection after every invalidation it queued before, so once the answer is read, every
write acknowledged before the PING was sent has been applied. With each PING the reader
checks the namespace's mark (:func:`sessionstore.keys.mark_key`: ``SET NX`` of a new
random token, then ``GET``, in one transaction; every miss reads it too): the token
names the database, and another one (or none) means the replies cached come from another
database or one emptied, and they are dropped. Redis 7.0 sends tracking clients nothing
on ``SWAPDB`` (``FLUSHDB`` and ``FLUSHALL`` it does tell), so this is how a swap is
seen. A PING counts as answered once the mark sent with it is read too. A reply is
served while it, or the last answered PING, was sent less than ``BOUND`` ago: a listener
that stalls or lags (a partition, a stopped server) stops the hits within ``BOUND``, and
reads go to the server. A listener that leaves a PING unanswered for the connection's
timeout, or will not open while the server answers reads, is dropped with the cache's
entries, and the cache runs timed (below) for :data:`RETRACK_AFTER` before it tries
tracking again. redis-py's own caching (``cache_config=``) is not used: it refuses
servers older than Redis 7.4 and covers neither the async nor the cluster client.

**Timed** (a user refused any of those, as the least-privilege user of :mod:`.acl` is:
on Redis 7.0 ``CLIENT TRACKING`` would let it learn other namespaces' key names): one
reading connection and no invalidations; a reply is served for ``BOUND`` after its read
was sent.

A hit costs a ``poll`` of two sockets (none when timed) and a dict lookup, and takes no
lock (it goes the locked way when a drain ran meanwhile, or tries the lock without
waiting to send a PING); a miss takes the lock (misses take turns on the one reading
connection).

Only plain values are cached (``HMGET``). History values (``history_get.lua``, a
script) are not: each of their reads asks the server.
"""

from __future__ import annotations

import math
import secrets
import select
import threading
import time
from typing import Any

import redis

from .. import forksafe, telemetry
from ..defaults import CACHE_STALENESS_BOUND
from .compat import socket_of
from .replies import text
from .retry import RETRIES, retry_delay

CHANNEL = b"__redis__:invalidate"
#: Seconds a served reply may be behind the server (see the module doc).
BOUND = CACHE_STALENESS_BOUND
#: Replies kept at most; the cache is emptied when full.
MAX_ENTRIES = 100_000
#: Seconds an unanswered PING is waited for when the connection has no timeout.
PING_TIMEOUT = 5.0
#: Seconds a cache whose listening connection failed (would not open, or left a PING
#: unanswered) stays timed before it tries tracking again.
RETRACK_AFTER = 30.0


class _Entry:
    """One name's cached reply; ``reply`` is None until the read that made it returns.

    ``sent`` is when that read was sent and ``expires`` when the key's ttl runs out
    (``time.monotonic()`` seconds; infinite without one). An invalidation or a write of
    this process removes the entry from the cache; a read still in flight then fills an
    entry nobody can find, so a reply that an invalidation overtook is never served.
    """

    __slots__ = ("expires", "reply", "sent")

    def __init__(self, sent: float) -> None:
        self.reply: Any = None
        self.sent = sent
        self.expires = math.inf


def _servable(entry: _Entry | None, confirmed: float, now: float) -> Any:
    """The entry's reply if it may be served at ``now``: within its ttl, and read or
    confirmed by an answered PING (sent at ``confirmed``) less than :data:`BOUND` ago."""
    if entry is None or now >= entry.expires:
        return None
    if now - (confirmed if confirmed > entry.sent else entry.sent) > BOUND:
        return None
    return entry.reply


class ValueCache:
    """``HMGET key field...`` replies kept in memory while they are known to hold.

    :meth:`lookup` and :meth:`hmget` are safe from several threads. Errors are
    redis-py's, for the caller's boundary to map; after one, the connections are
    dropped and the cache emptied.
    """

    def __init__(self, pool: redis.ConnectionPool, mark: str) -> None:
        self._pool = pool
        #: The key whose token names the database the replies come from (see the module
        #: doc), and its token as last read.
        self._mark = mark
        self._token: bytes | None = None
        #: A check of the mark sent on the reader with the PING, its reply not read yet.
        self._marking = False
        self._ponged = False
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._reader: Any = None
        self._listener: Any = None
        #: Watches both sockets while they are open and tracked; None otherwise.
        self._poller: Any = None
        #: Connected without tracking: replies live :data:`BOUND` (see the module doc).
        self._timed = False
        #: When the listening connection last failed (see :data:`RETRACK_AFTER`).
        self._listener_failed = -math.inf
        #: Odd while :meth:`_drain` applies what it took off the socket; bumped twice by
        #: each drain, so a hit that saw it change may have read an entry being dropped.
        self._draining = 0
        #: When the last answered PING was sent; the PING awaiting its answer, if any.
        self._confirmed = -math.inf
        self._ping: tuple[bytes, float] | None = None
        self._pings = 0
        self._ping_timeout = pool.connection_kwargs.get("socket_timeout") or PING_TIMEOUT
        forksafe.renew_locks(self, "_lock")
        forksafe.at_fork(self, "_forked")

    def _connection(self) -> Any:
        # RESP2: invalidations come as plain pub/sub messages on the channel, which every
        # parser returns as they are (RESP3 would make them push messages of their own).
        return self._pool.connection_class(**{**self._pool.connection_kwargs, "protocol": 2})

    def _open(self) -> None:
        """Connect tracked; timed when the server refuses this user tracking, or for
        :data:`RETRACK_AFTER` after the listening connection failed (the reading one
        may still work: a listener's path that stalls, a lagging listener)."""
        self._drop()
        if time.monotonic() - self._listener_failed >= RETRACK_AFTER:
            try:
                self._open_tracked()
                return
            except redis.exceptions.NoPermissionError:
                pass
            except (redis.ConnectionError, redis.TimeoutError):
                self._listener_failed = time.monotonic()
            self._drop()
        self._reader = reader = self._connection()
        reader.connect()
        self._timed = True

    def _retrack_due(self, now: float) -> bool:
        """Timed after a listener's failure, and :data:`RETRACK_AFTER` has passed."""
        failed = self._listener_failed
        return self._timed and failed > -math.inf and now - failed >= RETRACK_AFTER

    def _open_tracked(self) -> None:
        """Connect the listener, then the reader tracked to it, on the same server."""
        self._listener = listener = self._connection()
        listener.connect()
        listener.send_command("CLIENT", "ID")
        listener_id = listener.read_response()
        listener.send_command("SUBSCRIBE", CHANNEL)
        # Some parsers take pub/sub replies for push messages: ask for them as such.
        listener.read_response(push_request=True)
        self._reader = reader = self._connection()
        reader.connect()
        if (reader.host, reader.port) != (listener.host, listener.port):
            raise redis.ConnectionError("the primary changed while the cache connected")
        reader.send_command("CLIENT", "TRACKING", "ON", "REDIRECT", listener_id)
        reader.read_response()
        self._send_mark()
        self._read_mark()
        poller = select.poll()
        for connection in (listener, reader):
            poller.register(socket_of(connection), select.POLLIN)
        self._poller = poller

    def _drop(self) -> None:
        # Hits stop first (they find no poller), then the entries go, then the sockets.
        self._poller = None
        self._timed = False
        self._entries.clear()
        self._confirmed, self._ping = -math.inf, None
        self._token, self._marking = None, False
        for connection in (self._reader, self._listener):
            if connection is not None:
                connection.disconnect()
        self._reader = self._listener = None

    def _forked(self) -> None:
        """In a forked child: the parent's sockets are not ours to read or close."""
        self._poller = None
        self._timed = False
        self._entries = {}
        self._confirmed, self._ping = -math.inf, None
        self._token, self._marking = None, False
        self._reader = self._listener = None

    def _drain(self) -> None:
        """Apply every invalidation and PING answer received so far (under the lock).
        Leaves nothing buffered in the listener's parser, so that a quiet socket means
        no invalidation. Raises when a connection closed or a PING went unanswered
        for the connection's timeout."""
        listener = self._listener
        self._draining += 1
        try:
            while listener.can_read(timeout=0):
                message = listener.read_response(push_request=True)
                if not isinstance(message, list):
                    continue
                if message[0] == b"pong":
                    self._answered(message[1])
                elif message[0] == b"message":
                    names = message[2]
                    if names is None:
                        dropped = len(self._entries)
                        self._entries.clear()
                    else:
                        entries = self._entries
                        dropped = sum(entries.pop(text(name), None) is not None for name in names)
                    if dropped:
                        telemetry.cache_invalidated(dropped)
        finally:
            self._draining += 1
        # A reader the server dropped (CLIENT KILL, shutdown, idle timeout) no longer
        # tracks anything. No read of ours is in flight here but the mark's check sent
        # with the PING: misses hold the lock.
        if self._reader.can_read(timeout=0):
            if not self._marking:
                raise redis.ConnectionError("the cache's reading connection was closed")
            self._read_mark()
        ping = self._ping
        if ping is not None and time.monotonic() - ping[1] > self._ping_timeout:
            self._listener_failed = time.monotonic()
            raise redis.TimeoutError("the cache's listening connection did not answer a PING")

    def _answered(self, payload: bytes) -> None:
        # Everything the server queued before this answer was applied by the drain.
        ping = self._ping
        if ping is not None and payload == ping[0]:
            self._ponged = True
            self._confirm()

    def _confirm(self) -> None:
        """The PING is answered and the mark sent with it read: what the server did
        before they were sent has been applied."""
        ping = self._ping
        if ping is not None and self._ponged and not self._marking:
            self._confirmed, self._ping = ping[1], None

    def _send_mark(self) -> None:
        """Check the mark on the reader, in a transaction of its own (reply not read)."""
        reader = self._reader
        reader.send_packed_command(
            reader.pack_commands([("MULTI",), *self._mark_commands(), ("EXEC",)])
        )
        self._marking = True

    def _mark_commands(self) -> list[tuple[Any, ...]]:
        """Set the mark unless it is there, and read it (the last two replies of a
        transaction)."""
        # A new token each time: a database found without the mark gets one no other
        # database was given.
        return [("SET", self._mark, secrets.token_hex(8), "NX"), ("GET", self._mark)]

    def _read_mark(self) -> None:
        """Read the reply of :meth:`_send_mark` and apply it."""
        reader = self._reader
        for _ in range(3):  # OK, QUEUED, QUEUED
            reader.read_response()
        reply = reader.read_response()
        self._marking = False
        self._take_mark(reply)
        self._confirm()

    def _take_mark(self, reply: list[Any]) -> None:
        """Apply the ``SET NX``, ``GET`` replies of the mark: another token than the one
        read before means the replies cached come from another database (``SWAPDB``,
        which Redis 7.0 tells tracking clients nothing of) or one emptied: they go."""
        for part in reply:
            if isinstance(part, redis.ResponseError):
                raise part
        token = reply[-1]
        if token != self._token:
            if self._entries:
                telemetry.cache_invalidated(len(self._entries))
            self._entries.clear()
            self._token = token

    def _ping_due(self, now: float) -> bool:
        return self._poller is not None and self._ping is None and now - self._confirmed > BOUND / 2

    def _send_ping(self) -> None:
        """``PING <n>`` on the listener (under the lock), timed from before it is sent."""
        self._pings += 1
        payload = str(self._pings).encode()
        self._ping, self._ponged = (payload, time.monotonic()), False
        self._listener.send_command("PING", payload)
        self._send_mark()

    def _beat(self) -> None:
        """Send a PING if it is due and the lock is free (a hit never waits for it)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._ping_due(time.monotonic()):
                self._send_ping()
        except Exception:  # noqa: BLE001 - the next read reconnects and reports
            self._drop()
        finally:
            self._lock.release()

    def lookup(self, name: str) -> Any:
        """The cached ``HMGET`` reply of ``name`` if it may be served (see the module
        doc), or None (not cached, too old, or not connected: :meth:`hmget` asks the
        server). No round trip and never raises; a connection found closed is dropped."""
        now = time.monotonic()
        # A drain takes invalidations off the socket before it drops their entries: a
        # quiet socket proves nothing while one runs, or if one ran during this lookup.
        seen = self._draining
        poller = self._poller
        if poller is None:
            return _servable(self._entries.get(name), -math.inf, now) if self._timed else None
        try:
            quiet = not seen & 1 and not poller.poll(0)
        except RuntimeError:  # another thread is polling the same object right now
            quiet = False
        if not quiet:
            return self._lookup_after_drain(name)
        entry = self._entries.get(name)
        confirmed = self._confirmed
        if self._draining != seen:
            return self._lookup_after_drain(name)
        if now - confirmed > BOUND / 2 and self._ping is None:
            self._beat()
        return _servable(entry, confirmed, now)

    def _lookup_after_drain(self, name: str) -> Any:
        with self._lock:
            if self._poller is None:
                return None
            try:
                self._drain()
                now = time.monotonic()
                if self._ping_due(now):
                    self._send_ping()
            except Exception:  # noqa: BLE001 - the next read reconnects and reports
                self._drop()
                return None
            return _servable(self._entries.get(name), self._confirmed, now)

    def hmget(self, name: str, fields: list[bytes]) -> Any:
        """``HMGET name *fields`` (always the same fields), from memory when that may
        be served (see the module doc); a connection error or timeout is retried
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
                now = time.monotonic()
                if self._poller is not None:
                    self._drain()
                elif not self._timed or self._retrack_due(now):
                    self._open()
                now = time.monotonic()
                if self._ping_due(now):
                    self._send_ping()
                reply = _servable(self._entries.get(name), self._confirmed, now)
                if reply is not None:
                    return reply
                if self._marking:  # the reader's next reply is the heartbeat's mark
                    self._read_mark()
                if len(self._entries) >= MAX_ENTRIES:
                    self._entries.clear()
                entry = self._entries[name] = _Entry(time.monotonic())
                reader = self._reader
                # One transaction: the ttl is the one of the value read, and (tracked) the
                # mark names the database it was read from.
                marks = [] if self._poller is None else self._mark_commands()
                reads = [("HMGET", name, *fields), ("PTTL", name), *marks]
                reader.send_packed_command(reader.pack_commands([("MULTI",), *reads, ("EXEC",)]))
                for _ in range(len(reads) + 1):  # OK, QUEUED...
                    reader.read_response()
                replies = reader.read_response()
                for part in replies:
                    if isinstance(part, redis.ResponseError):  # EXEC returns, not raises
                        raise part
                reply, ttl_ms = replies[0], replies[1]
                if marks:
                    self._take_mark(replies[2:])
            except BaseException:
                self._drop()
                raise
            if ttl_ms >= 0:  # -1: no expiry; -2: no key
                entry.expires = entry.sent + ttl_ms / 1000
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
