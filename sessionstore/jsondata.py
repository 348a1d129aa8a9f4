"""Lossless JSON for event data: checked once on append, then stored as canonical text.

Canonical text is what ``orjson.dumps`` writes (key order kept, no spaces). Two events
are identical when their seq, type, time, id and canonical data text are equal.

Data survives a JSON round trip unchanged when the round trip gives back data equal to
it. The usual case is decided without one: data built only of the types JSON keeps,
exactly (see :func:`plain`), that ``orjson.dumps`` takes, always survives. Anything else
(a subclass, a tuple, an enum, a NaN) is judged by the round trip itself, as before.
"""

from __future__ import annotations

import math
import re
import reprlib
import threading
from typing import Any

import msgpack
import orjson

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
#: How deep data may nest (its containers, the outermost counted): an event's data sits
#: one level down in its event's record, and ``orjson`` writes 254 levels at most.
MAX_DEPTH = 253
#: How many characters of a long path or value an error message keeps at each end.
KEPT = 60

_short = reprlib.Repr()
_short.maxstring = _short.maxother = KEPT
_short.maxlevel = 3


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
    64 bits, strings that are not valid Unicode, nesting deeper than :data:`MAX_DEPTH`,
    and any other object.
    """
    if not isinstance(data, dict):
        raise JSONLossError("$", f"data must be a JSON object, not {type(data).__name__}")
    try:
        # Written one level down, as in its event's record: too deep there, too deep here.
        text = orjson.dumps([data])[1:-1]
        if plain(data) or orjson.loads(text) == data:
            return text.decode()
    except (orjson.JSONEncodeError, TypeError, RecursionError):
        pass
    # Slow path: find out what does not survive, and where.
    _check(data, [], set())
    try:
        return orjson.dumps(data).decode()
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise JSONLossError(format_path(_find_bad_string(data, []) or []), str(exc)) from exc


#: A NaN or an infinity as msgpack writes a float: 0xcb, then the eight bytes of the
#: double big-endian, whose eleven exponent bits are all set.
_NON_FINITE = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")
_PACKERS = threading.local()
#: A packer's buffer keeps the size of the most it ever packed: one that packed more than
#: this (or failed midway) is dropped, so that a thread keeps no more than about this.
_KEPT_BUFFER = 1 << 18


def plain(value: Any) -> bool:
    """True when ``value`` holds nothing a JSON round trip changes that ``orjson.dumps``
    takes: it is built only of dicts, lists, strs, ints, floats, bools and None, each
    exactly of its type (no subclass, tuple, enum, UUID, datetime or other object), with
    no NaN or infinity, integers within 64 bits and strings of valid Unicode; or it holds
    something ``orjson.dumps`` refuses (bytes, keys that are not strings, nesting past
    its limit). So data that is ``plain`` and that ``orjson.dumps`` takes survives a round
    trip unchanged, without making one. False decides nothing: the data may still
    survive (an ``IntEnum`` equals its value); ask :func:`dump_lossless`.

    One pass in C: msgpack with ``strict_types`` packs exactly those types and refuses
    every other, floats as eight-byte doubles, whose non-finite ones
    :data:`_NON_FINITE` finds (a match elsewhere, in a string's bytes, only means
    False), searched only when a 0xcb byte is there at all (data without a float most
    often has none). Each thread packs with a packer of its own."""
    packer = getattr(_PACKERS, "packer", None)
    if packer is None:
        packer = _PACKERS.packer = msgpack.Packer(strict_types=True, buf_size=1 << 14)
    try:
        packed = packer.pack(value)
    except (TypeError, ValueError, OverflowError, RecursionError):  # a type, a cycle, an int
        _PACKERS.packer = None
        return False
    if len(packed) > _KEPT_BUFFER:
        _PACKERS.packer = None
    return b"\xcb" not in packed or _NON_FINITE.search(packed) is None


def find_loss(data: Any) -> str:
    """Raise :class:`JSONLossError` for the first part of ``data`` the slow path of
    :func:`dump_lossless` refuses (a type JSON does not keep, an integer past 64 bits, a
    NaN or infinity, a key that is not a string, a cycle, nesting past :data:`MAX_DEPTH`),
    walking it in Python; return "" when there is none."""
    _check(data, [], set())
    return ""


def _check(value: Any, parts: list[str | int], active: set[int]) -> None:
    """Raise :class:`JSONLossError` for the first part of ``value`` (at ``parts``) that
    does not survive a round trip. The path is formatted only then: building it at every
    level costs as much as the data when keys are long and nesting is deep."""
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise JSONLossError(format_path(parts), "integer outside the 64-bit range")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JSONLossError(format_path(parts), f"{value!r} is not representable in JSON")
        return
    if isinstance(value, dict | list):
        if len(parts) >= MAX_DEPTH:
            raise JSONLossError(format_path(parts), f"nested deeper than {MAX_DEPTH} levels")
        marker = id(value)
        if marker in active:
            raise JSONLossError(format_path(parts), "cycle: the container contains itself")
        active.add(marker)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise JSONLossError(
                        format_path(parts),
                        f"key {short_repr(key)} is a {type(key).__name__}, not a string",
                    )
                parts.append(key)
                _check(item, parts, active)
                parts.pop()
        else:
            for index, item in enumerate(value):
                parts.append(index)
                _check(item, parts, active)
                parts.pop()
        active.discard(marker)
        return
    raise JSONLossError(
        format_path(parts), f"{type(value).__name__} does not survive a JSON round trip"
    )


def child_path(path: str, key: str) -> str:
    """``$.name`` for identifier-like keys, ``$['odd key']`` otherwise."""
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def format_path(parts: list[str | int]) -> str:
    """The JSON path of ``parts`` (keys and list indexes from the top), as
    :func:`child_path` writes it, with its middle elided when long (see :func:`elide`)."""
    path = "$"
    for part in parts:
        path = f"{path}[{part}]" if isinstance(part, int) else child_path(path, elide(part))
        if len(path) > 4 * KEPT:
            path = elide(path)
    return path


def elide(text: str, keep: int = KEPT) -> str:
    """``text`` with its middle replaced by ``...`` when it is longer than ``2 * keep + 3``
    characters: what an error message quotes of a path or a value stays short."""
    if len(text) <= 2 * keep + 3:
        return text
    return f"{text[:keep]}...{text[-keep:]}"


def short_repr(value: object) -> str:
    """A ``repr`` of ``value`` for an error message: bounded in length and in nesting
    (a value nested thousands deep does not exhaust the stack)."""
    try:
        text = _short.repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return elide(text)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _find_bad_string(value: Any, parts: list[str | int]) -> list[str | int] | None:
    if isinstance(value, str):
        return None if _utf8(value) else parts
    if isinstance(value, dict):
        for key, item in value.items():
            if not _utf8(key):
                return [*parts, key]
            found = _find_bad_string(item, [*parts, key])
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_bad_string(item, [*parts, index])
            if found is not None:
                return found
    return None


def load(text: str | bytes) -> Any:
    """Parse JSON text written by :func:`dump_lossless` (or any JSON)."""
    return orjson.loads(text)
