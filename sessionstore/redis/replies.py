"""What a server's reply says, read the same way by every module of the Redis backend.

The clients do not decode replies (``decode_responses=False``): elements arrive as bytes.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import NoPermissionError, ResponseError


def text(value: Any, errors: str = "replace") -> str:
    """A reply element as text: bytes decoded as UTF-8 (bytes that are not UTF-8 become
    U+FFFD, or raise ``UnicodeDecodeError`` with ``errors="strict"``); anything else
    as ``str``."""
    return value.decode(errors=errors) if isinstance(value, bytes) else str(value)


def unknown_command(reply: Any) -> bool:
    """``reply`` is the server's error for a command it does not know (an older server,
    or one that renamed the command away). redis-py strips the reply's ``ERR`` code."""
    return isinstance(reply, ResponseError) and str(reply).lower().startswith("unknown command")


def wrong_type(reply: Any) -> bool:
    """``reply`` is the server's error for a key of another type than the command works
    on (``WRONGTYPE``): it describes the key, not the server's state."""
    return isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE")


def refused(exc: ResponseError) -> bool:
    """The command is not allowed for this user, or renamed away (managed services). A
    refusal may come wrapped (a pipeline's ``Command # 1 (...) caused error: unknown
    command``), so the words count wherever they stand."""
    return isinstance(exc, NoPermissionError) or (
        isinstance(exc, ResponseError) and "unknown command" in str(exc).lower()
    )
