"""What every operator subcommand shares: ``--url``, ``--namespace``, ``--json``, a lazily
opened store, one clear line plus a non-zero exit code for every store error, and the
JSON form of stored values.

The ``--json`` rule, the same for every subcommand (:data:`JSON_RULE`): JSON lines, one
object per line. A command that lists things (sessions, events, verdicts, values, the
versions of a history) prints one object per row and nothing else (no rows: no lines);
a command with one result (``doctor``, ``values get``, ``delete``, ``clear``, ``acl``,
``demo``) prints exactly one object. Nothing but those lines goes to stdout; warnings
and errors go to stderr.

The JSON is exact and plain, with tagged forms for what JSON cannot hold (an object
whose only key is one of these tags is always such a form):

- ``{"$bytes": "<base64>"}``: bytes;
- ``{"$map": [[key, value], ...]}``: a map with a key that is not a string (bytes, int,
  float, bool, null), or whose only key is one of these tags;
- ``{"$float": "nan" | "inf" | "-inf"}``: a float JSON has no number for;
- ``{"$ext": [code, "<base64>"]}``, ``{"$timestamp": ns}``: msgpack extension values;
  anything else is ``{"$repr": "..."}``.

Characters that are not printable are written as ``\\uXXXX`` escapes, so the output is
safe on a terminal and parses to the exact values.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import math
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import unquote

import msgpack
import typer
from rich.console import Console

import sessionstore

from ..connection import ENV_URL, check_exists, mask_url, resolve_url
from ..errors import (
    AccessDeniedError,
    DurabilityError,
    InvalidArgumentError,
    SessionNotFoundError,
    SessionStoreError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from .text import count, plain

ENV_NAMESPACE = "SESSIONSTORE_NAMESPACE"
#: Exit codes: 1 = the check failed (verify, doctor); 2 = the command could not run.
EXIT_FAILED, EXIT_ERROR = 1, 2

Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar=ENV_URL,
        help="Store URL (default ./.sessionstore): redis://host:6379/0, a folder path, or "
        "sqlite:///relative/to/cwd.db or sqlite:////absolute/path.db (four slashes).",
    ),
]
Namespace = Annotated[
    str, typer.Option("--namespace", "-n", envvar=ENV_NAMESPACE, help="Namespace to work in.")
]
#: How every subcommand's ``--json`` output is shaped (see the module docstring).
JSON_RULE = (
    "--json prints JSON lines, one object per line: one per row for a listing, exactly "
    "one for a single result."
)
Json = Annotated[
    bool,
    typer.Option(
        "--json", help="JSON lines: one object per row, or one object for a single result."
    ),
]
#: What every DurabilityError the CLI prints ends with (the demo's too).
DURABILITY_HINT = (
    "make the server durable (appendonly yes, appendfsync always; `sessionstore doctor` "
    "checks it), or, for a throwaway store, add ?durability=none to the URL (the latest "
    "events may then be lost in a crash)"
)

#: How every typer application of the CLI is made: Click's own help (paragraphs
#: rewrapped to the terminal's width, no type label on a flag), no locals in tracebacks.
APP_SETTINGS: dict[str, Any] = {
    "no_args_is_help": True,
    "pretty_exceptions_show_locals": False,
    "rich_markup_mode": None,
}

console = Console(highlight=False, soft_wrap=True, emoji=False)
errors = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def open_store(
    url: str | None, namespace: str, *, existing: bool = False
) -> Iterator[sessionstore.Store]:
    """Open the store (no I/O yet); store errors inside the block become one line, and
    what the library reports on the way (a session it skipped, say) one line each. With
    ``existing`` (the commands that only read) a file or SQLite store whose path does not
    exist is an error naming the absolute path it resolved to, and nothing is created."""
    resolved = resolve_url(url)
    try:
        if existing:
            check_exists(resolved)
        with library_notices(), sessionstore.connect(resolved, namespace) as store:
            yield store
    except SessionStoreError as exc:
        fail(exc, resolved)


class _Notices(logging.Handler):
    """Prints each record of the ``sessionstore`` loggers as one escaped stderr line and
    keeps its message in every list of the open :func:`library_notices` blocks."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.sinks: list[list[str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        note(record.getMessage(), *self.sinks)


def note(message: str, *into: list[str]) -> None:
    """One escaped ``warning:`` line on stderr; the message is appended to each of ``into``."""
    for sink in into:
        sink.append(message)
    errors.print(plain("warning: ", message))


