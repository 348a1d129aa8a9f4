"""The conformance suites run every test for each backend and for both APIs (sync, async).

Besides the backends of the top-level conftest they run on "fakeredis": the Redis backend
on fakeredis's TCP server, reached by a plain URL (support.fake_redis). It is a fast tier,
not a proof: the real redis-server backends ("redis", "cluster", "acl") stay the proof,
and what fakeredis lacks is skipped on it with the gap named."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import CONFORMANCE_BACKENDS, url_for
from support.async_bridge import Stores
from support.fake_redis import FakeRedisServer, skip_gaps

FAKE = "fakeredis"


@pytest.fixture(params=[*CONFORMANCE_BACKENDS, FAKE])
def backend(request: pytest.FixtureRequest) -> str:
    """Every conformance backend, and fakeredis (tests it cannot run are skipped)."""
    if request.param == FAKE:
        skip_gaps(request)
    return request.param


@pytest.fixture(scope="session")
def fake_redis() -> Iterator[FakeRedisServer]:
    with FakeRedisServer() as server:
        yield server


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001
    """As the top-level ``store_url``, and the fakeredis server's URL for "fakeredis"."""
    if backend == FAKE:
        return request.getfixturevalue("fake_redis").url
    return url_for(backend, request, tmp_path)


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def open_store(store_url: str, namespace: str, api: str) -> Iterator[Callable[..., Any]]:
    """Open another store on the same URL (the same data, except for ``memory://``)."""
    stores = Stores(api)

    def _open(ns: str | None = None, url: str | None = None, **options: Any) -> Any:
        return stores.open(url or store_url, ns or namespace, **options)

    yield _open
    stores.close()


@pytest.fixture
def store(open_store: Callable[..., Any]) -> Any:
    return open_store()


@pytest.fixture
def shared(backend: str) -> None:
    """Skip where two connects do not share data (memory is private to one connect)."""
    if backend == "memory":
        pytest.skip("memory:// is private to one connect()")
