"""docker-compose.yml: a durable Redis by default, a 3+3 Redis Cluster and a Redis
Sentinel setup (a primary, two replicas, three sentinels) under profiles."""

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


SENTINEL_DATA = {n: s for n, s in SERVICES.items() if n.startswith("sentinel-") and "replica" in n}
SENTINEL_DATA["sentinel-primary"] = SERVICES["sentinel-primary"]
SENTINELS = {n: s for n, s in SERVICES.items() if n.startswith("sentinel-") and n[-1].isdigit()}
SENTINELS = {n: s for n, s in SENTINELS.items() if n not in SENTINEL_DATA}


def test_the_sentinel_profile_has_a_durable_primary_and_two_replicas_of_it():
    assert len(SENTINEL_DATA) == 3
    primary_port = flags(SERVICES["sentinel-primary"]["command"])["--port"]
    for name, service in SENTINEL_DATA.items():
        assert service["profiles"] == ["sentinel"]
        command = service["command"]
        options = flags(command)
        assert options["--appendonly"] == "yes" and options["--appendfsync"] == "always"
        if name != "sentinel-primary":
            at = command.index("--replicaof")
            assert command[at + 1 : at + 3] == ["127.0.0.1", primary_port]


def test_the_sentinel_profile_has_three_sentinels_watching_the_primary_with_a_quorum_of_two():
    assert len(SENTINELS) == 3
    primary_port = flags(SERVICES["sentinel-primary"]["command"])["--port"]
    ports = set()
    for service in SENTINELS.values():
        assert service["profiles"] == ["sentinel"]
        script = service["command"][-1]
        assert f"sentinel monitor svc 127.0.0.1 {primary_port} 2" in script
        assert script.endswith("--sentinel")
        ports.add(script.split("port ")[1].split("\\n")[0].split("\n")[0])
    assert len(ports) == 3
