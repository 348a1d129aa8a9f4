"""``sessionstore doctor``: can this store be used as configured? One line per check."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import typer

import sessionstore

from ..connection import REDIS_SCHEMES, mask_url, resolve_url, scheme_of
from ..errors import SessionStoreError
from ..models import SessionEvent, SessionHeader
from ..redis.acl import setuser_line
from .common import EXIT_FAILED, Json, Namespace, Url, console, emit_json

#: URL query parameters sessionstore reads itself (redis-py must not see them).
OWN_PARAMS = {"durability", "cluster"}


@dataclass
class Check:
    name: str
    status: str  # "OK", "WARN" (usable, but read the advice) or "FAIL" (blocks use)
    detail: str


def doctor(url: Url = None, namespace: Namespace = "default", json: Json = False) -> None:
    """Check the server (version, cluster, persistence against the chosen durability), the
    permissions of the current user and the scripts, by a real round trip in the
    namespace. Exit 0 when nothing blocks use, 1 when something does."""
    resolved = resolve_url(url)
    checks = []
    if scheme_of(resolved) in REDIS_SCHEMES:
        checks += redis_checks(resolved)
    checks += [round_trip(resolved, namespace)]
    if json:
        emit_json({"url": mask_url(resolved), "checks": [c.__dict__ for c in checks]})
    else:
        console.print(
            f"sessionstore doctor: {mask_url(resolved)} (namespace {namespace!r})", markup=False
        )
        colour = {"OK": "green", "WARN": "yellow", "FAIL": "red"}
        for check in checks:
            console.print(
                f"[{colour[check.status]}]{check.status:<4}[/] {check.name}: {check.detail}"
            )
    if any(check.status == "FAIL" for check in checks):
        raise typer.Exit(EXIT_FAILED)


def acl(
    user: Annotated[str, typer.Argument(help="Name of the Redis user to create.")],
    password: Annotated[str, typer.Option(help="Its password.")] = "<password>",
    namespace: Namespace = "default",
) -> None:
    """Print the redis-cli line that creates a user confined to the namespace's keys and
    to the commands sessionstore needs."""
    console.print(setuser_line(user, password, namespace), markup=False)


def split_own_params(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in OWN_PARAMS}
    rest = urlencode([(k, v) for k, v in query if k not in OWN_PARAMS])
    return urlunsplit(parts._replace(query=rest)), own


def redis_checks(url: str) -> list[Check]:
    import redis

    plain_url, own = split_own_params(url)
    durability = own.get("durability", "fsync")
    client = redis.Redis.from_url(plain_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        try:
            info = client.info()
        except redis.exceptions.NoPermissionError:
            return [Check("server", "WARN", "INFO is not permitted: version and mode unknown")]
        except redis.exceptions.RedisError as exc:
            return [Check("server", "FAIL", f"cannot reach it: {exc}")]
        checks = [
            Check("server", "OK", f"Redis {info.get('redis_version')} ({info.get('role')})"),
            Check("mode", "OK", "cluster" if info.get("cluster_enabled") else "standalone"),
            persistence(client, durability, info),
        ]
    finally:
        client.close()
    return checks


def persistence(client: Any, durability: str, info: dict[str, Any]) -> Check:
    import redis

    if durability == "none":
        return Check("persistence", "OK", "durability=none: nothing is required of the server")
    if durability.startswith("replicas:"):
        wanted = int(durability.split(":", 1)[1] or 0)
        have = int(info.get("connected_slaves", 0))
        if have < wanted:
            return Check(
                "persistence",
                "FAIL",
                f"durability={durability} but only {have} "
                "replica(s) are connected: appends will raise DurabilityError",
            )
        return Check("persistence", "OK", f"{have} replica(s) connected for {durability}")
    try:
        aof = client.config_get("appendonly").get("appendonly")
        fsync = client.config_get("appendfsync").get("appendfsync")
    except redis.exceptions.RedisError:
        return Check(
            "persistence",
            "WARN",
            "CONFIG GET is not permitted: durability=fsync "
            "cannot be verified (grant +config|get, or choose durability=none)",
        )
    if aof == "yes" and fsync == "always":
        return Check("persistence", "OK", "appendonly yes, appendfsync always (durability=fsync)")
    return Check(
        "persistence",
        "FAIL",
        f"appendonly {aof}, appendfsync {fsync}: durability=fsync"
        " appends will raise DurabilityError; set `appendonly yes` and `appendfsync "
        "always`, or connect with ?durability=replicas:N or ?durability=none",
    )


def round_trip(url: str, namespace: str) -> Check:
    """Write, read and delete a probe value and a probe log session in the namespace: this
    exercises every permission and script the library needs."""
    probe = f"doctor-{uuid.uuid4().hex[:12]}"
    started = time.perf_counter()
    try:
        with sessionstore.connect(url, namespace) as store:
            session = store.session(probe, "doctor", "doctor", "doctor")
            session.set_data({"probe": True}, 0)
            session.update(lambda value: value, 0)
            history = store.session(probe, "doctor", "doctor", "doctor", history=True)
            history.set_data(1, 0)
            if session.get_data(0) != {"probe": True} or history.get_data(0) != 1:
                return Check("read/write", "FAIL", "a value written was not read back")
            session.delete()
            store.events.create(SessionHeader(id=probe))
            store.events.append(probe, [SessionEvent(seq=0, type="doctor/probe", time=0)])
            store.events.load(probe)
            store.events.delete(probe)
    except SessionStoreError as exc:
        return Check("read/write", "FAIL", f"{type(exc).__name__}: {exc}")
    elapsed = (time.perf_counter() - started) * 1000
    return Check(
        "read/write",
        "OK",
        f"values, history, update, scripts and the event log "
        f"work in namespace {namespace!r} ({elapsed:.0f} ms)",
    )
