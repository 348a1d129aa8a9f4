"""``sessionstore doctor`` reads URLs and judges durability with the library's own code,
checks every primary of a cluster, answers any URL with lines (never a traceback), and
leaves a file store as it found it."""

from __future__ import annotations

import errno
import json
import os
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionEvent, SessionHeader
from sessionstore.backoff import Backoff
from sessionstore.cli import app
from sessionstore.redis import retry

T = 1_718_000_000_000


def doctor(*args: str) -> Any:
    result = CliRunner().invoke(app, ["doctor", *args], env={"COLUMNS": "400"})
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    assert "Traceback" not in result.stdout + result.stderr
    return result


def tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


@contextmanager
def inside(folder: str):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@contextmanager
def default_port_closed():
    """Connections to port 6379, where a URL without a host or port leads, are refused as
    on a machine with no Redis of its own: the test reaches no server it did not start,
    and a TLS URL does not wait out its handshake with a plain server found there."""
    connect = socket.socket.connect

    def refuse(sock: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and len(address) >= 2 and address[1] == 6379:
            raise ConnectionRefusedError(errno.ECONNREFUSED, os.strerror(errno.ECONNREFUSED))
        connect(sock, address)

    socket.socket.connect = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect = connect  # type: ignore[method-assign]


@contextmanager
def retried_at_once():
    """A call that met a refused connection is sent again as many times as ever, with no
    back-off before each retry: the same calls, outcomes and lines, without the waits."""
    backoff = retry.BACKOFF
    retry.BACKOFF = Backoff(base=0.0, cap=0.0)
    try:
        yield
    finally:
        retry.BACKOFF = backoff


def test_on_a_new_file_store_doctor_leaves_nothing_behind(tmp_path):
    url = (tmp_path / "not" / "yet" / "store").as_uri()
    result = doctor("--url", url, "-n", "ns")
    assert result.exit_code == 0, result.stdout
    assert "OK   read/write" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_on_a_file_store_in_use_doctor_leaves_the_tree_as_it_was(tmp_path):
    root = tmp_path / "store"
    with sessionstore.connect(root.as_uri(), "ns") as store:
        store.events.create(SessionHeader(id="s", created_at=1))
        store.events.append("s", [SessionEvent(seq=0, type="note", time=T, data={})])
        store.session("BTC", "s", "x", "1h").set_data(1, T)
    before = tree(tmp_path)
    for namespace in ("ns", "other"):
        assert doctor("--url", root.as_uri(), "-n", namespace).exit_code == 0
    assert tree(tmp_path) == before


def test_doctor_reads_the_url_as_the_library_does():
    typo = doctor("--url", "redis://127.0.0.1:1/0?durabilty=none", "--json")
    assert typo.exit_code == 1
    (check,) = json.loads(typo.stdout)["checks"]
    assert check["name"] == "url" and "durabilty" in check["detail"]
    with pytest_raises_invalid() as library:
        sessionstore.connect("redis://127.0.0.1:1/0?durabilty=none")
    assert check["detail"] == str(library.value)


@contextmanager
def pytest_raises_invalid():
    import pytest

    with pytest.raises(sessionstore.InvalidArgumentError) as caught:
        yield caught


def test_doctor_checks_every_primary_of_a_cluster(redis_cluster):
    url = redis_cluster.url
    ok = doctor("--url", url, "--json")
    checks = {c["name"]: c for c in json.loads(ok.stdout)["checks"]}
    primaries = redis_cluster.primaries()
    assert checks["server"]["detail"].startswith(f"cluster of {len(primaries)} primaries")
    assert checks["persistence"]["status"] == "OK", checks
    lax = primaries[-1]
    client = redis.Redis(port=lax.port)
    try:
        client.config_set("appendfsync", "everysec")
        failed = doctor("--url", url, "--json")
        assert failed.exit_code == 1
        detail = {c["name"]: c for c in json.loads(failed.stdout)["checks"]}["persistence"]
        assert detail["status"] == "FAIL" and f":{lax.port}" in detail["detail"]
        assert "appendfsync everysec" in detail["detail"]
    finally:
        client.config_set("appendfsync", "always")
        client.close()


def test_doctor_names_the_primary_without_the_functions_library_and_fix_installs_it(
    redis_cluster,
):
    from sessionstore.redis.library import install, library

    primaries = redis_cluster.primaries()
    for node in primaries:
        install(redis.Redis(port=node.port))
    bare = redis.Redis(port=primaries[0].port)
    try:
        bare.function_delete(library().name)
        warned = doctor("--url", redis_cluster.url, "--json")
        check = {c["name"]: c for c in json.loads(warned.stdout)["checks"]}["functions"]
        assert check["status"] == "WARN" and f":{primaries[0].port}" in check["detail"]
        assert f":{primaries[1].port}" not in check["detail"]
        assert "sessionstore doctor --fix --url <admin url>" in check["detail"]
        if bare.function_list(library().name):  # the round trip's first call loaded it
            bare.function_delete(library().name)
        fixed = doctor("--url", redis_cluster.url, "--json", "--fix")
        check = {c["name"]: c for c in json.loads(fixed.stdout)["checks"]}["functions"]
        assert check["status"] == "OK", check
        assert check["detail"].endswith(f"(loaded now on 127.0.0.1:{primaries[0].port})")
        assert bare.fcall_ro(library().version_function, 0) == library().version.encode()
    finally:
        bare.close()


def test_doctor_lists_every_node_of_a_cluster_also_a_primary_without_slots():
    from support import cluster_ops
    from support.redis_cluster import ClusterNodes

    with ClusterNodes(primaries=3, replicas=1) as cluster:
        empty = cluster_ops.add_node(cluster)
        ok = doctor("--url", cluster.url, "--json")
        nodes = {c["name"]: c for c in json.loads(ok.stdout)["checks"]}["nodes"]
        assert nodes["status"] == "OK", nodes
        detail = nodes["detail"]
        assert detail.startswith("7 nodes, 4 primaries and 3 replicas: ")
        assert f"primary 127.0.0.1:{empty.port} (no slots)" in detail
        for node in cluster.nodes:
            role = "primary" if cluster.role(node) == "primary" else "replica"
            assert f"{role} 127.0.0.1:{node.port} " in detail + " ", (node.port, detail)
        assert detail.count(" of 127.0.0.1:") == 3


SCHEMES = ["redis", "rediss", "unix", "memory", "dummy", "file", "sqlite", "mongodb", "", "REDIS"]
HOSTS = ["127.0.0.1:1", "localhost:1", "[::1]:1", "u:p@127.0.0.1:1", ":s3cret@127.0.0.1:1", ""]
PARAMS = [
    "durability=none",
    "durability=bogus",
    "durability=replicas:0",
    "cluster=yes",
    "cluster=maybe",
    "max_connections=0",
    "timeout=x",
    "ssl_cert_reqs=none",
    "db=x",
    "durabilty=none",
]
junk = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)


