"""What every operator subcommand shares: ``--url``, ``--namespace``, ``--json``, a lazily
opened store, and one clear line plus a non-zero exit code for every store error."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

import sessionstore

from ..connection import ENV_URL, mask_url, resolve_url
from ..errors import (
    AccessDeniedError,
    InvalidArgumentError,
    SessionNotFoundError,
    SessionStoreError,
    StoreUnavailableError,
)

ENV_NAMESPACE = "SESSIONSTORE_NAMESPACE"
#: Exit codes: 1 = the check failed (verify, doctor); 2 = the command could not run.
EXIT_FAILED, EXIT_ERROR = 1, 2

Url = Annotated[
    str | None,
    typer.Option(
        "--url", envvar=ENV_URL, help=f"Store URL [env {ENV_URL}; default ./.sessionstore]"
    ),
]
Namespace = Annotated[
    str, typer.Option("--namespace", "-n", envvar=ENV_NAMESPACE, help="Namespace to work in.")
]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON).")]

console = Console(highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def open_store(url: str | None, namespace: str) -> Iterator[sessionstore.Store]:
    """Open the store (no I/O yet); store errors inside the block become one line."""
    resolved = resolve_url(url)
    try:
        with sessionstore.connect(resolved, namespace) as store:
            yield store
    except SessionStoreError as exc:
        fail(exc, resolved)


def fail(exc: SessionStoreError, url: str, hint: str | None = None) -> None:
    kind = {
        StoreUnavailableError: "cannot reach the store",
        AccessDeniedError: "access denied",
        SessionNotFoundError: "not found",
        InvalidArgumentError: "invalid argument",
    }.get(type(exc), type(exc).__name__)
    errors.print(f"error: {kind} ({mask_url(url)}): {exc}", soft_wrap=True)
    if hint:
        errors.print(f"hint: {hint}", soft_wrap=True)
    raise typer.Exit(EXIT_ERROR)


def guarded(command: F) -> F:
    """Turn argument errors raised outside a store block into one line as well."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SessionStoreError as exc:
            fail(exc, resolve_url(kwargs.get("url")))

    return run  # type: ignore[return-value]


def emit_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, ensure_ascii=False, default=_jsonable) + "\n")
    sys.stdout.flush()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    return repr(value)


def iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)
