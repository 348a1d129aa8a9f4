"""Logical time: every ``when`` is normalised to integer epoch milliseconds."""

from __future__ import annotations

import numbers
import time
from datetime import UTC, datetime

from .errors import InvalidArgumentError

#: Largest magnitude accepted, so a ``when`` is exact as a Redis sorted-set score (a double).
MAX_ABS_EPOCH_MS = 2**53 - 1


def to_epoch_ms(when: object) -> int:
    """Return ``when`` as int epoch milliseconds.

    Accepts an aware ``datetime``, a naive ``datetime`` (taken as UTC) or an integer
    number of epoch milliseconds. Anything else (a bool, a float, a string, NaN, ...)
    raises :class:`InvalidArgumentError`.
    """
    if type(when) is int:
        ms = when
    elif isinstance(when, datetime):
        aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
        delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
        ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    elif isinstance(when, numbers.Integral) and not isinstance(when, bool):
        ms = int(when)
    else:
        raise InvalidArgumentError(
            f"when must be a datetime or int epoch milliseconds, not {type(when).__name__}: "
            f"{when!r:.80}"
        )
    if abs(ms) > MAX_ABS_EPOCH_MS:
        raise InvalidArgumentError(f"when {ms} is out of range (|when| <= {MAX_ABS_EPOCH_MS} ms)")
    return ms


def now_ms() -> int:
    """The wall clock as integer epoch milliseconds (exact: no float rounding)."""
    return time.time_ns() // 1_000_000


def expired(expires_at: int | None, now: int | None = None) -> bool:
    """Whether the expiry ``expires_at`` (epoch ms; None: never) has passed by ``now``
    (epoch ms; default: the wall clock now)."""
    return expires_at is not None and expires_at <= (now_ms() if now is None else now)
