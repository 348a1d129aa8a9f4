"""``sessionstore acl``: the ``ACL SETUSER`` line of a least-privilege user."""

from __future__ import annotations

import secrets
from typing import Annotated

import typer

from .common import Json, Namespace, console, emit_json, errors
from .text import plain

#: Random bytes of a generated password (as URL-safe base64: 43 characters).
PASSWORD_BYTES = 32


def acl(
    user: Annotated[str, typer.Argument(help="Name of the Redis user to create.")],
    password: Annotated[
        str | None,
        typer.Option(
            help="Its password. Without it a strong one is generated and shown once, "
            "inside the printed line."
        ),
    ] = None,
    namespace: Namespace = "default",
    upgrade: Annotated[
        bool,
        typer.Option(
            "--upgrade",
            help="Print only the line that adds this version's functions to the existing "
            "user, changing nothing else: run it before a rolling upgrade's new clients "
            "start, and the full line once no older client is left.",
        ),
    ] = False,
    json: Json = False,
) -> None:
    """Print the redis-cli line that creates a user confined to the namespace's keys and
    to the commands sessionstore needs. Without --password the line sets a newly
    generated password (stderr says so: keep it, it is shown only this once). --json: one
    object {"user", "namespace", "command", "generated_password"}."""
    # Imported here: importing the CLI (as every demo worker process does) loads no Redis driver.
    from ..redis.acl import grant_functions_line, setuser_line

    if upgrade:
        line = grant_functions_line(user)
        if json:
            emit_json({"user": user, "namespace": namespace, "command": line})
        else:
            console.print(plain(line), soft_wrap=True)
        return
    generated = password is None
    if password is None:
        password = secrets.token_urlsafe(PASSWORD_BYTES)
    line = setuser_line(user, password, namespace)
    if json:
        emit_json(
            {"user": user, "namespace": namespace, "command": line, "generated_password": generated}
        )
        return
    if generated:
        errors.print(
            "note: the line sets a newly generated password; it is shown only here, so "
            "keep it (in the user's SESSIONSTORE_URL) before you clear the screen"
        )
    console.print(plain(line), soft_wrap=True)
