"""docker-compose.yml: a durable Redis by default, a 3+3 Redis Cluster under a profile."""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = yaml.safe_load(
    (Path(__file__).resolve().parent.parent / "docker-compose.yml").read_text()
)
SERVICES = COMPOSE["services"]
CLUSTER = {name: s for name, s in SERVICES.items() if name.startswith("redis-node-")}


def flags(command: list[str]) -> dict[str, str]:
    return {
        command[i]: command[i + 1]
        for i in range(1, len(command) - 1)
        if command[i].startswith("--")
    }


def test_the_default_redis_fsyncs_every_write_and_keeps_its_data():
    redis = SERVICES["redis"]
    assert "profiles" not in redis
    assert redis["image"].startswith("redis:7")
    options = flags(redis["command"])
    assert options["--appendonly"] == "yes" and options["--appendfsync"] == "always"
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert "6379:6379" in redis["ports"]


def test_the_cluster_profile_has_six_durable_cluster_nodes_on_distinct_ports():
    assert len(CLUSTER) == 6
    ports = set()
    for service in CLUSTER.values():
        assert service["profiles"] == ["cluster"]
        options = flags(service["command"])
        assert options["--cluster-enabled"] == "yes"
        assert options["--appendonly"] == "yes" and options["--appendfsync"] == "always"
        ports.add(options["--port"])
    assert len(ports) == 6


def test_the_cluster_init_creates_three_primaries_with_a_replica_each():
    init = SERVICES["cluster-init"]
    assert init["profiles"] == ["cluster"]
    script = " ".join(init["command"])
    ports = {flags(s["command"])["--port"] for s in CLUSTER.values()}
    assert all(f"127.0.0.1:{port}" in script for port in ports)
    assert "--cluster-replicas 1" in script and "--cluster-yes" in script
    assert set(init["depends_on"]) == set(CLUSTER)


def test_every_named_volume_is_declared():
    used = {v.split(":")[0] for s in SERVICES.values() for v in s.get("volumes", [])}
    assert used <= set(COMPOSE["volumes"])
