"""One test per redis-py workaround of :mod:`sessionstore.redis.compat`, against real
redis-server processes: each asserts the redis-py behaviour the workaround relies on
(a private field with its meaning, a defect that still reproduces), so that it fails
when redis-py changes it and the workaround is reworked or removed."""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.exceptions import MovedError, ResponseError

from sessionstore.fairwait import FairQueue
from sessionstore.redis import compat


def _client_count(server: Any, name: str) -> int:
    admin = redis.Redis(port=server.port)
    try:
        return sum(1 for c in admin.client_list() if c.get("name") == name)
    finally:
        admin.close()


# The version guard ------------------------------------------------------------------------


def test_the_installed_redis_py_is_the_one_the_workarounds_were_tested_with():
    """A redis-py outside TESTED_RANGE fails here: run this file against it, rework what
    fails, then move the range."""
    assert compat.version_problem(redis.__version__) is None, redis.__version__


@pytest.mark.parametrize("version", ["9.0.0", "8.0.1", "7.4.1", "10.0.0b1"])
def test_another_redis_py_is_warned_of_naming_every_workaround(version):
    problem = compat.version_problem(version)
    assert problem is not None and version in problem
    for workaround in compat.WORKAROUNDS:
        assert workaround in problem
    assert compat.version_problem("8.1.0") is None
    assert compat.version_problem("8.99.3rc1") is None


def test_importing_under_another_redis_py_warns(monkeypatch):
    monkeypatch.setattr(redis, "__version__", "9.1.0")
    with pytest.warns(compat.RedisPyVersionWarning, match="not 9.1.0"):
        compat._check_installed()


# Sockets and connections ------------------------------------------------------------------


def test_socket_of_is_the_connected_socket_of_a_blocking_connection(redis_server):
    connection = redis.Connection(port=redis_server.port)
    assert compat.socket_of(connection) is None
    assert compat.socket_of(None) is None
    connection.connect()
    try:
        sock = compat.socket_of(connection)
        assert isinstance(sock, socket.socket)
        assert sock.getpeername()[1] == redis_server.port
    finally:
        connection.disconnect()
    assert compat.socket_of(connection) is None


def test_shut_async_ends_an_asyncio_connection_from_outside_its_loop(redis_server):
    name = f"compat-{uuid.uuid4().hex[:8]}"

    async def connect() -> Any:
        connection = redis.asyncio.Connection(port=redis_server.port, client_name=name)
        assert not compat.async_connected(connection)
        await connection.connect()
        assert compat.async_connected(connection)
        return connection

    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(connect())
    loop.close()
    assert _client_count(redis_server, name) == 1
    compat.shut_async(connection)
    assert not compat.async_connected(connection)
    assert connection._writer is None
    gone = threading.Event()
    for _ in range(200):  # the server notices the end when it next polls the socket
        if _client_count(redis_server, name) == 0:
            gone.set()
            break
        gone.wait(0.01)
    assert gone.is_set()

    async def reconnect() -> Any:
        await connection.connect()
        await connection.send_command("PING")
        reply = await connection.read_response()
        await connection.disconnect()
        return reply

    assert asyncio.run(reconnect()) == b"PONG"


def test_asyncio_connections_lists_a_pool_and_a_cluster_s_connections(redis_server, redis_cluster):
    async def held() -> tuple[list[Any], list[Any], list[Any]]:
        plain = redis.asyncio.Redis(port=redis_server.port)
        await plain.ping()
        pool = plain.connection_pool
        plain_found = compat.asyncio_connections(plain)
        expected = [*pool._available_connections, *pool._in_use_connections]
        cluster = redis.asyncio.cluster.RedisCluster.from_url(redis_cluster.url)
        await cluster.initialize()
        await cluster.get(f"compat-{uuid.uuid4().hex}")
        cluster_found = compat.asyncio_connections(cluster)
        await plain.aclose()
        await cluster.aclose()
        return plain_found, expected, cluster_found

    plain_found, expected, cluster_found = asyncio.run(held())
    assert plain_found and plain_found == expected
    assert all(isinstance(c, redis.asyncio.Connection) for c in plain_found)
    assert cluster_found and all(isinstance(c, redis.asyncio.Connection) for c in cluster_found)


