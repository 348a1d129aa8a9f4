"""``sessionstore doctor``: can this store be used as configured? One line per check."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

import sessionstore

from ..connection import REDIS_SCHEMES, file_root, mask_url, resolve_url, scheme_of
from ..errors import (
    AccessDeniedError,
    DurabilityError,
    LibraryMissingError,
    SessionStoreError,
    StoreUnavailableError,
)
from ..models import SessionEvent, SessionHeader
from ..redis.boundary import ErrorBoundary
from ..redis.client import SyncClient
from ..redis.durability import FSYNC, NONE, REPLICAS, Durability
from ..redis.firstuse import Topology
from ..redis.library import INSTALL_COMMAND, install, installed, library
from ..redis.options import RedisOptions, parse_options
from ..redis.pools import is_cluster
from ..results import probe_name
from ..store import Store
from .common import DURABILITY_HINT, EXIT_FAILED, Json, Namespace, Url, console, emit_json
from .text import plain

Fix = Annotated[
    bool,
    typer.Option(
        "--fix",
        help="Install the Redis Functions library on every primary (needs FUNCTION LOAD) "
        "and index the sessions and values written before the namespace index existed "
        "(needs SCAN): run it as an admin, once, and after each upgrade.",
    ),
]


@dataclass
class Check:
    name: str
    status: str  # "OK", "WARN" (usable, but read the advice) or "FAIL" (blocks use)
    detail: str


class Unreached(Check):
    """The FAIL of a server that could not be reached (or refused this user's login):
    every later check would only say it again, so none is run."""


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
    functions library where it is missing and index what was stored before the index
    existed.
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
        checks += guarded_check("server", redis_checks, url, namespace, fix)
        if any(isinstance(check, Unreached) for check in checks):
            return checks
        checks += guarded_check("index", lambda: [index_check(url, namespace, fix)])
    durability_failed = any(
        check.name == "persistence" and check.status == "FAIL" for check in checks
    )
    checks += guarded_check("read/write", lambda: [round_trip(url, namespace, durability_failed)])
    return checks


def guarded_check(name: str, check: Callable[..., list[Check]], *args: Any) -> list[Check]:
    """``check(*args)``; an error it did not expect is one FAIL line (never a traceback)."""
    try:
        return check(*args)
    except SessionStoreError as exc:
        return [Check(name, "FAIL", f"{type(exc).__name__}: {exc}")]
    except Exception as exc:  # noqa: BLE001 - any URL gets lines, not a traceback
        return [Check(name, "FAIL", f"unexpected {type(exc).__name__}: {exc}")]


def redis_checks(url: str, namespace: str, fix: bool) -> list[Check]:
    """Server, mode, persistence and the functions library (installed first with
    ``fix``), through the library's own client (the cluster's primaries as it finds them)
    and its own durability check."""
    options = parse_options(url, None, None)
    boundary = ErrorBoundary(options.display_url, options.timeout)
    topology = Topology(options.cluster, options.durability_choice())
    handle = SyncClient(options, topology, boundary)
    try:
        try:
            client = handle.get()
        except StoreUnavailableError as exc:
            # Said once, as what it is: nothing was written by a connection that failed.
            reason = exc.__cause__ or exc
            return [Unreached("server", "FAIL", f"cannot reach {options.display_url}: {reason}")]
        except SessionStoreError as exc:
            return [Unreached("server", "FAIL", f"{type(exc).__name__}: {exc}")]
        servers = primaries(client, options.display_url)
        nodes = []
        if handle.sentinel is not None:
            nodes.append(sentinel_check(handle.sentinel, options))
        elif is_cluster(client):
            nodes.append(cluster_nodes_check(client))
        # A Sentinel URL that names no durability has it settled by the first use.
        durability = topology.durability.current
        with sessionstore.connect(url, namespace) as store:
            return [
                *nodes,
                server_check(client, servers),
                persistence(client, servers, durability, store),
                functions_check(client, servers, fix),
            ]
    finally:
        handle.close()


def sentinel_check(manager: Any, options: RedisOptions) -> Check:
    """Every node of the service: the sentinels (those of the URL that answered, and the
    others they know), its primary and its replicas, as the first sentinel that answers
    reports them; FAIL when none answers or none knows the service."""
    import redis

    assert options.sentinel is not None
    service = options.sentinel.service
    reached, state, replicas, peers = [], None, [], []
    for client in manager.sentinels:
        kwargs = client.connection_pool.connection_kwargs
        address = f"{kwargs['host']}:{kwargs['port']}"
        try:
            found = client.sentinel_master(service)
            listed = client.sentinel_slaves(service)
            known = client.sentinel_sentinels(service)
        except redis.exceptions.RedisError:
            continue
        reached.append(address)
        if state is None:
            state, replicas, peers = found, listed, known
    total = len(manager.sentinels)
    if state is None:
        return Check("sentinel", "FAIL", f"no sentinel of {total} answered for service {service!r}")
    url_sentinels = {f"{host}:{port}" for host, port in options.sentinel.sentinels}
    others = [_sentinel_node(p) for p in peers if f"{p['ip']}:{p['port']}" not in url_sentinels]
    down = [r for r in [state, *replicas, *peers] if r.get("is_sdown") or r.get("is_odown")]
    status = "OK" if len(reached) == total and not down else "WARN"
    return Check(
        "sentinel",
        status,
        f"{len(reached)} of {total} sentinels reached ({', '.join(reached)})"
        + (f", other sentinels {', '.join(others)}" if others else "")
        + f"; service {service!r}: primary {_sentinel_node(state)}, replicas "
        f"{', '.join(_sentinel_node(r) for r in replicas) or 'none'}",
    )


def _sentinel_node(state: Any) -> str:
    """``host:port`` of a node a sentinel reports, with ``(down)`` when it is."""
    down = state.get("is_sdown") or state.get("is_odown")
    return f"{state['ip']}:{state['port']}" + (" (down)" if down else "")


def cluster_nodes_check(client: Any) -> Check:
    """Every node of the cluster as ``CLUSTER NODES`` on the first primary that answers
    reports it: each primary (with its slots, or none: a node just added), each replica
    (with its primary), and the nodes the cluster sees failing; WARN for any of those."""
    import redis

    listed: dict[str, Any] | None = None
    for node in client.get_primaries():
        try:
            listed = client.get_redis_connection(node).execute_command("CLUSTER NODES")
            break
        except redis.exceptions.RedisError:
            continue
    if listed is None:
        return Check("nodes", "FAIL", "no primary answered CLUSTER NODES")
    address = {entry["node_id"]: name for name, entry in listed.items()}
    shown, failing = [], []
    for name, entry in sorted(listed.items(), key=_node_order):
        flags = set(str(entry.get("flags", "")).split(","))
        state = " (failing)" if flags & {"fail", "fail?", "noaddr"} else ""
        if state:
            failing.append(name)
        if "master" in flags:
            slots = ", ".join(
                start if start == end else f"{start}-{end}"
                for start, end in (_slot_range(r) for r in entry.get("slots", []))
            )
            shown.append(f"primary {name} ({f'slots {slots}' if slots else 'no slots'}){state}")
        else:
            primary = address.get(entry.get("master_id", ""), "no primary")
            shown.append(f"replica {name} of {primary}{state}")
    primaries_count = sum("primary " in line for line in shown)
    return Check(
        "nodes",
        "WARN" if failing else "OK",
        f"{len(shown)} nodes, {primaries_count} primaries and "
        f"{len(shown) - primaries_count} replicas: {'; '.join(shown)}",
    )


def _node_order(item: tuple[str, Any]) -> tuple[bool, str]:
    """Primaries first, then replicas, each by address."""
    name, entry = item
    return "master" not in str(entry.get("flags", "")), name


def _slot_range(found: Any) -> tuple[str, str]:
    start = str(found[0])
    return start, str(found[1]) if len(found) > 1 else start


def primaries(client: Any, display_url: str) -> list[tuple[str, Any]]:
    """(name, target) of every server whose persistence counts: each primary of a cluster
    (target: its node), or the one server (target: None)."""
    if is_cluster(client):
        return [(node.name, node) for node in client.get_primaries()]
    return [(display_url, None)]


def ask(client: Any, node: Any, *args: Any) -> Any:
    """A redis-py call to one server (a cluster node, or the one server)."""
    method = getattr(client, args[0])
    return method(*args[1:], **({} if node is None else {"target_nodes": node}))


def server_check(client: Any, servers: list[tuple[str, Any]]) -> Check:
    import redis

    mode = f"cluster of {len(servers)} primaries" if node_targets(servers) else "standalone"
    versions = []
    for name, node in servers:
        try:
            info = ask(client, node, "info", "server")
        except redis.exceptions.NoPermissionError:
            # The least-privilege user: the library needs only INFO persistence and cluster.
            return Check(
                "server",
                "OK",
                f"{mode}; the Redis version is not shown: this user may not run "
                "`INFO server` (the library needs only `INFO persistence` and `INFO cluster`)",
            )
        except redis.exceptions.RedisError as exc:
            return Check("server", "FAIL", f"{name}: {exc}")
        versions.append(f"{name} Redis {info.get('redis_version')}")
    return Check("server", "OK", f"{mode}: {', '.join(versions)}")


def node_targets(servers: list[tuple[str, Any]]) -> bool:
    return any(node is not None for _, node in servers)


def persistence(
    client: Any, servers: list[tuple[str, Any]], durability: Durability, store: Store
) -> Check:
    """What the chosen durability needs of every primary, judged by the check the
    store's first event-log write makes (:meth:`sessionstore.Store.check_durable`, which
    writes nothing)."""
    where = f"on {len(servers)} primaries" if node_targets(servers) else "on the server"
    if durability.mode == NONE:
        return Check("persistence", "OK", "durability=none: nothing is required of the server")
    if durability.mode == REPLICAS:
        return replicas_check(client, servers, durability)
    try:
        store.check_durable()
    except DurabilityError as exc:
        return Check(
            "persistence", "FAIL", f"DurabilityError: {exc}; {exc.hint or DURABILITY_HINT}"
        )
    if durability.mode == FSYNC:
        return Check("persistence", "OK", f"appendonly yes, appendfsync always {where}")
    return aof_fsync_check(client, servers, where)


def replicas_check(client: Any, servers: list[tuple[str, Any]], durability: Durability) -> Check:
    short = []
    for name, node in servers:
        have = int(ask(client, node, "info", "replication").get("connected_slaves", 0))
        if have < durability.replicas:
            short.append(f"{name} has {have}")
    if short:
        return Check(
            "persistence",
            "FAIL",
            f"durability={durability} but {'; '.join(short)} connected replica(s): writes "
            "will raise NotReplicatedError",
        )
    return Check("persistence", "OK", f"each primary has the replicas durability={durability} asks")


def aof_fsync_check(client: Any, servers: list[tuple[str, Any]], where: str) -> Check:
    """``durability=aof`` trusts the fsync policy: confirm it where this user may read it."""
    import redis

    lax = []
    for name, node in servers:
        try:
            policy = ask(client, node, "config_get", "appendfsync").get("appendfsync")
        except redis.exceptions.ResponseError:
            return Check(
                "persistence",
                "WARN",
                f"appendonly yes {where} (durability=aof); the fsync policy is not shown: this "
                "user may not run `CONFIG GET appendfsync`: have an admin run "
                "`sessionstore doctor` once to confirm `appendfsync always`",
            )
        if str(policy) != "always":
            lax.append(f"{name} has appendfsync {policy}")
    if lax:
        return Check(
            "persistence",
            "WARN",
            f"AOF is on but {'; '.join(lax)}: an acknowledged append may be lost in a crash; "
            "set `appendfsync always`",
        )
    return Check(
        "persistence", "OK", f"AOF on, appendfsync always confirmed {where} (durability=aof)"
    )


def functions_check(client: Any, servers: list[tuple[str, Any]], fix: bool) -> Check:
    """This version of the Redis Functions library on every primary (a replica gets it
    by replication), asked by calling its version function, as the least-privilege user
    may; with ``fix``, loaded where it is missing (needs ``FUNCTION LOAD``)."""
    import redis

    name, loaded, missing = library().name, [], []
    for server, node in servers:
        try:
            if fix and install(client, node):
                loaded.append(server)
            elif not installed(client, node):
                missing.append(server)
        except LibraryMissingError:
            return Check(
                "functions",
                "FAIL",
                f"--fix needs a user allowed FUNCTION LOAD to install {name}: run "
                f"`{INSTALL_COMMAND}`",
            )
        except redis.exceptions.NoPermissionError as exc:
            return Check("functions", "FAIL", f"this user may not call functions: {exc}")
        except redis.exceptions.ResponseError as exc:
            if "unknown command" not in str(exc).lower():
                raise
            return Check(
                "functions",
                "WARN",
                f"{server} has no Redis Functions (Redis before 7): the scripts are sent by "
                "EVALSHA, and the user of `sessionstore acl` (which needs Redis 7) cannot "
                "be used",
            )
    if missing:
        return Check(
            "functions",
            "WARN",
            f"{name} is not installed on {', '.join(missing)}: a user allowed FUNCTION LOAD "
            "installs it at first use, the user of `sessionstore acl` cannot: run "
            f"`{INSTALL_COMMAND}`",
        )
    where = f"{len(servers)} primaries" if node_targets(servers) else "the server"
    done = f" (loaded now on {', '.join(loaded)})" if loaded else ""
    return Check("functions", "OK", f"{name} is installed on {where}{done}")


def index_check(url: str, namespace: str, fix: bool) -> Check:
    """Data of the namespace missing from its index (stores written before it existed):
    FAIL with the remedy; with ``fix``, index it. Both need SCAN (an admin)."""
    from ..redis.index import audit, rebuild

    try:
        if fix:
            added = rebuild(url, namespace)
            return Check(
                "index",
                "OK",
                f"indexed {added.sessions} session(s) and {added.values} value(s) that "
                f"the index of namespace {namespace!r} lacked",
            )
        missing = audit(url, namespace)
    except AccessDeniedError:
        return Check(
            "index",
            "WARN",
            "this user may not SCAN, so the namespace index cannot be audited: an admin "
            "can (`sessionstore doctor`)",
        )
    except SessionStoreError as exc:
        return Check("index", "FAIL", f"{type(exc).__name__}: {exc}")
    if missing.total:
        return Check(
            "index",
            "FAIL",
            f"{missing.sessions} session(s) and {missing.values} value(s) of namespace "
            f"{namespace!r} are stored but not indexed (written before the index existed), "
            "so listings miss them: run `sessionstore doctor --fix` once as an admin",
        )
    return Check("index", "OK", f"every session and value of {namespace!r} is indexed")


def round_trip(url: str, namespace: str, durability_failed: bool = False) -> Check:
    """Write, read and delete a probe value and a probe log session in the namespace: this
    exercises every permission (and, on Redis, every function of the library) the library
    needs. On a file store every file and folder the probe made is removed again. An
    event log refused for the durability the persistence check already failed
    (``durability_failed``) is named, not explained a second time."""
    probe = probe_name("doctor")
    started = time.perf_counter()
    values_work = False
    try:
        with sessionstore.connect(url, namespace) as store, FileScratch(url, store, probe):
            session = store.session(probe, "doctor", "doctor", "doctor")
            session.set_data({"probe": True}, 0)
            session.update(lambda value: value, 0)
            history = store.session(probe, "doctor", "doctor", "doctor", history=True)
            history.set_data(1, 0)
            if session.get_data(0) != {"probe": True} or history.get_data(0) != 1:
                return Check("read/write", "FAIL", "a value written was not read back")
            session.delete()
            values_work = True
            store.events.create(SessionHeader(id=probe))
            store.events.append(probe, [SessionEvent(seq=0, type="doctor/probe", time=0)])
            store.events.load(probe)
            store.events.delete(probe)
    except DurabilityError as exc:
        if isinstance(exc, StoreUnavailableError):
            return Check("read/write", "FAIL", f"{type(exc).__name__}: {exc}")
        if durability_failed and values_work:
            return Check(
                "read/write",
                "FAIL",
                f"values, history and update work in namespace {namespace!r}; the event "
                "log refuses appends (DurabilityError: see persistence)",
            )
        hint = exc.hint or DURABILITY_HINT
        return Check("read/write", "FAIL", f"{type(exc).__name__}: {exc}; {hint}")
    except SessionStoreError as exc:
        return Check("read/write", "FAIL", f"{type(exc).__name__}: {exc}")
    elapsed = (time.perf_counter() - started) * 1000
    functions = ", through the library's Redis functions" if scheme_of(url) in REDIS_SCHEMES else ""
    return Check(
        "read/write",
        "OK",
        f"values, history, update and the event log work in namespace {namespace!r}"
        f"{functions} ({elapsed:.0f} ms)",
    )


class FileScratch:
    """On a file store, what the round trip of ``probe`` leaves is removed on leaving the
    block: the probe key's folder and log file (their names hold the probe's unique id),
    then every folder on the way to them that did not exist before (the namespace's,
    the store's own), each only while it is empty. Nothing on other stores."""

    def __init__(self, url: str, store: Store, probe: str) -> None:
        self.probe_paths: list[Path] = []
        self.new_dirs: list[Path] = []
        if scheme_of(url) not in ("", "file"):
            return
        from ..arguments import value_key
        from ..backends.files import FileValues

        key = value_key(store.namespace, probe, "doctor", "doctor", "doctor", "backtest")
        key_dir = FileValues(file_root(url)).key_dir(key)
        log = Path(store.events.locate(probe) or key_dir)
        self.probe_paths = [key_dir, log]
        for path in (key_dir, log.parent):
            while not path.exists() and path != path.parent:
                self.new_dirs.append(path)
                path = path.parent

    def __enter__(self) -> FileScratch:
        return self

    def __exit__(self, *exc: object) -> None:
        for path in self.probe_paths:
            if path.is_dir() and path in self.new_dirs:
                shutil.rmtree(path, ignore_errors=True)
            elif path.is_file() or path.is_symlink():
                path.unlink(missing_ok=True)
        for folder in sorted(set(self.new_dirs), key=lambda p: len(p.parts), reverse=True):
            # Not empty (written meanwhile by someone else), or gone already: kept.
            with contextlib.suppress(OSError):
                os.rmdir(folder)
