"""``sessionstore acl --apply``: the least-privilege user made on every node of a
deployment by an admin's URL, and what it may do there: run ``doctor``, read and write
its namespace through any node, select the database its URL names, and nothing of
another namespace."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
import redis
from support.redis_cluster import ClusterNodes

import sessionstore
from sessionstore import AccessDeniedError, SessionEvent, SessionHeader

T0 = 1_718_000_000_000


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionstore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def exercise(url: str, namespace: str) -> None:
    with sessionstore.connect(url, namespace) as store:
        session = store.session("A", "s", "e", "1h")
        session.set_data(1, T0)
        assert session.update(lambda v: v + 1, T0) == 2
        store.events.create(SessionHeader(id="s-1"))
        store.events.append("s-1", [SessionEvent(seq=0, type="t", time=T0)])
        assert len(store.events.load("s-1").events) == 1
        assert [i.header.id for i in store.events.list_info()] == ["s-1"]
        assert store.events.stored_bytes("s-1") > 0


def test_apply_makes_the_user_on_every_node_of_a_cluster(redis_cluster: ClusterNodes) -> None:
    namespace, user = f"t-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    admin_url = redis_cluster.url
    made = cli("acl", user, "--password", "pw", "-n", namespace, "--url", admin_url, "--apply",
               "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    applied = json.loads(made.stdout)["applied"]
    assert sorted(applied) == sorted(f"127.0.0.1:{n.port}" for n in redis_cluster.nodes)
    for node in redis_cluster.nodes:
        assert redis.Redis(port=node.port).acl_getuser(user) is not None
    sessionstore.connect(admin_url, namespace).close()
    doctor_fix = cli("doctor", "--fix", "--url", admin_url, "-n", namespace)
    assert doctor_fix.returncode == 0, doctor_fix.stdout + doctor_fix.stderr
    # Reached through a replica, as a client that knows only it would.
    replica = next(n for n in redis_cluster.nodes if redis_cluster.role(n) == "replica")
    url = f"redis://{user}:pw@127.0.0.1:{replica.port}/0?durability=none"
    exercise(url, namespace)
    doctor = cli("doctor", "--url", url, "-n", namespace)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "no primary answered CLUSTER NODES" not in doctor.stdout
    with sessionstore.connect(url, f"{namespace}-other") as other, pytest.raises(AccessDeniedError):
        other.session("A", "s", "e", "1h").get_data(T0)


def test_the_printed_line_goes_to_the_url_and_grants_its_database(redis_server) -> None:
    namespace, user = f"t-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    url = f"redis://127.0.0.1:{redis_server.port}/3"
    printed = cli("acl", user, "--password", "pw", "-n", namespace, "--url", url)
    assert printed.returncode == 0, printed.stderr
    line = printed.stdout.strip()
    assert line.startswith(f"redis-cli -h 127.0.0.1 -p {redis_server.port} ACL SETUSER")
    assert "'+select|3'" in line and "every node" in printed.stderr
    made = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30)
    assert made.returncode == 0 and made.stdout.strip() == "OK", made.stderr
    admin = redis.Redis(port=redis_server.port)
    from sessionstore.redis.library import install

    install(admin)
    exercise(f"redis://{user}:pw@127.0.0.1:{redis_server.port}/3?durability=none", namespace)
    assert redis.Redis(port=redis_server.port, db=3).exists(
        *[k for k in redis.Redis(port=redis_server.port, db=3).keys(f"ss:{namespace}:*")]
    )
    with (
        pytest.raises(AccessDeniedError),
        sessionstore.connect(
            f"redis://{user}:pw@127.0.0.1:{redis_server.port}/4?durability=none", namespace
        ) as store,
    ):
        store.session("A", "s", "e", "1h").get_data(T0)
    admin.acl_deluser(user)
    admin.close()


def test_apply_needs_a_url_and_refuses_a_store_that_is_not_redis(tmp_path) -> None:
    assert cli("acl", "u", "--apply").returncode == 2
    refused = cli("acl", "u", "--url", tmp_path.as_uri(), "--apply")
    assert refused.returncode == 2 and "Redis URL" in refused.stderr


def test_apply_makes_the_user_on_the_primary_and_replicas_of_a_sentinel_service() -> None:
    from support.redis_sentinel import SentinelSetup

    namespace, user = f"t-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    with SentinelSetup() as setup:
        made = cli("acl", user, "--password", "pw", "-n", namespace, "--url", setup.url,
                   "--apply", "--json")  # fmt: skip
        assert made.returncode == 0, made.stderr
        applied = json.loads(made.stdout)["applied"]
        assert sorted(applied) == sorted(f"127.0.0.1:{n.port}" for n in setup.data_nodes)
        for node in setup.data_nodes:
            assert redis.Redis(port=node.port).acl_getuser(user) is not None