# Pools ------------------------------------------------------------------------------------


def test_a_blocking_pool_waits_in_its_queue_class_and_gives_back_with_put_nowait(redis_server):
    """What FairBlockingPool relies on: redis-py waits for a free connection in
    ``queue_class().get(block=True, timeout=...)`` and gives one back with
    ``put_nowait``."""
    calls: list[tuple[Any, ...]] = []

    class Recording(FairQueue):
        def get(self, block: bool = True, timeout: float | None = None) -> Any:
            calls.append(("get", block, timeout))
            return super().get(block, timeout)

        def put_nowait(self, item: Any) -> None:
            calls.append(("put_nowait", item is not None))
            super().put_nowait(item)

    pool = compat.FairBlockingPool.from_url(
        redis_server.url, max_connections=1, timeout=7, queue_class=Recording
    )
    assert isinstance(compat.FairBlockingPool.from_url(redis_server.url).pool, FairQueue)
    calls.clear()
    connection = pool.get_connection()
    pool.release(connection)
    pool.disconnect()
    assert calls == [("get", True, 7), ("put_nowait", True)]

    fair = compat.FairBlockingPool.from_url(redis_server.url, max_connections=1, timeout=0.01)
    held = fair.get_connection()
    with pytest.raises(redis.ConnectionError):
        fair.get_connection()
    fair.release(held)
    fair.disconnect()
    assert not isinstance(redis.BlockingConnectionPool(max_connections=1).pool, FairQueue)


def test_a_sentinel_pool_mixed_into_a_blocking_pool_waits_and_asks_for_the_primary(
    redis_server,
):
    """What SentinelBlockingPool relies on: redis-py's Sentinel pool, mixed before a
    blocking pool, keeps its connections of the primary and the blocking pool's wait."""
    asked: list[int] = []

    class Asking(compat.SentinelPrimary):
        def primary_address(self) -> tuple[Any, Any]:
            asked.append(1)
            return ("127.0.0.1", redis_server.port)

    pool = compat.SentinelBlockingPool(
        "service",
        redis.sentinel.Sentinel([]),
        connection_class=Asking,
        max_connections=1,
        timeout=0.01,
    )
    assert isinstance(pool.pool, FairQueue)
    held = pool.get_connection()
    assert isinstance(held, Asking) and asked == [1]
    with pytest.raises(redis.ConnectionError, match="No connection available"):
        pool.get_connection()
    pool.release(held)
    assert pool.get_connection() is held
    pool.disconnect()

    async def wait_async() -> None:
        class AsyncAsking(compat.AsyncSentinelPrimary):
            async def primary_address(self) -> tuple[Any, Any]:
                asked.append(2)
                return ("127.0.0.1", redis_server.port)

        apool = compat.AsyncSentinelBlockingPool(
            "service",
            redis.asyncio.sentinel.Sentinel([]),
            connection_class=AsyncAsking,
            max_connections=1,
            timeout=0.01,
        )
        first = await apool.get_connection()
        with pytest.raises(redis.ConnectionError, match="No connection available"):
            await apool.get_connection()
        await apool.release(first)
        await apool.disconnect()

    asyncio.run(wait_async())
    assert asked == [1, 2]


class _CountingPool(redis.BlockingConnectionPool):
    releases: collections.Counter[int]

    def release(self, connection: Any) -> None:
        _CountingPool.releases[id(connection)] += 1
        super().release(connection)


