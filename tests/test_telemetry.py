"""Metrics and traces (:mod:`sessionstore.telemetry`), read back through the OpenTelemetry
SDK's in-memory metric reader and span exporter, on real backends, sync and async.

Each test configures providers of its own (``telemetry.configure``), never the SDK's
global ones (which may be set once per process), and forgets them at the end.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import url_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import sessionstore
import sessionstore.aio
from sessionstore import SessionHeader, telemetry
from sessionstore.errors import (
    ComputeTimeoutError,
    SessionBusyError,
    SessionNotFoundError,
    SessionStoreError,
)

BACKENDS = ["memory", "file", "sqlite", "redis"]
SYSTEMS = {
    "memory": "sessionstore.memory",
    "file": "sessionstore.files",
    "sqlite": "sqlite",
    "redis": "redis",
}
WHEN = 1_700_000_000_000


@dataclass
class Recorded:
    """What the store recorded since the test began."""

    reader: InMemoryMetricReader
    exporter: InMemorySpanExporter
    tracer: Any

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span_names(self) -> set[str]:
        return {str(span.attributes["db.operation.name"]) for span in self.spans()}

    def points(self, name: str) -> list[Any]:
        found = []
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def metric_units(self) -> dict[str, str]:
        units = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    units[metric.name] = metric.unit
        return units

    def operations(self) -> set[str]:
        return {
            str(point.attributes["db.operation.name"])
            for point in self.points("db.client.operation.duration")
        }

    def texts(self) -> list[str]:
        """Every string the store handed to OpenTelemetry: names, attributes, statuses."""
        found: list[str] = []
        for span in self.spans():
            found.append(span.name)
            found.extend(str(value) for value in (span.attributes or {}).values())
            found.append(span.status.description or "")
            for event in span.events:
                found.append(event.name)
                found.extend(str(value) for value in (event.attributes or {}).values())
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        found.extend(str(value) for value in point.attributes.values())
        return found


def _recorder(record_ids: bool = False) -> Recorded:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(
        meter_provider=MeterProvider(metric_readers=[reader]),
        tracer_provider=tracer_provider,
        record_ids=record_ids,
    )
    return Recorded(reader, exporter, tracer_provider.get_tracer("caller"))


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    yield _recorder()
    telemetry.reset()


@pytest.fixture(params=BACKENDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(kind: str, request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return url_for(kind, request, tmp_path)


def _header() -> SessionHeader:
    return SessionHeader(id=f"s-{uuid.uuid4().hex[:10]}", created_at=WHEN, cwd="/w")


VALUE_OPERATIONS = {
    "wait_for_init",
    "set_data",
    "get_data",
    "update",
    "put",
    "get_or_compute",
    "records",
    "set_ttl",
    "delete",
    "list_values",
    "check_durable",
}
EVENT_OPERATIONS = {
    "events.create",
    "events.append",
    "events.load",
    "events.inspect",
    "events.info",
    "events.read_from",
    "events.read_records_from",
    "events.read_page",
    "events.list",
    "events.list_info",
    "events.stored_bytes",
    "events.set_ttl",
    "events.fork",
    "events.prune",
    "events.delete",
    "writer.open",
    "writer.flush",
    "writer.close",
}


def _sync_calls(store: sessionstore.Store) -> None:
    plain = store.session("BTC", "s", "x", "1h")
    plain.wait_for_init()
    plain.set_data({"a": 1}, WHEN)
    plain.get_data(WHEN)
    plain.update(lambda value: {"a": 2}, WHEN)
    plain.set_ttl(60)
    plain.delete()
    history = store.session("BTC", "s", "x", "4h", history=True)
    history.put({"b": 1}, WHEN)
    history.get_or_compute(WHEN + 1, lambda: 3)
    history.records()
    store.list_values()
    store.check_durable()
    header = _header()
    log = store.events
    log.create(header)
    log.append(header.id, [{"seq": 0, "type": "user", "time": WHEN, "data": {}}])
    log.load(header.id)
    log.inspect(header.id)
    log.info(header.id)
    log.read_from(header.id, 0)
    log.read_records_from(header.id, 0)
    list(log.iter_events(header.id))
    log.list()
    log.list_info()
    log.stored_bytes(header.id)
    log.set_ttl(header.id, 60)
    log.fork(header.id, header.id + "-child", at_seq=1)
    log.prune()
    log.delete(header.id)
    with log.writer(_header(), window=60) as writer:
        writer.emit("user", {"n": 1})
        writer.flush()


async def _async_calls(store: sessionstore.aio.AsyncStore) -> None:
    plain = store.session("BTC", "s", "x", "1h")
    await plain.wait_for_init()
    await plain.set_data({"a": 1}, WHEN)
    await plain.get_data(WHEN)
    await plain.update(lambda value: {"a": 2}, WHEN)
    await plain.set_ttl(60)
    await plain.delete()
    history = store.session("BTC", "s", "x", "4h", history=True)
    await history.put({"b": 1}, WHEN)
    await history.get_or_compute(WHEN + 1, lambda: 3)
    await history.records()
    await store.list_values()
    await store.check_durable()
    header = _header()
    log = store.events
    await log.create(header)
    await log.append(header.id, [{"seq": 0, "type": "user", "time": WHEN, "data": {}}])
    await log.load(header.id)
    await log.inspect(header.id)
    await log.info(header.id)
    await log.read_from(header.id, 0)
    await log.read_records_from(header.id, 0)
    [event async for event in log.iter_events(header.id)]
    await log.list()
    await log.list_info()
    await log.stored_bytes(header.id)
    await log.set_ttl(header.id, 60)
    await log.fork(header.id, header.id + "-child", at_seq=1)
    await log.prune()
    await log.delete(header.id)
    async with log.writer(_header(), window=60) as writer:
        writer.emit("user", {"n": 1})
        await writer.flush()


def _check_operations(recorded: Recorded, kind: str, namespace: str) -> None:
    expected = VALUE_OPERATIONS | EVENT_OPERATIONS
    assert expected <= recorded.span_names()
    assert expected <= recorded.operations()
    for span in recorded.spans():
        assert span.kind.name == "CLIENT"
        assert span.attributes["db.system.name"] == SYSTEMS[kind]
        assert span.attributes["db.namespace"] == namespace
        assert span.name == f"{span.attributes['db.operation.name']} {namespace}"
        assert span.status.status_code is not StatusCode.ERROR
    for point in recorded.points("db.client.operation.duration"):
        assert point.attributes["db.system.name"] == SYSTEMS[kind]
        assert point.attributes["db.namespace"] == namespace
        assert "error.type" not in point.attributes
        assert point.count >= 1 and point.sum >= 0
    assert recorded.metric_units()["db.client.operation.duration"] == "s"


def test_every_operation_has_a_span_and_a_duration(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    with sessionstore.connect(url, namespace) as store:
        _sync_calls(store)
    _check_operations(recorded, kind, namespace)


def test_every_async_operation_has_a_span_and_a_duration(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    async def main() -> None:
        async with sessionstore.aio.connect(url, namespace) as store:
            await _async_calls(store)

    asyncio.run(main())
    _check_operations(recorded, kind, namespace)


def test_a_failed_operation_records_its_error_type(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    with sessionstore.connect(url, namespace) as store, pytest.raises(SessionNotFoundError):
        store.events.info("missing")
    [span] = [s for s in recorded.spans() if s.attributes["db.operation.name"] == "events.info"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "SessionNotFoundError"
    assert span.attributes["error.type"] == "SessionNotFoundError"
    [point] = [
        p
        for p in recorded.points("db.client.operation.duration")
        if p.attributes["db.operation.name"] == "events.info"
    ]
    assert point.attributes["error.type"] == "SessionNotFoundError"


def test_spans_nest_in_the_callers_span(recorded: Recorded, kind: str, url: str) -> None:
    with (
        sessionstore.connect(url, "nest") as store,
        recorded.tracer.start_as_current_span("caller") as caller,
    ):
        store.session("A", "b", "c", "1h").set_data(1, WHEN)
    [span] = [s for s in recorded.spans() if s.name == "set_data nest"]
    assert span.parent is not None
    assert span.parent.span_id == caller.get_span_context().span_id
    assert span.context.trace_id == caller.get_span_context().trace_id


def test_async_spans_nest_in_the_callers_span(recorded: Recorded, kind: str, url: str) -> None:
    async def main() -> Any:
        async with sessionstore.aio.connect(url, "nest") as store:
            with recorded.tracer.start_as_current_span("caller") as caller:
                await store.session("A", "b", "c", "1h").set_data(1, WHEN)
            return caller

    caller = asyncio.run(main())
    [span] = [s for s in recorded.spans() if s.name == "set_data nest"]
    assert span.parent is not None
    assert span.parent.span_id == caller.get_span_context().span_id


def _compute_outcomes(recorded: Recorded) -> dict[str, int]:
    return {
        str(p.attributes["sessionstore.compute.outcome"]): p.value
        for p in recorded.points("sessionstore.compute.outcomes")
    }


def test_get_or_compute_outcomes_and_compute_leases(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    with sessionstore.connect(url, namespace) as store:
        handle = store.session("A", "b", "c", "1h", history=True)
        handle.get_or_compute(WHEN, lambda: 1)  # computed
        handle.get_or_compute(WHEN, lambda: 2)  # reused
        started, release = threading.Event(), threading.Event()

        def slow() -> int:
            started.set()
            release.wait(10)
            return 3

        computing = threading.Thread(target=handle.get_or_compute, args=(WHEN + 1, slow))
        computing.start()
        started.wait(10)
        with pytest.raises(ComputeTimeoutError):
            handle.get_or_compute(WHEN + 1, lambda: 4, timeout=0.2)  # timed out
        waiter = threading.Thread(target=handle.get_or_compute, args=(WHEN + 1, lambda: 5))
        waiter.start()
        time.sleep(0.2)
        release.set()
        computing.join(10)
        waiter.join(10)
    assert _compute_outcomes(recorded) == {"computed": 2, "reused": 1, "timed_out": 1, "waited": 1}
    leases = {
        str(p.attributes["sessionstore.lease.outcome"]): p.value
        for p in recorded.points("sessionstore.lease.acquisitions")
        if p.attributes["sessionstore.lease.kind"] == "compute"
    }
    assert leases["acquired"] == 2 and leases["busy"] >= 2
    [timed_out] = [s for s in recorded.spans() if s.status.status_code is StatusCode.ERROR]
    assert timed_out.attributes["error.type"] == "ComputeTimeoutError"
    assert any(event.name == "wait" for event in timed_out.events)


def test_writer_leases_queue_depth_and_flushes(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    with sessionstore.connect(url, namespace) as store:
        header = _header()
        with store.events.writer(header, window=60) as writer:
            with pytest.raises(SessionBusyError):
                store.events.writer(header)
            for n in range(3):
                writer.emit("user", {"n": n})
            [depth] = recorded.points("sessionstore.writer.queue.depth")
            assert depth.value == 3
            assert depth.attributes == {"db.system.name": SYSTEMS[kind], "db.namespace": namespace}
            writer.flush()
            [depth] = recorded.points("sessionstore.writer.queue.depth")
            assert depth.value == 0
            assert recorded.metric_units()["sessionstore.writer.queue.depth"] == "{event}"
    assert _lease_outcomes(recorded, "sessionstore.lease.kind", "writer") == {
        "acquired": 1,
        "busy": 1,
    }
    flushes = [
        p
        for p in recorded.points("db.client.operation.duration")
        if p.attributes["db.operation.name"] == "writer.flush"
    ]
    assert sum(p.count for p in flushes) >= 1


def test_the_queue_depth_is_reported_again_after_telemetry_is_turned_off_and_on(
    recorded: Recorded, namespace: str
) -> None:
    """A meter keeps the first gauge of a name: configuring the same providers again
    (after ``enabled=False``, or a ``reset``) still reports every open writer."""
    current = telemetry.current
    assert current
    providers = {"meter_provider": current.meter_provider, "tracer_provider": None}
    store = sessionstore.connect("memory://", namespace)
    with store, store.events.writer(_header(), window=60) as before:
        before.emit("user", {"n": 0})
        telemetry.configure(enabled=False)
        telemetry.configure(**providers)
        with store.events.writer(_header(), window=60) as after:
            for n in range(3):
                after.emit("user", {"n": n})
            [depth] = recorded.points("sessionstore.writer.queue.depth")
            assert depth.value == 4
            telemetry.configure(meter_provider=MeterProvider(), tracer_provider=None)
            assert recorded.points("sessionstore.writer.queue.depth") == []


def test_a_writer_opened_before_telemetry_is_on_is_counted_once_it_is(namespace: str) -> None:
    telemetry.configure(enabled=False)
    try:
        with sessionstore.connect("memory://", namespace) as store:
            writer = store.events.writer(_header(), window=60)
            writer.emit("user", {"n": 0})
            writer.emit("user", {"n": 1})
            recorded = _recorder()
            [depth] = recorded.points("sessionstore.writer.queue.depth")
            assert depth.value == 2
            writer.close()
    finally:
        telemetry.reset()


def _lease_outcomes(recorded: Recorded, attribute: str, value: str) -> dict[str, int]:
    """Lease acquisitions by outcome, of the points whose ``attribute`` is ``value``."""
    return {
        str(p.attributes["sessionstore.lease.outcome"]): p.value
        for p in recorded.points("sessionstore.lease.acquisitions")
        if p.attributes[attribute] == value
    }


def _takeovers(
    recorded: Recorded, name: str = "sessionstore.lease.takeovers"
) -> dict[tuple[str, str], int]:
    return {
        (str(p.attributes["sessionstore.lease.kind"]), str(p.attributes["db.operation.name"])): (
            p.value
        )
        for p in recorded.points(name)
    }


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_compute_lease_taken_from_a_failed_holder_is_a_takeover(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    with sessionstore.connect(url, namespace) as store:
        handle = store.session("A", "b", "c", "1h", history=True)
        started, fail = threading.Event(), threading.Event()

        def failing() -> int:
            started.set()
            fail.wait(10)
            raise RuntimeError("the holder fails")

        def holder() -> None:
            with pytest.raises(RuntimeError):
                handle.get_or_compute(WHEN, failing)

        holding = threading.Thread(target=holder)
        holding.start()
        started.wait(10)
        waiter = threading.Thread(target=handle.get_or_compute, args=(WHEN, lambda: 2))
        waiter.start()
        time.sleep(0.1)  # the waiter finds the lease held
        fail.set()
        holding.join(10)
        waiter.join(10)
        assert handle.get_data(WHEN) == 2
    assert _takeovers(recorded) == {("compute", "get_or_compute"): 1}
    outcomes = {
        str(p.attributes["sessionstore.lease.outcome"]): p.value
        for p in recorded.points("sessionstore.lease.acquisitions")
    }
    assert outcomes["takeover"] == 1 and outcomes["acquired"] == 1 and outcomes["busy"] >= 1


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_a_lapsed_writer_lease_is_one_takeover_for_the_taker_one_loss_for_the_loser(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    header = _header()
    with sessionstore.connect(url, namespace) as store:
        paused = store.events.writer(header, lease=0.2, window=60)
        paused.emit("note", {"n": 0})
        paused.flush()
        with paused._drain_lock:  # nothing renews its lease, which expires
            time.sleep(0.3)
            store.events.writer(header).close()  # another writer takes it over
        paused.emit("note", {"n": 1})
        for _ in range(2):
            with pytest.raises(SessionBusyError):
                paused.flush()
        with pytest.raises(SessionBusyError):
            paused.close()
        store.events.writer(header).close()  # released by the taker: no takeover
    assert _takeovers(recorded) == {("writer", "writer.open"): 1}
    assert _takeovers(recorded, "sessionstore.lease.losses") == {("writer", "writer.flush"): 1}
    assert recorded.metric_units()["sessionstore.lease.takeovers"] == "{takeover}"
    assert recorded.metric_units()["sessionstore.lease.losses"] == "{lease}"
    assert _lease_outcomes(recorded, "db.operation.name", "writer.open") == {
        "acquired": 2,
        "takeover": 1,
    }


def test_a_lost_update_race_is_a_retry(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    with sessionstore.connect(url, namespace) as store:
        mine = store.session("A", "b", "c", "1h")
        other = store.session("A", "b", "c", "1h")
        mine.set_data(0, WHEN)
        raced = []

        def bump(value: Any) -> Any:
            if not raced:
                raced.append(True)
                other.set_data(100, WHEN)
            return value + 1

        assert mine.update(bump, WHEN) == 101
    [span] = [s for s in recorded.spans() if s.attributes["db.operation.name"] == "update"]
    assert [event.name for event in span.events] == ["retry"]
    [retries] = recorded.points("sessionstore.operation.retries")
    assert retries.value == 1 and retries.attributes["db.operation.name"] == "update"


def test_async_leases_outcomes_retries_and_queue_depth(
    recorded: Recorded, kind: str, url: str, namespace: str
) -> None:
    async def main() -> None:
        async with sessionstore.aio.connect(url, namespace) as store:
            history = store.session("A", "b", "c", "1h", history=True)
            await history.get_or_compute(WHEN, lambda: 1)
            await history.get_or_compute(WHEN, lambda: 2)
            mine = store.session("A", "b", "c", "4h")
            other = store.session("A", "b", "c", "4h")
            await mine.set_data(0, WHEN)
            raced: list[bool] = []

            async def bump(value: Any) -> Any:
                if not raced:
                    raced.append(True)
                    await other.set_data(100, WHEN)
                return value + 1

            assert await mine.update(bump, WHEN) == 101
            header = _header()
            async with store.events.writer(header, window=60) as writer:
                with pytest.raises(SessionBusyError):
                    await store.events.writer(header)
                writer.emit("user", {"n": 1})
                writer.emit("user", {"n": 2})
                [depth] = recorded.points("sessionstore.writer.queue.depth")
                assert depth.value == 2
                await writer.flush()

    asyncio.run(main())
    assert _compute_outcomes(recorded) == {"computed": 1, "reused": 1}
    leases = {
        (
            str(p.attributes["sessionstore.lease.kind"]),
            str(p.attributes["sessionstore.lease.outcome"]),
        ): p.value
        for p in recorded.points("sessionstore.lease.acquisitions")
    }
    assert leases == {("compute", "acquired"): 1, ("writer", "acquired"): 1, ("writer", "busy"): 1}
    [retries] = recorded.points("sessionstore.operation.retries")
    assert retries.value == 1
    assert "writer.flush" in recorded.operations()


def test_the_observability_doc_tables_every_instrument() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "observability.md").read_text()
    names = [name for _, name, _, _ in telemetry.INSTRUMENTS]
    for name in [*names, "sessionstore.writer.queue.depth"]:
        assert f"| `{name}` |" in doc
    for operation in telemetry.OPERATIONS.values():
        assert f"`{operation}`" in doc


def test_cache_hits_and_misses_are_counted(recorded: Recorded, redis_server: Any) -> None:
    with sessionstore.connect(redis_server.url, "cached", cache=True) as store:
        handle = store.session("A", "b", "c", "1h")
        handle.set_data(1, WHEN)
        for _ in range(3):
            handle.get_data(WHEN)
    counted = {
        str(p.attributes["sessionstore.cache.result"]): p.value
        for p in recorded.points("sessionstore.cache.requests")
    }
    assert counted.get("hit", 0) >= 1
    assert sum(counted.values()) == 3


def test_cache_invalidations_and_the_staleness_bound_are_reported(
    recorded: Recorded, redis_server: Any
) -> None:
    from sessionstore.redis.tracking import BOUND

    with (
        sessionstore.connect(redis_server.url, "cached", cache=True) as store,
        sessionstore.connect(redis_server.url, "cached") as other,
    ):
        handle = store.session("A", "b", "c", "1h")
        handle.set_data(1, WHEN)
        assert handle.get_data(WHEN) == 1  # cached
        other.session("A", "b", "c", "1h").set_data(2, WHEN)
        deadline = time.monotonic() + 5
        while handle.get_data(WHEN) != 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        [bound] = recorded.points("sessionstore.cache.staleness_bound")
        assert bound.value == BOUND
        assert bound.attributes == {"db.system.name": "redis", "db.namespace": "cached"}
        assert recorded.metric_units()["sessionstore.cache.staleness_bound"] == "s"
    assert recorded.points("sessionstore.cache.staleness_bound") == []  # closed: no cache
    invalidated = recorded.points("sessionstore.cache.invalidations")
    assert sum(point.value for point in invalidated) >= 1
    assert recorded.metric_units()["sessionstore.cache.invalidations"] == "{entry}"


def test_a_store_without_a_cache_counts_no_cache_requests(recorded: Recorded, url: str) -> None:
    with sessionstore.connect(url, "uncached") as store:
        handle = store.session("A", "b", "c", "1h")
        handle.set_data(1, WHEN)
        handle.get_data(WHEN)
        handle.get_data(WHEN)
    assert recorded.points("sessionstore.cache.requests") == []


def test_connection_waits_are_recorded(recorded: Recorded, redis_server: Any) -> None:
    url = f"{redis_server.url}?max_connections=1"
    with sessionstore.connect(url, "waits") as store:
        header = _header()
        store.events.create(header)
        store.events.append(header.id, [{"seq": 0, "type": "user", "time": WHEN, "data": {}}])
        follower = iter(store.events.follow(header.id, 1, poll=0.5))
        blocked = threading.Thread(target=lambda: next(follower, None), daemon=True)
        blocked.start()
        time.sleep(0.1)  # the follow holds the one connection in XREAD BLOCK
        store.events.info(header.id)
        store.events.append(header.id, [{"seq": 1, "type": "user", "time": WHEN, "data": {}}])
        blocked.join(10)
    waits = recorded.points("db.client.connection.wait_time")
    assert waits and max(point.max for point in waits) > 0.01
    assert waits[0].attributes["db.client.connection.pool.name"] == "redis"
    assert recorded.metric_units()["db.client.connection.wait_time"] == "s"


def test_async_connection_waits_are_recorded(recorded: Recorded, redis_server: Any) -> None:
    async def main() -> None:
        url = f"{redis_server.url}?max_connections=1"
        async with sessionstore.aio.connect(url, "waits") as store:
            header = _header()
            await store.events.create(header)
            event = {"seq": 0, "type": "user", "time": WHEN, "data": {}}
            await store.events.append(header.id, [event])
            follower = store.events.follow(header.id, 1, poll=0.5)
            blocked = asyncio.create_task(anext(follower, None))
            await asyncio.sleep(0.1)  # the follow holds the one place in XREAD BLOCK
            await store.events.info(header.id)
            await store.events.append(header.id, [{**event, "seq": 1}])
            await blocked
            await follower.aclose()

    asyncio.run(main())
    waits = recorded.points("db.client.connection.wait_time")
    assert waits and max(point.max for point in waits) > 0.01


def test_a_library_load_is_a_resend(recorded: Recorded, redis_server: Any) -> None:
    import redis

    admin = redis.Redis(port=redis_server.port)
    try:
        with sessionstore.connect(redis_server.url, "resend") as store:
            handle = store.session("A", "b", "c", "1h")
            handle.set_data(1, WHEN)
            admin.function_flush()
            handle.set_data(2, WHEN)
    finally:
        admin.close()
    reasons = {
        str(p.attributes["sessionstore.resend.reason"]): p
        for p in recorded.points("sessionstore.redis.resends")
    }
    assert reasons["library_load"].value >= 1
    assert dict(reasons["library_load"].attributes) == {
        "db.system.name": "redis",
        "db.namespace": "resend",
        "db.operation.name": "set_data",
        "sessionstore.resend.reason": "library_load",
    }
    span = [s for s in recorded.spans() if s.attributes["db.operation.name"] == "set_data"][-1]
    assert "resend" in [event.name for event in span.events]


def test_ids_are_recorded_only_when_asked(url: str, namespace: str) -> None:
    for record_ids in (False, True):
        recorded = _recorder(record_ids)
        header = _header()
        try:
            with sessionstore.connect(url, namespace) as store:
                store.session("SYM", "strat", "ex", "1h").set_data(1, WHEN)
                store.events.create(header)
                store.events.append(
                    header.id, [{"seq": 0, "type": "user", "time": WHEN, "data": {}}]
                )
        finally:
            telemetry.reset()
        texts = recorded.texts()
        assert ("SYM/strat/ex/1h/backtest" in texts) is record_ids
        assert (header.id in texts) is record_ids


def test_without_a_provider_nothing_is_recorded_and_nothing_breaks(
    url: str, namespace: str
) -> None:
    recorded = _recorder()
    telemetry.reset()  # no global provider is set in the tests: off at the next call
    with sessionstore.connect(url, namespace) as store:
        _sync_calls(store)
    assert telemetry.current is False
    assert recorded.spans() == []
    assert recorded.points("db.client.operation.duration") == []


def test_a_process_that_never_imported_opentelemetry_does_not_import_it() -> None:
    """No provider can be set where nothing imported the API: the first call decides
    telemetry is off without importing it; a process that set one records."""
    program = """
