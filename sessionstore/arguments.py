"""Checks of the arguments of the public API. No I/O.

Each check returns the argument as the store uses it (a retention in ms, a
:class:`~sessionstore.keys.ValueKey`) or raises :class:`InvalidArgumentError` saying what
was wrong; checks of event-log arguments (session ids, headers, batches) are in
:mod:`sessionstore.eventlog`.
"""

from __future__ import annotations

import io
import math

from .errors import InvalidArgumentError
from .jsondata import short_repr
from .keys import ValueKey

#: The modes of a session value (``store.session(..., mode=...)``).
MODES = ("backtest", "live")
#: The longest retention accepted, in ms (about 285,000 years): an expiry time stays
#: exact as a double and far inside every backend's 64-bit range.
MAX_TTL_MS = 2**53 - 1
#: The longest timeout accepted, in seconds (one day): ``connect(timeout=...)`` and the
#: socket timeouts of a Redis URL. A longer wait is a hung call, not a timeout.
MAX_TIMEOUT = 86_400.0


def check_unicode(name: str, text: str) -> str:
    """``text`` must encode as UTF-8 (no lone surrogates), on every backend alike."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{name} {short_repr(text)} is not valid Unicode") from exc
    return text


def check_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, not {type(value).__name__}")
    return check_unicode(name, value)


def check_namespace(namespace: object) -> str:
    check_text("namespace", namespace)
    if not namespace:
        raise InvalidArgumentError("namespace must not be empty")
    return namespace  # type: ignore[return-value]


def value_key(
    namespace: str, symbol: object, strategy: object, exchange: object, frame: object, mode: object
) -> ValueKey:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, not {short_repr(mode)}")
    return ValueKey(
        namespace,
        check_text("symbol", symbol),
        check_text("strategy", strategy),
        check_text("exchange", exchange),
        check_text("frame", frame),
        mode,  # type: ignore[arg-type]
    )


def check_max_versions(history: bool, max_versions: object) -> int | None:
    if max_versions is None:
        return None
    if not history:
        raise InvalidArgumentError("max_versions only applies to history=True sessions")
    if not isinstance(max_versions, int) or isinstance(max_versions, bool) or max_versions < 1:
        raise InvalidArgumentError(f"max_versions must be a positive int, not {max_versions!r}")
    return max_versions


def check_ttl(ttl: object) -> int | None:
    """A retention of ``ttl`` seconds (an int or a float > 0) in milliseconds, rounded
    up to a whole one (at least 1); None stays None (no expiry). Anything else raises
    :class:`InvalidArgumentError`."""
    if ttl is None:
        return None
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or ttl <= 0
    ):
        raise InvalidArgumentError(
            f"ttl must be a positive number of seconds or None, not {short_repr(ttl)}"
        )
    if ttl > MAX_TTL_MS / 1000:
        raise InvalidArgumentError(f"ttl {short_repr(ttl)} is too long (at most {MAX_TTL_MS} ms)")
    # Rounded to the microsecond first, so that 0.3 s is 300 ms, not 301.
    return max(1, math.ceil(round(ttl * 1000, 3)))


def check_timeout(name: str, timeout: object) -> float:
    """``timeout`` seconds (an int or a float in (0, :data:`MAX_TIMEOUT`]) as a float;
    anything else (a bool, NaN, infinity, 0, a negative or longer one) raises
    :class:`InvalidArgumentError` naming ``name``."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_TIMEOUT
    ):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds in (0, {MAX_TIMEOUT:g}], not {short_repr(timeout)}"
        )
    return float(timeout)


def check_flag(name: str, value: object) -> bool:
    """``value``, which must be True or False (a string such as ``"no"`` is true in Python:
    taken for a flag, it would say the opposite of what it means)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, not {short_repr(value)}")
    return value


def check_binary_stream(name: str, stream: object, method: str) -> None:
    """``stream`` must be a binary stream with ``method`` (``read`` or ``write``): a text
    stream (``open(path, "w")``, ``sys.stdout``) raises :class:`InvalidArgumentError`
    naming ``name``, before anything is read or written."""
    if isinstance(stream, io.TextIOBase) or not callable(getattr(stream, method, None)):
        kind = "a text stream" if isinstance(stream, io.TextIOBase) else type(stream).__name__
        mode = "rb" if method == "read" else "wb"
        raise InvalidArgumentError(
            f"{name} must be a binary stream with {method}() (a file opened with {mode!r},"
            f" sys.{'stdin' if method == 'read' else 'stdout'}.buffer), not {kind}"
        )


def check_poll(poll: object) -> float:
    if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll < 3600:
        raise InvalidArgumentError(f"poll must be seconds in (0, 3600), not {short_repr(poll)}")
    return float(poll)


def check_seconds(name: str, value: object) -> float:
    """A positive, finite number of seconds (at most a day), as a float: a wait or a lease."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= 86400
    ):
        raise InvalidArgumentError(f"{name} must be seconds in (0, 86400], not {short_repr(value)}")
    return float(value)
