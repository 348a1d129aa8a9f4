"""``sessionstore doctor``: can this store be used as configured? One line per check.

The checks themselves live beside this command, one module per kind: :mod:`.server` (a
Redis server and its nodes), :mod:`.index` (the namespace index) and :mod:`.round_trip`
(a real write, read and delete in the namespace).
"""

from __future__ import annotations

from typing import Annotated

import typer

import sessionstore

from ...connection import REDIS_SCHEMES, mask_url, resolve_url, scheme_of
from ...errors import SessionStoreError
from ..common import EXIT_FAILED, Json, Namespace, Url, console, emit_json
from ..text import plain
from .check import Check, Unreached, guarded_check
from .round_trip import round_trip

Fix = Annotated[
    bool,
    typer.Option(
        "--fix",
        help="Install this version's Redis Functions library on every primary where it is "
        "missing or outdated (needs FUNCTION LOAD; where it is current nothing is loaded) "
        "and index the sessions and values written before the namespace index existed "
        "(needs SCAN): run it as an admin, once, and after each upgrade.",
    ),
]


def doctor(
    url: Url = None, namespace: Namespace = "default", json: Json = False, fix: Fix = False
) -> None:
    """Check the server (version, cluster, persistence against the chosen durability and
    the Redis Functions library, on every primary of a cluster), the namespace index, the
    permissions of the current user (and on Redis the library's functions), by a real
    round trip in the namespace (on a file store, every file and folder it makes is
    removed again). Each finding is said once: a server it cannot reach is the only
    line. The URL is read and the durability checked by the library itself, as a store
    would. Exit 0 when nothing blocks use, 1 when something does. With --fix, first install the
    functions library where it is missing or outdated (where it is current, nothing is
    loaded and any user gets OK) and index what was stored before the index existed.
    --json: one object {"url", "namespace", "ok", "checks": [{"name", "status",
    "detail"}]}."""
    try:
        resolved = resolve_url(url)
        checks = run_checks(resolved, namespace, fix)
    except SessionStoreError as exc:
        resolved, checks = str(url), [Check("url", "FAIL", str(exc))]
    failed = any(check.status == "FAIL" for check in checks)
    if json:
        emit_json(
            {
                "url": mask_url(resolved),
                "namespace": namespace,
                "ok": not failed,
                "checks": [c.__dict__ for c in checks],
            }
        )
    else:
        console.print(plain(f"sessionstore doctor: {mask_url(resolved)} (namespace {namespace!r})"))
        colour = {"OK": "green", "WARN": "yellow", "FAIL": "red"}
        for check in checks:
            console.print(f"[{colour[check.status]}]{check.status:<4}[/] ", end="")
            console.print(plain(f"{check.name}: {check.detail}"))
    if failed:
        raise typer.Exit(EXIT_FAILED)


def run_checks(url: str, namespace: str, fix: bool) -> list[Check]:
    """Every check for ``url``; a URL the library refuses is one FAIL."""
    try:
        with sessionstore.connect(url, namespace):  # reads the URL as a store does; no I/O
            pass
    except SessionStoreError as exc:
        return [Check("url", "FAIL", str(exc))]
    checks = []
    if scheme_of(url) in REDIS_SCHEMES:
        # Imported here: importing the CLI (as every demo worker process does) loads no
        # Redis driver.
        from .index import index_check
        from .server import redis_checks

        checks += guarded_check("server", redis_checks, url, namespace, fix)
        if any(isinstance(check, Unreached) for check in checks):
            return checks
        checks += guarded_check("index", lambda: [index_check(url, namespace, fix)])
    durability_failed = any(
        check.name == "persistence" and check.status == "FAIL" for check in checks
    )
    checks += guarded_check("read/write", lambda: [round_trip(url, namespace, durability_failed)])
    return checks
