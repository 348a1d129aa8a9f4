# Long on purpose (~470 lines): this is the one home of every redis-py workaround, so that
# all of them sit behind the one version check (TESTED_RANGE) and are checked again together
# when redis-py changes. Split by topic, a workaround could escape the check.
"""Every place sessionstore relies on redis-py's internals or works around its defects.

Each workaround below says what redis-py does, why sessionstore works around it, and
what would let it go; tests/test_redis_compat.py holds one test per workaround that
fails when redis-py changes the behaviour it relies on (a private field renamed, a
defect fixed), so that the workaround is then reworked or removed. The rest of the
package imports these names from here and never reaches into redis-py itself.

The workarounds were written and tested for redis-py :data:`TESTED_RANGE` (lower bound
included, upper bound excluded). Importing this module under another version warns
(:class:`RedisPyVersionWarning`), naming every workaround to check again: they may then
misbehave silently (a renamed private field reads as "no socket", a fixed defect is
worked around for nothing).

The redis-py internals each workaround relies on:

- :func:`socket_of`: ``Connection._sock``;
- :func:`async_connected`, :func:`shut_async`: ``redis.asyncio`` connections'
  ``_reader`` / ``_writer``;
- :func:`asyncio_connections`: the pools' ``_available_connections`` /
  ``_in_use_connections``, the asyncio cluster nodes' ``_connections``;
- :class:`FairBlockingPool`: ``BlockingConnectionPool``'s ``queue_class`` protocol;
- :class:`SentinelBlockingPool`, :class:`AsyncSentinelBlockingPool`: redis-py's Sentinel
  pools mixed into its blocking pools;
- :class:`ClusterNodePool`: ``RedisCluster._execute_command`` releasing a connection
  twice;
- :func:`driver_defect`, :class:`ClusterClient`, :class:`AsyncClusterClient`:
  ``RedisCluster`` following ``ASK`` to a node it does not know (``AttributeError`` on
  None);
- :func:`async_node_send`: ``redis.asyncio.cluster.PipelineCommand`` and
  ``ClusterNode.execute_pipeline``;
- :func:`new_node_client`, :func:`new_async_node`:
  ``NodesManager.create_redis_connections``, ``RedisCluster.get_connection_kwargs``;
- :func:`learn_moved_slot`: ``NodesManager.move_slot``;
- :class:`SentinelPrimary`, :class:`AsyncSentinelPrimary`:
  ``SentinelManagedConnection._connect_retry``, ``connect_to`` and
  ``connect_check_health``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import socket
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import PipelineCommand
from redis.cluster import PRIMARY, ClusterNode
from redis.exceptions import ClusterError, RedisClusterException, RedisError

from ..drive import Pause, Steps, adrive, drive
from ..fairwait import FairQueue
from .retry import retry_delay

#: The redis-py versions the workarounds were written and tested for: (lowest included,
#: highest excluded); pyproject.toml requires the same range, and CI tests both ends of it
#: (8.0 lacks ``Sentinel.close``).
TESTED_RANGE = ((8, 1), (9, 0))

#: Each workaround of this module, as the version warning names it.
WORKAROUNDS = (
    "socket_of (Connection._sock)",
    "shut_async (asyncio Connection._reader/_writer)",
    "asyncio_connections (pools' _available_connections/_in_use_connections, "
    "cluster nodes' _connections)",
    "FairBlockingPool (BlockingConnectionPool queue_class get/put_nowait)",
    "SentinelBlockingPool/AsyncSentinelBlockingPool (Sentinel pools mixed into blocking pools)",
    "ClusterNodePool (RedisCluster releasing a connection twice after ASK)",
    "driver_defect/ClusterClient (AttributeError on ASK to an unknown node)",
    "async_node_send (asyncio PipelineCommand, ClusterNode.execute_pipeline)",
    "new_node_client/new_async_node (NodesManager.create_redis_connections, get_connection_kwargs)",
    "learn_moved_slot (NodesManager.move_slot)",
    "SentinelPrimary/AsyncSentinelPrimary (SentinelManagedConnection._connect_retry, "
    "connect_to, connect_check_health)",
)


class RedisPyVersionWarning(UserWarning):
    """The installed redis-py is outside :data:`TESTED_RANGE`."""


def _version_tuple(version: str) -> tuple[int, ...]:
    """``"8.1.0"`` -> ``(8, 1, 0)``; stops at the first part that is not a number."""
    parts: list[int] = []
    for part in version.split("."):
        number = re.match(r"\d+", part)
        if number is None:
            break
        parts.append(int(number.group()))
    return tuple(parts)


def version_problem(version: str) -> str | None:
    """Why redis-py ``version`` may not suit the workarounds (naming each of them), or
    None inside :data:`TESTED_RANGE`."""
    low, high = TESTED_RANGE
    found = _version_tuple(version)
    if low <= found < high:
        return None
    tested = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
    return (
        f"sessionstore's redis-py workarounds were tested with redis-py {tested}, not "
        f"{version}; each of them may misbehave and must be checked against it "
        f"(tests/test_redis_compat.py): {'; '.join(WORKAROUNDS)}"
    )


def _check_installed() -> None:
    problem = version_problem(redis.__version__)
    if problem is not None:
        warnings.warn(problem, RedisPyVersionWarning, stacklevel=3)


_check_installed()


# Sockets and connections ------------------------------------------------------------------


def socket_of(connection: Any) -> Any:
    """The socket of a blocking redis-py connection, None when it is not connected (or
    ``connection`` is None).

    redis-py keeps it in ``Connection._sock`` and offers no public accessor. sessionstore
    only waits for its readiness (``select``/``poll``: the value cache, the Sentinel
    watch) or shuts it down from another thread (a failover fence): never reads or
    writes it, its parser owns the bytes. Drop when redis-py exposes the socket or a
    way to wait on several connections."""
    return getattr(connection, "_sock", None)


def async_connected(connection: Any) -> bool:
    """True when a ``redis.asyncio`` connection has its streams (is connected).

    redis-py keeps them in ``_reader``/``_writer`` and offers ``is_connected`` only on
    some versions; this is what its own ``connect`` checks. Drop with
    :func:`shut_async`."""
    return bool(connection._reader)


def shut_async(connection: Any) -> None:
    """Shut one ``redis.asyncio`` connection's socket down without its event loop, and
    let the connection forget its streams (it reconnects if ever used again).

    redis-py closes an asyncio connection only from its own loop (``await
    disconnect()``); a store used from several loops must drop the connections of a
    loop that is closed or run by another thread. This reads the socket from the
    private ``_writer`` stream and clears ``_reader``/``_writer``, as redis-py's own
    ``disconnect`` does. Drop when redis-py can close a connection from outside its
    loop."""
    writer = getattr(connection, "_writer", None)
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    connection._reader = connection._writer = None


def asyncio_connections(client: Any) -> list[Any]:
    """Every connection a ``redis.asyncio`` client holds (its pool's, or its cluster
    nodes').

    redis-py offers no public list: this reads its pools' ``_available_connections``
    and ``_in_use_connections`` and its cluster nodes' ``_connections``, and finds
    nothing if they are renamed. Needed by :func:`shut_async`'s callers; drop with it."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        manager = client.nodes_manager
        nodes = [*manager.startup_nodes.values(), *manager.nodes_cache.values()]
        return [c for node in nodes for c in getattr(node, "_connections", ())]
    pool = client.connection_pool
    return [
        *getattr(pool, "_available_connections", ()),
        *getattr(pool, "_in_use_connections", ()),
    ]


# Pools ------------------------------------------------------------------------------------


class FairBlockingPool(redis.BlockingConnectionPool):
    """``BlockingConnectionPool`` whose waiting callers are served first come, first
    served, failing only after ``timeout`` seconds without a connection given back.

    redis-py's blocking pool keeps free connections in a ``LifoQueue``: a newcomer may
    take a connection given back ahead of the callers already waiting. It waits in
    ``queue_class().get(block=True, timeout=...)`` and gives back with ``put_nowait``:
    :class:`~sessionstore.fairwait.FairQueue` replaces its queue there and nothing else
    changes. Drop when redis-py's blocking pool serves waiters in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("queue_class", FairQueue)
        super().__init__(*args, **kwargs)


class AsyncSlotPool(redis.asyncio.ConnectionPool):
    """The pool of a ``redis.asyncio`` client whose calls already wait their turn (the
    async client's :class:`~sessionstore.fairwait.FairQueue`: at most
    ``max_connections`` calls at once, each on one connection at a time), so that the
    pool never has to wait: redis-py's ``BlockingConnectionPool`` would add its
    condition and its timeout to every call for nothing (about 10 us, a sixth of a
    ``get_data``). It takes the blocking pool's arguments (``timeout`` is the queue's)
    and keeps room for twice ``max_connections``: a cancelled call may leave the release
    of its connection to the background after giving its turn back."""

    def __init__(
        self, *, timeout: float | None = None, max_connections: int | None = None, **kwargs: Any
    ) -> None:
        room = None if max_connections is None else 2 * max_connections
        super().__init__(max_connections=room, **kwargs)


class ClusterNodePool(FairBlockingPool):
    """The blocking pool of one cluster node, which takes a connection back only from
    the thread that holds it.

    redis-py's ``RedisCluster._execute_command`` keeps the connection of an attempt
    that met ``ASK`` or ``MOVED`` after releasing it; when the next attempt fails before
    it takes a connection (:func:`driver_defect`, a slot not covered, no connection
    free), its ``finally`` releases that connection a second time. A
    ``BlockingConnectionPool`` then holds it twice (or once more while another thread
    uses it), two threads share one connection and each reads the other's replies.
    Here a release by a thread other than the holder, or of a connection already
    back, is ignored. Drop when redis-py's pool ignores a second release or its cluster
    client stops making one.
    """

    def reset(self) -> None:
        super().reset()
        #: Each connection handed out, and the thread it was handed to.
        self._holders: dict[Any, int] = {}
        self._holders_lock = threading.Lock()
        self._getting = threading.local()

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        # A connection that fails to connect is released inside; let that through.
        self._getting.active = True
        try:
            connection = super().get_connection(*args, **kwargs)
        finally:
            self._getting.active = False
        with self._holders_lock:
            self._holders[connection] = threading.get_ident()
        return connection

    def release(self, connection: Any) -> None:
        with self._holders_lock:
            holder = self._holders.get(connection)
            if holder is None and not getattr(self._getting, "active", False):
                return  # already back in the pool
            if holder is not None and holder != threading.get_ident():
                return  # released before, and handed out again since
            self._holders.pop(connection, None)
        super().release(connection)


class SentinelBlockingPool(redis.sentinel.SentinelConnectionPool, FairBlockingPool):
    """redis-py's Sentinel pool with the waiting of a :class:`FairBlockingPool`.

    redis-py has no blocking Sentinel pool; ``SentinelConnectionPool`` only overrides
    what concerns the primary's address and calls ``super()`` for the rest, so mixed
    before a blocking pool it hands out connections of the service's primary from the
    blocking pool's queue. Drop when redis-py offers a blocking Sentinel pool."""


