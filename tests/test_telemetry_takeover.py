"""``sessionstore.lease.takeovers`` of writer leases, counted by the taker: a lease taken
from a writer whose lease lapsed without being released (a writer process SIGKILLed
here) is one takeover; a lease its writer released is none. Read back through the
OpenTelemetry SDK's in-memory metric reader, on files, SQLite and Redis, sync and async
(memory, whose leases live in one process, and a writer paused past its lease:
``test_telemetry.py``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import url_for
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import sessionstore
import sessionstore.aio
from sessionstore import SessionHeader, telemetry
from sessionstore.errors import SessionBusyError

WHEN = 1_700_000_000_000

#: A writer that takes a session's lease (0.3 s: on Redis and SQLite it lapses soon
#: after its process dies), writes one event and says so, then waits to be killed.
HOLDER = f"""
import sys, time
import sessionstore
import sessionstore.aio
url, namespace, session_id = sys.argv[1:4]
store = sessionstore.connect(url, namespace)
header = sessionstore.SessionHeader(id=session_id, created_at={WHEN}, cwd="/w")
writer = store.events.writer(header, lease=0.3, window=60)
writer.emit("note", {{"n": 0}})
writer.flush()
print("holding", flush=True)
time.sleep(60)
"""


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    found = InMemoryMetricReader()
    telemetry.configure(meter_provider=MeterProvider(metric_readers=[found]))
    yield found
    telemetry.reset()


def _points(reader: InMemoryMetricReader, name: str) -> dict[tuple[str, ...], int]:
    """The points of counter ``name``: (kind, operation[, outcome]) -> value."""
    found = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    names = ("sessionstore.lease.kind", "db.operation.name")
                    if name == "sessionstore.lease.acquisitions":
                        names += ("sessionstore.lease.outcome",)
                    found[tuple(str(point.attributes[n]) for n in names)] = point.value
    return found


def _header() -> SessionHeader:
    return SessionHeader(id=f"s-{uuid.uuid4().hex[:10]}", created_at=WHEN, cwd="/w")


def _take(store: sessionstore.Store, header: SessionHeader) -> Any:
    """A writer of ``header``, opened as soon as the lease is free (within 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return store.events.writer(header, window=60)
        except SessionBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _killed_holder(url: str, header: SessionHeader) -> None:
    """A writer process that holds ``header``'s lease, SIGKILLed: it never releases
    its lease nor reports anything."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, "ns", header.id], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "holding\n"
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("kind", ["file", "sqlite", "redis"])
def test_the_lease_of_a_sigkilled_writer_is_one_takeover_counted_by_the_taker(
    reader: InMemoryMetricReader, kind: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    url, header = url_for(kind, request, tmp_path), _header()
    _killed_holder(url, header)
    with sessionstore.connect(url, "ns") as store:
        with _take(store, header) as writer:
            writer.emit("note", {"n": 1})
        with store.events.writer(header) as writer:  # released above: no takeover
            writer.emit("note", {"n": 2})
        assert [event.seq for event in store.events.load(header.id).events] == [0, 1, 2]
    assert _points(reader, "sessionstore.lease.takeovers") == {("writer", "writer.open"): 1}
    assert _points(reader, "sessionstore.lease.losses") == {}
    acquisitions = _points(reader, "sessionstore.lease.acquisitions")
    assert acquisitions[("writer", "writer.open", "takeover")] == 1
    assert acquisitions[("writer", "writer.open", "acquired")] == 1


def test_an_async_writer_counts_the_takeover_of_a_sigkilled_writers_lease(
    reader: InMemoryMetricReader, redis_server: Any
) -> None:
    header = _header()
    _killed_holder(redis_server.url, header)

    async def take() -> None:
        async with sessionstore.aio.connect(redis_server.url, "ns") as store:
            deadline = time.monotonic() + 5
            while True:
                try:
                    writer = await store.events.writer(header, window=60)
                    break
                except SessionBusyError:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
            writer.emit("note", {"n": 1})
            await writer.close()

    asyncio.run(take())
    assert _points(reader, "sessionstore.lease.takeovers") == {("writer", "writer.open"): 1}
