"""``sessionstore namespaces delete``: every key, file or row of one namespace goes, on
every backend, and a namespace beside it stays whole; a writer's lease refuses it unless
forced; the command asks first."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest
import redis
from support.namespace_data import contents, seed, url_of
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionHeader
from sessionstore.cli import app
from sessionstore.keys import namespace_pattern
from sessionstore.namespace_delete import NamespaceBusyError, delete_namespace


@pytest.fixture(params=["file", "sqlite", "redis", "cluster"])
def url(request, tmp_path) -> str:
    return url_of(request.param, request, tmp_path)


def leftovers(url: str, namespace: str) -> list[str]:
    """Whatever the backend still holds of ``namespace``: keys, files or rows."""
    if url.startswith("file://"):
        from sessionstore.backends.fsutil import encode_name

        folder = Path(url[len("file://") :]) / encode_name(namespace)
        return sorted(str(path) for path in folder.rglob("*")) if folder.exists() else []
    if url.startswith("sqlite://"):
        conn = sqlite3.connect(url[len("sqlite:///") :])
        found = []
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            columns = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}
            if "namespace" in columns:
                query = f'SELECT COUNT(*) FROM "{table}" WHERE namespace = ?'  # noqa: S608
                found += [table] * conn.execute(query, (namespace,)).fetchone()[0]
        conn.close()
        return found
    plain = redis.Redis.from_url(url)
    cluster = plain.info("cluster").get("cluster_enabled") == 1
    client = redis.RedisCluster.from_url(url) if cluster else plain
    try:
        if isinstance(client, redis.RedisCluster):
            return sorted(
                key.decode()
                for node in client.get_primaries()
                for key in client.get_redis_connection(node).scan_iter(
                    match=namespace_pattern(namespace)
                )
            )
        return sorted(key.decode() for key in client.scan_iter(match=namespace_pattern(namespace)))
    finally:
        client.close()
        plain.close()


def test_a_namespace_is_deleted_whole_and_the_one_beside_it_stays(url, namespace):
    kept = namespace + "-kept"
    seed(url, namespace)
    seed(url, kept)
    before, kept_before = leftovers(url, kept), contents(url, kept)
    assert leftovers(url, namespace)
    report = delete_namespace(url, namespace)
    assert (report.sessions, report.values) == (3, 3) and report.removed > 0
    assert leftovers(url, namespace) == []
    assert contents(url, namespace) == {"sessions": {}, "values": {}}
    assert leftovers(url, kept) == before
    assert contents(url, kept) == kept_before
    assert delete_namespace(url, namespace).removed == 0


def test_a_writers_lease_refuses_the_delete_unless_forced(url, namespace):
    seed(url, namespace)
    with sessionstore.connect(url, namespace) as store:
        writer = store.events.writer(SessionHeader(id="live"))
        writer.emit("note", {})
        writer.flush()
        with pytest.raises(NamespaceBusyError, match="'live'"):
            delete_namespace(url, namespace)
        assert len(store.events.list()) == 4
        assert delete_namespace(url, namespace, force=True).sessions == 4
        with contextlib.suppress(sessionstore.SessionStoreError):
            writer.close()  # its log is gone
    delete_namespace(url, namespace)  # what the writer's close left, if anything
    assert leftovers(url, namespace) == []


def test_the_command_asks_first_and_reports_what_it_removed(tmp_path, namespace):
    url = (tmp_path / "store").as_uri()
    seed(url, namespace)
    runner = CliRunner()
    refused = runner.invoke(app, ["namespaces", "delete", namespace, "--url", url], input="n\n")
    assert refused.exit_code == 1 and leftovers(url, namespace)
    done = runner.invoke(app, ["namespaces", "delete", namespace, "--url", url, "--yes", "--json"])
    assert done.exit_code == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["namespace"] == namespace and (result["sessions"], result["values"]) == (3, 3)
    assert result["unit"] == "files and folders" and not leftovers(url, namespace)


def test_the_least_privilege_user_may_not_delete_a_namespace(acl_url, namespace):
    seed(acl_url, namespace)
    with pytest.raises(sessionstore.AccessDeniedError):
        delete_namespace(acl_url, namespace)
    assert len(contents(acl_url, namespace)["sessions"]) == 3
