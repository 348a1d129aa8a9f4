"""Value encoding: session values cross the wire and the disk as msgpack, nothing else.

Round trips return an equal value, except that tuples come back as lists.
Nothing is ever unpickled.
"""

from __future__ import annotations

from typing import Any

import msgpack

from .errors import CorruptDataError, NotSerializableError


def encode_value(value: Any, key: str) -> bytes:
    """Pack ``value``; raise :class:`NotSerializableError` naming ``key`` and the bad type.

    The packed bytes are unpacked once more so a value that packs but cannot come
    back (a dict keyed by a list, say) is refused here rather than at the next read.
    """
    try:
        packed: bytes = msgpack.packb(value, use_bin_type=True)
        decode_value(packed)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        path, type_name = _find_unpackable(value)
        raise NotSerializableError(key, type_name or str(exc), path or "$") from exc
    return packed


def decode_value(packed: bytes) -> Any:
    """Unpack bytes written by :func:`encode_value`."""
    return msgpack.unpackb(packed, raw=False, strict_map_key=False, ext_hook=_no_ext)


def load_value(packed: bytes, where: str) -> Any:
    """The value stored as ``packed`` under ``where`` (a key's label or name); raises
    :class:`CorruptDataError` naming ``where`` for bytes :func:`encode_value` never
    writes: not msgpack, truncated or followed by more, nested too deep, text that is
    not UTF-8, or a msgpack extension."""
    try:
        return decode_value(packed)
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        detail = str(exc)[:120] or type(exc).__name__
        raise CorruptDataError(
            where, f"its value is not msgpack sessionstore wrote ({detail})"
        ) from None


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"a msgpack extension (type {code})")


_SCALARS = (str, bytes, bytearray, bool, float, type(None))
_INT_RANGE = (-(2**63), 2**64 - 1)


def _find_unpackable(value: Any, path: str = "$", depth: int = 0) -> tuple[str, str]:
    """Locate the first part of ``value`` msgpack refuses: (path, type name)."""
    if depth > 500:
        return path, "nesting deeper than 500 levels"
    if isinstance(value, int) and not isinstance(value, bool):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            return path, "int outside the 64-bit range"
        return "", ""
    if isinstance(value, _SCALARS):
        return "", ""
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _find_unpackable(item, f"{path}[{index}]", depth + 1)
            if found[0]:
                return found
        return "", ""
    if isinstance(value, dict):
        for k, item in value.items():
            if isinstance(k, list | tuple | dict):
                return f"{path}[{k!r:.40}]", f"{type(k).__name__} used as a map key"
            found = _find_unpackable(k, f"{path}<key>", depth + 1)
            if found[0]:
                return found
            found = _find_unpackable(item, f"{path}[{k!r:.40}]", depth + 1)
            if found[0]:
                return found
        return "", ""
    return path, type(value).__name__
