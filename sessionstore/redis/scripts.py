"""The Lua scripts (``lua/*.lua``), loaded once and called by SHA.

Each script is sent by ``EVALSHA``; on ``NOSCRIPT`` (a restarted server, ``SCRIPT
FLUSH``, a replica promoted by a failover) it is loaded with ``SCRIPT LOAD`` on the
server that answered, and the call is repeated, once. The repeat is safe: an earlier
send whose reply was lost may have been applied, and every write script recognises its
own resend (see :mod:`sessionstore.keys`). A second ``NOSCRIPT`` is raised as it is: the
error boundary (:class:`~.client.ErrorBoundary`) makes it a
:class:`~sessionstore.errors.StoreUnavailableError`, since an earlier send may have
been applied. Every key a script touches is passed in
``KEYS``, built by :mod:`sessionstore.keys`; on a Redis Cluster they share one hash tag,
so ``EVALSHA`` is routed to the node serving that slot.

A write that can create data names its index entry (``first``: the ``ZADD`` of
:func:`sessionstore.redis.index.add_command`): on a single server it is sent in the same
pipeline, before the write (one round trip); on a cluster, where the index lives in
another slot, as a call of its own before the write. Either way data never exists
without its index entry.

Scripts do all their checks before their first write. Without a shebang Redis runs
them in compatibility mode: under ``maxmemory`` with ``noeviction`` a script is refused
at its first memory-growing write (HSET, ZADD, XADD) when it has written nothing yet, so
an out-of-memory server leaves nothing half done.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import PipelineCommand
from redis.cluster import PRIMARY, ClusterNode
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import SessionStoreError
from .client import RETRIES, Steps, adrive, drive, is_cluster, retry_delay
from .durability import Acks

Arg = str | bytes | int
#: A command as redis-py's ``execute_command`` takes it.
Command = Sequence[Arg]


@dataclass(frozen=True)
class Script:
    """One Lua script: its file name without ``.lua``, its text and its SHA1."""

    name: str
    source: bytes
    sha: str


def lua_dir() -> Traversable:
    """The installed ``sessionstore/lua`` folder, else the repository's ``lua/`` folder."""
    installed = resources.files("sessionstore") / "lua"
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "lua"


@functools.cache
def scripts() -> dict[str, Script]:
    """Every script of the lua folder, by name."""
    found: dict[str, Script] = {}
    for entry in lua_dir().iterdir():
        if entry.name.endswith(".lua"):
            source = entry.read_bytes()
            name = entry.name[: -len(".lua")]
            found[name] = Script(name, source, hashlib.sha1(source).hexdigest())
    if not found:
        raise SessionStoreError(f"no Lua scripts found in {lua_dir()}: the install is broken")
    return found


def script(name: str) -> Script:
    """The script ``lua/<name>.lua``."""
    return scripts()[name]


def _evalsha_args(found: Script, keys: Sequence[str], args: Sequence[Arg]) -> list[Arg]:
    return [found.sha, len(keys), *keys, *args]


def _raise_first_error(replies: list[Any]) -> None:
    for reply in replies:
        if isinstance(reply, RedisError):
            raise reply


def _batch(
    found: Script,
    keys: Sequence[str],
    args: Sequence[Arg],
    first: Command | None,
    then: Sequence[Command] = (),
) -> tuple[list[Command], int]:
    """The commands of one pipeline: ``first`` (an index entry), the script call, then
    ``then``; and where the script's reply is."""
    batch: list[Command] = [] if first is None else [first]
    at = len(batch)
    batch.append(["EVALSHA", *_evalsha_args(found, keys, args)])
    return [*batch, *then], at


def _wait_command(replicas: int, ms: int) -> list[Command]:
    return [["WAIT", replicas, ms]]


def _no_script(replies: list[Any], at: int, attempt: int) -> bool:
    """The script of a pipeline was missing (to load and send again, once)."""
    return attempt == 0 and at < len(replies) and isinstance(replies[at], NoScriptError)


#: What a direct call to the node serving a slot may meet while the cluster moves the
#: slot (failover, resharding): the call is repeated after the slot map is refreshed.
_SLOT_MOVING = (RedisConnectionError, RedisTimeoutError, AskError, ClusterDownError, TryAgainError)


# Synchronous flavour -------------------------------------------------------------------


