"""Stored and user-given values as literal terminal text.

Ids, symbols, header fields, event data and the error messages that quote them are data
a user or an attacker controls. What the CLI prints of them is built here, as
:class:`rich.text.Text` (never parsed as markup or emoji codes), with every character
that is not printable (ANSI escapes, C0 and C1 controls, DEL, bidi overrides, line and
paragraph separators, lone surrogates) shown as a visible Python-style escape:
``\\x1b``, ``\\r``, ``\\u202e``. The same rule keeps ``--json`` output free of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.text import Text

#: Escapes that read better than ``\xNN``.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Depth below which :func:`preview` shows ``…`` instead of descending.
_MAX_DEPTH = 12


def escape_char(char: str) -> str:
    """``char`` as a visible escape: ``\\n``, ``\\x1b``, ``\\u202e`` or ``\\U000e0001``."""
    named = _NAMED.get(char)
    if named:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def literal(value: object) -> str:
    """``value`` (a string as is, anything else as ``str()``) with every non-printable
    character replaced by its escape; the result is safe to print on a terminal."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else escape_char(char) for char in text)


def plain(*parts: object, style: str = "") -> Text:
    """The parts, each made :func:`literal`, joined as one :class:`Text` (no markup)."""
    return Text("".join(literal(part) for part in parts), style=style)


def shorten(text: str, width: int) -> str:
    """``text`` made :func:`literal` and cut to about ``width`` characters, saying how
    long it was when it is cut (a huge string is not escaped whole)."""
    if len(text) <= width:
        shown = literal(text)
        if len(shown) <= width:
            return shown
    return f"{literal(text[:width])[: width - 1]}… ({len(text)} chars)"


def preview(value: Any, width: int = 80) -> str:
    """A compact one-line view of ``value`` (JSON data or a msgpack value), cut to about
    ``width`` characters and made :func:`literal`. Huge strings and deep nesting are cut,
    never walked whole."""
    if isinstance(value, str):
        return shorten(value, width)
    pieces: list[str] = []
    size = 0
    for piece in _pieces(value, 0, width):
        pieces.append(piece)
        size += len(piece)
        if size > width:
            return literal("".join(pieces))[: width - 1] + "…"
    return literal("".join(pieces))


def _pieces(value: Any, depth: int, budget: int) -> Iterator[str]:
    if isinstance(value, str | bytes | bytearray):
        yield repr(value[: budget + 1])
    elif isinstance(value, dict):
        if depth >= _MAX_DEPTH:
            yield "{…}"
            return
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            if index:
                yield ", "
            yield from _pieces(key, depth + 1, budget)
            yield ": "
            yield from _pieces(item, depth + 1, budget)
        yield "}"
    elif isinstance(value, list | tuple):
        if depth >= _MAX_DEPTH:
            yield "[…]"
            return
        yield "["
        for index, item in enumerate(value):
            if index:
                yield ", "
            yield from _pieces(item, depth + 1, budget)
        yield "]"
    else:
        yield repr(value)[: budget + 1]


def count(number: int, noun: str) -> str:
    """``1 session``, ``2 sessions``: a number with its noun, singular for one."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