@contextmanager
def library_notices() -> Iterator[list[str]]:
    """Inside the block, what the library warns of (``logging`` records of the
    ``sessionstore`` loggers, Python warnings) is printed as one escaped ``warning:``
    line each on stderr; yields the list of those messages. Blocks nest: each message is
    printed once and lands in the list of every open block."""
    logger = logging.getLogger("sessionstore")
    handler = next((h for h in logger.handlers if isinstance(h, _Notices)), None)
    owner = handler is None
    if handler is None:
        handler = _Notices()
        logger.addHandler(handler)
    sink: list[str] = []
    handler.sinks.append(sink)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield sink
            finally:
                for warning in caught:
                    note(str(warning.message), *handler.sinks)
    finally:
        handler.sinks = [other for other in handler.sinks if other is not sink]
        if owner:
            logger.removeHandler(handler)


def fail(exc: SessionStoreError, url: str | None, hint: str | None = None) -> None:
    """:func:`say_error`, then exit 2."""
    say_error(exc, url, hint)
    raise typer.Exit(EXIT_ERROR)


def say_error(exc: SessionStoreError, url: str | None, hint: str | None = None) -> None:
    """One ``error:`` line on stderr (the URL masked, every quoted value escaped), then a
    ``hint:`` line when there is one (for a :class:`DurabilityError` of the server's
    settings its own hint, else :data:`DURABILITY_HINT`; none for a write too few
    replicas confirmed)."""
    if isinstance(exc, DurabilityError) and not isinstance(exc, StoreUnavailableError):
        hint = exc.hint or DURABILITY_HINT
    kind = {
        StoreUnavailableError: "cannot reach the store",
        AccessDeniedError: "access denied",
        SessionNotFoundError: "not found",
        StoreNotFoundError: "not found",
        InvalidArgumentError: "invalid argument",
    }.get(type(exc), type(exc).__name__)
    where = f" ({mask_url(url)})" if url else ""
    errors.print(plain(f"error: {kind}{where}: ", exc))
    if hint:
        errors.print(plain("hint: ", hint))


def mask_address(address: str) -> str:
    """``address`` as the CLI may print it: a URL (``tcp://user:pass@host:8786``) or a
    ``user:pass@host:port`` without a scheme, with the password of its user info masked
    as :func:`~sessionstore.urls.mask_url` masks a URL's."""
    if "://" in address:
        return mask_url(address)
    return mask_url(_SCHEME_STAND_IN + address).removeprefix(_SCHEME_STAND_IN)


_SCHEME_STAND_IN = "address://"


def mask_in(text: str, address: str) -> str:
    """``text`` (an error message that may quote ``address``) with the user info of
    ``address`` masked wherever it occurs; when its password would still show (quoted
    in another form), a line saying the message is withheld instead."""
    shown = mask_address(address)
    if shown == address:
        return text
    after = address.partition("://")[2] or address
    userinfo = after[: after.rfind("@")]
    masked = mask_address(after)
    masked_userinfo = masked[: masked.rfind("@")]
    text = text.replace(address, shown).replace(after, masked)
    text = text.replace(userinfo, masked_userinfo)
    password = userinfo.partition(":")[2]
    folded = text.casefold()
    if password and any(piece.casefold() in folded for piece in _quoted_forms(password)):
        return "(the message is not shown: it quotes the password)"
    return text


def _quoted_forms(password: str) -> set[str]:
    """The forms a message may quote ``password`` in (compared without case, so a
    percent-escape in either case counts): as it is, URL-unquoted, and each of those
    escaped as ``repr`` (either quote), JSON and Python's string escapes do."""
    forms = {password, unquote(password)}
    escaped = {form.encode("unicode_escape").decode("ascii") for form in forms}
    escaped |= {json.dumps(form)[1:-1] for form in forms}
    escaped |= {repr(form)[1:-1] for form in forms}
    escaped |= {text.replace("'", "\\'").replace('"', '\\"') for text in escaped}
    return forms | escaped