def _load_targets(client: Any, keys: Sequence[str]) -> list[Any]:
    """Where a cluster loads a missing script: every primary the client knows and the
    node serving the keys. ``NOSCRIPT`` may come from a node other than the one the slot
    map names (the target of an ``ASK`` while the slot migrates), so loading on the
    slot's node alone would send the reload to the wrong one."""
    nodes = {node.name: node for node in client.get_primaries()}
    serving = client.get_node_from_key(keys[0])
    nodes.setdefault(serving.name, serving)
    return list(nodes.values())


def _load_steps(client: Any, found: Script, keys: Sequence[str]) -> Steps[None]:
    """``SCRIPT LOAD`` as steps: on a cluster on each of :func:`_load_targets` (a node
    down is passed over unless every load failed)."""
    if not is_cluster(client):
        yield functools.partial(client.script_load, found.source)
        return
    errors: list[BaseException] = []
    targets = _load_targets(client, keys)
    for node in targets:
        try:
            yield functools.partial(
                client.execute_command, "SCRIPT LOAD", found.source, target_nodes=node
            )
        except (RedisError, RedisClusterException) as exc:
            errors.append(exc)
    if len(errors) == len(targets):
        raise errors[0]


def _load(client: Any, found: Script, keys: Sequence[str]) -> None:
    drive(_load_steps(client, found, keys))


def run(
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], first: Command | None = None
) -> Any:
    """Run script ``name`` with ``EVALSHA``, loading it first when the server lacks it;
    ``first`` (an index entry) before it (see the module doc)."""
    found = script(name)
    if first is not None:
        if not is_cluster(client):
            return _pipelined(client, found, keys, args, first, [])[0]
        client.execute_command(*first)
    try:
        return client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))
    except NoScriptError:
        _load(client, found, keys)
        return client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))


def run_then_wait(
    client: Any,
    name: str,
    keys: Sequence[str],
    args: Sequence[Arg],
    replicas: int,
    ms: int,
    first: Command | None = None,
) -> tuple[Any, int]:
    """Run script ``name``, then ``WAIT replicas ms`` on the same connection (one
    pipeline, one round trip); returns (script reply, replicas that acknowledged).
    ``first`` as for :func:`run`.

    On a cluster both go to the primary serving the keys' slot; when that primary is
    unreachable or no longer serves the slot, the slot map is refreshed and the call
    repeated (at most ``RETRIES`` times): the scripts are idempotent per call.
    """
    found = script(name)
    if not is_cluster(client):
        return _run_then_wait_on(client, found, keys, args, replicas, ms, first)
    if first is not None:
        client.execute_command(*first)
    for attempt in range(RETRIES + 1):
        node = client.get_node_from_key(keys[0])
        try:
            try:
                reply, acks = _run_then_wait_on(
                    client.get_redis_connection(node), found, keys, args, replicas, ms
                )
                return reply, Acks(acks, node.name)
            except AskError as ask:
                # The slot is migrating and the keys are already on the target: the
                # same pipeline goes there, after ASKING.
                with _node_client(client, ask.host, ask.port) as (target, name):
                    reply, acks = _run_then_wait_on(
                        target, found, keys, args, replicas, ms, ["ASKING"]
                    )
                    return reply, Acks(acks, name)
        except _SLOT_MOVING:
            if attempt == RETRIES:
                raise
        time.sleep(retry_delay(attempt + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            client.nodes_manager.initialize()
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _node_client(client: Any, host: str, port: int) -> Iterator[tuple[Any, str]]:
    """(the redis-py client of cluster node ``host:port``, its name); a node the slot
    map does not have yet (a primary just added, receiving its first slot) gets a
    client of its own for this call."""
    node = client.get_node(host=host, port=port)
    if node is not None:
        yield client.get_redis_connection(node), node.name
        return
    node = ClusterNode(host, port, PRIMARY)
    client.nodes_manager.create_redis_connections([node])
    try:
        yield node.redis_connection, node.name
    finally:
        node.redis_connection.close()


def _run_then_wait_on(
    client: Any,
    found: Script,
    keys: Sequence[str],
    args: Sequence[Arg],
    replicas: int,
    ms: int,
    first: Command | None = None,
) -> tuple[Any, int]:
    reply, rest = _pipelined(client, found, keys, args, first, _wait_command(replicas, ms))
    return reply, int(rest[0])


def _pipelined(
    client: Any,
    found: Script,
    keys: Sequence[str],
    args: Sequence[Arg],
    first: Command | None,
    then: Sequence[Command],
) -> tuple[Any, list[Any]]:
    """One pipeline of :func:`_batch` on a single server (a cluster node's client);
    returns (the script's reply, the replies of ``then``)."""
    return drive(_pipeline_steps(client, found, keys, args, first, then))


def _pipeline_steps(
    client: Any,
    found: Script,
    keys: Sequence[str],
    args: Sequence[Arg],
    first: Command | None,
    then: Sequence[Command],
) -> Steps[tuple[Any, list[Any]]]:
    """:func:`_pipelined` as steps, for :func:`drive` and :func:`adrive`: loads the
    script and sends the pipeline again once on NOSCRIPT."""
    commands, at = _batch(found, keys, args, first, then)
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies = yield functools.partial(pipe.execute, raise_on_error=False)
        if _no_script(replies, at, attempt):
            yield functools.partial(client.script_load, found.source)
            continue
        break
    _raise_first_error(replies)
    return replies[at], replies[at + 1 :]


# Asynchronous flavour ------------------------------------------------------------------


async def _load_async(client: Any, found: Script, keys: Sequence[str]) -> None:
    await adrive(_load_steps(client, found, keys))


async def run_async(
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], first: Command | None = None
) -> Any:
    """:func:`run` on a ``redis.asyncio`` client."""
    found = script(name)
    if first is not None:
        if not is_cluster(client):
            return (await _pipelined_async(client, found, keys, args, first, []))[0]
        await client.execute_command(*first)
    try:
        return await client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))
    except NoScriptError:
        await _load_async(client, found, keys)
        return await client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))


