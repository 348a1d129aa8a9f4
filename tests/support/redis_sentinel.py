"""A real Redis Sentinel setup for the tests: one primary, two replicas and three
sentinels, each a ``redis-server`` on a free port in its own temp dir (AOF on for the
data nodes). The sentinels watch the primary as service :data:`SERVICE` with a quorum of
2 and fail over after :data:`DOWN_AFTER_MS` of silence."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import redis

from support.redis_server import RedisServer, free_port

SERVICE = "svc"
#: Every data node starts a full sync at once (Redis 7 waits 5 s for more replicas).
SYNC_AT_ONCE = ("--repl-diskless-sync-delay", "0")
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000


class SentinelServer(RedisServer):
    """One ``redis-server sentinel.conf --sentinel`` (its config file is rewritten by it)."""

    def __init__(self, primary_port: int) -> None:
        super().__init__(durable=False)
        self.primary_port = primary_port

    def args(self) -> list[str]:
        conf = self.dir / "sentinel.conf"
        if not conf.exists():
            conf.write_text(
                f"port {self.port}\n"
                "bind 127.0.0.1\n"
                f"dir {self.dir}\n"
                f"logfile {self.dir / 'sentinel.log'}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {SERVICE} 2\n"
            )
        return [self.binary, str(conf), "--sentinel"]


class SentinelSetup:
    """The data nodes and the sentinels; :attr:`url` is the ``redis+sentinel://`` URL."""

    def __init__(self) -> None:
        self.primary = RedisServer(*SYNC_AT_ONCE, port=free_port())
        self.replicas = [
            RedisServer(*SYNC_AT_ONCE, "--replicaof", "127.0.0.1", str(self.primary.port))
            for _ in range(2)
        ]
        self.sentinels = [SentinelServer(self.primary.port) for _ in range(3)]

    @property
    def data_nodes(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def current_primary(self) -> tuple[str, int] | None:
        """The primary the sentinels report, asked of the first that answers."""
        for sentinel in self.sentinels:
            client = redis.Redis(port=sentinel.port, socket_timeout=1)
            try:
                host, port = client.sentinel_get_master_addr_by_name(SERVICE)
                return (host.decode() if isinstance(host, bytes) else str(host)), int(port)
            except (redis.RedisError, TypeError):
                continue
            finally:
                client.close()
        return None

    def node_at(self, port: int) -> RedisServer:
        [node] = [n for n in self.data_nodes if n.port == port]
        return node

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:g} s")
            time.sleep(0.05)

    def replicas_online(self, port: int) -> int:
        """Replicas of the node at ``port`` past their first sync."""
        client = redis.Redis(port=port, socket_timeout=1)
        try:
            info = client.info("replication")
            count = int(info.get("connected_slaves", 0))
            return sum(info.get(f"slave{n}", {}).get("state") == "online" for n in range(count))
        except redis.RedisError:
            return 0
        finally:
            client.close()

    def __enter__(self) -> SentinelSetup:
        try:
            self.primary.start()
            for replica in self.replicas:
                replica.start()
            self.wait(
                lambda: self.replicas_online(self.primary.port) == 2,
                "replicas attached and in sync",
            )
            for sentinel in self.sentinels:
                sentinel.start()
            self.wait(self._sentinels_agree, "sentinels see each other and both replicas")
        except BaseException:
            self.cleanup()
            raise
        return self

    def _sentinels_agree(self) -> bool:
        for sentinel in self.sentinels:
            client = redis.Redis(port=sentinel.port, socket_timeout=1)
            try:
                state = client.sentinel_master(SERVICE)
                if int(state["num-other-sentinels"]) != 2 or int(state["num-slaves"]) != 2:
                    return False
            except redis.RedisError:
                return False
            finally:
                client.close()
        return True

    def cleanup(self) -> None:
        for server in [*self.sentinels, *self.data_nodes]:
            server.cleanup()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def logs(self) -> dict[str, str]:
        """Each server's log, for a failure message."""
        found = {}
        for server in [*self.sentinels, *self.data_nodes]:
            for log in Path(server.dir).glob("*.log"):
                found[f"{server.port}/{log.name}"] = log.read_text()[-2000:]
        return found
