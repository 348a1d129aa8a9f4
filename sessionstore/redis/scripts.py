"""The Lua scripts (``lua/*.lua``), called as one Redis Functions library.

On Redis 7 every script is a function of one library, :func:`library`, built from the
``lua/*.lua`` files when it is first needed: each file's text becomes the body of
``local function <name>(KEYS, ARGV) ... end``, registered as ``ss_<version>_<name>``
in the library ``sessionstore_<version>``. A file whose name starts with ``_`` holds
Lua shared by several scripts (local functions): its text comes first, once in the
library and before each script sent by ``EVALSHA``. The version is the package version and a
hash of the library text, so it changes whenever any script does; the function names
carry it too (function names are global across a server's libraries), so two versions
are installed side by side during a rolling upgrade, each client calling its own. A
function ``ss_<version>_version`` returns the version: a user that may only call
functions checks the installed library with it (``FUNCTION LIST`` would show every
library's code).

A script that only reads (:data:`READ_ONLY`) is flagged ``no-writes`` and called with
``FCALL_RO``, the others with ``FCALL``. Only a library loaded by someone allowed
``FUNCTION LOAD`` (an admin: ``sessionstore doctor --fix``) runs: the least-privilege
user of :mod:`.acl` may call functions, never load or run Lua of its own.

On ``Function not found`` (a server without the library, or with another version of
it) the library is loaded with ``FUNCTION LOAD`` (without ``REPLACE``: a library of the
same name loaded meanwhile by another client is the same text) on the server that
answered, and the call is repeated, once. A user refused ``FUNCTION LOAD`` gets
:class:`~sessionstore.errors.LibraryMissingError`, naming the command that installs it.
The repeat is safe: an earlier send whose reply was lost may have been applied, and
every write script recognises its own resend (see :mod:`sessionstore.keys`). A second
``Function not found`` is raised as it is: the error boundary
(:class:`~.client.ErrorBoundary`) makes it a
:class:`~sessionstore.errors.StoreUnavailableError`, since an earlier send may have been
applied. Redis keeps functions in its RDB and AOF files and replicates them, so a
restart with persistence or a failover keeps them.

A server that does not know ``FCALL`` (Redis before 7) gets the same scripts by
``EVALSHA``, loaded with ``SCRIPT LOAD`` on ``NOSCRIPT``, with the same at-most-once
repeat; a client found talking to such a server keeps to ``EVALSHA`` (see
:func:`uses_evalsha`).

Every key a script touches is passed in ``KEYS``, built by :mod:`sessionstore.keys`; on
a Redis Cluster they share one hash tag, and the call is sent to the node serving that
slot (the library routes it itself, following ``MOVED`` and ``ASK``: redis-py would ask
a node for the keys of every ``FCALL`` with ``COMMAND GETKEYS``).

A write that can create data names its index entry (``first``: the ``ZADD`` of
:func:`sessionstore.redis.index.add_command`): on a single server it is sent in the same
pipeline, before the write (one round trip); on a cluster, where the index lives in
another slot, as a call of its own before the write. Either way data never exists
without its index entry. With ``replicas:N`` (:func:`run_then_wait_steps`) the entry is
as durable as the data: on a single server the ``WAIT`` after the script covers it; on a
cluster it is followed by a ``WAIT`` of its own on the index's node, and too few
acknowledgements raise before the data is written.

Scripts do all their checks before their first write. Under ``maxmemory`` with
``noeviction`` a server out of memory refuses a function that can grow memory before it
runs (it is not flagged ``allow-oom``), so nothing is left half done; the scripts whose
first write only removes (:data:`FREEING`: deletes, lease releases, index cleanup, torn
tails) are flagged ``allow-oom`` and run as they did as scripts, so memory can still be
freed. By ``EVALSHA`` (no shebang: compatibility mode) a script is refused at its first
memory-growing write when it has written nothing yet, with the same outcome.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import redis.asyncio.cluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..drive import Pause, Steps, drive
from ..errors import LibraryMissingError, SessionStoreError
from ..version import __version__
from .client import is_cluster
from .compat import async_node_send, learn_moved_slot, new_async_node, new_node_client
from .durability import Acks, check_value_acks
from .retry import RETRIES, retry_delay

Arg = str | bytes | int
#: A command as redis-py's ``execute_command`` takes it.
Command = Sequence[Arg]

#: Scripts that only read: flagged ``no-writes``, called with ``FCALL_RO``.
READ_ONLY = frozenset({"history_get"})
#: Scripts whose first write only removes data: flagged ``allow-oom`` (see the module doc).
FREEING = frozenset({"value_forget", "lease_release", "log_delete", "index_forget", "log_cut_tail"})
#: The prefix of the library's name; the prefix of its functions' names is ``ss_``.
LIBRARY_PREFIX = "sessionstore_"
#: What installs the library, as an error message names it.
INSTALL_COMMAND = "sessionstore doctor --fix --url <admin url>"
#: What a script body must not use: it runs inside a function, not as a script.
_SCRIPT_ONLY = re.compile(r"redis\.(replicate_commands|breakpoint|debug)\b|^#!", re.M)
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Script:
    """One Lua script: its file name without ``.lua``, its text, its SHA1 (for
    ``EVALSHA``), its function's name in :func:`library`, and whether it only reads."""

    name: str
    source: bytes
    sha: str
    function: str
    read_only: bool


