"""How the Lua scripts are called: as functions of the Redis Functions library of
:mod:`.library` (``FCALL``, ``FCALL_RO`` for a script that only reads), or by
``EVALSHA`` on a server without Functions; on a Redis Cluster, on the node serving the
keys' slot.

On ``Function not found`` (a server without the library, or with another version of
it) the library is loaded with ``FUNCTION LOAD`` (without ``REPLACE``: a library of the
same name loaded meanwhile by another client is the same text) on the server that
answered, and the call is repeated, once. A user refused ``FUNCTION LOAD`` gets
:class:`~sessionstore.errors.LibraryMissingError`, naming the command that installs it.
The repeat is safe: an earlier send whose reply was lost may have been applied, and
every write script recognises its own resend (see :mod:`sessionstore.keys`). A second
``Function not found`` is raised as it is: the error boundary
(:class:`~.boundary.ErrorBoundary`) makes it a
:class:`~sessionstore.errors.StoreUnavailableError`, since an earlier send may have been
applied. Redis keeps functions in its RDB and AOF files and replicates them, so a
restart with persistence or a failover keeps them.

A server that does not know ``FCALL`` (Redis before 7) gets the same scripts by
``EVALSHA``, loaded with ``SCRIPT LOAD`` on ``NOSCRIPT``, with the same at-most-once
repeat; a client found talking to such a server keeps to ``EVALSHA`` (see
:func:`uses_evalsha`).

Every key a script touches is passed in ``KEYS``, built by :mod:`sessionstore.keys`; on
a Redis Cluster they share one hash tag, and the call is sent to the node serving that
slot (this module routes it itself, following ``MOVED`` and ``ASK``: redis-py would ask
a node for the keys of every ``FCALL`` with ``COMMAND GETKEYS``).

A write that can create data names its index entry (``first``: an :class:`Entry`, the
call of ``index_add.lua`` that :mod:`sessionstore.redis.index` builds): on a single server
it is sent in the same pipeline, before the write (one round trip), or folded into the
write's own call for a script that takes it (:data:`TAKES_ENTRY`: one call); on a
cluster, where the index lives in another slot, as a call of its own before the write.
Either way data never exists without its index entry. With ``replicas:N``
(:func:`run_then_wait_steps`) the entry is as durable as the data: on a single server
the ``WAIT`` after the script covers it; on a cluster it is followed by a ``WAIT`` of its
own on the index's node, and too few acknowledgements raise before the data is written.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import redis.asyncio.cluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import telemetry
from ..drive import Pause, Steps, drive
from .compat import async_node_send, learn_moved_slot, new_async_node, new_node_client
from .durability import Acks, check_value_acks
from .library import FUNCTION_MISSING, Script, check_loaded, library, script
from .pools import is_cluster
from .replies import unknown_command
from .retry import RETRIES, retry_delay

Arg = str | bytes | int
#: A command as redis-py's ``execute_command`` takes it.
Command = Sequence[Arg]


#: The write scripts that take their index entry themselves: where the index shares the
#: connection (a single server), its key follows theirs and its ``index_add.lua``
#: arguments follow their own, and the write is one call instead of two.
TAKES_ENTRY = frozenset({"value_swap"})


class Entry(NamedTuple):
    """A script call sent before a write's own, in its round trip on a single server (an
    index entry: see :mod:`sessionstore.redis.index`)."""

    name: str
    keys: Sequence[str]
    args: Sequence[Arg]


# How a script is called ---------------------------------------------------------------

#: The clients found talking to a server without Redis Functions.
_EVALSHA_CLIENTS: weakref.WeakSet[Any] = weakref.WeakSet()


def uses_evalsha(client: Any) -> bool:
    """``client`` met a server that does not know ``FCALL`` (Redis before 7): it sends
    the scripts by ``EVALSHA``."""
    # The set's own (C) emptiness first: a membership test of a WeakSet costs ~0.3 us.
    return bool(_EVALSHA_CLIENTS.data) and client in _EVALSHA_CLIENTS  # type: ignore[attr-defined]


def call_command(
    client: Any, name: str, keys: Sequence[str | bytes], args: Sequence[Arg]
) -> list[Arg]:
    """The command calling script ``name`` on ``client`` as :func:`run_steps` first sends
    it (its function, or by ``EVALSHA`` on a server without Functions), for a caller
    that batches several calls itself."""
    return _call(script(name), keys, args, uses_evalsha(client))


#: What a call names its script by (its function, or its SHA by ``EVALSHA``), as it is
#: sent: redis-py passes bytes on as they are, and spends about 0.2 us on a str.
_SENT_NAMES: dict[str, bytes] = {}
#: Key counts, as they are sent.
_COUNTS = tuple(b"%d" % count for count in range(8))


def _sent_name(name: str) -> bytes:
    sent = _SENT_NAMES.get(name)
    if sent is None:
        sent = _SENT_NAMES[name] = name.encode()
    return sent


def _call(found: Script, keys: Sequence[Arg], args: Sequence[Arg], evalsha: bool) -> list[Arg]:
    count = _COUNTS[len(keys)] if len(keys) < len(_COUNTS) else b"%d" % len(keys)
    if evalsha:
        return ["EVALSHA", _sent_name(found.sha), count, *keys, *args]
    verb = "FCALL_RO" if found.read_only else "FCALL"
    return [verb, _sent_name(found.function), count, *keys, *args]


def _missing(reply: Any) -> bool:
    """The reply of a call whose function or script the server lacks."""
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, ResponseError) and FUNCTION_MISSING in str(reply)
    )


def _raise_first_error(replies: list[Any]) -> None:
    for reply in replies:
        if isinstance(reply, RedisError):
            raise reply


#: What a direct call to the node serving a slot may meet while the cluster moves the
#: slot (failover, resharding): the call is repeated after the slot map is refreshed.
_SLOT_MOVING = (RedisConnectionError, RedisTimeoutError, AskError, ClusterDownError, TryAgainError)


# Where a batch of commands goes -----------------------------------------------------------

#: Sends commands on one connection, in order, and returns their replies with an error
#: reply in its place (an awaitable of them on a ``redis.asyncio`` client).
Batch = Callable[[Sequence[Command]], Any]


class Send:
    """The step of an operation that sends ``commands`` on one connection, in order, to
    the server ``where`` names (as errors name it): calling it sends them by ``batch``
    and returns their replies, an error reply in its place (an awaitable of them on a
    ``redis.asyncio`` client). What a test of the steps reads, and answers with scripted
    replies."""

    __slots__ = ("batch", "commands", "where")

    def __init__(self, batch: Batch, commands: Sequence[Command], where: str) -> None:
        self.batch = batch
        self.commands = commands
        self.where = where

    def __call__(self) -> Any:
        return self.batch(self.commands)

    def __repr__(self) -> str:
        return f"Send({self.where}: {[command[0] for command in self.commands]})"


def client_batch(client: Any) -> Batch:
    """A :data:`Batch` on a single server's client (sync or async): one pipeline, or for
    a single command the command alone (a pipeline of one costs a call more client time
    than the call itself)."""
    alone = _async_alone if _kind(client)[1] else _alone

    def send(commands: Sequence[Command]) -> Any:
        if len(commands) == 1:
            return alone(client, commands[0])
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return pipe.execute(raise_on_error=False)

    return send


def _alone(client: Any, command: Command) -> list[Any]:
    """The reply of one command, as a pipeline gives it: an error reply in its place."""
    try:
        return [client.execute_command(*command)]
    except ResponseError as error:
        return [error]


async def _async_alone(client: Any, command: Command) -> list[Any]:
    """:func:`_alone` on a ``redis.asyncio`` client."""
    try:
        return [await client.execute_command(*command)]
    except ResponseError as error:
        return [error]


def _async_node_batch(node: Any) -> Batch:
    """A :data:`Batch` on one node of a ``redis.asyncio`` cluster client (see
    :func:`.compat.async_node_send`)."""
    return functools.partial(async_node_send, node)


def _is_async_cluster(client: Any) -> bool:
    return isinstance(client, redis.asyncio.cluster.RedisCluster)


#: Per client class: (a cluster client, a ``redis.asyncio`` client). redis-py's clients
#: are Protocol classes, on which an ``isinstance`` costs about a microsecond, and every
#: script call asks both.
_KINDS: dict[type, tuple[bool, bool]] = {}


def _kind(client: Any) -> tuple[bool, bool]:
    cls = client.__class__
    found = _KINDS.get(cls)
    if found is None:
        asynchronous = isinstance(client, redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster)
        found = _KINDS[cls] = (is_cluster(client), asynchronous)
    return found


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
        fresh = new_async_node(client, host, port)
        return _async_node_batch(fresh), fresh.name, fresh.disconnect
    direct = new_node_client(client, host, port)
    return client_batch(direct), f"{host}:{port}", direct.close


# The operations ---------------------------------------------------------------------------


def _pipeline_steps(
    client: Any,
    send: Batch,
    where: str,
    found: Script,
    keys: Sequence[str | bytes],
    args: Sequence[Arg],
    asking: Command | None,
    then: Sequence[Command] | None,
    first: Entry | None = None,
) -> Steps[Any]:
    """One batch on one connection (``asking``, the call of ``first``, the script's call,
    then ``then``) to the server ``where`` names; returns (the script's reply, the replies
    of ``then``), or the script's reply alone when ``then`` is None. A server without
    Functions gets the batch again by ``EVALSHA``; a server without the function or the
    scripts gets them loaded there and the batch again, once."""
    evalsha = uses_evalsha(client)
    if first is None:
        calls = [(found, keys, args)]
    elif found.name in TAKES_ENTRY:
        calls = [(found, [*keys, *first.keys], [*args, *first.args])]
    else:
        calls = [(script(first.name), first.keys, first.args), (found, keys, args)]

    def batch(evalsha: bool) -> list[Command]:
        commands: list[Command] = [_call(*call, evalsha) for call in calls]
        if asking is not None:
            commands.insert(0, asking)
        if then:
            commands.extend(then)
        return commands

    at = len(calls) if asking is not None else len(calls) - 1
    replies = yield Send(send, batch(evalsha), where)
    if not evalsha and unknown_command(replies[at]):
        _EVALSHA_CLIENTS.add(client)
        evalsha = True
        telemetry.resent("evalsha")
        replies = yield Send(send, batch(True), where)
    for reply in replies[: at + 1]:
        if _missing(reply):
            loads: list[Command] = (
                [["SCRIPT", "LOAD", call.source] for call in dict.fromkeys(c[0] for c in calls)]
                if evalsha
                else [["FUNCTION", "LOAD", library().source]]
            )
            for loaded in (yield Send(send, loads, where)):
                check_loaded(loaded, where, evalsha)
            telemetry.resent("library_load")
            replies = yield Send(send, batch(evalsha), where)
            break
    _raise_first_error(replies)
    return replies[at] if then is None else (replies[at], replies[at + 1 :])


#: One attempt on the node serving a slot: (a Batch there, ``ASKING`` or None, the node
#: as errors name it) -> steps.
Attempt = Callable[[Batch, Command | None, str], Steps[Any]]


def _on_slot_node_steps(client: Any, key: str | bytes, attempt: Attempt) -> Steps[tuple[Any, str]]:
    """``attempt`` on the cluster node serving ``key``'s slot; returns (its result, the
    node's name). When that node is unreachable or no longer serves the slot, the slot map
    is refreshed and the attempt repeated (at most ``RETRIES`` times): the scripts are
    idempotent per call. A slot moved or being migrated answers ``MOVED`` or ``ASK``: the
    attempt goes there (after ``ASKING``)."""
    for attempt_no in range(RETRIES + 1):
        node = client.get_node_from_key(key)
        try:
            try:
                send = _node_batch(client, node)
                result = yield from attempt(send, None, f"the Redis Cluster node {node.name}")
                return result, node.name
            except AskError as ask:
                telemetry.resent("redirect")
                send, target, close = _ask_target(client, ask.host, ask.port)
                try:
                    result = yield from attempt(
                        send, ["ASKING"], f"the Redis Cluster node {target}"
                    )
                except BaseException as exc:
                    if close is not None and not isinstance(exc, GeneratorExit):
                        yield close
                    raise
                if close is not None:
                    yield close
                if isinstance(ask, MovedError):
                    # The slot map learns the slot's new node (a refresh failing is left
                    # to the next call).
                    with contextlib.suppress(RedisError, RedisClusterException):
                        yield functools.partial(learn_moved_slot, client, ask)
                return result, target
        except _SLOT_MOVING:
            if attempt_no == RETRIES:
                raise
        telemetry.resent("cluster_retry")
        yield Pause(retry_delay(attempt_no + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            yield client.nodes_manager.initialize
    raise AssertionError("unreachable")


def _cluster_steps(
    client: Any,
    found: Script,
    keys: Sequence[str | bytes],
    args: Sequence[Arg],
    then: Sequence[Command],
) -> Steps[tuple[Any, list[Any], str]]:
    """:func:`_pipeline_steps` on the primary serving the keys' slot (see
    :func:`_on_slot_node_steps`); returns (the script's reply, the replies of ``then``,
    the node that answered)."""

    def call(send: Batch, asking: Command | None, where: str) -> Steps[tuple[Any, list[Any]]]:
        return (yield from _pipeline_steps(client, send, where, found, keys, args, asking, then))

    (reply, rest), node = yield from _on_slot_node_steps(client, keys[0], call)
    return reply, rest, node


def run_steps(
    client: Any,
    name: str,
    keys: Sequence[str | bytes],
    args: Sequence[Arg],
    first: Entry | None = None,
) -> Steps[Any]:
    """Call script ``name`` (its function, or by ``EVALSHA``; see the module doc), loading
    the library first when the server lacks it; ``first`` (an index entry) before it."""
    found = script(name)
    if not _kind(client)[0]:
        # The batch's own steps, handed on (one generator less on every call's path).
        send = client_batch(client)
        return _pipeline_steps(
            client, send, "the Redis server", found, keys, args, None, None, first
        )
    return _cluster_run_steps(client, found, keys, args, first)


def _cluster_run_steps(
    client: Any,
    found: Script,
    keys: Sequence[str | bytes],
    args: Sequence[Arg],
    first: Entry | None,
) -> Steps[Any]:
    """:func:`run_steps` on a Redis Cluster."""
    if first is not None:
        yield from _cluster_steps(client, script(first.name), first.keys, first.args, ())
    reply, _, _ = yield from _cluster_steps(client, found, keys, args, ())
    return reply


def run(
    client: Any,
    name: str,
    keys: Sequence[str | bytes],
    args: Sequence[Arg],
    first: Entry | None = None,
) -> Any:
    """:func:`run_steps` on a redis-py client."""
    return drive(run_steps(client, name, keys, args, first))


def run_then_wait_steps(
    client: Any,
    name: str,
    keys: Sequence[str | bytes],
    args: Sequence[Arg],
    replicas: int,
    ms: int,
    first: Entry | None = None,
) -> Steps[tuple[Any, int]]:
    """Call script ``name``, then ``WAIT replicas ms`` on the same connection (one
    pipeline, one round trip); returns (script reply, replicas that acknowledged; on a
    cluster an :class:`~.durability.Acks` naming the node). ``first`` as for
    :func:`run_steps`; on a cluster it is sent with a ``WAIT`` of its own to the index's
    node first, and fewer acknowledgements than ``replicas`` raise
    :class:`~sessionstore.errors.NotReplicatedError` there, before the script runs. On a
    cluster the script and its ``WAIT`` go to the primary serving the keys' slot (see
    :func:`_cluster_steps`)."""
    found = script(name)
    wait: list[Command] = [["WAIT", replicas, ms]]
    if not _kind(client)[0]:
        send = client_batch(client)
        reply, rest = yield from _pipeline_steps(
            client, send, "the Redis server", found, keys, args, None, wait, first
        )
        return reply, int(rest[0])
    if first is not None:
        entry = script(first.name)
        _, acks, node = yield from _cluster_steps(client, entry, first.keys, first.args, wait)
        check_value_acks(replicas, Acks(int(acks[0]), node), first.keys[0], node, ms)
    reply, rest, node = yield from _cluster_steps(client, found, keys, args, wait)
    return reply, Acks(int(rest[0]), node)
