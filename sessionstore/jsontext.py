"""Event data given as JSON text: :class:`JSONText` (or a ``msgspec.Raw``) is checked
with one parse and stored as it is, without the round trip Python data needs.

The text must hold what data given as Python objects must be (see
:func:`sessionstore.jsondata.dump_lossless`): a JSON object, no NaN or Infinity,
integers within 64 bits, strings of valid Unicode, nested no deeper than Python data
may be. Text in canonical form (what ``orjson.dumps`` writes: no spaces, keys in the
order given) is stored byte for byte; any other valid text is stored in canonical form,
so the same data is stored as the same bytes whichever way it came. A key given twice in
one object keeps its last value, as JSON parsers read it (a model's output may hold
one: it is taken, as what every reader of that text would find).
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import msgspec
import orjson

from .jsondata import MAX_DEPTH, JSONLossError, dump_lossless
from .models import MSGSPEC_RECURSION_LIMIT


class JSONText(bytes):
    """Event data that is JSON text already: UTF-8 bytes, or a str (encoded as UTF-8),
    marked as JSON. ``append`` and a writer's ``emit`` take it (as they take a
    ``msgspec.Raw``) where they take a ``data`` dict, check it with one parse and store
    it without encoding it again; a read gives back the object it holds. Text that does
    not hold a lossless JSON object is refused by
    :class:`~sessionstore.errors.NotJSONSerializableError` naming the event (its
    ``path`` is ``$`` for text that is not JSON or not an object)."""

    __slots__ = ()

    def __new__(cls, text: str | bytes | bytearray | memoryview) -> JSONText:
        if isinstance(text, str):
            # A lone surrogate is kept (as bytes that are not UTF-8) for append to refuse
            # naming the event, rather than failing here without a name.
            return super().__new__(cls, text.encode("utf-8", "surrogatepass"))
        if not isinstance(text, bytes | bytearray | memoryview):
            raise TypeError(f"JSONText takes a str or bytes, not {type(text).__name__}")
        return super().__new__(cls, text)


#: The types of event data that is JSON text.
TEXT_TYPES = frozenset({JSONText, msgspec.Raw})

_OBJECTS = msgspec.json.Decoder(list[dict[str, Any]])
#: Digits to "0", everything else to a space: a run of 19 "0"s may be a long integer.
_DIGITS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_NUMBER = b"0" * 19
_KINDS = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


def checked_texts(texts: list[bytes]) -> tuple[list[bytes], list[dict[str, Any]]]:
    """The canonical text and the object of each of ``texts``; raises
    :class:`IndexedLossError` naming the index of the first text that does not hold a
    lossless JSON object, and why.

    One parse of the whole batch decides the usual case: every text canonical, which
    the parsed objects written back prove byte for byte (a text that is not, or that
    holds what does not survive, writes back differently or not at all), and none
    nested too deep (:func:`_too_deep`). Anything else is judged text by text."""
    try:
        parsed = _parsed_objects(b"[" + b",".join(texts) + b"]")
        canonical = list(map(orjson.dumps, parsed))
    except (msgspec.DecodeError, orjson.JSONDecodeError, orjson.JSONEncodeError, RecursionError):
        pass
    else:
        if canonical == texts and (
            max(map(len, texts)) < _DEEP_TEXT or not any(map(_too_deep, canonical, parsed))
        ):
            return canonical, parsed
    pairs = [_checked_text(index, text) for index, text in enumerate(texts)]
    return [text for text, _ in pairs], [data for _, data in pairs]


def _parsed_objects(joined: bytes) -> list[dict[str, Any]]:
    """The objects of a JSON array of objects: parsed by msgspec, which checks they are
    objects as it goes, within the recursion limit it is safe at; else by orjson."""
    if sys.getrecursionlimit() <= MSGSPEC_RECURSION_LIMIT:
        return _OBJECTS.decode(joined)
    parsed = orjson.loads(joined)
    if set(map(type, parsed)) - {dict}:
        raise orjson.JSONDecodeError("not only objects", "", 0)
    return parsed  # type: ignore[no-any-return]


#: The shortest text that can nest deeper than MAX_DEPTH: its brackets, opened and closed.
_DEEP_TEXT = 2 * (MAX_DEPTH + 1)


def _too_deep(text: bytes, data: dict[str, Any]) -> bool:
    """Whether ``data``, parsed from ``text``, nests deeper than
    :data:`~sessionstore.jsondata.MAX_DEPTH`: written one level down, as in its event's
    record, ``orjson`` refuses it. Only a text with more brackets than that can."""
    if text.count(b"[") + text.count(b"{") <= MAX_DEPTH:
        return False
    try:
        orjson.dumps([data])
    except orjson.JSONEncodeError:
        return True
    return False


class IndexedLossError(JSONLossError):
    """A :class:`JSONLossError` of the text at ``index`` of a batch."""

    def __init__(self, index: int, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.index = index


def _checked_text(index: int, text: bytes) -> tuple[bytes, dict[str, Any]]:
    text = bytes(text)  # orjson parses plain bytes only, not a subclass such as JSONText
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise IndexedLossError(index, "$", f"the text is not JSON ({exc})") from None
    if type(data) is not dict:
        kind = "null" if data is None else _KINDS.get(type(data), type(data).__name__)
        raise IndexedLossError(index, "$", f"the text must hold a JSON object, not {kind}")
    if text.translate(_DIGITS).find(_LONG_NUMBER) >= 0:
        # orjson reads an integer past 64 bits as a float: read it exactly (the text is
        # known to be JSON by now), so that it is refused as Python data holding it is.
        with contextlib.suppress(RecursionError):  # too deep to keep in any case
            data = json.loads(text)
    try:
        return dump_lossless(data).encode(), data
    except JSONLossError as exc:
        raise IndexedLossError(index, exc.path, exc.reason) from None
