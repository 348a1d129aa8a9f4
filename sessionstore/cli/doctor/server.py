"""The checks of a Redis server for ``sessionstore doctor``: its nodes (a Sentinel
service's, a cluster's), version, persistence against the chosen durability and the
Redis Functions library, on every primary, through the library's own client."""

from __future__ import annotations

from typing import Any

import sessionstore

from ...errors import DurabilityError, LibraryMissingError, SessionStoreError, StoreUnavailableError
from ...redis.boundary import ErrorBoundary
from ...redis.client import SyncClient
from ...redis.durability import FSYNC, NONE, REPLICAS, Durability
from ...redis.firstuse import Topology
from ...redis.library import INSTALL_COMMAND, install, installed, library
from ...redis.options import RedisOptions, parse_options
from ...redis.pools import is_cluster
from ...redis.replies import refused
from ...store import Store
from ..common import DURABILITY_HINT
from .check import Check, Unreached


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
    may; with ``fix``, loaded where it is missing or of another version (needs
    ``FUNCTION LOAD``), and only there: where it is current, ``fix`` changes nothing and
    needs no more than the least-privilege user may do."""
    import redis

    name, loaded, missing = library().name, [], []
    for server, node in servers:
        try:
            if installed(client, node):
                continue
            if not fix:
                missing.append(server)
            elif install(client, node):  # False: loaded meanwhile by another client
                loaded.append(server)
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
            if not refused(exc):
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
