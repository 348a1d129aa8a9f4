"""Shared fixtures: a real redis-server and a real Redis Cluster per test session (each
started only when a test asks for it), and backend-parametrised stores; the tests' temp
dirs on a RAM disk when there is one."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator

import pytest
import typer.main
import typer.testing
from support.ramdisk import ram_root
from support.redis_cluster import ClusterNodes
from support.redis_server import ContainerRedis, RedisServer, shared_server

from sessionstore.redis.acl import setuser_args
from sessionstore.redis.library import install

#: Fixtures ``opened`` / ``open_`` for the tests that drive the Redis backend directly.
pytest_plugins = ["support.redis_helpers"]

#: Every backend the conformance suites run against (dummy has its own small contract).
#: "cluster" is the Redis backend on a 3-primary Redis Cluster, reached by a plain URL.
BACKENDS = ["memory", "file", "sqlite", "redis", "cluster"]
#: The conformance suites also run through the least-privilege ACL user ("acl").
CONFORMANCE_BACKENDS = [*BACKENDS, "acl"]
ACL_USER, ACL_PASSWORD = "conformance", "conformance-secret"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers for every two CPUs. Most tests wait on the servers and
    processes they start, so a third worker keeps two cores busy (on two cores: 5:46
    with two workers, 5:11 with three)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, (cpus or 1) * 3 // 2)


def pytest_configure(config: pytest.Config) -> None:
    """``tmp_path`` and its kin go on the RAM disk when there is one (see
    :mod:`support.ramdisk`), unless ``--basetemp`` or ``PYTEST_DEBUG_TEMPROOT`` chose a
    place: pytest's usual numbered dirs, kept as usual, under it.

    ``COLUMNS`` is the tests' own to set: the CLI's consoles, made when it is imported,
    would keep a width exported to the test run for good (a test gives one with
    ``CliRunner``'s ``env``)."""
    os.environ.pop("COLUMNS", None)
    root = ram_root()
    if root is not None and config.option.basetemp is None:
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", root)


@pytest.fixture(scope="session", autouse=True)
def one_click_command_per_app() -> Iterator[None]:
    """typer builds an application's click command anew on every run (``get_command``,
    behind both ``app(...)`` and typer's ``CliRunner.invoke``) by reading every command's
    signature: most of the cost of running the CLI in the tests' process. The tests build
    it once per application; a click command keeps nothing of one run for the next.

    ``CliRunner.invoke`` calls typer's private ``typer.testing._get_command``, imported
    from ``typer.main``: a typer that no longer does fails here rather than running every
    test with the slow path unnoticed."""
    if getattr(typer.testing, "_get_command", None) is not typer.main.get_command:
        raise RuntimeError(
            "typer.testing._get_command is no longer typer.main.get_command: the "
            "one_click_command_per_app fixture (tests/conftest.py) needs another way in"
        )
    built = functools.cache(typer.main.get_command)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.main, "get_command", built)
        patch.setattr(typer.testing, "_get_command", built)
        yield


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | ContainerRedis]:
    with shared_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterNodes]:
    with ClusterNodes() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def acl_url(redis_server: RedisServer | ContainerRedis) -> str:
    """The documented least-privilege user (sessionstore.redis.acl), with a key pattern
    widened from one namespace to every test namespace (``t-...``). It may not run
    CONFIG, so its event logs use ``durability=aof`` (checked through INFO persistence).
    It may not load the library's functions: the admin installs them first."""
    import redis

    args = setuser_args(ACL_USER, ACL_PASSWORD, "x")
    args[args.index("~ss:x:*")] = "~ss:t-*"
    admin = redis.Redis(port=redis_server.port)
    admin.execute_command(*args)
    install(admin)
    admin.close()
    return f"redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{redis_server.port}/0?durability=aof"


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def url_for(backend: str, request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001
    if backend == "memory":
        return "memory://"
    if backend == "file":
        return (tmp_path / "store").as_uri()
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    if backend == "redis":
        return request.getfixturevalue("redis_server").url
    if backend == "cluster":
        return request.getfixturevalue("redis_cluster").url
    if backend == "acl":
        return request.getfixturevalue("acl_url")
    if backend == "dummy":
        return "dummy://"
    raise AssertionError(backend)


@pytest.fixture(params=CONFORMANCE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001
    """A URL for ``backend``; every process and store opened on it sees the same data."""
    return url_for(backend, request, tmp_path)