@st.composite
def urls(draw: Any) -> str:
    scheme = draw(st.sampled_from(SCHEMES))
    host = draw(st.one_of(st.sampled_from(HOSTS), junk.map(lambda text: text.replace(".", ""))))
    path = draw(st.one_of(st.sampled_from(["/0", "/15", "/x", "", "/"]), junk))
    query = "&".join(draw(st.lists(st.one_of(st.sampled_from(PARAMS), junk), max_size=3)))
    head = f"{scheme}://" if draw(st.booleans()) or scheme else ""
    return f"{head}{host}{path}" + (f"?{query}" if query else "") + draw(junk)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(url=urls())
def test_any_url_gets_lines_and_an_exit_code_never_a_traceback(url):
    with (
        tempfile.TemporaryDirectory() as folder,
        inside(folder),
        default_port_closed(),
        retried_at_once(),
    ):
        result = doctor("--url", url)
        assert result.exit_code in (0, 1, 2), (url, result.stdout, result.stderr)
        assert len(result.stderr.splitlines()) <= 2, result.stderr
        if "://:s3cret@" in url:  # a password in a URL (a plain path has none)
            assert "s3cret" not in result.stdout + result.stderr
        assert not [p for p in Path(folder).rglob("*") if p.is_dir() and "doctor-" in p.name]


def lines_of(result: Any) -> dict[str, str]:
    """``{check name: "STATUS detail"}`` of doctor's text output (one line per check)."""
    found = {}
    for line in result.stdout.splitlines()[1:]:
        status, rest = line.split(maxsplit=1)
        name, detail = rest.split(": ", 1)
        assert name not in found, result.stdout
        found[name] = f"{status} {detail}"
    return found


def test_a_server_that_cannot_be_reached_is_said_once_as_what_it_is():
    from support.redis_server import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    with retried_at_once():
        result = doctor("--url", url)
    assert result.exit_code == 1
    checks = lines_of(result)
    assert list(checks) == ["server"], result.stdout
    assert checks["server"].startswith(f"FAIL cannot reach {url}: ")
    assert "Connection refused" in checks["server"]
    assert "may or may not" not in result.stdout


def test_the_round_trip_names_functions_only_on_redis(tmp_path, redis_server, namespace):
    on_files = lines_of(doctor("--url", (tmp_path / "store").as_uri(), "-n", "ns"))
    assert on_files["read/write"].startswith(
        "OK values, history, update and the event log work in namespace 'ns' ("
    )
    assert "script" not in on_files["read/write"] and "function" not in on_files["read/write"]
    on_redis = lines_of(doctor("--url", redis_server.url, "-n", namespace))
    assert "work in namespace" in on_redis["read/write"]
    assert ", through the library's Redis functions (" in on_redis["read/write"]


