"""``python -m benchmarks.telemetry_cost``: what :mod:`sessionstore.telemetry` costs a call.

Per backend (memory, SQLite, Redis on a ``redis-server`` of its own), the time of one
call of a mix (``set_data``, then ``get_data`` of a plain value, and an
``events.append`` of one event) in three modes:

* ``bare``: the flows driven directly, as before telemetry existed (``flows.run`` and
  ``flows.arun`` replaced by the drivers for the measurement);
* ``off``: telemetry present, no provider set (what a user without OpenTelemetry, or
  without an SDK configured, gets);
* ``seam``: providers that record nothing (the API's no-op providers, subclassed so
  that they count as set): what :mod:`sessionstore.telemetry` itself costs, without
  any SDK's work;
* ``metrics``: the OpenTelemetry SDK's meter provider recording every instrument, and
  no tracer provider (no spans);
* ``sampled``: ``metrics`` plus the SDK's tracer provider with a sampler keeping one
  trace in a hundred (``ParentBased(TraceIdRatioBased(0.01))``): what a production
  setup that samples traces pays;
* ``on``: the OpenTelemetry SDK recording every instrument and span: a
  ``MeterProvider`` with an in-memory reader and a ``TracerProvider`` whose
  ``BatchSpanProcessor`` hands the spans to an exporter that drops them (the export
  itself runs in the SDK's thread, as in production).

Each mode runs ``--calls`` calls, ``--rounds`` times, the modes taking turns (a shared
machine slows whatever runs when it is busy); the median of each mode's fastest rounds
is printed, by wall clock and by the calling thread's CPU time, and what each mode adds
over ``off`` (see :func:`main`).

What a recording mode adds is split in two by running it once more with
:func:`_floor_run` in place of :meth:`sessionstore.telemetry.Telemetry.run`: the least any
instrumentation of a call does with the same providers and the same precomputed
attributes (a span started, made current and ended; the clock read twice; one histogram
record), with no bookkeeping of its own. That floor is the OpenTelemetry SDK's and API's
part (with the garbage the SDK leaves and its export thread); what the mode adds above
it is :mod:`sessionstore.telemetry`'s own.
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sessionstore  # noqa: E402
from benchmarks.servers import RedisServer  # noqa: E402
from sessionstore import flows, telemetry  # noqa: E402
from sessionstore.drive import drive  # noqa: E402

WHEN = 1_700_000_000_000
MODES = ("bare", "off", "seam", "metrics", "sampled", "on")
#: The recording modes also run with :func:`_floor_run` (as ``floor:<mode>``).
FLOORED = ("metrics", "sampled", "on")
RUNS = (*MODES, *(f"floor:{mode}" for mode in FLOORED))


def _bare_run(flow: Any, backend: Any) -> Any:
    """:func:`sessionstore.flows.run` without the telemetry hook, for the flows of the mix
    (which yield backend calls only)."""

    def resolve(step: flows.Call) -> Any:
        return functools.partial(getattr(backend, step.name), *step.args, **step.kwargs)

    return drive(flow, resolve)


def _floor_run(
    self: telemetry.Telemetry,
    flow: Any,
    backend: Any,
    resolve: Callable[[Any, Any], Any],
    drive: Callable[..., Any],
) -> Any:
    """The least a recording of one call does (the calls of the mix never fail, take
    no lease and resend nothing): a span with the operation's attributes, current while
    the flow runs; its duration recorded."""
    from opentelemetry import context, trace

    operation = getattr(backend, telemetry.SCOPE_ATTR).operation(flow.__qualname__)
    span, token = None, None
    if self.tracer is not None:
        span = self.tracer.start_span(
            operation.span_name, kind=trace.SpanKind.CLIENT, attributes=operation.attributes
        )
        if span.is_recording():
            token = context.attach(trace.set_span_in_context(span))
        else:
            span = None
    started = time.perf_counter()
    result = drive(flow, functools.partial(resolve, backend))
    self.duration.record(time.perf_counter() - started, operation.attributes)
    if span is not None:
        span.end()
    if token is not None:
        context.detach(token)
    return result


@contextmanager
def _mode(run: str) -> Iterator[None]:
    original, recorded = flows.run, telemetry.Telemetry.run
    floor, _, mode = run.rpartition(":")
    if floor:
        telemetry.Telemetry.run = _floor_run  # type: ignore[method-assign]
    if mode == "bare":
        flows.run = _bare_run  # type: ignore[assignment]
        for module in _runners():
            module.run = _bare_run  # type: ignore[attr-defined]
    try:
        if mode == "seam":
            telemetry.configure(**_null_providers())
        elif mode in ("metrics", "sampled", "on"):
            _configure_sdk(mode)
        yield
    finally:
        flows.run = original
        telemetry.Telemetry.run = recorded  # type: ignore[method-assign]
        for module in _runners():
            module.run = original  # type: ignore[attr-defined]
        telemetry.reset()


def _runners() -> Sequence[Any]:
    from sessionstore import store

    return (store,)


@functools.cache
def _sdk_providers() -> dict[str, Any]:
    """One meter provider and two tracer providers (every span; one trace in a hundred)
    of the SDK, made once (each tracer provider's batch processor runs a thread of its
    own)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    # A busy machine starves the export thread: spans it drops are not the point here.
    logging.getLogger("opentelemetry.sdk").setLevel(logging.ERROR)
    every = TracerProvider()
    every.add_span_processor(BatchSpanProcessor(Dropping()))
    sampled = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.01)))
    sampled.add_span_processor(BatchSpanProcessor(Dropping()))
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return {"meter": meter, "on": every, "sampled": sampled}


