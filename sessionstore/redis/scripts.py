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
without its index entry. With ``replicas:N`` (:func:`run_then_wait_steps`) the entry is
as durable as the data: on a single server the ``WAIT`` after the script covers it; on a
cluster it is followed by a ``WAIT`` of its own on the index's node, and too few
acknowledgements raise before the data is written.

Scripts do all their checks before their first write. Without a shebang Redis runs
them in compatibility mode: under ``maxmemory`` with ``noeviction`` a script is refused
at its first memory-growing write (HSET, ZADD, XADD) when it has written nothing yet, so
an out-of-memory server leaves nothing half done.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import redis.asyncio.cluster
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

from ..drive import Pause, Steps, drive
from ..errors import SessionStoreError
from .client import is_cluster
from .durability import Acks, check_value_acks
from .retry import RETRIES, retry_delay

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


def _no_script(replies: list[Any], at: int) -> bool:
    """The script of a pipeline was missing (to load and send again, once)."""
    return at < len(replies) and isinstance(replies[at], NoScriptError)


#: What a direct call to the node serving a slot may meet while the cluster moves the
#: slot (failover, resharding): the call is repeated after the slot map is refreshed.
_SLOT_MOVING = (RedisConnectionError, RedisTimeoutError, AskError, ClusterDownError, TryAgainError)


# Where a batch of commands goes -----------------------------------------------------------

#: Sends commands on one connection, in order, and returns their replies with an error
#: reply in its place (an awaitable of them on a ``redis.asyncio`` client).
Batch = Callable[[Sequence[Command]], Any]


def client_batch(client: Any) -> Batch:
    """A :data:`Batch` on a single server's client (sync or async): one pipeline."""

    def send(commands: Sequence[Command]) -> Any:
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return pipe.execute(raise_on_error=False)

    return send


def _async_node_batch(node: AsyncClusterNode) -> Batch:
    """A :data:`Batch` on one node of a ``redis.asyncio`` cluster client, which has no
    client per node: the node's own pipeline keeps the commands on one connection."""

    async def send(commands: Sequence[Command]) -> list[Any]:
        queued = [PipelineCommand(at, *command) for at, command in enumerate(commands)]
        await node.execute_pipeline(queued)
        return [command.result for command in queued]

    return send


def _is_async_cluster(client: Any) -> bool:
    return isinstance(client, redis.asyncio.cluster.RedisCluster)


def _node_batch(client: Any, node: Any) -> Batch:
    """A :data:`Batch` on the cluster node ``node``."""
    if _is_async_cluster(client):
        return _async_node_batch(node)
    return client_batch(client.get_redis_connection(node))


def _ask_target(client: Any, host: str, port: int) -> tuple[Batch, str, Callable[[], Any] | None]:
    """(a :data:`Batch` on the target of an ``ASK``, its name, what closes it); a node the
    slot map does not have yet (a primary just added, receiving its first slot) gets a
    connection of its own for this call, closed after it."""
    node = client.get_node(host=host, port=port)
    if node is not None:
        return _node_batch(client, node), node.name, None
    if _is_async_cluster(client):
        fresh = AsyncClusterNode(host, port, PRIMARY, **client.get_connection_kwargs())
        return _async_node_batch(fresh), fresh.name, fresh.disconnect
    node = ClusterNode(host, port, PRIMARY)
    client.nodes_manager.create_redis_connections([node])
    return client_batch(node.redis_connection), node.name, node.redis_connection.close


# The operations ---------------------------------------------------------------------------


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
    """``SCRIPT LOAD``: on a cluster on each of :func:`_load_targets` (a node down is
    passed over unless every load failed)."""
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


def _pipeline_steps(
    send: Batch,
    found: Script,
    keys: Sequence[str],
    args: Sequence[Arg],
    first: Command | None,
    then: Sequence[Command],
) -> Steps[tuple[Any, list[Any]]]:
    """One batch of :func:`_batch` on one connection; returns (the script's reply, the
    replies of ``then``). On NOSCRIPT the script is loaded there and the batch sent again,
    once."""
    commands, at = _batch(found, keys, args, first, then)
    replies = yield functools.partial(send, commands)
    if _no_script(replies, at):
        _raise_first_error((yield functools.partial(send, [["SCRIPT", "LOAD", found.source]])))
        replies = yield functools.partial(send, commands)
    _raise_first_error(replies)
    return replies[at], replies[at + 1 :]