def test_the_least_privilege_user_is_told_the_exact_commands_it_may_not_run(acl_url, namespace):
    result = doctor("--url", acl_url, "-n", namespace)
    assert result.exit_code == 0, result.stdout
    checks = lines_of(result)
    assert checks["server"] == (
        "OK standalone; the Redis version is not shown: this user may not run `INFO server` "
        "(the library needs only `INFO persistence` and `INFO cluster`)"
    )
    assert "INFO is not permitted" not in result.stdout
    assert checks["persistence"].startswith("WARN appendonly yes on the server (durability=aof)")
    assert "this user may not run `CONFIG GET appendfsync`" in checks["persistence"]
    assert checks["index"].startswith("WARN this user may not SCAN")
    assert checks["read/write"].startswith("OK ")


def test_fix_as_the_least_privilege_user_reports_a_current_library_as_ok(acl_url, namespace):
    from sessionstore.redis.library import library

    plain_run = lines_of(doctor("--url", acl_url, "-n", namespace))
    result = doctor("--url", acl_url, "-n", namespace, "--fix")
    assert result.exit_code == 0, result.stdout
    checks = lines_of(result)
    assert checks["functions"] == plain_run["functions"]
    assert checks["functions"] == f"OK {library().name} is installed on the server"
    assert "FUNCTION LOAD" not in result.stdout


def test_the_least_privilege_user_without_durability_aof_gets_its_remedy_once(acl_url, namespace):
    fsync = acl_url.replace("?durability=aof", "")
    result = doctor("--url", fsync, "-n", namespace)
    assert result.exit_code == 1
    checks = lines_of(result)
    assert checks["persistence"].startswith("FAIL DurabilityError: durability='fsync' could not")
    assert checks["persistence"].endswith(
        "add ?durability=aof to the URL (sessionstore then "
        "checks the server through INFO persistence, which "
        "this user may run)"
    )
    assert result.stdout.count("?durability=aof to the URL") == 1
    assert checks["read/write"] == (
        f"FAIL values, history and update work in namespace {namespace!r}; the event log "
        "refuses appends (DurabilityError: see persistence)"
    )


def test_a_server_without_durable_aof_gets_the_durability_advice_once(namespace):
    from support.redis_server import RedisServer

    from sessionstore.cli.common import DURABILITY_HINT

    with RedisServer(durable=False) as server:
        result = doctor("--url", server.url, "-n", namespace)
    assert result.exit_code == 1
    checks = lines_of(result)
    assert checks["persistence"].startswith("FAIL DurabilityError: ")
    assert checks["persistence"].endswith(DURABILITY_HINT)
    assert result.stdout.count(DURABILITY_HINT) == 1
    assert result.stdout.count("appendonly no") == 1
    assert checks["read/write"].endswith(
        "the event log refuses appends (DurabilityError: see persistence)"
    )


def keys_of(ports: list[int], namespace: str) -> list[bytes]:
    """Every key of ``namespace`` on the servers at ``ports``."""
    found = []
    for port in ports:
        client = redis.Redis(port=port)
        try:
            found += client.keys(f"ss:{namespace}:*")
        finally:
            client.close()
    return found


def totals_of_top(url: str, namespace: str) -> tuple[int, int]:
    result = CliRunner().invoke(app, ["top", "--url", url, "-n", namespace, "--once", "--json"])
    assert result.exit_code == 0, result.stderr
    refresh = json.loads(result.stdout)
    return refresh["sessions"]["total"], refresh["values"]["total"]


@pytest.mark.parametrize("where", ["redis", "acl", "cluster"])
def test_doctor_leaves_no_key_and_no_index_entry_on_redis(where, request, namespace):
    if where == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        url, ports = cluster.url, [node.port for node in cluster.primaries()]
    else:
        server = request.getfixturevalue("redis_server")
        url = server.url if where == "redis" else request.getfixturevalue("acl_url")
        ports = [server.port]
    for _ in range(3):
        result = doctor("--url", url, "-n", namespace)
        assert "OK   read/write" in result.stdout, result.stdout
    assert keys_of(ports, namespace) == []
    assert totals_of_top(url, namespace) == (0, 0)


def test_doctor_whose_event_log_is_refused_leaves_no_key_on_redis(acl_url, redis_server, namespace):
    fsync = acl_url.replace("?durability=aof", "")
    result = doctor("--url", fsync, "-n", namespace)
    assert "FAIL read/write: values, history and update work" in result.stdout, result.stdout
    assert keys_of([redis_server.port], namespace) == []