class AsyncSentinelBlockingPool(
    redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool
):
    """:class:`SentinelBlockingPool` for ``redis.asyncio``."""


# The cluster client's ASK to an unknown node ----------------------------------------------

_DRIVER_DIR = os.path.dirname(redis.__file__) + os.sep


def driver_defect(exc: BaseException) -> bool:
    """``exc`` is the ``AttributeError`` redis-py's cluster client raises when a slot
    being migrated answers ``ASK`` with a node it does not know yet (a primary just added
    by ``redis-cli --cluster add-node``): it looks the node up, finds None and uses it.
    The command was not applied (``ASK`` means the node that answered did not run it).

    Recognised as an ``AttributeError`` on None raised inside redis-py's own files.
    Drop (with :class:`ClusterClient`) when redis-py refreshes its slot map on an
    ``ASK`` to a node it does not know."""
    if not isinstance(exc, AttributeError) or getattr(exc, "obj", object()) is not None:
        return False
    trace = exc.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    return trace is not None and trace.tb_frame.f_code.co_filename.startswith(_DRIVER_DIR)


#: Attempts of one call that meets :func:`driver_defect` (see :class:`ClusterClient`).
DEFECT_ATTEMPTS = 6


class ClusterClient(redis.cluster.RedisCluster):
    """``RedisCluster`` that survives :func:`driver_defect`: the slot map is refreshed and
    the command sent again, with a back-off, until the node is known (the first slot
    moved to it makes it part of the map); after :data:`DEFECT_ATTEMPTS` a
    ``ClusterError`` (the boundary makes it
    :class:`~sessionstore.errors.StoreUnavailableError`)."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(super().execute_command, *args, **kwargs)
        return drive(_past_defects(call, self.nodes_manager.initialize, args))


class AsyncClusterClient(redis.asyncio.cluster.RedisCluster):
    """:class:`ClusterClient` for ``redis.asyncio``."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(super().execute_command, *args, **kwargs)
        return await adrive(_past_defects(call, self.nodes_manager.initialize, args))


