"""``sessionstore namespaces``: the namespaces of a store and what each holds;
``sessionstore namespaces delete NS``: remove one whole."""

from __future__ import annotations

from typing import Annotated

import typer

import sessionstore

from ..admin import namespace_bytes
from ..connection import mask_url, resolve_url
from ..namespace_delete import NamespaceBusyError, delete_namespace
from .common import (
    APP_SETTINGS,
    Json,
    Url,
    check_exists,
    console,
    emit_json,
    emit_rows,
    errors,
    fail,
    guarded,
)
from .tables import human_bytes, print_listing
from .text import count, plain

LISTING_HELP = (
    "Every namespace of the store that holds data, with its sessions, values and size "
    "(bytes its sessions and values take where they are stored, as `sessions list` and "
    "`values list` count them). On Redis it finds the namespaces' indexes with SCAN, so "
    "it needs an admin's URL; counts are of sessions and values that exist. --json: one "
    'object per namespace {"name", "sessions", "values", "bytes"}. `namespaces delete NS` '
    "removes one."
)

app = typer.Typer(
    help=LISTING_HELP, **{**APP_SETTINGS, "no_args_is_help": False}, invoke_without_command=True
)


@app.callback(invoke_without_command=True, help=LISTING_HELP)
def listing(ctx: typer.Context, url: Url = None, json: Json = False) -> None:
    if ctx.invoked_subcommand is None:
        guarded(namespaces)(url=url, json=json)


def namespaces(url: Url = None, json: Json = False) -> None:
    """Every namespace of the store that holds data (see LISTING_HELP)."""
    resolved = resolve_url(url)
    try:
        check_exists(resolved)
        rows = [
            {**usage._asdict(), "bytes": _bytes_of(resolved, usage.name)}
            for usage in sessionstore.namespaces(resolved)
        ]
    except sessionstore.SessionStoreError as exc:
        fail(exc, resolved, _admin_hint(exc, "listing namespaces"))
    if json:
        emit_rows(rows)
        return
    if not rows:
        errors.print(plain(f"no namespace of {mask_url(resolved)} holds data"))
        return
    print_listing(
        ["namespace", "sessions", "values", "size"],
        [
            [
                plain(row["name"]),
                str(row["sessions"]),
                str(row["values"]),
                human_bytes(row["bytes"]),
            ]
            for row in rows
        ],
    )


def _bytes_of(url: str, namespace: str) -> int:
    with sessionstore.connect(url, namespace) as store:
        return namespace_bytes(store)


def _admin_hint(exc: Exception, what: str) -> str | None:
    if isinstance(exc, sessionstore.AccessDeniedError):
        return f"{what} needs SCAN: use an admin's URL"
    return None


@app.command("delete")
@guarded
def delete(
    namespace: Annotated[str, typer.Argument(help="The namespace to delete.")],
    url: Url = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Delete even while a writer holds a lease in it.")
    ] = False,
    json: Json = False,
) -> None:
    """Remove every session, value and piece of bookkeeping of NAMESPACE, and nothing of
    any other: on Redis every key beginning with ss:<namespace>: (found with SCAN on
    every primary: an admin's URL), on files its folder, on SQLite its rows. Asks first
    unless --yes; refused while a writer holds a lease in it unless --force. --json: one
    object {"namespace", "sessions", "values", "removed", "unit"}."""
    resolved = resolve_url(url)
    if not yes:
        typer.confirm(
            f"Delete every session and value of namespace {namespace!r} of {mask_url(resolved)}?",
            abort=True,
            err=True,
        )
    try:
        report = delete_namespace(resolved, namespace, force=force)
    except sessionstore.SessionStoreError as exc:
        hint = "stop its writers, or give --force" if isinstance(exc, NamespaceBusyError) else None
        fail(exc, resolved, hint or _admin_hint(exc, "deleting a namespace"))
    if json:
        emit_json(
            {
                "namespace": report.namespace,
                "sessions": report.sessions,
                "values": report.values,
                "removed": report.removed,
                "unit": report.unit,
            }
        )
        return
    console.print(
        plain(
            f"deleted namespace {report.namespace!r}: {count(report.sessions, 'session')}, "
            f"{count(report.values, 'value')} ({report.removed} {report.unit} removed)"
        )
    )
