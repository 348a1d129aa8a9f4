"""The Lua scripts (``lua/*.lua``), loaded once and called by SHA.

Each script is sent by ``EVALSHA``; on ``NOSCRIPT`` (a restarted server, ``SCRIPT
FLUSH``) it is loaded with ``SCRIPT LOAD`` and the call is repeated. Every key a script
touches is passed in ``KEYS``, built by :mod:`sessionstore.keys`.

Scripts do all their checks before their first write. Without a shebang Redis runs
them in compatibility mode: under ``maxmemory`` with ``noeviction`` a script is refused
at its first memory-growing write (HSET, ZADD, XADD) when it has written nothing yet, so
an out-of-memory server leaves nothing half done.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError, RedisError

from ..errors import SessionStoreError

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


# Synchronous flavour -------------------------------------------------------------------


def run(client: Any, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """Run script ``name`` with ``EVALSHA``, loading it first when the server lacks it."""
    found = script(name)
    try:
        return client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))
    except NoScriptError:
        client.script_load(found.source)
        return client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))


def run_then_wait(
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], replicas: int, ms: int
) -> tuple[Any, int]:
    """Run script ``name``, then ``WAIT replicas ms`` on the same connection (one
    pipeline, one round trip); returns (script reply, replicas that acknowledged)."""
    found = script(name)
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


async def run_async(client: Any, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """:func:`run` on a ``redis.asyncio`` client."""
    found = script(name)
    try:
        return await client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))
    except NoScriptError:
        await client.script_load(found.source)
        return await client.execute_command("EVALSHA", *_evalsha_args(found, keys, args))


async def run_then_wait_async(
    client: Any, name: str, keys: Sequence[str], args: Sequence[Arg], replicas: int, ms: int
) -> tuple[Any, int]:
    """:func:`run_then_wait` on a ``redis.asyncio`` client."""
    found = script(name)
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