def run_steps(
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], first: Command | None = None
) -> Steps[Any]:
    """Run script ``name`` with ``EVALSHA``, loading it first when the server lacks it;
    ``first`` (an index entry) before it (see the module doc)."""
    found = script(name)
    if first is not None:
        if not is_cluster(client):
            send = client_batch(client)
            reply, _ = yield from _pipeline_steps(send, found, keys, args, first, ())
            return reply
        yield functools.partial(client.execute_command, *first)
    call = functools.partial(client.execute_command, "EVALSHA", *_evalsha_args(found, keys, args))
    try:
        return (yield call)
    except NoScriptError:
        yield from _load_steps(client, found, keys)
        return (yield call)


def run(
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], first: Command | None = None
) -> Any:
    """:func:`run_steps` on a redis-py client."""
    return drive(run_steps(client, name, keys, args, first))


def run_then_wait_steps(
    client: Any,
    name: str,
    keys: Sequence[str],
    args: Sequence[Arg],
    replicas: int,
    ms: int,
    first: Command | None = None,
) -> Steps[tuple[Any, int]]:
    """Run script ``name``, then ``WAIT replicas ms`` on the same connection (one
    pipeline, one round trip); returns (script reply, replicas that acknowledged).
    ``first`` as for :func:`run_steps`; on a cluster it is sent with a ``WAIT`` of its
    own to the index's node first, and fewer acknowledgements than ``replicas`` raise
    :class:`~sessionstore.errors.NotReplicatedError` there, before the script runs.

    On a cluster both go to the primary serving the keys' slot; when that primary is
    unreachable or no longer serves the slot, the slot map is refreshed and the call
    repeated (at most ``RETRIES`` times): the scripts are idempotent per call. A slot
    being migrated answers ``ASK`` when the keys are already on the target: the same
    pipeline goes there, after ``ASKING``.
    """
    found = script(name)
    wait = _wait_command(replicas, ms)
    if not is_cluster(client):
        send = client_batch(client)
        reply, rest = yield from _pipeline_steps(send, found, keys, args, first, wait)
        return reply, int(rest[0])
    if first is not None:
        index = str(first[1])
        entry = functools.partial(_entry_steps, first, wait)
        acks, node = yield from _on_slot_node_steps(client, index, entry)
        check_value_acks(replicas, Acks(acks, node), index, node, ms)

    def write(send: Batch, asking: Command | None) -> Steps[tuple[Any, list[Any]]]:
        return (yield from _pipeline_steps(send, found, keys, args, asking, wait))

    (reply, rest), node = yield from _on_slot_node_steps(client, keys[0], write)
    return reply, Acks(int(rest[0]), node)


def _entry_steps(
    first: Command, wait: Sequence[Command], send: Batch, asking: Command | None
) -> Steps[int]:
    """An index entry and its ``WAIT`` on one node: how many replicas acknowledged it."""
    commands = [*([] if asking is None else [asking]), first, *wait]
    replies = yield functools.partial(send, commands)
    _raise_first_error(replies)
    return int(replies[-1])


#: One attempt on the node serving a slot: (a Batch there, ``ASKING`` or None) -> steps.
Attempt = Callable[[Batch, Command | None], Steps[Any]]


def _on_slot_node_steps(client: Any, key: str, attempt: Attempt) -> Steps[tuple[Any, str]]:
    """``attempt`` on the cluster node serving ``key``'s slot; returns (its result, the
    node's name). When that node is unreachable or no longer serves the slot, the slot map
    is refreshed and the attempt repeated (at most ``RETRIES`` times); ``ASK`` sends it to
    the target, after ``ASKING``."""
    for attempt_no in range(RETRIES + 1):
        node = client.get_node_from_key(key)
        try:
            try:
                return (yield from attempt(_node_batch(client, node), None)), node.name
            except AskError as ask:
                send, target, close = _ask_target(client, ask.host, ask.port)
                try:
                    result = yield from attempt(send, ["ASKING"])
                except BaseException as exc:
                    if close is not None and not isinstance(exc, GeneratorExit):
                        yield close
                    raise
                if close is not None:
                    yield close
                return result, target
        except _SLOT_MOVING:
            if attempt_no == RETRIES:
                raise
        yield Pause(retry_delay(attempt_no + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            yield client.nodes_manager.initialize
    raise AssertionError("unreachable")
