"""What the benchmarks run against: a throwaway ``redis-server``, a throwaway Redis
Cluster of such servers, and a proxy that holds back every byte of the connections that
subscribe.

Both are the benchmarks' own (the test suite has its fault-injecting doubles in
``tests/support``, which the benchmarks do not import).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar

import redis

T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A ``redis-server`` without persistence (a benchmark measures the library, not the
    disk) on a free port, in a directory of its own removed on exit; ``options`` are added
    to its command line."""

    def __init__(self, *options: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not on PATH (apt-get install redis-server)")
        self.binary = binary
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="sessionstore-bench-")
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        options = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
        persistence = ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            [self.binary, *options, *persistence, *self.options], stdout=subprocess.DEVNULL
        )
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise SystemExit(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.02)
        client.close()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """A Redis Cluster of ``primaries`` :class:`RedisServer` nodes (no replicas), each
    serving an even share of the 16384 slots (``CLUSTER ADDSLOTSRANGE``), joined by
    ``CLUSTER MEET`` and ready once every node reports ``cluster_state:ok``; every node
    is stopped and its directory removed on exit."""

    SLOTS = 16384

    def __init__(self, primaries: int) -> None:
        self.bus_ports = [_free_port() for _ in range(primaries)]
        # The config file is relative to the node's --dir, its own temp dir.
        self.nodes = [
            RedisServer(
                *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                *("--cluster-port", str(bus_port)),
            )
            for bus_port in self.bus_ports
        ]

    @property
    def url(self) -> str:
        """A plain URL of one node: the library finds the whole cluster from it."""
        return self.nodes[0].url

    def slot_ranges(self) -> list[tuple[int, int]]:
        """The first and last slot each node serves, in node order."""
        count = len(self.nodes)
        return [
            (index * self.SLOTS // count, (index + 1) * self.SLOTS // count - 1)
            for index in range(count)
        ]

    def __enter__(self) -> RedisCluster:
        try:
            for node in self.nodes:
                node.__enter__()
            for node, (first, last) in zip(self.nodes, self.slot_ranges(), strict=True):
                self._ask(node, "CLUSTER", "ADDSLOTSRANGE", first, last)
                self._ask(
                    node, "CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port, self.bus_ports[0]
                )
            self._wait_ok()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for node in self.nodes:
            node.__exit__()

    def on_each(self, call: Callable[[redis.Redis], T]) -> list[T]:
        """What ``call`` returns for a client of each node, in node order."""
        return [_on(node, call) for node in self.nodes]

    def _wait_ok(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not all(
            b"cluster_state:ok" in info
            for info in self.on_each(lambda client: client.execute_command("CLUSTER", "INFO"))
        ):
            if time.monotonic() > deadline:
                raise SystemExit(f"a {len(self.nodes)}-node cluster did not reach cluster_state:ok")
            time.sleep(0.05)

    @staticmethod
    def _ask(node: RedisServer, *command: str | int) -> None:
        _on(node, lambda client: client.execute_command(*command))


def _on(node: RedisServer, call: Callable[[redis.Redis], T]) -> T:
    client = redis.Redis(port=node.port, socket_timeout=2)
    try:
        return call(client)
    finally:
        client.close()


class SubscriberStall:
    """A TCP proxy to ``port`` that forwards every connection until its client sends a
    ``SUBSCRIBE``; from then on nothing more passes, either way (a partition of the
    invalidation channel alone)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sockets: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"

    def __enter__(self) -> SubscriberStall:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in [self.listener, *self.sockets]:
            with suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        with suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                server = socket.create_connection(("127.0.0.1", self.port))
                self.sockets += [client, server]
                stalled = threading.Event()
                threading.Thread(
                    target=self._pump, args=(client, server, stalled), daemon=True
                ).start()
                threading.Thread(
                    target=self._pump, args=(server, client, stalled), daemon=True
                ).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, stalled: threading.Event) -> None:
        with suppress(OSError):
            while chunk := source.recv(65536):
                if b"SUBSCRIBE" in chunk.upper():
                    stalled.set()
                if not stalled.is_set():
                    target.sendall(chunk)
