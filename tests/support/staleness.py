"""Counting stale reads: how far behind an acknowledged write a cache's reads were."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def late_reads(
    read: Callable[[], Any],
    expected: Any,
    acknowledged: float,
    bound: float,
    *,
    passing: tuple[type[BaseException], ...] = (),
    timeout: float = 30,
) -> list[float]:
    """Read until ``read()`` returns ``expected`` (written and acknowledged at
    ``time.monotonic()`` ``acknowledged``); the reads that started more than ``bound``
    seconds after it and still missed it, as seconds since it. A read raising one of
    ``passing`` counts as no answer. Gives up (an ``AssertionError``) after 100 late
    reads or ``timeout`` seconds."""
    late: list[float] = []
    deadline = acknowledged + timeout
    while True:
        started = time.monotonic()
        assert started < deadline, f"never read {expected!r}; late reads at +{late[:5]} s"
        try:
            found = read()
        except passing:
            continue
        if found == expected:
            return late
        if started - acknowledged > bound:
            late.append(round(started - acknowledged, 3))
            assert len(late) < 100, f"stale reads past the bound, at +{late[:5]} s ..."
        time.sleep(0.002)
