"""The conformance suites run every test for each backend and for both APIs (sync, async)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.async_bridge import Bridge, sync_view

import sessionstore
from sessionstore import aio


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def open_store(store_url: str, namespace: str, api: str) -> Iterator[Callable[..., Any]]:
    """Open another store on the same URL (the same data, except for ``memory://``)."""
    opened: list[Any] = []
    bridge = Bridge() if api == "async" else None

    def _open(ns: str | None = None, url: str | None = None, **options: Any) -> Any:
        target_url, target_ns = url or store_url, ns or namespace
        if bridge is None:
            store: Any = sessionstore.connect(target_url, target_ns, **options)
        else:
            store = sync_view(bridge.run(aio.connect, target_url, target_ns, **options), bridge)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
    if bridge is not None:
        bridge.stop()


@pytest.fixture
def store(open_store: Callable[..., Any]) -> Any:
    return open_store()


@pytest.fixture
def shared(backend: str) -> None:
    """Skip where two connects do not share data (memory is private to one connect)."""
    if backend == "memory":
        pytest.skip("memory:// is private to one connect()")
