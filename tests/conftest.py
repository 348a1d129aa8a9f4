"""Shared fixtures: a real redis-server per test session, and backend-parametrised stores."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support.redis_server import RedisServer

#: Every backend the conformance suites run against (dummy has its own small contract).
BACKENDS = ["memory", "file", "sqlite", "redis"]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


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
