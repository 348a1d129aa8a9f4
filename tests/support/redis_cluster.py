"""A real Redis Cluster for the tests: 3 primaries and 3 replicas, each a ``redis-server``
on a free port in its own temp dir, joined by ``redis-cli --cluster create``.

Every node runs ``appendonly yes`` with ``appendfsync always`` and
``cluster-node-timeout`` 2000 ms, so a killed primary is failed over to its replica by
the cluster itself within a few seconds. When ``redis-server`` or ``redis-cli`` is
missing the cluster tests are skipped with a loud reason, except under ``CI``, where
that is a failure (as for :class:`RedisServer`).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable

import pytest
import redis
from redis.cluster import key_slot

from .redis_server import RedisServer

CLI = shutil.which("redis-cli")
NODE_TIMEOUT_MS = 2000
SLOTS = 16384


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too, both below the
    usual ephemeral range (32768 and up), so outgoing connections cannot take them."""
    for _ in range(200):
        port = random.randrange(10000, 22700)
        try:
            with socket.socket() as first, socket.socket() as bus:
                first.bind(("127.0.0.1", port))
                bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def require_cli() -> str:
    if CLI:
        return CLI
    reason = (
        "redis-cli is not on PATH: the Redis Cluster tests cannot run (apt-get install redis-tools)"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _ask(node: RedisServer, *command: str) -> str:
    client = redis.Redis(port=node.port, socket_timeout=2, socket_connect_timeout=2)
    try:
        reply = client.execute_command(*command)
        return reply.decode() if isinstance(reply, bytes) else str(reply)
    finally:
        client.close()


def _replication(node: RedisServer) -> dict[str, object]:
    client = redis.Redis(port=node.port, socket_timeout=2, socket_connect_timeout=2)
    try:
        return client.info("replication")
    finally:
        client.close()


def _info(node: RedisServer) -> dict[str, str]:
    pairs = (line.partition(":") for line in _ask(node, "CLUSTER", "INFO").splitlines())
    return {name: value.strip() for name, _, value in pairs if name}


class ClusterNodes:
    """The nodes of one cluster (3 primaries with a replica each, by default);
    :meth:`start` creates the cluster and waits until it serves."""

    def __init__(self, primaries: int = 3, replicas: int = 1) -> None:
        self.cli = require_cli()
        self.nodes = [self.new_server() for _ in range(primaries * (1 + replicas))]
        self.replicas = replicas

    @staticmethod
    def new_server() -> RedisServer:
        """A cluster-enabled ``redis-server`` on a free port, not started."""
        return RedisServer(
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            # a replica's first sync starts at once, not after the default 5 s
            "--repl-diskless-sync-delay", "0",
            port=cluster_port(),
        )  # fmt: skip

    # --- life cycle ---

    def start(self, node: RedisServer | None = None) -> ClusterNodes:
        """Create the cluster; or, given a killed ``node``, start it again on its port
        and data dir: it rejoins from its ``nodes.conf`` (a primary that was failed over
        comes back as a replica of its successor)."""
        if node is not None:
            node.start()
            return self
        try:
            for each in self.nodes:
                self.start_on_a_free_port(each)
            created = subprocess.run(
                [
                    self.cli, "--cluster", "create",
                    *(f"127.0.0.1:{each.port}" for each in self.nodes),
                    "--cluster-replicas", str(self.replicas), "--cluster-yes",
                ],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}")
            self.wait_ok()
        except BaseException:
            self.cleanup()
            raise
        return self

    @staticmethod
    def start_on_a_free_port(node: RedisServer) -> None:
        # Another process may take a port between the check and the bind.
        for attempt in range(3):
            try:
                node.start()
                return
            except RuntimeError:
                if attempt == 2:
                    raise
                node.port = cluster_port()

    def cleanup(self) -> None:
        """SIGKILL every node (a graceful shutdown may wait for replicas) and remove
        their data dirs."""
        for node in self.nodes:
            node.kill()
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> ClusterNodes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # --- addresses ---

    @property
    def url(self) -> str:
        """The URL of one node that was a primary when the cluster was created."""
        return self.nodes[0].url

    def running(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def role(self, node: RedisServer) -> str:
        """``"primary"`` or ``"replica"``, as ``node`` itself sees it."""
        return "primary" if _replication(node)["role"] == "master" else "replica"

    def primaries(self) -> list[RedisServer]:
        return [n for n in self.running() if self.role(n) == "primary"]

    def serving(self, key: str) -> RedisServer | None:
        """The running primary that serves ``key``'s slot by its own account, if any."""
        slot = key_slot(key.encode())
        for node in self.primaries():
            if any(start <= slot <= end for start, end in own_slots(node)):
                return node
        return None

    def owner(self, key: str) -> RedisServer:
        """:meth:`serving`, which must find one."""
        node = self.serving(key)
        if node is None:
            raise AssertionError(f"no running primary serves slot {key_slot(key.encode())}")
        return node

    # --- faults ---

    def kill(self, node: RedisServer) -> None:
        """SIGKILL ``node``: no shutdown, like a crash."""
        node.kill()

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster did not get {what} within {timeout:g} s")
            time.sleep(0.05)

    def wait_ok(self, timeout: float = 30) -> None:
        """Until every running node reports ``cluster_state:ok`` with every slot served
        and every running replica is in sync with its primary."""

        def healthy() -> bool:
            for node in self.running():
                info = _info(node)
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS):
                    return False
                replication = _replication(node)
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
            return True

        self.wait(healthy, "cluster_state:ok on every node", timeout)


def own_slots(node: RedisServer) -> list[tuple[int, int]]:
    """The slot ranges ``node`` serves, from the ``myself`` line of ``CLUSTER NODES``."""
    for line in _ask(node, "CLUSTER", "NODES").splitlines():
        fields = line.split()
        if "myself" in fields[2]:
            ranges = [f.partition("-") for f in fields[8:] if not f.startswith("[")]
            return [(int(a), int(b or a)) for a, _, b in ranges]
    return []
