"""Metrics and traces of every store operation, through the OpenTelemetry API.

Optional (``pip install sessionstore[otel]``): nothing of ``opentelemetry`` is imported
until the first operation, and only then if the process imported it already (or names a
provider in ``OTEL_PYTHON_METER_PROVIDER`` / ``OTEL_PYTHON_TRACER_PROVIDER``): no provider
can be set otherwise. Whether to record is decided once, at the first operation (or by
:func:`configure`): with the API missing, or
with neither a global meter provider nor a global tracer provider set (the API's own
proxies and no-op providers count as none), telemetry is off and an operation pays one
module attribute read. Set the global providers before a store's first call, or call
:func:`configure` (with providers of your own, or none: the global ones are looked at
again) afterwards.

One seam: every operation of the public API, sync and async, is a flow driven by
:func:`sessionstore.flows.run` or :func:`sessionstore.flows.arun`, and these hand it to
:meth:`Telemetry.run` / :meth:`Telemetry.arun` when telemetry is on. The operation is
the flow's name (:data:`OPERATIONS`), its database system and namespace are those its
store bound to its backends (:func:`bind`). What is recorded (names, units, attributes)
is tabled in ``docs/observability.md``.

Never recorded: a value, event data, a URL or a password, an exception's message (only
its type, as ``error.type``). Session ids and value keys only with
``configure(record_ids=True)``.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, Literal
from urllib.parse import parse_qs

from .defaults import CACHE_STALENESS_BOUND
from .leases import TakenOver
from .version import __version__

#: The attribute a store sets on each of its backends: the backend's :class:`Scope`.
SCOPE_ATTR = "_sessionstore_telemetry_scope"

#: ``db.client.operation.duration`` buckets (seconds), as the semantic conventions advise.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)

#: ``db.operation.name`` of each flow (by its qualified name): the public method it runs.
OPERATIONS = {
    "ready": "wait_for_init",
    "get_data": "get_data",
    "set_data": "set_data",
    "put": "put",
    "get_or_compute": "get_or_compute",
    "update": "update",
    "set_value_retention": "set_ttl",
    "delete_value": "delete",
    "value_records": "records",
    "list_values": "list_values",
    "check_durable": "check_durable",
    "create": "events.create",
    "append": "events.append",
    "load": "events.load",
    "inspect_session": "events.inspect",
    "info": "events.info",
    "list_info": "events.list_info",
    "stored_bytes": "events.stored_bytes",
    "set_retention": "events.set_ttl",
    "fork": "events.fork",
    "read_from": "events.read_from",
    "read_records_from": "events.read_records_from",
    "EventPages.next": "events.read_page",
    "list_sessions": "events.list",
    "delete_session": "events.delete",
    "prune": "events.prune",
    "open_buffer": "writer.open",
    "WriterBuffer.write": "writer.flush",
    "WriterBuffer.finish": "writer.close",
}

#: The histograms (in seconds) and counters: (attribute, name, unit, description).
INSTRUMENTS = (
    (
        "duration",
        "db.client.operation.duration",
        "s",
        "Duration of a store operation (a call of the public API).",
    ),
    (
        "retries",
        "sessionstore.operation.retries",
        "{retry}",
        "Times an update ran its fn again after losing a race.",
    ),
    ("resends", "sessionstore.redis.resends", "{send}", "Redis commands sent again, by reason."),
    (
        "waits",
        "db.client.connection.wait_time",
        "s",
        "Time a call waited for a free connection of its pool.",
    ),
    (
        "leases",
        "sessionstore.lease.acquisitions",
        "{acquisition}",
        "Attempts to take a lease, by kind and outcome.",
    ),
    (
        "takeovers",
        "sessionstore.lease.takeovers",
        "{takeover}",
        "Leases taken from another holder that failed, died, lapsed or was paused"
        " (counted by the taker).",
    ),
    (
        "losses",
        "sessionstore.lease.losses",
        "{lease}",
        "Writer leases another writer took over, counted by the writer that lost it"
        " when it next flushes or closes (a dead writer counts none).",
    ),
    ("computes", "sessionstore.compute.outcomes", "{call}", "get_or_compute calls, by outcome."),
    (
        "cache",
        "sessionstore.cache.requests",
        "{request}",
        "Value reads on a store with a cache, answered by it (hit) or not.",
    ),
    (
        "invalidations",
        "sessionstore.cache.invalidations",
        "{entry}",
        "Cached value reads dropped because the value changed (Redis told of a write,"
        " or of the database emptied or swapped).",
    ),
)

#: The attributes of what is counted outside any operation, on Redis.
_REDIS = {"db.system.name": "redis"}

#: Backend calls that take a lease: the lease's kind.
_LEASE_CALLS = {"acquire_lease": "writer", "acquire_compute_lease": "compute"}
#: The operations of a writer holding its lease: a takeover fences them off.
_WRITER_CALLS = frozenset({"writer.flush", "writer.close"})

#: ``db.system.name`` by URL scheme (the local stores have no registered name).
_SYSTEMS = {
    "redis": "redis",
    "rediss": "redis",
    "unix": "redis",
    "redis+sentinel": "redis",
    "rediss+sentinel": "redis",
    "sqlite": "sqlite",
    "memory": "sessionstore.memory",
    "dummy": "sessionstore.dummy",
    "file": "sessionstore.files",
    "": "sessionstore.files",
}


class Scope:
    """Where a backend's operations happen: ``db.system.name``, ``db.namespace`` and
    whether its value reads may be answered from a cache (``?cache=yes``)."""

    __slots__ = (
        "system",
        "namespace",
        "caches",
        "lifecycle",
        "_attributes",
        "_operations",
        "__weakref__",
    )

    def __init__(self, system: str, namespace: str, caches: bool = False) -> None:
        self.system = system
        self.namespace = namespace
        self.caches = caches
        #: The closed flag of the store working here (a store sets it), if any.
        self.lifecycle: Any = None
        self._attributes = {"db.system.name": system, "db.namespace": namespace}
        self._operations: dict[str, Operation] = {}

    def span_name(self, operation: str) -> str:
        """``{db.operation.name} {db.namespace}``, as the conventions name a client span."""
        return self.operation(operation).span_name

    def attributes(self, operation: str | None = None) -> dict[str, str]:
        """The attributes of ``operation`` here (made once; never changed by a caller)."""
        return self._attributes if operation is None else self.operation(operation).attributes

    def operation(self, name: str) -> Operation:
        """The :class:`Operation` of the flow named ``name`` (its qualified name, or an
        operation's name) here, made at its first call."""
        found = self._operations.get(name)
        if found is None:
            found = self._operations[name] = Operation(self, OPERATIONS.get(name, name))
        return found


class Operation:
    """What every call of one operation in one :class:`Scope` shares, made once: its
    span name and attribute dicts (the SDK is handed the same dict on every call; no
    caller changes it)."""

    __slots__ = (
        "name",
        "span_name",
        "attributes",
        "redis",
        "compute",
        "writes",
        "_variants",
    )

    def __init__(self, scope: Scope, name: str) -> None:
        self.name = name
        self.span_name = f"{name} {scope.namespace}".rstrip()
        self.attributes = {**scope.attributes(), "db.operation.name": name}
        self.redis = scope.system == "redis"
        self.compute = name == "get_or_compute"
        self.writes = name in _WRITER_CALLS
        self._variants: dict[tuple[str, ...], dict[str, str]] = {}

    def with_(self, *pairs: str) -> dict[str, str]:
        """The operation's attributes plus ``pairs`` (name, value, name, value...),
        made once per distinct ``pairs``."""
        found = self._variants.get(pairs)
        if found is None:
            found = {**self.attributes, **dict(zip(pairs[::2], pairs[1::2], strict=True))}
            self._variants[pairs] = found
        return found


_UNBOUND = Scope("sessionstore", "")


def scope_for(url: str, namespace: str, cache: bool | None = None) -> Scope:
    """The scope of a store on ``url`` (a masked or a full URL: only its scheme and its
    ``?cache=`` are read) in ``namespace``."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    query = url.partition("?")[2].partition("#")[0]  # urlsplit refuses some URLs a store takes
    caches = bool(cache) or parse_qs(query).get("cache") == ["yes"]
    scope = Scope(_SYSTEMS.get(scheme, "sessionstore." + scheme), namespace, caches)
    if caches:
        _caching.add(scope)
    return scope


#: The scopes of the stores with a cache (while their stores live).
_caching: weakref.WeakSet[Scope] = weakref.WeakSet()


def bind(scope: Scope, *backends: object) -> None:
    """Mark ``backends`` as working in ``scope`` (a store does, as it is made; no I/O)."""
    for backend in backends:
        setattr(backend, SCOPE_ATTR, scope)


#: None until looked at (the first operation, or :func:`configure`); then False (off)
#: or the :class:`Telemetry` recording.
current: Telemetry | Literal[False] | None = None
_looking = threading.Lock()


def configure(
    *,
    meter_provider: Any = None,
    tracer_provider: Any = None,
    record_ids: bool = False,
    enabled: bool = True,
) -> None:
    """Record with ``meter_provider`` and ``tracer_provider`` (each defaults to the global
    one of ``opentelemetry.metrics`` / ``opentelemetry.trace``, looked at now), from the
    next operation on, in every store of the process. ``record_ids=True`` adds the
    session id (``sessionstore.session.id``) or value key (``sessionstore.value.key``:
    ``symbol/strategy/exchange/frame/mode``) to each span; off by default, since ids may
    name customers or accounts. ``enabled=False`` turns telemetry off. Without the
    OpenTelemetry API installed, or with neither provider given nor set globally,
    telemetry is off and this returns quietly."""
    global current
    with _looking:
        current = _build(meter_provider, tracer_provider, record_ids) if enabled else False


def reset() -> None:
    """Forget the decision: the next operation looks at the global providers again."""
    global current
    with _looking:
        current = None


def look() -> Telemetry | None:
    """The recording :class:`Telemetry`, deciding at the first call (see the module doc)."""
    global current
    found = current
    if found is None:
        with _looking:
            if current is None:
                # No provider can be set where nothing imported the API (a provider named
                # in the environment is loaded by it): off, without importing it.
                current = _build(None, None, False) if _api_in_use() else False
            found = current
    return found or None


def _api_in_use() -> bool:
    """Whether the OpenTelemetry API is imported in this process, or a provider is named
    in the environment (``OTEL_PYTHON_METER_PROVIDER``, ``OTEL_PYTHON_TRACER_PROVIDER``)."""
    return "opentelemetry" in sys.modules or any(
        os.environ.get(name)
        for name in ("OTEL_PYTHON_METER_PROVIDER", "OTEL_PYTHON_TRACER_PROVIDER")
    )


def _build(
    meter_provider: Any, tracer_provider: Any, record_ids: bool
) -> Telemetry | Literal[False]:
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return False
    if meter_provider is None:
        meter_provider = _set(metrics.get_meter_provider(), "opentelemetry.metrics")
    if tracer_provider is None:
        tracer_provider = _set(trace.get_tracer_provider(), "opentelemetry.trace")
    if meter_provider is None and tracer_provider is None:
        return False
    return Telemetry(meter_provider, tracer_provider, record_ids)


def _set(provider: Any, api: str) -> Any:
    """``provider`` unless it is one of the API package's own: a proxy for a provider not
    set yet, or a no-op one."""
    return None if type(provider).__module__.startswith(api) else provider


def cache_read(backend: object, hit: bool) -> None:
    """Count a value read the backend's cache answered (``hit``) or did not, on a store
    with a cache; nothing when telemetry is off."""
    found = current
    if found:
        found.cache_read(backend, hit)  # type: ignore[union-attr]


def resent(reason: str) -> None:
    """Count a Redis send repeated for ``reason`` (and note it on the current span)."""
    found = current
    if found:
        found.resent(reason)  # type: ignore[union-attr]


def connection_waited(seconds: float, pool: str) -> None:
    """Record a wait of ``seconds`` for a connection of ``pool``."""
    found = current
    if found:
        found.connection_waited(seconds, pool)  # type: ignore[union-attr]


def cache_invalidated(count: int) -> None:
    """Count ``count`` cached value reads dropped because their values changed."""
    found = current
    if found and found.metered:
        found.invalidations.add(count, _REDIS)


def track_writer(buffer: Any, backend: object) -> None:
    """Count ``buffer``'s queued events in ``sessionstore.writer.queue.depth`` while it
    lives (read when the metrics are collected: nothing per emit), telemetry on now or
    only later."""
    _writers[buffer] = getattr(backend, SCOPE_ATTR, _UNBOUND)


class Telemetry:
    """The instruments and the tracer that record the store's operations."""

    duration: Any
    retries: Any
    resends: Any
    waits: Any
    leases: Any
    takeovers: Any
    losses: Any
    computes: Any
    cache: Any
    invalidations: Any

    def __init__(self, meter_provider: Any, tracer_provider: Any, record_ids: bool) -> None:
        from opentelemetry import context, trace

        self._trace = trace
        self._attach = context.attach
        self._detach = context.detach
        self._in_context = trace.set_span_in_context
        self._client = trace.SpanKind.CLIENT
        self.record_ids = record_ids
        self.tracer = (
            None
            if tracer_provider is None
            else tracer_provider.get_tracer("sessionstore", __version__)
        )
        self._lost: weakref.WeakSet[Any] = weakref.WeakSet()
        self.metered = meter_provider is not None
        self.meter_provider = meter_provider
        if meter_provider is None:
            return
        meter = meter_provider.get_meter("sessionstore", __version__)
        for attribute, name, unit, description in INSTRUMENTS:
            if unit == "s":
                made = meter.create_histogram(
                    name,
                    unit=unit,
                    description=description,
                    explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
                )
            else:
                made = meter.create_counter(name, unit=unit, description=description)
            setattr(self, attribute, made)
        with _looking_gauges:
            # A meter keeps the first instrument of a name, and its callback: one gauge
            # per provider, which reads whichever Telemetry records with it now.
            if not any(made is meter_provider for made in _GAUGED):
                meter.create_observable_gauge(
                    "sessionstore.writer.queue.depth",
                    callbacks=[functools.partial(_queue_depths, meter_provider)],
                    unit="{event}",
                    description="Events emitted to write-behind writers and not yet durable.",
                )
                meter.create_observable_gauge(
                    "sessionstore.cache.staleness_bound",
                    callbacks=[functools.partial(_staleness_bounds, meter_provider)],
                    unit="s",
                    description="How far behind the server a store's cache may answer.",
                )
                _GAUGED.append(meter_provider)

    # -- one operation --------------------------------------------------------------

    def run(
        self,
        flow: Any,
        backend: Any,
        resolve: Callable[[Any, Any], Any],
        drive: Callable[..., Any],
    ) -> Any:
        """``drive(flow, ...)`` recorded: a span around it, its duration and outcome."""
        watch = _Watch(self, flow, backend, resolve, False)
        try:
            result = drive(flow, watch.resolve)
        except BaseException as error:
            watch.finish(error)
            raise
        watch.finish(None)
        return result

    async def arun(
        self,
        flow: Any,
        backend: Any,
        resolve: Callable[[Any, Any], Any],
        adrive: Callable[..., Any],
    ) -> Any:
        """:meth:`run` for the async driver."""
        watch = _Watch(self, flow, backend, resolve, True)
        try:
            result = await adrive(flow, watch.resolve)
        except BaseException as error:
            watch.finish(error)
            raise
        watch.finish(None)
        return result

    # -- outside a flow ---------------------------------------------------------------

    def cache_read(self, backend: object, hit: bool) -> None:
        scope: Scope = getattr(backend, SCOPE_ATTR, _UNBOUND)
        if self.metered and scope.caches:
            read = scope.operation("get_data")
            self.cache.add(1, read.with_("sessionstore.cache.result", "hit" if hit else "miss"))

    def resent(self, reason: str) -> None:
        watch = _running.get()
        if self.metered:
            pair = ("sessionstore.resend.reason", reason)
            attributes = (
                {"db.system.name": "redis", pair[0]: reason}
                if watch is None
                else watch.operation.with_(*pair)
            )
            self.resends.add(1, attributes)
        if watch is not None and watch.span is not None:
            watch.span.add_event("resend", {"sessionstore.resend.reason": reason})

    def connection_waited(self, seconds: float, pool: str) -> None:
        if self.metered:
            self.waits.record(
                seconds, {"db.system.name": "redis", "db.client.connection.pool.name": pool}
            )
        watch = _running.get()
        if watch is not None and watch.span is not None:
            watch.span.add_event("connection wait", {"sessionstore.wait.seconds": seconds})


#: The write-behind writers open in this process, by their store's scope (tracked
#: whether telemetry is on or not: it may be turned on while they are open).
_writers: weakref.WeakKeyDictionary[Any, Scope] = weakref.WeakKeyDictionary()
#: The meter providers given a queue-depth gauge (a provider is held for good: one per
#: configuration a process makes).
_GAUGED: list[Any] = []
_looking_gauges = threading.Lock()


def _records_with(meter_provider: Any) -> bool:
    """Whether telemetry records metrics with ``meter_provider`` now (a gauge made for
    it reports nothing once another one, or none, is configured)."""
    found = current
    return bool(found) and found.meter_provider is meter_provider  # type: ignore[union-attr]


def _queue_depths(meter_provider: Any, options: Any) -> Iterator[Any]:
    """The queue depth of every open writer, by scope, while telemetry records metrics
    with ``meter_provider``."""
    from opentelemetry.metrics import Observation

    if not _records_with(meter_provider):
        return
    depths: dict[Scope, int] = {}
    for buffer, scope in list(_writers.items()):
        if not buffer.released:
            depths[scope] = depths.get(scope, 0) + len(buffer.pending)
    for scope, depth in depths.items():
        yield Observation(depth, scope.attributes())


def _staleness_bounds(meter_provider: Any, options: Any) -> Iterator[Any]:
    """The staleness bound of the cache of every store that has one, while telemetry
    records metrics with ``meter_provider``."""
    from opentelemetry.metrics import Observation

    if not _records_with(meter_provider):
        return
    seen = set()
    for scope in list(_caching):
        if scope.lifecycle is not None and scope.lifecycle.closed:
            continue  # a closed store has no cache any more
        attributes = scope.attributes()
        if (scope.system, scope.namespace) not in seen:
            seen.add((scope.system, scope.namespace))
            yield Observation(CACHE_STALENESS_BOUND, attributes)


#: The operation running in this thread or task, on a Redis backend (where resends and
#: connection waits happen), so that they carry its attributes and land on its span.
_running: ContextVar[_Watch | None] = ContextVar("sessionstore_telemetry_watch", default=None)


class _Watch:
    """One operation from start to finish: its span (only while it records), its
    pauses and leases, its outcome. Made and finished by :meth:`Telemetry.run`: no
    context manager, no closure per call."""

    __slots__ = (
        "telemetry",
        "operation",
        "backend",
        "resolve_step",
        "is_async",
        "span",
        "started",
        "paused",
        "held",
        "applied",
        "using",
        "running",
        "buffer",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        flow: Any,
        backend: Any,
        resolve_step: Callable[[Any, Any], Any],
        is_async: bool,
    ) -> None:
        operation = getattr(backend, SCOPE_ATTR, _UNBOUND).operation(flow.__qualname__)
        self.telemetry = telemetry
        self.operation = operation
        self.backend = backend
        self.resolve_step = resolve_step
        self.is_async = is_async
        self.paused = False  # a Sleep, or a lease found busy
        self.held = False  # user code ran under a compute lease
        self.applied = False  # user code ran (update's fn): once more is a retry
        self.using: Any = None
        self.running: Any = None
        # The writer whose flush or close this is: a lost lease is counted once per writer.
        self.buffer = _owner(flow) if operation.writes and telemetry.metered else None
        span = None
        tracer = telemetry.tracer
        if tracer is not None:
            attributes = operation.attributes
            span = tracer.start_span(
                operation.span_name,
                kind=telemetry._client,
                attributes={**attributes, **_ids(flow)} if telemetry.record_ids else attributes,
            )
            if span.is_recording():  # a span the sampler dropped is never made current
                self.using = telemetry._attach(telemetry._in_context(span))
            else:
                span = None
        self.span = span
        if operation.redis:
            self.running = _running.set(self)
        self.started = time.perf_counter()

    def resolve(self, step: Any) -> Any:
        """The driver's step resolver: the backend's, noting pauses, retries, leases."""
        kind = type(step).__name__
        if kind == "Call":
            lease = _LEASE_CALLS.get(step.name)
            if lease is None:
                return self.resolve_step(self.backend, step)
            return self._leasing(lease, self.resolve_step(self.backend, step))
        if kind == "Sleep":
            self.pause(step.seconds)
        elif kind == "Apply":
            if self.applied:
                self.retry()
            self.applied = True
        elif kind == "Hold":
            self.held = True
            if self.span is not None:
                self.span.add_event("compute")
        return self.resolve_step(self.backend, step)

    def _leasing(self, lease: str, resolved: Any) -> Any:
        if self.is_async:

            async def leased() -> Any:
                return self.leased(lease, await resolved())

            return leased
        return lambda: self.leased(lease, resolved())

    def pause(self, seconds: float) -> None:
        """A wait for another caller's result, or a back-off before a retry."""
        self.paused = True
        if self.span is not None:
            name = "wait" if self.operation.compute else "backoff"
            self.span.add_event(name, {"sessionstore.pause.seconds": seconds})

    def retry(self) -> None:
        """User code run again: the operation lost a race and starts over."""
        if self.span is not None:
            self.span.add_event("retry")
        if self.telemetry.metered:
            self.telemetry.retries.add(1, self.operation.attributes)

    def leased(self, kind: str, taken: Any) -> Any:
        """Note a lease taken (an epoch, a :class:`~sessionstore.leases.TakenOver` one
        when a writer's lease lapsed unreleased; True for a compute lease) or not."""
        if not taken:
            outcome = "busy"
            self.paused = True
        elif self.paused or type(taken) is TakenOver:
            outcome = "takeover"
        else:
            outcome = "acquired"
        if self.span is not None:
            self.span.add_event(
                "lease", {"sessionstore.lease.kind": kind, "sessionstore.lease.outcome": outcome}
            )
        telemetry = self.telemetry
        if telemetry.metered:
            pairs = ("sessionstore.lease.kind", kind, "sessionstore.lease.outcome", outcome)
            telemetry.leases.add(1, self.operation.with_(*pairs))
            if outcome == "takeover":
                telemetry.takeovers.add(1, self.operation.with_(*pairs[:2]))
        return taken

    def finish(self, error: BaseException | None) -> None:
        elapsed = time.perf_counter() - self.started
        telemetry = self.telemetry
        operation = self.operation
        try:
            if telemetry.metered:
                if error is None:
                    telemetry.duration.record(elapsed, operation.attributes)
                else:
                    self._failed(error, elapsed)
                if operation.compute:
                    outcome = self._computed(error)
                    telemetry.computes.add(
                        1, operation.with_("sessionstore.compute.outcome", outcome)
                    )
            span = self.span
            if span is not None:
                if error is not None:
                    kind = type(error).__qualname__
                    span.set_attribute("error.type", kind)
                    span.set_status(
                        telemetry._trace.Status(telemetry._trace.StatusCode.ERROR, kind)
                    )
                span.end()
        finally:
            if self.running is not None:
                _running.reset(self.running)
            if self.using is not None:
                telemetry._detach(self.using)

    def _failed(self, error: BaseException, elapsed: float) -> None:
        telemetry = self.telemetry
        kind = type(error).__qualname__
        telemetry.duration.record(elapsed, self.operation.with_("error.type", kind))
        buffer = self.buffer
        if kind == "SessionBusyError" and buffer is not None and buffer not in telemetry._lost:
            # A writer's flush or close refused by its fence: another writer took its lease
            # (and counted the takeover); this one counts the lease it lost, once.
            telemetry._lost.add(buffer)
            telemetry.losses.add(1, self.operation.with_("sessionstore.lease.kind", "writer"))

    def _computed(self, error: BaseException | None) -> str:
        if error is not None:
            return "timed_out" if type(error).__name__ == "ComputeTimeoutError" else "error"
        if self.held:
            return "computed"
        return "waited" if self.paused else "reused"


def _owner(flow: Any) -> Any:
    """The object whose method ``flow`` is (a writer's buffer), read from its frame."""
    frame = getattr(flow, "gi_frame", None) or getattr(flow, "cr_frame", None)
    return None if frame is None else frame.f_locals.get("self")


def _ids(flow: Any) -> dict[str, str]:
    """The session id or value key an operation works on, read from its arguments."""
    found = getattr(flow, "gi_frame", None)
    values = {} if found is None else found.f_locals
    state = values.get("state")
    if state is not None and hasattr(state, "key"):
        return {"sessionstore.value.key": state.key.label()}
    owner = values.get("self")
    for name in ("session_id", "parent_id"):
        if isinstance(values.get(name), str):
            return {"sessionstore.session.id": values[name]}
    header = values.get("header")
    if header is not None and isinstance(getattr(header, "id", None), str):
        return {"sessionstore.session.id": header.id}
    if owner is not None and isinstance(getattr(owner, "session_id", None), str):
        return {"sessionstore.session.id": owner.session_id}
    return {}