async def run_then_wait_async(
    client: Any,
    name: str,
    keys: Sequence[str],
    args: Sequence[Arg],
    replicas: int,
    ms: int,
    first: Command | None = None,
) -> tuple[Any, int]:
    """:func:`run_then_wait` on a ``redis.asyncio`` client."""
    found = script(name)
    if not is_cluster(client):
        wait = _wait_command(replicas, ms)
        reply, rest = await _pipelined_async(client, found, keys, args, first, wait)
        return reply, int(rest[0])
    if first is not None:
        await client.execute_command(*first)
    for attempt in range(RETRIES + 1):
        node = client.get_node_from_key(keys[0])
        try:
            try:
                return await _run_then_wait_on_node(client, node, found, keys, args, replicas, ms)
            except AskError as ask:
                # See run_then_wait: the pipeline goes to the target, after ASKING.
                target = client.get_node(host=ask.host, port=ask.port)
                if target is not None:
                    return await _run_then_wait_on_node(
                        client, target, found, keys, args, replicas, ms, asking=True
                    )
                target = AsyncClusterNode(
                    ask.host, ask.port, PRIMARY, **client.get_connection_kwargs()
                )
                try:
                    return await _run_then_wait_on_node(
                        client, target, found, keys, args, replicas, ms, asking=True
                    )
                finally:
                    await target.disconnect()
        except _SLOT_MOVING:
            if attempt == RETRIES:
                raise
        await asyncio.sleep(retry_delay(attempt + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            await client.nodes_manager.initialize()
    raise AssertionError("unreachable")


async def _pipelined_async(
    client: Any,
    found: Script,
    keys: Sequence[str],
    args: Sequence[Arg],
    first: Command | None,
    then: Sequence[Command],
) -> tuple[Any, list[Any]]:
    """:func:`_pipelined` on a ``redis.asyncio`` client."""
    return await adrive(_pipeline_steps(client, found, keys, args, first, then))


async def _run_then_wait_on_node(
    client: Any,
    node: Any,
    found: Script,
    keys: Sequence[str],
    args: Sequence[Arg],
    replicas: int,
    ms: int,
    *,
    asking: bool = False,
) -> tuple[Any, int]:
    # The async cluster client has no per-node client: the node's own pipeline keeps
    # (ASKING,) EVALSHA and WAIT on one connection, as WAIT and ASKING need.
    for attempt in range(2):
        commands = [PipelineCommand(0, "ASKING")] if asking else []
        at = len(commands)
        commands += [
            PipelineCommand(at, "EVALSHA", *_evalsha_args(found, keys, args)),
            PipelineCommand(at + 1, "WAIT", replicas, ms),
        ]
        await node.execute_pipeline(commands)
        replies: list[Any] = [command.result for command in commands]
        if isinstance(replies[at], NoScriptError) and attempt == 0:
            await node.execute_command("SCRIPT", "LOAD", found.source)
            continue
        break
    _raise_first_error(replies)
    return replies[at], Acks(int(replies[at + 1]), node.name)
