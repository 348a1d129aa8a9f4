"""Shared fixtures: a real redis-server and a real Redis Cluster per test session (each
started only when a test asks for it), and backend-parametrised stores."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis.cluster
import support.artifacts
from support.redis_cluster import ClusterNodes
from support.redis_server import RedisServer

#: Every backend the conformance suites run against (dummy has its own small contract).
#: "cluster" is the Redis backend on a 3-primary Redis Cluster, reached by a plain URL.
BACKENDS = ["memory", "file", "sqlite", "redis", "cluster"]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterNodes]:
    with ClusterNodes() as cluster:
        yield cluster


def _through_a_cluster_client(inspect: Callable[..., Any]) -> Callable[..., Any]:
    """``inspect(backend, url, ...)`` of :mod:`support.artifacts` for "cluster": its
    "redis" code, with a cluster client (keys live on three primaries)."""

    @functools.wraps(inspect)
    def wrapper(backend: str, url: str, *args: Any) -> Any:
        if backend != "cluster":
            return inspect(backend, url, *args)
        plain = support.artifacts._redis
        support.artifacts._redis = redis.cluster.RedisCluster.from_url
        try:
            return inspect("redis", url, *args)
        finally:
            support.artifacts._redis = plain

    return wrapper


# support.artifacts knows "redis" only; until it learns "cluster", the suites reach it
# through these wrappers.
for _name in ("footprint", "tear_tail", "remove_event", "set_stored_version", "snapshot"):
    setattr(support.artifacts, _name, _through_a_cluster_client(getattr(support.artifacts, _name)))


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
    if backend == "dummy":
        return "dummy://"
    raise AssertionError(backend)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001
    """A URL for ``backend``; every process and store opened on it sees the same data."""
    return url_for(backend, request, tmp_path)