@pytest.fixture
def ask_to_an_unknown_node(redis_cluster) -> Iterator[tuple[str, Any]]:
    """A key whose slot migrates (the source answers ASK for it, the key being absent
    there) to a primary that cluster clients made in the test must forget; yields
    (the key, a function that makes a client forget the target)."""
    key = f"compat-ask-{uuid.uuid4().hex}"
    probe = redis.cluster.RedisCluster.from_url(redis_cluster.url)
    slot = probe.keyslot(key)
    source = probe.get_node_from_key(key)
    target = next(n for n in probe.get_primaries() if n.name != source.name)
    source_admin = redis.Redis(host=source.host, port=source.port)
    target_admin = redis.Redis(host=target.host, port=target.port)
    source_id = source_admin.execute_command("CLUSTER", "MYID").decode()
    target_id = target_admin.execute_command("CLUSTER", "MYID").decode()
    target_admin.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    source_admin.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)

    def forget(client: Any) -> None:
        client.nodes_manager.nodes_cache.pop(target.name)

    try:
        yield key, forget
    finally:
        for admin in (source_admin, target_admin):
            admin.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
            admin.close()
        probe.close()


def test_an_ask_to_an_unknown_node_fails_inside_redis_py_and_releases_twice(
    ask_to_an_unknown_node, redis_cluster
):
    """The defect driver_defect recognises, ClusterClient survives and ClusterNodePool
    guards against: redis-py's cluster client follows ASK to a node missing from its
    map, uses None (AttributeError inside redis-py), and up to redis-py 8.1 released the
    connection of the attempt that met ASK a second time (8.2 releases it once)."""
    key, forget = ask_to_an_unknown_node
    _CountingPool.releases = collections.Counter()
    client = redis.cluster.RedisCluster.from_url(
        redis_cluster.url, connection_pool_class=_CountingPool
    )
    forget(client)
    _CountingPool.releases.clear()
    try:
        with pytest.raises(AttributeError) as caught:
            client.get(key)
    finally:
        client.close()
    assert compat.driver_defect(caught.value)
    assert max(_CountingPool.releases.values()) == (
        2 if compat._version_tuple(redis.__version__) < (8, 2) else 1
    )
    assert not compat.driver_defect(AttributeError("elsewhere", obj=None))

    survivor = compat.ClusterClient.from_url(
        redis_cluster.url, connection_pool_class=compat.ClusterNodePool
    )
    forget(survivor)
    try:
        assert survivor.get(key) is None  # the target imports the slot: ASKING, GET
    finally:
        survivor.close()


# Cluster nodes addressed directly ---------------------------------------------------------


def test_async_node_send_keeps_a_batch_on_one_node_with_errors_in_place(redis_cluster):
    key = f"compat-{uuid.uuid4().hex}"

    async def send() -> tuple[list[Any], list[Any]]:
        client = redis.asyncio.cluster.RedisCluster.from_url(redis_cluster.url)
        await client.initialize()
        node = client.get_node_from_key(key)
        commands = [("SET", key, "1"), ("HGET", key, "x"), ("GET", key), ("DEL", key)]
        replies = await compat.async_node_send(node, commands)
        fresh = compat.new_async_node(client, node.host, node.port)
        assert fresh.name == node.name
        fresh_replies = await compat.async_node_send(fresh, [("EXISTS", key)])
        await fresh.disconnect()
        await client.aclose()
        return replies, fresh_replies

    replies, fresh_replies = asyncio.run(send())
    assert replies[0] in (True, b"OK")
    assert isinstance(replies[1], ResponseError) and "WRONGTYPE" in str(replies[1])
    assert replies[2] == b"1" and replies[3] == 1
    assert fresh_replies == [0]


def test_new_node_client_reaches_a_node_outside_the_map(redis_cluster):
    client = redis.cluster.RedisCluster.from_url(redis_cluster.url, socket_timeout=3)
    try:
        node = client.get_primaries()[0]
        direct = compat.new_node_client(client, node.host, node.port)
        try:
            assert direct.connection_pool.connection_kwargs["port"] == node.port
            assert direct.connection_pool.connection_kwargs["socket_timeout"] == 3
            assert direct.ping() is True
        finally:
            direct.close()
    finally:
        client.close()


