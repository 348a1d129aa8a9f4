"""``sessionstore namespaces``: the namespaces of a store and what each holds."""

from __future__ import annotations

from rich.table import Table

import sessionstore

from ..connection import mask_url, resolve_url
from .common import Json, Url, console, emit_rows, errors, fail
from .text import plain


def namespaces(url: Url = None, json: Json = False) -> None:
    """Every namespace of the store that holds data, with its sessions and values. On
    Redis it reads the namespaces' indexes with SCAN, so it needs an admin's URL (counts
    are index entries); on files and SQLite it counts what is stored. --json: one object
    per namespace {"name", "sessions", "values"}."""
    resolved = resolve_url(url)
    try:
        usages = sessionstore.namespaces(resolved)
    except sessionstore.SessionStoreError as exc:
        hint = (
            "listing namespaces needs SCAN: use an admin's URL"
            if isinstance(exc, sessionstore.AccessDeniedError)
            else None
        )
        fail(exc, resolved, hint)
    if json:
        emit_rows(usage._asdict() for usage in usages)
        return
    if not usages:
        errors.print(plain(f"no namespace of {mask_url(resolved)} holds data"))
        return
    table = Table("namespace", "sessions", "values")
    for usage in usages:
        table.add_row(plain(usage.name), str(usage.sessions), str(usage.values))
    console.print(table)
