"""Lossless JSON for event data: checked once on append, then stored as canonical text.

Canonical text is what ``orjson.dumps`` writes (key order kept, no spaces). Two events
are identical when their seq, type, time, id and canonical data text are equal.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_MAX_DEPTH = 250


class JSONLossError(Exception):
    """Raised by :func:`dump_lossless`; carries the JSON path and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def dump_lossless(data: Any) -> str:
    """Return canonical JSON text for ``data``, a JSON object that survives a round trip.

    Raises :class:`JSONLossError` with the path of the first offending part: NaN and
    infinities, sets, bytes, tuples, datetimes, non-string keys, cycles, integers outside
    64 bits, strings that are not valid Unicode, and any other object.
    """
    if not isinstance(data, dict):
        raise JSONLossError("$", f"data must be a JSON object, not {type(data).__name__}")
    try:
        text = orjson.dumps(data)
        if orjson.loads(text) == data:
            return text.decode()
    except (orjson.JSONEncodeError, TypeError, RecursionError):
        pass
    # Slow path: find out what does not survive, and where.
    _check(data, "$", set(), 0)
    try:
        return orjson.dumps(data).decode()
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise JSONLossError(_find_bad_string(data, "$") or "$", str(exc)) from exc


def dump_lossless_all(items: list[Any]) -> list[str] | None:
    """:func:`dump_lossless` of every item when the whole list survives one round trip
    (one parse instead of one per item); None when some item may not, so that the caller
    checks them one by one and names the offender."""
    try:
        if all(type(item) is dict for item in items) and orjson.loads(orjson.dumps(items)) == items:
            return [orjson.dumps(item).decode() for item in items]
    except (orjson.JSONEncodeError, TypeError, RecursionError):
        pass
    return None


def _check(value: Any, path: str, active: set[int], depth: int) -> None:
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise JSONLossError(path, "integer outside the 64-bit range")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JSONLossError(path, f"{value!r} is not representable in JSON")
        return
    if isinstance(value, dict | list):
        if depth >= _MAX_DEPTH:
            raise JSONLossError(path, f"nested deeper than {_MAX_DEPTH} levels")
        marker = id(value)
        if marker in active:
            raise JSONLossError(path, "cycle: the container contains itself")
        active.add(marker)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise JSONLossError(
                        path, f"key {key!r:.40} is a {type(key).__name__}, not a string"
                    )
                _check(item, child_path(path, key), active, depth + 1)
        else:
            for index, item in enumerate(value):
                _check(item, f"{path}[{index}]", active, depth + 1)
        active.discard(marker)
        return
    raise JSONLossError(path, f"{type(value).__name__} does not survive a JSON round trip")


def child_path(path: str, key: str) -> str:
    """``$.name`` for identifier-like keys, ``$['odd key']`` otherwise."""
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _find_bad_string(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return None if _utf8(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            if not _utf8(key):
                return f"{path}[{key!r}]"
            found = _find_bad_string(item, child_path(path, key))
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_bad_string(item, f"{path}[{index}]")
            if found:
                return found
    return None


def load(text: str | bytes) -> Any:
    """Parse JSON text written by :func:`dump_lossless` (or any JSON)."""
    return orjson.loads(text)
