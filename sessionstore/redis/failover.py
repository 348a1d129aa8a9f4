"""Following a Redis Sentinel failover as it happens, so that no write is acknowledged by
a primary the sentinels are replacing.

A failover promotes a replica while the old primary, still a primary in its own eyes,
goes on accepting writes until the sentinels demote it (seconds later) and discard them.
A replica still attached to it confirms them (``WAIT``) and loses them too when it is
moved to the new primary. So a store on a ``redis+sentinel://`` URL keeps a
:class:`FailoverWatch`: one thread subscribed to the events of every sentinel of the URL.

- A sentinel announcing a failover of the service (``+try-failover``, ``+selected-slave``
  and the states that follow) *fences* it: from then on no connection to a primary is
  made, the sockets of those made before are shut down at once (a blocking one; an
  asyncio one is dropped before its next command), and a reply read on one of them is
  discarded (the call raises ``ConnectionError``, which redis-py resends on a new
  connection and the boundary makes :class:`~sessionstore.errors.StoreUnavailableError`:
  it may or may not have been applied). A value cache (``?cache=yes``) sees its sockets
  end and empties itself. A sentinel sends ``REPLICAOF NO ONE`` to the
  chosen replica one timer tick (50-100 ms) after ``+selected-slave``, so a reply read
  before the fence was confirmed while every replica was still attached.
- ``+switch-master`` (or the failover's abort, ``-failover-abort-*``, from the sentinel
  that announced it) lifts the fence; the new primary it names is preferred to what a
  sentinel that has not caught up yet still reports. A fence the sentinels never lift
  ends after their ``failover-timeout``.
- A primary demoted under an open connection (``READONLY``, ``WAIT`` refused on a
  replica, a ``WAIT`` ``UNBLOCKED`` by the demotion) drops the connection and raises
  ``ConnectionError``: the call is resent on a new connection, which asks the sentinels
  again (every write recognises its own resend: see :mod:`sessionstore.keys`).

The connections that obey the watch are those of :mod:`.fenced`. The watch starts at
the first connection (opening a store does no I/O) and first tries
every sentinel once. A sentinel unreachable from this client cannot warn it: its
events are missed until it is reached again (each half second).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
import weakref
from typing import Any

import redis
from redis.exceptions import RedisError

from .. import forksafe
from .compat import socket_of
from .replies import text

#: Events of a sentinel that start (or carry on) a failover of the service it names.
FENCE_EVENTS = frozenset(
    {
        "+try-failover",
        "+elected-leader",
        "+failover-state-select-slave",
        "+selected-slave",
        "+failover-state-send-slaveof-noone",
        "+failover-state-wait-promotion",
        "+promoted-slave",
        "+failover-state-reconf-slaves",
        "+slave-reconf-sent",
        "+slave-reconf-inprog",
        "+slave-reconf-done",
        "+failover-end-for-timeout",
        "+failover-end",
    }
)
#: The event naming the new primary: the end of every fence.
SWITCH = "+switch-master"
#: The prefix of the events of a failover given up (the fence of that sentinel ends).
ABORT = "-failover-abort"
#: How long (s) a fence lasts at most when the sentinels' ``failover-timeout`` is unknown.
DEFAULT_FENCE_S = 180.0
#: Seconds between two attempts to reach a sentinel the watch lost.
RECONNECT_S = 0.5

Address = tuple[str, int]


def _subject(channel: str, words: list[str]) -> tuple[str, Address | None] | None:
    """(the service an event is about, the address of its primary as the event names
    it): after ``@`` for a replica or sentinel, the words after ``master`` for the
    service itself, the first word and the old address for ``+switch-master``."""
    if "@" in words:
        at = words.index("@")
        rest = words[at + 1 : at + 4]
    elif channel == SWITCH:
        rest = words[:3]
    elif len(words) >= 2 and words[0] == "master":
        rest = words[1:4]
    else:
        return None
    if not rest:
        return None
    if len(rest) == 3 and rest[2].isdigit():
        return rest[0], (rest[1], int(rest[2]))
    return rest[0], None


class FailoverWatch:
    """The fence of one store's Sentinel service (see the module doc).

    :attr:`generation` changes at every event that fences, lifts or moves the service:
    a connection made under another generation is stale.
    """

    def __init__(
        self,
        sentinels: list[Address],
        service: str,
        sentinel_kwargs: dict[str, Any],
        timeout: float,
    ) -> None:
        self.service = service
        self.generation = 0
        self._sentinels = list(sentinels)
        self._kwargs = sentinel_kwargs
        self._timeout = timeout
        #: Each sentinel in a failover of the service, and since when (monotonic).
        self._failing: dict[str, float] = {}
        self._limit = DEFAULT_FENCE_S
        #: (old primary, new primary) of the last ``+switch-master``, until the
        #: sentinels asked report the new one.
        self._switch: tuple[Address, Address] | None = None
        #: The blocking connections made under the watch (see :meth:`made`).
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        #: Primaries a ``+switch-master`` replaced: the late events of the failover that
        #: replaced them (its leader ends after the others announced the switch) fence
        #: nothing.
        self._replaced: set[Address] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        #: The running thread's stop flag and the socket pair that wakes it.
        self._stop = threading.Event()
        self._wake: tuple[socket.socket, socket.socket] | None = None
        forksafe.renew_locks(self, "_lock")
        forksafe.at_fork(self, "_after_fork")

    # Used by the connections ------------------------------------------------------------

    def start(self) -> None:
        """Start the watch (once, and again after :meth:`close`); wait until every
        sentinel was tried once."""
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._stop = threading.Event()
                    self._wake = socket.socketpair()
                    self._ready = threading.Event()
                    self._thread = threading.Thread(
                        target=self._run,
                        args=(self._stop, self._wake, self._ready),
                        name=f"sessionstore-sentinel-{self.service}",
                        daemon=True,
                    )
                    self._thread.start()
        self._ready.wait(self._timeout * len(self._sentinels))

    @property
    def stopped(self) -> bool:
        """No thread runs (never started, closed, or in a forked child)."""
        return self._thread is None

    def fence(self) -> str | None:
        """Why no connection to a primary may be made now; None when one may."""
        now = time.monotonic()
        failing = tuple(self._failing.items())  # one step: the watch thread changes it
        live = sorted(name for name, since in failing if now - since < self._limit)
        if not live:
            return None
        return (
            f"the sentinel(s) at {', '.join(live)} are failing over service "
            f"{self.service!r}: no call goes to a primary until they announce the new one"
        )

    def address(self, reported: Address) -> Address:
        """The primary to connect to, given the one a sentinel reported: the new primary
        of the last ``+switch-master`` while the sentinel still reports the old one."""
        switch = self._switch
        if switch is None:
            return reported
        old, new = switch
        if _same(reported, old):
            return new
        self._switch = None
        return reported

    def close(self) -> None:
        """Stop the thread (the store is closing; a later connection starts another)."""
        with self._lock:
            stop, wake, self._thread = self._stop, self._wake, None
        stop.set()
        if wake is not None:
            with contextlib.suppress(OSError):
                wake[1].send(b"x")

    # The thread -----------------------------------------------------------------------

    def _event(self, sentinel: str, channel: str, data: str) -> None:
        words = data.split()
        subject = _subject(channel, words)
        if subject is None or subject[0] != self.service:
            return
        primary = subject[1]
        with self._lock:
            if channel == SWITCH and primary is not None and len(words) >= 5:
                if not words[4].isdigit():
                    return
                new = (words[3], int(words[4]))
                if self._switch == (primary, new) and not self._failing:
                    return  # another sentinel's announcement of the same switch
                self._switch = (primary, new)
                self._replaced.add(primary)
                self._replaced.discard(new)
                self._failing.clear()
            elif channel in FENCE_EVENTS:
                if primary in self._replaced or sentinel in self._failing:
                    return
                self._failing[sentinel] = time.monotonic()
            elif channel.startswith(ABORT) and sentinel in self._failing:
                del self._failing[sentinel]
            else:
                return
            self.generation += 1
            connections = list(self._connections)
        for connection in connections:
            _shut(connection)

    def made(self, connection: Any) -> None:
        """Register a blocking connection just made: a change of :attr:`generation`
        shuts its socket down at once (a read in flight, or a poll of it, sees the end),
        and its owner drops it."""
        with self._lock:
            self._connections.add(connection)

    def _subscribe(self, host: str, port: int, name: str) -> Any:
        """A pub/sub of every event of the sentinel; its failover state taken after the
        subscription, so that nothing falls between."""
        client = redis.Redis(
            host=host,
            port=port,
            socket_timeout=self._timeout,
            socket_connect_timeout=self._timeout,
            **self._kwargs,
        )
        pubsub = client.pubsub()
        try:
            pubsub.psubscribe("*")
            pubsub.get_message(timeout=self._timeout)  # the subscription's confirmation
            state: dict[str, Any] = client.sentinel_master(self.service)  # type: ignore[assignment]
        except BaseException:
            pubsub.close()
            client.close()
            raise
        # The client lives as long as the pub/sub: closing it (or collecting it) would
        # close the pub/sub's connection too.
        pubsub.owner = client  # type: ignore[attr-defined]
        with self._lock:
            limit = state.get("failover-timeout")
            if isinstance(limit, int) and limit > 0:
                self._limit = limit / 1000
            if "failover_in_progress" in str(state.get("flags", "")):
                self._failing.setdefault(name, time.monotonic())
                self.generation += 1
        return pubsub

    def _run(
        self,
        stop: threading.Event,
        wake: tuple[socket.socket, socket.socket],
        ready: threading.Event,
    ) -> None:
        subscribed: dict[str, Any] = {}
        try:
            while not stop.is_set():
                self._connect_missing(subscribed, stop)
                ready.set()
                self._drain(subscribed, wake[0])
        finally:
            for pubsub in subscribed.values():
                with contextlib.suppress(Exception):
                    pubsub.close()
            for sock in wake:
                sock.close()

    def _connect_missing(self, subscribed: dict[str, Any], stop: threading.Event) -> None:
        for host, port in self._sentinels:
            name = f"{host}:{port}"
            if name not in subscribed and not stop.is_set():
                with contextlib.suppress(RedisError, OSError):
                    subscribed[name] = self._subscribe(host, port, name)

    def _drain(self, subscribed: dict[str, Any], wake: socket.socket) -> None:
        """Wait (at most :data:`RECONNECT_S`) for events and handle them; a sentinel
        whose connection failed is dropped, to be reached again."""
        sockets: dict[Any, str] = {}
        for name, pubsub in subscribed.items():
            sock = socket_of(pubsub.connection)
            if sock is not None:
                sockets[sock] = name
        try:
            ready, _, _ = select.select([*sockets, wake], [], [], RECONNECT_S)
        except (OSError, ValueError):
            ready = list(sockets)
        for sock in ready:
            if sock not in sockets:
                continue
            name = sockets[sock]
            try:
                while (message := subscribed[name].get_message(timeout=0)) is not None:
                    if message.get("type") == "pmessage":
                        self._event(name, text(message["channel"]), text(message["data"]))
            except (RedisError, OSError, ValueError, AttributeError):
                with contextlib.suppress(Exception):
                    subscribed[name].close()
                del subscribed[name]

    def _after_fork(self) -> None:
        # The thread does not exist in a child: the child's first connection starts one.
        # The parent's sockets are not the child's to shut down.
        self._connections = weakref.WeakSet()
        self._thread = None
        self._wake = None
        self._stop = threading.Event()
        self._ready = threading.Event()


def _shut(connection: Any) -> None:
    """Shut a connection's socket down without closing it: its owner's next read (or
    poll) finds the end, and closes it in its own thread."""
    sock = socket_of(connection)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _same(one: Address, other: Address) -> bool:
    return (text(one[0]), int(one[1])) == (text(other[0]), int(other[1]))
