"""``python -m benchmarks.telemetry_cost``: what :mod:`sessionstore.telemetry` costs a call.

Per backend (memory, SQLite, Redis on a ``redis-server`` of its own), the time of one
call of a mix (``set_data``, then ``get_data`` of a plain value, and an
``events.append`` of one event) in three modes:

* ``bare``: the flows driven directly, as before telemetry existed (``flows.run`` and
  ``flows.arun`` replaced by the drivers for the measurement);
* ``off``: telemetry present, no provider set (what a user without OpenTelemetry, or
  without an SDK configured, gets);
* ``metrics``: the OpenTelemetry SDK's meter provider recording every instrument, and
  no tracer provider (no spans);
* ``on``: the OpenTelemetry SDK recording every instrument and span: a
  ``MeterProvider`` with an in-memory reader and a ``TracerProvider`` whose
  ``BatchSpanProcessor`` hands the spans to an exporter that drops them (the export
  itself runs in the SDK's thread, as in production).

Each mode runs ``--calls`` calls, ``--rounds`` times, the modes taking turns (a shared
machine slows whatever runs when it is busy); the median of each mode's fastest rounds
is printed, and the ratios ``off / bare``, ``metrics / off`` and ``on / off``.
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
MODES = ("bare", "off", "metrics", "on")


def _bare_run(flow: Any, backend: Any) -> Any:
    """:func:`sessionstore.flows.run` without the telemetry hook, for the flows of the mix
    (which yield backend calls only)."""

    def resolve(step: flows.Call) -> Any:
        return functools.partial(getattr(backend, step.name), *step.args, **step.kwargs)

    return drive(flow, resolve)


@contextmanager
def _mode(mode: str) -> Iterator[None]:
    original = flows.run
    if mode == "bare":
        flows.run = _bare_run  # type: ignore[assignment]
        for module in _runners():
            module.run = _bare_run  # type: ignore[attr-defined]
    try:
        if mode in ("metrics", "on"):
            _configure_sdk(spans=mode == "on")
        yield
    finally:
        flows.run = original
        for module in _runners():
            module.run = original  # type: ignore[attr-defined]
        telemetry.reset()


def _runners() -> Sequence[Any]:
    from sessionstore import store

    return (store,)


@functools.cache
def _sdk_providers() -> tuple[Any, Any]:
    """One meter and one tracer provider of the SDK, made once (each tracer provider's
    batch processor runs a thread of its own)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    # A busy machine starves the export thread: spans it drops are not the point here.
    logging.getLogger("opentelemetry.sdk").setLevel(logging.ERROR)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Dropping()))
    return MeterProvider(metric_readers=[InMemoryMetricReader()]), tracer_provider


def _configure_sdk(spans: bool) -> None:
    meter_provider, tracer_provider = _sdk_providers()
    if spans:
        telemetry.configure(meter_provider=meter_provider, tracer_provider=tracer_provider)
    else:  # no global tracer provider is set here: metrics only
        telemetry.configure(meter_provider=meter_provider)


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


def measure(url: str, rounds: int, calls: int) -> dict[str, list[float]]:
    """Microseconds per mix of calls, one figure per round, by mode."""
    found: dict[str, list[float]] = {mode: [] for mode in MODES}
    with sessionstore.connect(url, "telemetry-bench") as store:
        call = _calls(store)
        for n in range(calls):  # warm: connections, scripts, caches
            call(n)
        for _ in range(rounds):
            for mode in MODES:
                with _mode(mode):
                    started = time.perf_counter()
                    for n in range(calls):
                        call(n)
                    found[mode].append((time.perf_counter() - started) / calls * 1e6)
    return found


def _typical(figures: list[float]) -> float:
    """The median of the fastest half: what a call costs when nothing else interferes."""
    fastest = sorted(figures)[: max(1, len(figures) // 2)]
    return statistics.median(fastest)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300)
    options = parser.parse_args(argv)
    print(
        f"{'backend':8} {'bare us':>8} {'off us':>8} {'metrics us':>10} {'on us':>8} "
        f"{'off/bare':>9} {'metrics/off':>12} {'on/off':>7}"
    )
    with tempfile.TemporaryDirectory() as folder, RedisServer() as server:
        urls = {
            "memory": "memory://",
            "sqlite": f"sqlite:///{folder}/bench.db",
            "redis": f"{server.url}?durability=none",
        }
        for name, url in urls.items():
            found = measure(url, options.rounds, options.calls)
            bare, off, metrics, on = (_typical(found[mode]) for mode in MODES)
            print(
                f"{name:8} {bare:8.1f} {off:8.1f} {metrics:10.1f} {on:8.1f} "
                f"{off / bare:9.3f} {metrics / off:12.3f} {on / off:7.3f}"
            )


if __name__ == "__main__":
    main()