def test_learn_moved_slot_points_the_slot_map_at_the_new_node(redis_cluster):
    client = redis.cluster.RedisCluster.from_url(redis_cluster.url)
    try:
        key = f"compat-{uuid.uuid4().hex}"
        slot = client.keyslot(key)
        owner = client.get_node_from_key(key)
        other = next(n for n in client.get_primaries() if n.name != owner.name)
        compat.learn_moved_slot(client, MovedError(f"{slot} {other.host}:{other.port}"))
        assert client.get_node_from_key(key).name == other.name
        client.nodes_manager.initialize()
        assert client.get_node_from_key(key).name == owner.name
    finally:
        client.close()


# Connections to a Sentinel service's primary ----------------------------------------------


def _sentinel_pool(connection_class: type, port: int) -> Any:
    manager = redis.sentinel.Sentinel([])
    return redis.sentinel.SentinelConnectionPool(
        "service", manager, connection_class=connection_class, port=port
    )


def test_redis_py_reconnects_a_sentinel_connection_without_asking_again(redis_server):
    """What SentinelPrimary works around: a dropped connection is connected again to the
    address it had, without ``_connect_retry`` (which asks the sentinels)."""
    asked: list[int] = []
    address = ("127.0.0.1", redis_server.port)

    class Plain(redis.sentinel.SentinelManagedConnection):
        def _connect_retry(self) -> None:
            if self._sock:
                return
            asked.append(1)
            self.connect_to(address)

    class Asking(compat.SentinelPrimary):
        def primary_address(self) -> tuple[Any, Any]:
            asked.append(2)
            return address

    for kind, expected in ((Plain, [1]), (Asking, [2, 2])):
        asked.clear()
        pool = _sentinel_pool(kind, redis_server.port)
        connection = pool.get_connection()
        connection.disconnect()
        connection.send_command("PING")
        assert connection.read_response() == b"PONG"
        assert asked == expected
        pool.disconnect()


def test_redis_py_reconnects_an_asyncio_sentinel_connection_without_asking_again(redis_server):
    asked: list[int] = []
    address = ("127.0.0.1", redis_server.port)

    class Plain(redis.asyncio.sentinel.SentinelManagedConnection):
        async def _connect_retry(self) -> None:
            if self._reader:
                return
            asked.append(1)
            await self.connect_to(address)

    class Asking(compat.AsyncSentinelPrimary):
        async def primary_address(self) -> tuple[Any, Any]:
            asked.append(2)
            return address

    async def run(kind: type) -> Any:
        manager = redis.asyncio.sentinel.Sentinel([])
        pool = redis.asyncio.sentinel.SentinelConnectionPool(
            "service", manager, connection_class=kind, port=redis_server.port
        )
        connection = await pool.get_connection()
        await connection.disconnect()
        await connection.send_command("PING")
        reply = await connection.read_response()
        await pool.disconnect()
        return reply

    for kind, expected in ((Plain, [1]), (Asking, [2, 2])):
        asked.clear()
        assert asyncio.run(run(kind)) == b"PONG"
        assert asked == expected


def test_the_package_reaches_into_redis_py_only_through_compat():
    """The private names of redis-py the workarounds use appear in compat alone."""
    import pathlib

    import sessionstore

    private = (
        "._sock",
        'get_extra_info("socket")',
        "PipelineCommand",
        "execute_pipeline",
        "_connect_retry",
        "_available_connections",
        "_in_use_connections",
        "create_redis_connections",
        "move_slot",
    )
    root = pathlib.Path(sessionstore.__file__).parent
    for path in root.rglob("*.py"):
        if path.name == "compat.py":
            continue
        text = path.read_text()
        found = [name for name in private if name in text]
        assert not found, f"{path.relative_to(root)} uses {found}"