@dataclass(frozen=True)
class Library:
    """The Redis Functions library of every script: its name (``sessionstore_<version>``),
    its version, its text (what ``FUNCTION LOAD`` takes) and the name of its function
    returning the version."""

    name: str
    version: str
    source: bytes
    version_function: str


def lua_dir() -> Traversable:
    """The installed ``sessionstore/lua`` folder, else the repository's ``lua/`` folder."""
    installed = resources.files("sessionstore") / "lua"
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "lua"


def _shared() -> bytes:
    """The Lua shared by the scripts: the text of every ``_*.lua`` file of the lua folder."""
    entries = sorted(lua_dir().iterdir(), key=lambda entry: entry.name)
    return b"".join(e.read_bytes() for e in entries if e.name[0] == "_" and e.name[-4:] == ".lua")


@functools.cache
def _sources() -> dict[str, bytes]:
    """The text of every script of the lua folder, by name, checked to be a valid body
    of a function."""
    found: dict[str, bytes] = {}
    for entry in sorted(lua_dir().iterdir(), key=lambda entry: entry.name):
        if entry.name.endswith(".lua") and not entry.name.startswith("_"):
            name, source = entry.name[: -len(".lua")], entry.read_bytes()
            used = _SCRIPT_ONLY.search(source.decode("utf-8", "replace"))
            if not _NAME.fullmatch(name) or used is not None:
                what = f"uses {used.group(0)!r}" if used else "is not a Lua name"
                raise SessionStoreError(f"the Lua script {name}.lua cannot be a function: {what}")
            found[name] = source
    if not found:
        raise SessionStoreError(f"no Lua scripts found in {lua_dir()}: the install is broken")
    return found


def _flags(name: str) -> str:
    if name in READ_ONLY:
        return "{'no-writes'}"
    return "{'allow-oom'}" if name in FREEING else "{}"


def _library_text(sources: dict[str, bytes], version: str) -> bytes:
    lines = [f"#!lua name={LIBRARY_PREFIX}{version}".encode(), _shared().rstrip(b"\n")]
    for name, source in sources.items():
        lines += [
            f"local function {name}(KEYS, ARGV)".encode(),
            source.rstrip(b"\n"),
            b"end",
            f"redis.register_function{{function_name='ss_{version}_{name}', callback="
            f"function(keys, args) return {name}(keys, args) end, flags={_flags(name)}}}".encode(),
        ]
    lines.append(
        f"redis.register_function{{function_name='ss_{version}_version', callback="
        f"function() return '{version}' end, flags={{'no-writes'}}}}".encode()
    )
    return b"\n".join(lines) + b"\n"