def _past_defects(call: Callable[[], Any], refresh: Callable[[], Any], args: Any) -> Steps[Any]:
    """``call``, sent again after a slot-map ``refresh`` while it meets
    :func:`driver_defect` (see :class:`ClusterClient`)."""
    for attempt in range(DEFECT_ATTEMPTS):
        try:
            return (yield call)
        except AttributeError as exc:
            if not driver_defect(exc):
                raise
            if attempt == DEFECT_ATTEMPTS - 1:
                raise ClusterError(_defect_text(args)) from exc
        yield Pause(retry_delay(attempt + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            yield refresh
    raise AssertionError("unreachable")


def _defect_text(args: tuple[Any, ...]) -> str:
    name = args[0].decode() if args and isinstance(args[0], bytes) else str(args[:1])
    return (
        f"{name} was redirected (ASK) to a node the cluster client did not know yet, "
        f"{DEFECT_ATTEMPTS} times: a slot is migrating to a new primary"
    )


# Cluster nodes addressed directly ---------------------------------------------------------


async def async_node_send(node: AsyncClusterNode, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` on one connection of the ``redis.asyncio`` cluster node
    ``node``, in order; their replies, with an error reply in its place.

    ``redis.asyncio``'s cluster client has no client per node (the sync one has
    ``get_redis_connection``): the node's own pipeline, fed redis-py's internal
    ``PipelineCommand`` objects through ``ClusterNode.execute_pipeline``, keeps the
    commands on one connection. Drop when the asyncio cluster client offers a
    pipeline bound to one node."""
    queued = [PipelineCommand(at, *command) for at, command in enumerate(commands)]
    await node.execute_pipeline(queued)
    return [command.result for command in queued]


def new_node_client(client: redis.cluster.RedisCluster, host: str, port: int) -> redis.Redis:
    """A ``redis.Redis`` to a primary the sync cluster ``client``'s slot map does not
    have yet (a primary just added), built as the client builds its nodes' clients;
    the caller closes it.

    redis-py builds them in ``NodesManager.create_redis_connections`` and has no public
    way to reach a node outside its map (an ``ASK`` to a new primary). Drop with
    :func:`driver_defect`."""
    node = ClusterNode(host, port, PRIMARY)
    client.nodes_manager.create_redis_connections([node])
    assert node.redis_connection is not None
    return node.redis_connection


def new_async_node(
    client: redis.asyncio.cluster.RedisCluster, host: str, port: int
) -> AsyncClusterNode:
    """:func:`new_node_client` for ``redis.asyncio``: a node with the connection
    arguments of ``client`` (``get_connection_kwargs``); the caller disconnects it."""
    kwargs: dict[str, Any] = client.get_connection_kwargs()
    return AsyncClusterNode(host, port, PRIMARY, **kwargs)


def learn_moved_slot(client: Any, moved: Any) -> Any:
    """Let the cluster ``client``'s slot map learn the new node of the slot a
    ``MovedError`` names (an awaitable on ``redis.asyncio``).

    redis-py does this inside its own command loop, through
    ``NodesManager.move_slot``; a call sent to a node directly (a batch of commands
    on one connection) must do it itself. Drop when the cluster client can send a
    batch to one slot's node."""
    return client.nodes_manager.move_slot(moved)


# Connections to a Sentinel service's primary ----------------------------------------------


class SentinelPrimary(redis.sentinel.SentinelManagedConnection):
    """A connection to a Sentinel service's primary whose address is chosen by
    :meth:`primary_address` on every connect (a subclass says how).

    redis-py's ``SentinelManagedConnection`` connects through its private
    ``_connect_retry`` (to the address the pool's sentinels report) but reconnects a
    dropped connection (``connect_check_health``) to the address it had: after a
    failover, to the old primary. Here every connect asks :meth:`primary_address`;
    ``resolved`` is True while connecting to it. Drop when redis-py asks the sentinels
    again on every reconnect and offers a hook to choose the address."""

    resolved = False

    def primary_address(self) -> tuple[Any, Any]:
        """The address to connect to now; raises ``ConnectionError`` when none may be
        connected to. This one asks the pool's sentinels, as redis-py does; a subclass
        chooses."""
        return self.connection_pool.get_master_address()

    def connected(self) -> None:
        """Called after each connect."""

    @property
    def is_open(self) -> bool:
        return socket_of(self) is not None

    def _connect_retry(self) -> None:
        if self._sock:
            return
        address = self.primary_address()
        self.connection_pool.master_address = address
        self.resolved = True
        try:
            self.connect_to(address)
        finally:
            self.resolved = False
        self.connected()

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if self._sock:
            return
        if self.resolved:
            super().connect_check_health(*args, **kwargs)
        else:
            self._connect_retry()


class AsyncSentinelPrimary(redis.asyncio.sentinel.SentinelManagedConnection):
    """:class:`SentinelPrimary` for ``redis.asyncio`` (connected: ``_reader`` set)."""

    resolved = False

    async def primary_address(self) -> tuple[Any, Any]:
        """:meth:`SentinelPrimary.primary_address`."""
        return await self.connection_pool.get_master_address()

    @property
    def is_open(self) -> bool:
        return async_connected(self)

    async def _connect_retry(self) -> None:
        if self._reader:
            return
        address = await self.primary_address()
        self.connection_pool.master_address = address
        self.resolved = True
        try:
            await self.connect_to(address)
        finally:
            self.resolved = False

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if self._reader:
            return
        if self.resolved:
            await super().connect_check_health(*args, **kwargs)
        else:
            await self._connect_retry()