@functools.cache
def _null_providers() -> dict[str, Any]:
    """Providers that record nothing, yet count as set (the API's own do not)."""
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    class NullMeters(NoOpMeterProvider):
        pass

    class NullTracers(NoOpTracerProvider):
        pass

    return {"meter_provider": NullMeters(), "tracer_provider": NullTracers()}


def _configure_sdk(mode: str) -> None:
    providers = _sdk_providers()
    # No global tracer provider is set here: "metrics" records no span.
    telemetry.configure(meter_provider=providers["meter"], tracer_provider=providers.get(mode))


def _calls(store: sessionstore.Store) -> Callable[[int], None]:
    value = store.session("BTCUSDT", "bench", "binance", "1h")
    log = store.events
    header = sessionstore.SessionHeader(id=f"b-{uuid.uuid4().hex[:10]}", created_at=WHEN)
    log.create(header)
    seq = [0]

    def call(n: int) -> None:
        value.set_data({"n": n}, WHEN)
        value.get_data(WHEN)
        log.append(header.id, [{"seq": seq[0], "type": "user", "time": WHEN, "data": {}}])
        seq[0] += 1

    return call


def measure(url: str, rounds: int, calls: int) -> dict[str, dict[str, list[float]]]:
    """Microseconds per mix of calls, one figure per round, by clock (``wall``, and
    ``cpu``: the calling thread's CPU time) and mode."""
    found: dict[str, dict[str, list[float]]] = {"wall": {}, "cpu": {}}
    for clock in found.values():
        clock.update({run: [] for run in RUNS})
    with sessionstore.connect(url, "telemetry-bench") as store:
        call = _calls(store)
        for n in range(calls):  # warm: connections, scripts, caches
            call(n)
        for _ in range(rounds):
            for run in RUNS:
                with _mode(run):
                    started, used = time.perf_counter(), time.thread_time()
                    for n in range(calls):
                        call(n)
                    found["cpu"][run].append((time.thread_time() - used) / calls * 1e6)
                    found["wall"][run].append((time.perf_counter() - started) / calls * 1e6)
    return found


@contextmanager
def _backends() -> Iterator[dict[str, str]]:
    """The URL of each backend measured, by name: memory, SQLite in a temporary folder,
    Redis on a ``redis-server`` of its own."""
    with tempfile.TemporaryDirectory() as folder, RedisServer() as server:
        yield {
            "memory": "memory://",
            "SQLite": f"sqlite:///{folder}/bench.db",
            "Redis": f"{server.url}?durability=none",
        }