import sys, sessionstore
from sessionstore import telemetry
if sys.argv[1] == "set":
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    metrics.set_meter_provider(MeterProvider())
with sessionstore.connect("memory://", "t") as store:
    store.session("A", "b", "c", "1h").set_data(1, 1)
print("opentelemetry" in sys.modules, bool(telemetry.current))
"""
    found = [
        subprocess.run(
            [sys.executable, "-c", program, mode], capture_output=True, text=True, check=True
        ).stdout.split()
        for mode in ("unset", "set")
    ]
    assert found == [["False", "False"], ["True", "True"]]


def test_configure_enabled_false_turns_it_off(recorded: Recorded) -> None:
    telemetry.configure(enabled=False)
    with sessionstore.connect("memory://", "off") as store:
        store.session("A", "b", "c", "1h").set_data(1, WHEN)
    assert recorded.spans() == []


#: A value or event data to look for: marked with a character no name, id or attribute the
#: store records holds, so that it is never found in one by chance ("get_or_compu").
SECRET = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="%"),
    min_size=12,
    max_size=30,
).map(lambda text: "\u00a7" + text)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=SECRET, data=SECRET)
def test_no_value_or_event_data_reaches_an_attribute(value: str, data: str) -> None:
    recorded = _recorder(record_ids=True)
    try:
        with sessionstore.connect("memory://", "secrets") as store:
            handle = store.session("A", "b", "c", "1h", history=True)
            handle.set_data({"secret": value}, WHEN)
            handle.get_data(WHEN)
            handle.update(lambda found: {"secret": value, "again": data}, WHEN)
            handle.get_or_compute(WHEN + 1, lambda: value)
            with pytest.raises(SessionStoreError):
                handle.put(object(), WHEN)  # refused: names no value either
            header = _header()
            store.events.create(header)
            store.events.append(
                header.id, [{"seq": 0, "type": "user", "time": WHEN, "data": {"t": data}}]
            )
            store.events.read_from(header.id, 0)
            with store.events.writer(_header()) as writer:
                writer.emit("user", {"t": data})
    finally:
        telemetry.reset()
    for text in recorded.texts():
        assert value not in text and data not in text


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(password=SECRET)
def test_no_url_password_reaches_an_attribute(password: str, redis_server: Any) -> None:
    recorded = _recorder(record_ids=True)
    url = redis_server.url.replace("redis://", f"redis://user:{quote(password, safe='')}@")
    try:
        with (
            sessionstore.connect(url, "secrets", timeout=2) as store,
            pytest.raises(SessionStoreError),  # the server knows no such user
        ):
            store.session("A", "b", "c", "1h").set_data(1, WHEN)
    finally:
        telemetry.reset()
    assert recorded.spans()
    for text in recorded.texts():
        assert password not in text


def test_the_acl_users_password_reaches_no_attribute(acl_url: str, namespace: str) -> None:
    recorded = _recorder(record_ids=True)
    try:
        with sessionstore.connect(acl_url, namespace) as store:
            store.session("A", "b", "c", "1h").set_data(1, WHEN)
    finally:
        telemetry.reset()
    assert recorded.spans()
    assert not any("conformance-secret" in text for text in recorded.texts())


@pytest.mark.parametrize(
    ("url", "caches"),
    [("memory://127.0.0.1:1[", False), ("redis://h:1[/0?cache=yes", True), ("x?cache=no", False)],
)
def test_the_scope_of_any_url_a_store_takes_is_read_without_parsing_the_rest(url, caches):
    assert telemetry.scope_for(url, "ns").caches is caches