@functools.cache
def library() -> Library:
    """The library of every script (see the module doc)."""

    sources = _sources()
    digest = hashlib.sha1(_library_text(sources, "")).hexdigest()[:10]
    version = f"{re.sub(r'[^A-Za-z0-9]', '_', __version__)}_{digest}"
    return Library(
        f"{LIBRARY_PREFIX}{version}",
        version,
        _library_text(sources, version),
        f"ss_{version}_version",
    )


@functools.cache
def scripts() -> dict[str, Script]:
    """Every script of the lua folder, by name."""
    version = library().version
    return {
        name: Script(
            name,
            _shared() + source,
            hashlib.sha1(_shared() + source).hexdigest(),
            f"ss_{version}_{name}",
            name in READ_ONLY,
        )
        for name, source in _sources().items()
    }


def script(name: str) -> Script:
    """The script ``lua/<name>.lua``."""
    return scripts()[name]


# How a script is called ---------------------------------------------------------------

#: The clients found talking to a server without Redis Functions.
_EVALSHA_CLIENTS: weakref.WeakSet[Any] = weakref.WeakSet()


def uses_evalsha(client: Any) -> bool:
    """``client`` met a server that does not know ``FCALL`` (Redis before 7): it sends
    the scripts by ``EVALSHA``."""
    return client in _EVALSHA_CLIENTS


def _call(found: Script, keys: Sequence[str], args: Sequence[Arg], evalsha: bool) -> list[Arg]:
    if evalsha:
        return ["EVALSHA", found.sha, len(keys), *keys, *args]
    verb = "FCALL_RO" if found.read_only else "FCALL"
    return [verb, found.function, len(keys), *keys, *args]


def _unknown_command(reply: Any) -> bool:
    return isinstance(reply, ResponseError) and str(reply).lower().startswith("unknown command")


#: The error of ``FCALL`` when the server lacks the function.
_FUNCTION_MISSING = "Function not found"


def _missing(reply: Any) -> bool:
    """The reply of a call whose function or script the server lacks."""
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, ResponseError) and _FUNCTION_MISSING in str(reply)
    )


def _loaded(reply: Any, where: str, evalsha: bool = False) -> None:
    """Check the reply of ``FUNCTION LOAD`` (or ``SCRIPT LOAD``): a library of the same
    name loaded meanwhile is fine; a user refused ``FUNCTION LOAD`` gets
    :class:`LibraryMissingError`."""
    if not isinstance(reply, RedisError) or "already exists" in str(reply):
        return
    if not evalsha and (isinstance(reply, NoPermissionError) or "NOPERM" in str(reply)):
        found = library()
        raise LibraryMissingError(
            f"{where} does not have the Redis Functions library {found.name} (missing, or "
            f"another version of it is installed), and this user may not install it "
            f"(FUNCTION LOAD was refused: {reply}): have an admin run `{INSTALL_COMMAND}` "
            "once, which loads it on every primary",
            found.name,
        ) from reply
    raise reply


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


def client_batch(client: Any) -> Batch:
    """A :data:`Batch` on a single server's client (sync or async): one pipeline."""

    def send(commands: Sequence[Command]) -> Any:
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return pipe.execute(raise_on_error=False)

    return send


def _async_node_batch(node: Any) -> Batch:
    """A :data:`Batch` on one node of a ``redis.asyncio`` cluster client (see
    :func:`.compat.async_node_send`)."""
    return functools.partial(async_node_send, node)


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
    keys: Sequence[str],
    args: Sequence[Arg],
    first: Command | None,
    then: Sequence[Command],
) -> Steps[tuple[Any, list[Any]]]:
    """One batch on one connection (``first``, the script's call, then ``then``) to the
    server ``where`` names; returns (the script's reply, the replies of ``then``). A
    server without Functions gets the batch again by ``EVALSHA``; a server without the
    function or the script gets it loaded there and the batch again, once."""
    evalsha = uses_evalsha(client)
    head: list[Command] = [] if first is None else [first]
    at = len(head)
    replies = yield functools.partial(send, [*head, _call(found, keys, args, evalsha), *then])
    if not evalsha and _unknown_command(replies[at]):
        _EVALSHA_CLIENTS.add(client)
        evalsha = True
        replies = yield functools.partial(send, [*head, _call(found, keys, args, True), *then])
    if _missing(replies[at]):
        load: Command = (
            ["SCRIPT", "LOAD", found.source] if evalsha else ["FUNCTION", "LOAD", library().source]
        )
        _loaded((yield functools.partial(send, [load]))[0], where, evalsha)
        replies = yield functools.partial(send, [*head, _call(found, keys, args, evalsha), *then])
    _raise_first_error(replies)
    return replies[at], replies[at + 1 :]


