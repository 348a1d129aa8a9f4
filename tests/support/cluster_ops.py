"""Operator actions on a test cluster (:class:`ClusterNodes`), done the way an operator
does them: ``redis-cli --cluster add-node``, ``reshard``, ``rebalance
--cluster-use-empty-masters``, a graceful ``CLUSTER FAILOVER`` on a replica, a primary
SIGKILLed. Each returns once the cluster has settled (every slot served, every node
agreeing), so a test checks its data against a cluster at rest.
"""

from __future__ import annotations

import subprocess

import redis

from .redis_cluster import ClusterNodes, own_slots
from .redis_server import RedisServer


def _cli(cluster: ClusterNodes, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [cluster.cli, "--cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"redis-cli --cluster {args[0]} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def address(node: RedisServer) -> str:
    return f"127.0.0.1:{node.port}"


def node_id(node: RedisServer) -> str:
    client = redis.Redis(port=node.port, socket_timeout=2, decode_responses=True)
    try:
        return str(client.execute_command("CLUSTER", "MYID"))
    finally:
        client.close()


def _listed_by_all(cluster: ClusterNodes, text: str) -> bool:
    """Whether ``CLUSTER NODES`` of every running node mentions ``text``."""
    for each in cluster.running():
        client = redis.Redis(port=each.port, socket_timeout=2, decode_responses=True)
        try:
            if text not in client.execute_command("CLUSTER", "NODES"):
                return False
        finally:
            client.close()
    return True


def _known_by_all(cluster: ClusterNodes, node: RedisServer) -> bool:
    return _listed_by_all(cluster, node_id(node))


def add_node(cluster: ClusterNodes, replica_of: RedisServer | None = None) -> RedisServer:
    """Start a node and ``redis-cli --cluster add-node`` it: an empty primary, or a
    replica of ``replica_of``; waits until every node knows it."""
    node = cluster.new_server()
    cluster.start_on_a_free_port(node)
    cluster.nodes.append(node)
    existing = cluster.primaries()[0]
    extra = (
        []
        if replica_of is None
        else ["--cluster-slave", "--cluster-master-id", node_id(replica_of)]
    )
    _cli(cluster, "add-node", address(node), address(existing), *extra)
    cluster.wait(lambda: _known_by_all(cluster, node), "the new node known by all", 20)
    cluster.wait_ok()
    return node


def reshard(cluster: ClusterNodes, source: RedisServer, target: RedisServer, slots: int) -> None:
    """Move ``slots`` slots from ``source`` to ``target`` (``redis-cli --cluster reshard``),
    key by key, as under traffic."""
    _cli(
        cluster, "reshard", address(source),
        "--cluster-from", node_id(source), "--cluster-to", node_id(target),
        "--cluster-slots", str(slots), "--cluster-yes", "--cluster-pipeline", "10",
    )  # fmt: skip
    cluster.wait_ok()


def rebalance_onto_empty(cluster: ClusterNodes) -> None:
    """``redis-cli --cluster rebalance --cluster-use-empty-masters``: slots spread over
    every primary, new empty ones included."""
    _cli(
        cluster, "rebalance", address(cluster.primaries()[0]),
        "--cluster-use-empty-masters", "--cluster-pipeline", "10",
    )  # fmt: skip
    cluster.wait_ok()


def replica_of(cluster: ClusterNodes, primary: RedisServer) -> RedisServer:
    """A running replica of ``primary``."""
    for node in cluster.running():
        client = redis.Redis(port=node.port, socket_timeout=2)
        try:
            info = client.info("replication")
        finally:
            client.close()
        if info["role"] == "slave" and int(info["master_port"]) == primary.port:
            return node
    raise AssertionError(f"no running replica of 127.0.0.1:{primary.port}")


def graceful_failover(cluster: ClusterNodes, primary: RedisServer) -> RedisServer:
    """``CLUSTER FAILOVER`` on a replica of ``primary`` (no data loss: the replica
    catches up first); returns the new primary once the cluster agrees."""
    promoted = replica_of(cluster, primary)
    client = redis.Redis(port=promoted.port, socket_timeout=5)
    try:
        # A manual failover times out (5 s, nothing changed) when the primary does not
        # answer its replica's request in time (seen on a cluster just created): the
        # operator asks again.
        for attempt in range(4):
            client.execute_command("CLUSTER", "FAILOVER")
            try:
                cluster.wait(lambda: _serves(cluster, promoted), "the failover", 6)
                break
            except AssertionError:
                if attempt == 3:
                    raise
    finally:
        client.close()
    cluster.wait_ok()
    return promoted


def _serves(cluster: ClusterNodes, node: RedisServer) -> bool:
    return cluster.role(node) == "primary" and bool(own_slots(node))


def kill_primary(cluster: ClusterNodes, primary: RedisServer) -> RedisServer:
    """SIGKILL ``primary``; returns its replica once that one serves the slots."""
    promoted = replica_of(cluster, primary)
    cluster.kill(primary)
    cluster.wait(lambda: _serves(cluster, promoted), "the failover")
    return promoted


def _primary_clients(cluster: ClusterNodes) -> list[redis.Redis]:
    return [redis.Redis(port=n.port, socket_timeout=5) for n in cluster.primaries()]


def begin_migration(
    cluster: ClusterNodes, slot: int, source: RedisServer, target: RedisServer
) -> None:
    """Move every key of ``slot`` from ``source`` to ``target`` the way ``redis-cli
    --cluster reshard`` does (``SETSLOT IMPORTING/MIGRATING``, ``MIGRATE``), and stop
    there: ``source`` still owns the slot and answers ``ASK`` for the keys, as it does
    for a moment during every slot migration."""
    src, dst = redis.Redis(port=source.port), redis.Redis(port=target.port)
    try:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
        while names := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *names)
    finally:
        src.close()
        dst.close()


def finish_migration(cluster: ClusterNodes, slot: int, target: RedisServer) -> None:
    """``CLUSTER SETSLOT slot NODE target`` on every primary (target first)."""
    owner = node_id(target)
    clients = _primary_clients(cluster)
    clients.sort(key=lambda c: c.connection_pool.connection_kwargs["port"] != target.port)
    try:
        for client in clients:
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner)
    finally:
        for client in clients:
            client.close()
    cluster.wait_ok()


def require_full_coverage(cluster: ClusterNodes, required: bool) -> None:
    """``cluster-require-full-coverage`` on every running node: with ``no``, the other
    primaries keep serving their slots while one primary is down."""
    for node in cluster.running():
        client = redis.Redis(port=node.port, socket_timeout=2)
        try:
            client.config_set("cluster-require-full-coverage", "yes" if required else "no")
        finally:
            client.close()


def announce_port(cluster: ClusterNodes, node: RedisServer, port: int) -> None:
    """Make ``node`` announce ``port`` to clients (``cluster-announce-port``; its cluster
    bus stays on its own port + 10000), as a node behind a port forward does; returns
    once every running node lists it at that port (so ``CLUSTER SLOTS`` and ``MOVED``
    name it)."""
    client = redis.Redis(port=node.port, socket_timeout=2)
    try:
        client.config_set("cluster-announce-bus-port", str(node.port + 10000))
        client.config_set("cluster-announce-port", str(port))
    finally:
        client.close()
    wanted = f"127.0.0.1:{port}@{node.port + 10000}"
    cluster.wait(
        lambda: _listed_by_all(cluster, wanted),
        f"127.0.0.1:{node.port} announced at port {port}",
        20,
    )
