"""What the benchmarks run against: a throwaway ``redis-server`` and a proxy that holds
back every byte of the connections that subscribe.

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
from contextlib import suppress

import redis


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A ``redis-server`` without persistence (a benchmark measures the library, not the
    disk) on a free port, in a directory of its own removed on exit."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not on PATH (apt-get install redis-server)")
        self.binary = binary
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="sessionstore-bench-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        options = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
        persistence = ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            [self.binary, *options, *persistence], stdout=subprocess.DEVNULL
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