def _typical(figures: list[float]) -> float:
    """The median of the fastest half: what a call costs when nothing else interferes."""
    fastest = sorted(figures)[: max(1, len(figures) // 2)]
    return statistics.median(fastest)


def main(argv: list[str] | None = None) -> None:
    """Per backend five rows: wall-clock and CPU microseconds per mix by mode; ``added
    %``: the CPU time a mode adds to the calling thread over ``off``, as a share of the
    fastest wall-clock round of ``off`` (what the caller waits for); of it, ``floor %``:
    what the same mode adds with :func:`_floor_run` (OpenTelemetry's part), and ``ours
    %``: the rest (:mod:`sessionstore.telemetry`'s bookkeeping). On a busy machine the
    wall-clock figures swing (the SDK's export thread competes for a core too); the CPU
    time of the calling thread swings far less."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300)
    options = parser.parse_args(argv)
    print(f"{'backend':8} {'row':8} " + " ".join(f"{mode:>8}" for mode in MODES))
    with _backends() as urls:
        for name, url in urls.items():
            found = measure(url, options.rounds, options.calls)
            wall = {run: _typical(found["wall"][run]) for run in RUNS}
            cpu = {run: _typical(found["cpu"][run]) for run in RUNS}
            print(f"{name:8} {'wall us':8} " + " ".join(f"{wall[m]:8.1f}" for m in MODES))
            print(f"{name:8} {'cpu us':8} " + " ".join(f"{cpu[m]:8.1f}" for m in MODES))
            # The fastest round of ``off``: the share is never flattered by a slow machine.
            fastest = min(found["wall"]["off"])
            added = {run: (cpu[run] - cpu["off"]) / fastest * 100 for run in RUNS}
            print(f"{name:8} {'added %':8} " + " ".join(f"{added[m]:8.1f}" for m in MODES))
            floor = {m: added.get(f"floor:{m}") for m in MODES}
            print(f"{name:8} {'floor %':8} " + " ".join(_figure(floor[m]) for m in MODES))
            ours = {m: _less(added[m], floor[m]) for m in MODES}
            print(f"{name:8} {'ours %':8} " + " ".join(_figure(ours[m]) for m in MODES))


#: The rows of ``python -m benchmarks --only telemetry``: (mode, what the row says, the
#: target on ours / baseline: a call with that mode against the same call with none).
ROWS = (
    ("off", "a call mix, no provider set, against no telemetry at all", 1.05),
    ("metrics", "a call mix, every metric recorded by the OpenTelemetry SDK", 1.10),
    ("sampled", "a call mix, metrics and 1 trace in 100 recorded by the SDK", 1.10),
    ("on", "a call mix, every metric and span recorded by the SDK", 1.10),
)


def telemetry_results(_url: str, sizes: Any) -> list[Any]:
    """The rows of the ``telemetry`` group: per backend and mode, the calling thread's
    time per call mix (CPU added over ``off``, on the fastest wall-clock round of
    ``off``; ``off`` itself against ``bare``), lower is better; the settings say how
    much of it is OpenTelemetry's floor."""
    from benchmarks.harness import Result

    rounds, calls = max(4, sizes.reps * 2), sizes.calls * 2
    rows: list[Any] = []
    with _backends() as urls:
        for name, url in urls.items():
            found = measure(url, rounds, calls)
            cpu = {run: _typical(found["cpu"][run]) for run in RUNS}
            fastest = min(found["wall"]["off"])
            for mode, label, target in ROWS:
                base_mode = "bare" if mode == "off" else "off"
                base = fastest if mode != "off" else fastest - (cpu["off"] - cpu["bare"])
                floor = cpu.get(f"floor:{mode}")
                settings = f"{rounds} rounds of {calls} mixes (set_data, get_data, append 1)"
                if floor is not None:
                    settings += (
                        f"; OpenTelemetry's floor adds {floor - cpu['off']:.1f} us"
                        f" of the {cpu[mode] - cpu['off']:.1f} us"
                    )
                rows.append(
                    Result(
                        area=f"Telemetry ({name})",
                        scenario=label,
                        baseline_name="the same with "
                        + ("no telemetry" if mode == "off" else "none set"),
                        ours=base + (cpu[mode] - cpu[base_mode]),
                        baseline=base,
                        unit="us/mix",
                        target=target,
                        settings=settings,
                        lower_is_better=True,
                    )
                )
    return rows


def _less(value: float, floor: float | None) -> float | None:
    return None if floor is None else value - floor


def _figure(value: float | None) -> str:
    return f"{'':>8}" if value is None else f"{value:8.1f}"


if __name__ == "__main__":
    main()
