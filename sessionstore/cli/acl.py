"""``sessionstore acl``: the ``ACL SETUSER`` line of a least-privilege user."""

from __future__ import annotations

import secrets
from typing import Annotated

import typer

from ..connection import ENV_URL, REDIS_SCHEMES, scheme_of
from ..errors import InvalidArgumentError, SessionStoreError
from .common import Json, Namespace, console, emit_json, errors, fail
from .text import plain

#: Random bytes of a generated password (as URL-safe base64: 43 characters).
PASSWORD_BYTES = 32


#: What stderr says of every line printed: ACL users are kept per server.
EVERY_NODE = (
    "note: ACL users are kept per Redis server: run the line on every node (each primary "
    "and replica of a cluster or Sentinel service, with -h/-p), or let `sessionstore acl "
    "--apply --url <admin url>` do it"
)


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
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            envvar=ENV_URL,
            help="The Redis deployment (redis://, rediss://, unix://, redis+sentinel://): the "
            "printed line is sent to its host and port and grants the database it names; "
            "with --apply, an admin's URL.",
        ),
    ] = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Make the user on every node of the deployment --url names (the server, "
            "every node of a cluster, the primary and replicas of a Sentinel service) "
            "instead of printing the line only.",
        ),
    ] = False,
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
    to the commands sessionstore needs (and to the database --url names); run it on every
    node, or make the user everywhere with --apply. Without --password the line sets a
    newly generated password (stderr says so: keep it, it is shown only this once).
    --json: one object {"user", "namespace", "command", "generated_password", "applied"}
    ("applied": the host:port of each node made on, with --apply)."""
    # Imported here: importing the CLI (as every demo worker process does) loads no Redis driver.
    from ..redis.acl import grant_functions_args, grant_functions_line, setuser_args, setuser_line

    if apply and url is None:
        fail(
            InvalidArgumentError(
                f"--apply needs --url (or ${ENV_URL}): an admin's URL of the deployment"
            ),
            None,
        )
    try:
        at, db = _target(url) if url is not None else (None, 0)
        generated = password is None and not upgrade
        if password is None:
            password = secrets.token_urlsafe(PASSWORD_BYTES)
        if upgrade:
            line, args = grant_functions_line(user, at), grant_functions_args(user)
        else:
            line = setuser_line(user, password, namespace, db, at)
            args = setuser_args(user, password, namespace, db)
        applied = _apply(url, args) if apply and url is not None else None
    except SessionStoreError as exc:
        fail(exc, url)
    if json:
        found: dict[str, object] = {"user": user, "namespace": namespace, "command": line}
        if not upgrade:
            found["generated_password"] = generated
        if applied is not None:
            found["applied"] = applied
        emit_json(found)
        return
    if generated:
        errors.print(
            "note: the line sets a newly generated password; it is shown only here, so "
            "keep it (in the user's SESSIONSTORE_URL) before you clear the screen"
        )
    if applied is None:
        errors.print(EVERY_NODE)
    console.print(plain(line), soft_wrap=True)
    if applied is not None:
        errors.print(plain(f"applied on {len(applied)} node(s): {', '.join(applied)}"))


def _target(url: str) -> tuple[tuple[str, int] | None, int]:
    """Where the printed line goes ((host, port) of the URL; None for a unix socket or a
    Sentinel service, whose nodes the sentinels name) and the database the URL names."""
    from redis.connection import parse_url

    from ..redis.options import parse_options
    from ..urls import invalid_url

    if scheme_of(url) not in REDIS_SCHEMES:
        raise InvalidArgumentError(
            f"sessionstore acl is for Redis: --url (or ${ENV_URL}) must be a Redis URL"
        )
    options = parse_options(url, None, None)
    if options.sentinel is not None:
        return None, int(options.sentinel.node_kwargs.get("db", 0))
    try:
        parsed = parse_url(options.url)
    except ValueError as exc:  # a port out of range, a bracket left open
        raise invalid_url(url, exc) from None
    db = int(parsed.get("db", 0))
    if "path" in parsed:
        return None, db
    return (str(parsed.get("host", "localhost")), int(parsed.get("port", 6379))), db


def _apply(url: str, args: list[str]) -> list[str]:
    from ..redis.acl_apply import apply_user

    return apply_user(url, args)
