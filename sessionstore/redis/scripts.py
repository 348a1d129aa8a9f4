"""The Lua scripts (``lua/*.lua``), loaded once and called by SHA.

Each script is sent by ``EVALSHA``; on ``NOSCRIPT`` (a restarted server, ``SCRIPT
FLUSH``, a replica promoted by a failover) it is loaded with ``SCRIPT LOAD`` on the
server that answered, and the call is repeated. Every key a script touches is passed in
``KEYS``, built by :mod:`sessionstore.keys`; on a Redis Cluster they share one hash tag,
so ``EVALSHA`` is routed to the node serving that slot.

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
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from redis.asyncio.cluster import PipelineCommand
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
from .client import RETRIES, is_cluster, retry_delay

Arg = str | bytes | int


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


#: What a direct call to the node serving a slot may meet while the cluster moves the
#: slot (failover, resharding): the call is repeated after the slot map is refreshed.
_SLOT_MOVING = (RedisConnectionError, RedisTimeoutError, AskError, ClusterDownError, TryAgainError)


# Synchronous flavour -------------------------------------------------------------------


def _load(client: Any, found: Script, keys: Sequence[str]) -> None:
    if is_cluster(client):
        node = client.get_node_from_key(keys[0])
        client.execute_command("SCRIPT LOAD", found.source, target_nodes=node)
    else:
        client.script_load(found.source)


def run(client: Any, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """Run script ``name`` with ``EVALSHA``, loading it first when the server lacks it."""
    found = script(name)
    try:
        return client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))
    except NoScriptError:
        _load(client, found, keys)
        return client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))


def run_then_wait(
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], replicas: int, ms: int
) -> tuple[Any, int]:
    """Run script ``name``, then ``WAIT replicas ms`` on the same connection (one
    pipeline, one round trip); returns (script reply, replicas that acknowledged).

    On a cluster both go to the primary serving the keys' slot; when that primary is
    unreachable or no longer serves the slot, the slot map is refreshed and the call
    repeated (at most ``RETRIES`` times): the scripts are idempotent per call.
    """
    found = script(name)
    if not is_cluster(client):
        return _run_then_wait_on(client, found, keys, args, replicas, ms)
    for attempt in range(RETRIES + 1):
        node = client.get_node_from_key(keys[0])
        try:
            return _run_then_wait_on(
                client.get_redis_connection(node), found, keys, args, replicas, ms
            )
        except _SLOT_MOVING:
            if attempt == RETRIES:
                raise
        time.sleep(retry_delay(attempt + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            client.nodes_manager.initialize()
    raise AssertionError("unreachable")


def _run_then_wait_on(
    client: Any, found: Script, keys: Sequence[str], args: Sequence[Arg], replicas: int, ms: int
) -> tuple[Any, int]:
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("EVALSHA", *_evalsha_args(found, keys, args))
        pipe.execute_command("WAIT", replicas, ms)
        replies = pipe.execute(raise_on_error=False)
        if isinstance(replies[0], NoScriptError) and attempt == 0:
            client.script_load(found.source)
            continue
        break
    _raise_first_error(replies)
    return replies[0], int(replies[1])


# Asynchronous flavour ------------------------------------------------------------------


async def _load_async(client: Any, found: Script, keys: Sequence[str]) -> None:
    if is_cluster(client):
        node = client.get_node_from_key(keys[0])
        await client.execute_command("SCRIPT LOAD", found.source, target_nodes=node)
    else:
        await client.script_load(found.source)


async def run_async(client: Any, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """:func:`run` on a ``redis.asyncio`` client."""
    found = script(name)
    try:
        return await client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))
    except NoScriptError:
        await _load_async(client, found, keys)
        return await client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))


async def run_then_wait_async(
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], replicas: int, ms: int
) -> tuple[Any, int]:
    """:func:`run_then_wait` on a ``redis.asyncio`` client."""
    found = script(name)
    if not is_cluster(client):
        return await _run_then_wait_on_async(client, found, keys, args, replicas, ms)
    for attempt in range(RETRIES + 1):
        try:
            return await _run_then_wait_on_node(client, found, keys, args, replicas, ms)
        except _SLOT_MOVING:
            if attempt == RETRIES:
                raise
        await asyncio.sleep(retry_delay(attempt + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            await client.nodes_manager.initialize()
    raise AssertionError("unreachable")


async def _run_then_wait_on_async(
    client: Any, found: Script, keys: Sequence[str], args: Sequence[Arg], replicas: int, ms: int
) -> tuple[Any, int]:
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("EVALSHA", *_evalsha_args(found, keys, args))
        pipe.execute_command("WAIT", replicas, ms)
        replies = await pipe.execute(raise_on_error=False)
        if isinstance(replies[0], NoScriptError) and attempt == 0:
            await client.script_load(found.source)
            continue
        break
    _raise_first_error(replies)
    return replies[0], int(replies[1])


async def _run_then_wait_on_node(
    client: Any, found: Script, keys: Sequence[str], args: Sequence[Arg], replicas: int, ms: int
) -> tuple[Any, int]:
    # The async cluster client has no per-node client: the node's own pipeline keeps
    # EVALSHA and WAIT on one connection, as WAIT needs.
    node = client.get_node_from_key(keys[0])
    for attempt in range(2):
        commands = [
            PipelineCommand(0, "EVALSHA", *_evalsha_args(found, keys, args)),
            PipelineCommand(1, "WAIT", replicas, ms),
        ]
        await node.execute_pipeline(commands)
        replies: list[Any] = [command.result for command in commands]
        if isinstance(replies[0], NoScriptError) and attempt == 0:
            await client.execute_command("SCRIPT LOAD", found.source, target_nodes=node)
            continue
        break
    _raise_first_error(replies)
    return replies[0], int(replies[1])