#: One attempt on the node serving a slot: (a Batch there, ``ASKING`` or None, the node
#: as errors name it) -> steps.
Attempt = Callable[[Batch, Command | None, str], Steps[Any]]


def _on_slot_node_steps(client: Any, key: str, attempt: Attempt) -> Steps[tuple[Any, str]]:
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
        yield Pause(retry_delay(attempt_no + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            yield client.nodes_manager.initialize
    raise AssertionError("unreachable")


def _cluster_steps(
    client: Any,
    found: Script,
    keys: Sequence[str],
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
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], first: Command | None = None
) -> Steps[Any]:
    """Call script ``name`` (its function, or by ``EVALSHA``; see the module doc), loading
    the library first when the server lacks it; ``first`` (an index entry) before it."""
    found = script(name)
    if not is_cluster(client):
        send = client_batch(client)
        reply, _ = yield from _pipeline_steps(
            client, send, "the Redis server", found, keys, args, first, ()
        )
        return reply
    if first is not None:
        yield functools.partial(client.execute_command, *first)
    reply, _, _ = yield from _cluster_steps(client, found, keys, args, ())
    return reply


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
    if not is_cluster(client):
        send = client_batch(client)
        reply, rest = yield from _pipeline_steps(
            client, send, "the Redis server", found, keys, args, first, wait
        )
        return reply, int(rest[0])
    if first is not None:
        index = str(first[1])
        entry = functools.partial(_entry_steps, first, wait)
        acks, node = yield from _on_slot_node_steps(client, index, entry)
        check_value_acks(replicas, Acks(acks, node), index, node, ms)
    reply, rest, node = yield from _cluster_steps(client, found, keys, args, wait)
    return reply, Acks(int(rest[0]), node)


def _entry_steps(
    first: Command, wait: Sequence[Command], send: Batch, asking: Command | None, where: str
) -> Steps[int]:
    """An index entry and its ``WAIT`` on one node: how many replicas acknowledged it."""
    commands = [*([] if asking is None else [asking]), first, *wait]
    replies = yield functools.partial(send, commands)
    _raise_first_error(replies)
    return int(replies[-1])


# Installing the library -------------------------------------------------------------------


def _on(client: Any, node: Any, *command: Arg) -> Any:
    """``command`` on the one server, or on the cluster node ``node``."""
    return client.execute_command(*command, **({} if node is None else {"target_nodes": node}))


def installed(client: Any, node: Any = None) -> bool:
    """Whether the server (a cluster's ``node``) has this version of the library, asked
    by calling its version function (what the user of :mod:`.acl` may do). Raises
    redis-py's ``ResponseError`` on a server without Functions (Redis before 7)."""
    try:
        _on(client, node, "FCALL_RO", library().version_function, 0)
    except ResponseError as exc:
        if _FUNCTION_MISSING in str(exc):
            return False
        raise
    return True


def install(client: Any, node: Any = None) -> bool:
    """Load the library with ``FUNCTION LOAD`` on the server (a cluster's ``node``)
    unless it is there; True when this call loaded it. Other versions stay installed
    (the clients of each keep calling theirs). A user refused ``FUNCTION LOAD`` gets
    :class:`LibraryMissingError`; a server without Functions (Redis before 7) redis-py's
    ``ResponseError``."""
    try:
        _on(client, node, "FUNCTION", "LOAD", library().source)
    except RedisError as exc:
        _loaded(exc, "the Redis server" if node is None else f"the Redis Cluster node {node.name}")
        return False
    return True
