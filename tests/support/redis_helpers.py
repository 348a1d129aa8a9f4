"""Helpers shared by the tests that drive the Redis backend directly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from sessionstore import keys
from sessionstore.contracts import Backends
from sessionstore.redis import open_redis


def namespace_snapshot(client: redis.Redis, namespace: str) -> dict[bytes, Any]:
    """Every key of ``namespace`` with its whole content, to prove nothing changed."""
    found: dict[bytes, Any] = {}
    for name in client.scan_iter(match=keys.namespace_pattern(namespace)):
        kind = client.type(name)
        if kind == b"hash":
            found[name] = client.hgetall(name)
        elif kind == b"zset":
            found[name] = client.zrange(name, 0, -1, withscores=True)
        elif kind == b"stream":
            found[name] = (client.xrange(name), client.xinfo_stream(name)["last-generated-id"])
        else:
            found[name] = kind
    return found


@pytest.fixture
def opened() -> Iterator[list[Backends]]:
    """Backends opened by the test, closed when it ends."""
    made: list[Backends] = []
    yield made
    for backends in made:
        backends.close()


@pytest.fixture
def open_(opened: list[Backends]) -> Callable[..., Backends]:
    """``open_(url, namespace, **options)``: ``open_redis``, closed after the test."""

    def _open(url: str, namespace: str, **options: Any) -> Backends:
        backends = open_redis(url, namespace, **options)
        opened.append(backends)
        return backends

    return _open