def say_nothing_found(what: str, url: str | None, namespace: str) -> None:
    """A listing that found nothing says so on stderr: which store (masked URL or path)
    and namespace it read, and which namespaces of that store do hold data (when the
    user may list them)."""
    resolved = resolve_url(url)
    message = f"no {what} in namespace {namespace!r} of {mask_url(resolved)}"
    try:
        usages = sessionstore.namespaces(resolved)
    except SessionStoreError:
        usages = None
    others = None if usages is None else [u for u in usages if u.name != namespace]
    if others:
        held = ", ".join(
            f"{usage.name!r} ({count(usage.sessions, 'session')}, {count(usage.values, 'value')})"
            for usage in others[:10]
        )
        more = f" and {len(others) - 10} more" if len(others) > 10 else ""
        message += f"; namespaces holding data: {held}{more} (choose one with -n)"
    elif usages:  # this namespace holds data of another kind
        message += "; no other namespace of this store holds data"
    elif usages is not None:
        message += "; no namespace of this store holds data"
    errors.print(plain(message))


def retention(ttl: float | None, persist: bool) -> float | None:
    """The ttl an ``expire`` command sets (None: ``--persist``, remove the retention);
    :class:`InvalidArgumentError` unless exactly one of the two was given."""
    if (ttl is None) == (not persist):
        raise InvalidArgumentError("give exactly one of --ttl SECONDS and --persist")
    return ttl


#: The options of the ``expire`` commands.
Ttl = Annotated[
    float | None,
    typer.Option(help="Seconds from now; every later write moves the expiry on by as much."),
]
Persist = Annotated[bool, typer.Option("--persist", help="Remove the retention.")]


def guarded(command: F) -> F:
    """Turn argument errors raised outside a store block into one line as well."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SessionStoreError as exc:
            fail(exc, store_url(kwargs["url"]) if "url" in kwargs else None)

    return run  # type: ignore[return-value]


def store_url(url: str | None) -> str | None:
    """The URL an error line names: ``url`` resolved as a store would resolve it; None
    when it cannot be (an empty ``--url``: the error itself says what is wrong)."""
    try:
        return resolve_url(url)
    except SessionStoreError:
        return None


def emit_json(payload: dict[str, Any]) -> None:
    """One result: ``payload`` as one line of JSON (see the module docstring)."""
    sys.stdout.write(json_text(payload) + "\n")
    sys.stdout.flush()


def emit_rows(rows: Iterable[dict[str, Any]]) -> None:
    """A listing: one line of JSON per row (see the module docstring)."""
    for row in rows:
        emit_json(row)


def json_text(payload: Any) -> str:
    """``payload`` as JSON text with only printable characters (see the module docstring)."""
    limit = sys.getrecursionlimit()
    # A map nested 511 deep is three times as deep in its "$map" form.
    sys.setrecursionlimit(max(limit, 4 * _MAX_DEPTH))
    try:
        text = json.dumps(jsonable(payload), ensure_ascii=False, allow_nan=False)
    finally:
        sys.setrecursionlimit(limit)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _json_escape(char) for char in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


#: Deeper than msgpack nests (511 levels).
_MAX_DEPTH = 600
_TAGS = frozenset({"$bytes", "$map", "$float", "$ext", "$timestamp", "$repr"})


def jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` (a msgpack or JSON value) as plain JSON data, exactly: bytes, maps with
    keys that are not strings and non-finite floats become the tagged forms."""
    if depth > _MAX_DEPTH:
        return {"$repr": f"nesting deeper than {_MAX_DEPTH} levels"}
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    # Loops rather than comprehensions: one stack frame a level (msgpack nests 511 deep).
    if isinstance(value, list | tuple):
        items = []
        for item in value:
            items.append(jsonable(item, depth + 1))
        return items
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value) and not (
            len(value) == 1 and next(iter(value)) in _TAGS
        ):
            mapping = {}
            for key, item in value.items():
                mapping[key] = jsonable(item, depth + 1)
            return mapping
        pairs = []
        for key, item in value.items():
            pairs.append([jsonable(key, depth + 1), jsonable(item, depth + 1)])
        return {"$map": pairs}
    if isinstance(value, msgpack.Timestamp):
        return {"$timestamp": value.to_unix_nano()}
    if isinstance(value, msgpack.ExtType):
        return {"$ext": [value.code, base64.b64encode(value.data).decode("ascii")]}
    if hasattr(value, "_asdict"):
        return jsonable(value._asdict(), depth + 1)
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump(), depth + 1)
    return {"$repr": repr(value)}


def iso(ms: int | None) -> str:
    """Epoch ms as ISO 8601 in UTC (``2024-06-10T06:13:20.000Z``); ``-`` for None."""
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)
