"""The Lua scripts (``lua/*.lua``) as one Redis Functions library, and its installation
(how a script is called: :mod:`.scripts`).

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

Scripts do all their checks before their first write. Under ``maxmemory`` with
``noeviction`` a server out of memory refuses a function that can grow memory before it
runs (it is not flagged ``allow-oom``), so nothing is left half done; the scripts whose
first write only removes (:data:`FREEING`: deletes, lease releases, index cleanup, torn
tails) are flagged ``allow-oom`` and run as they did as scripts, so memory can still be
freed. By ``EVALSHA`` (no shebang: compatibility mode) a script is refused at its first
memory-growing write when it has written nothing yet, with the same outcome.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from redis.exceptions import NoPermissionError, RedisError, ResponseError

from ..errors import LibraryMissingError, SessionStoreError
from ..version import __version__

#: Scripts that only read: flagged ``no-writes``, called with ``FCALL_RO``.
READ_ONLY = frozenset({"history_get", "history_page"})
#: Scripts whose first write only removes data: flagged ``allow-oom`` (see the module doc).
FREEING = frozenset({"value_forget", "lease_release", "log_delete", "index_forget", "log_cut_tail"})
#: The prefix of the library's name; the prefix of its functions' names is ``ss_``.
LIBRARY_PREFIX = "sessionstore_"
#: What installs the library, as an error message names it.
INSTALL_COMMAND = "sessionstore doctor --fix --url <admin url>"
#: What a script body must not use: it runs inside a function, not as a script.
_SCRIPT_ONLY = re.compile(r"redis\.(replicate_commands|breakpoint|debug)\b|^#!", re.M)
_NAME = re.compile(r"[a-z][a-z0-9_]*")
#: The error of ``FCALL`` when the server lacks the function.
FUNCTION_MISSING = "Function not found"


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


def check_loaded(reply: Any, where: str, evalsha: bool = False) -> None:
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


# Installing the library -------------------------------------------------------------------


def _on(client: Any, node: Any, *command: Any) -> Any:
    """``command`` on the one server, or on the cluster node ``node``."""
    return client.execute_command(*command, **({} if node is None else {"target_nodes": node}))


def installed(client: Any, node: Any = None) -> bool:
    """Whether the server (a cluster's ``node``) has this version of the library, asked
    by calling its version function (what the user of :mod:`.acl` may do). Raises
    redis-py's ``ResponseError`` on a server without Functions (Redis before 7)."""
    try:
        _on(client, node, "FCALL_RO", library().version_function, 0)
    except ResponseError as exc:
        if FUNCTION_MISSING in str(exc):
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
        check_loaded(
            exc, "the Redis server" if node is None else f"the Redis Cluster node {node.name}"
        )
        return False
    return True
