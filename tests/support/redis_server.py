"""Real ``redis-server`` processes for the tests: each on a free port in a data dir of its
own (on a RAM disk when there is one, see :mod:`support.ramdisk`).

Tests never touch a Redis they did not start. When no ``redis-server`` binary is on PATH
the Redis tests are skipped with a loud reason, except under ``CI``, where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from .ramdisk import ram_root

BINARY = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_binary() -> str:
    if BINARY:
        return BINARY
    reason = (
        "redis-server is not on PATH: the Redis tests cannot run (apt-get install redis-server)"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def docker_works() -> bool:
    """True when a Docker engine answers (testcontainers can start a Redis)."""
    try:
        import docker

        return bool(docker.from_env().ping())
    except Exception:  # noqa: BLE001 - any failure means: no usable engine
        return False


class ContainerRedis:
    """A ``redis:7`` container with AOF ``appendfsync always`` (testcontainers), used for
    the shared server when there is no ``redis-server`` binary but Docker works. Tests
    that kill or restart their own server still need the binary."""

    def __init__(self) -> None:
        from testcontainers.core.container import DockerContainer

        self.container = (
            DockerContainer("redis:7")
            .with_command("redis-server --appendonly yes --appendfsync always --save ''")
            .with_exposed_ports(6379)
        )
        self.host = "127.0.0.1"
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def __enter__(self) -> ContainerRedis:
        self.container.start()
        self.host = self.container.get_container_host_ip()
        self.port = int(self.container.get_exposed_port(6379))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the redis:7 container did not answer in 30 s")

    def __exit__(self, *exc: object) -> None:
        self.container.stop()


def shared_server() -> RedisServer | ContainerRedis:
    """The test session's Redis: a local ``redis-server``, else a container when Docker
    works; else a loud skip (a failure under ``CI``)."""
    if BINARY or not docker_works():
        return RedisServer()
    return ContainerRedis()


class RedisServer:
    """One ``redis-server`` with AOF ``appendfsync always`` unless told otherwise."""

    def __init__(
        self,
        *extra: str,
        port: int | None = None,
        data_dir: Path | None = None,
        durable: bool = True,
    ) -> None:
        self.binary = require_binary()
        self.port = port or free_port()
        self._own_dir = data_dir is None
        self.dir = data_dir or Path(tempfile.mkdtemp(prefix="sessionstore-redis-", dir=ram_root()))
        self.extra = list(extra)
        self.durable = durable
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.durable
            else ["--appendonly", "no"]
        )
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            *persistence,
            "--logfile",
            str(self.dir / "redis.log"),
            *self.extra,
        ]

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self.process.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer in 10 s")

    def kill(self) -> None:
        """SIGKILL: no shutdown save, like a crash."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self._close_pipe()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_pipe()

    def _close_pipe(self) -> None:
        """The stderr pipe of a server that ended (left open, it is a ResourceWarning
        whenever it is collected, in whichever test that happens)."""
        if self.process and self.process.poll() is not None and self.process.stderr:
            self.process.stderr.close()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
