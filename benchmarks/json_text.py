"""Event data that is JSON text already, on Redis: ``append`` of :class:`JSONText` data
against the raw script call with the same texts.

* append, 1 and 100 events per call, each event's ``data`` the canonical JSON text of
  the workload's data (as an agent harness holds a model's tool-call arguments):
  ``store.events.append`` of events whose data is ``JSONText``, against ``EVALSHA`` of
  ``lua/log_append.lua`` by redis-py whose event texts embed the same data texts as
  they are (``orjson.Fragment``, no parse, no checks). Ours parses every text once to
  check it and keeps it as it is.
"""

from __future__ import annotations

from typing import Any

import orjson

from sessionstore import JSONText, SessionEvent

from . import workload
from .harness import Result, Sizes
from .redis_log import OurLog, RawLog, append_results


def text_batches(first: int, calls: int, size: int) -> list[list[SessionEvent]]:
    """:func:`workload.batches` with each event's data as its canonical JSON text."""
    return [
        [
            SessionEvent(seq=e.seq, type=e.type, time=e.time, data=JSONText(orjson.dumps(e.data)))
            for e in batch
        ]
        for batch in workload.batches(first, calls, size)
    ]


def raw_text_batches(first: int, calls: int, size: int) -> list[list[Any]]:
    """:func:`text_batches` with each data text as an ``orjson.Fragment``, which
    ``raw_args`` writes into the event's text as it is."""
    return [
        [e.model_copy(update={"data": orjson.Fragment(bytes(e.data))}) for e in batch]
        for batch in text_batches(first, calls, size)
    ]


class OurTextLog(OurLog):
    make_batches = staticmethod(text_batches)


class RawTextLog(RawLog):
    make_batches = staticmethod(raw_text_batches)


def text_append_results(url: str, sizes: Sizes) -> list[Result]:
    return append_results(
        url,
        sizes,
        (OurTextLog, RawTextLog),
        "JSONText event",
        "raw EVALSHA of log_append.lua, same texts",
    )
