"""The lossless check of event data given as Python objects, without a backend.

* the check of a typical 300-byte agent event (a ``tool/call`` whose data is a nested
  dict of strings and ints with a list), 100 events per batch as ``append`` checks
  them: what ``sessionstore/jsondata.py`` ``plain`` costs an event (one strict msgpack
  pass over the batch's data and a search of its doubles for NaN or infinity), against
  the budget of 1 µs an event. The settings line adds the same check for one event
  alone, the round trip it replaces (``orjson.loads`` and a comparison), and all that
  ``encode_batch`` adds to the baseline's one ``orjson.dumps`` per event (the checks of
  the event fields and harness fields as well). What that costs an ``append`` against
  the raw script call is the row "Redis event log: append 100 events per call".
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from sessionstore import SessionEvent
from sessionstore.eventlog import encode_batch
from sessionstore.jsondata import plain

from . import workload
from .harness import Result, Sizes

AREA = "Event data check"
#: The budget of the check, per event.
BUDGET_NS = 1000.0
BATCH = 100

#: A typical agent event's data: 300 bytes of canonical JSON.
AGENT_EVENT: dict[str, Any] = {
    "turn": 12,
    "step": 1,
    "call_id": "call_000012",
    "name": "bash",
    "arguments": {
        "cmd": "pytest -x tests/test_store.py -k append",
        "timeout": 120,
        "env": {"CI": "1"},
    },
    "content": "Running the failing test alone before changing it.",
    "paths": ["tests/test_store.py", "tests/conftest.py", "sessionstore/store.py"],
    "attempt": 2,
}


def fresh_data(count: int) -> list[dict[str, Any]]:
    """``count`` equal copies of :data:`AGENT_EVENT`, each its own objects."""
    text = orjson.dumps(AGENT_EVENT)
    return [orjson.loads(text) for _ in range(count)]


def events(datas: list[dict[str, Any]]) -> list[SessionEvent]:
    return [
        SessionEvent(seq=seq, type="tool/call", time=workload.T0 + seq, data=data)
        for seq, data in enumerate(datas)
    ]


def per_event_ns(action: Callable[[Any], object], make: Callable[[], Any], rounds: int) -> float:
    """Nanoseconds per event of ``action`` over ``rounds`` inputs from ``make`` (each of
    :data:`BATCH` events, built untimed), the garbage collector off while it runs."""
    inputs = [make() for _ in range(rounds)]
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        for given in inputs:
            action(given)
        return (time.perf_counter() - started) / rounds / BATCH * 1e9
    finally:
        gc.enable()


def _records(batch: list[SessionEvent]) -> list[dict[str, Any]]:
    return [{"seq": e.seq, "type": e.type, "time": e.time, "data": e.data} for e in batch]


def _raw_texts(batch: list[SessionEvent]) -> list[bytes]:
    dumps = orjson.dumps
    return [dumps({"seq": e.seq, "type": e.type, "time": e.time, "data": e.data}) for e in batch]


def _round_trip(datas: list[dict[str, Any]]) -> bool:
    loads, dumps = orjson.loads, orjson.dumps
    return all(loads(dumps(data)) == data for data in datas)


def check_results(_url: str, sizes: Sizes) -> list[Result]:
    """The check's cost an event against its budget (medians of ``sizes.reps * 2``
    repetitions, the parts measured in turns)."""
    assert 290 <= len(orjson.dumps(AGENT_EVENT)) <= 310 and plain(fresh_data(BATCH))
    rounds = max(4, sizes.batch_calls * 5)
    costs: dict[str, list[float]] = {
        name: [] for name in ("batch", "alone", "round trip", "encode", "raw")
    }
    for _ in range(sizes.reps * 2):
        costs["batch"].append(per_event_ns(plain, lambda: fresh_data(BATCH), rounds))
        costs["alone"].append(
            per_event_ns(lambda datas: list(map(plain, datas)), lambda: fresh_data(BATCH), rounds)
        )
        costs["round trip"].append(per_event_ns(_round_trip, lambda: fresh_data(BATCH), rounds))
        costs["encode"].append(
            per_event_ns(
                lambda batch: encode_batch("bench", batch),
                lambda: events(fresh_data(BATCH)),
                rounds,
            )
        )
        costs["raw"].append(per_event_ns(_raw_texts, lambda: events(fresh_data(BATCH)), rounds))
    median = {name: statistics.median(values) for name, values in costs.items()}
    added = [ours - raw for ours, raw in zip(costs["encode"], costs["raw"], strict=True)]
    settings = (
        f"no backend; a 300-byte agent event ({BATCH} per batch); medians of "
        f"{len(costs['batch'])} repetitions: the check of one event alone "
        f"{median['alone']:,.0f} ns, the round trip it replaces (orjson.loads and a "
        f"comparison) {median['round trip']:,.0f} ns, encode_batch (event fields, harness "
        f"fields, this check, the texts) {median['encode']:,.0f} ns against one orjson.dumps "
        f"per event {median['raw']:,.0f} ns, adding {statistics.median(added):,.0f} ns"
    )
    return [
        Result(
            AREA,
            f"lossless check of a 300-byte agent event, {BATCH} per batch",
            "the budget of 1 µs an event",
            median["batch"],
            BUDGET_NS,
            "ns/event",
            1.0,
            settings,
            lower_is_better=True,
            samples={"ours": costs["batch"], "baseline": [BUDGET_NS] * len(costs["batch"])},
        )
    ]


if __name__ == "__main__":
    for row in check_results("", Sizes()):
        print(f"{row.key}: {row.ours:,.0f} ns/event ({row.ratio:.2f} of the budget)")
        print(row.settings)
