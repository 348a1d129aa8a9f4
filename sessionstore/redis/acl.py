"""The least-privilege Redis user for one namespace: exactly the commands sessionstore sends.

``setuser_args`` builds the ``ACL SETUSER`` arguments; ``setuser_line`` the same as one
``redis-cli`` line (docs/operations.md shows it, and a test runs both conformance
suites through a user made from it).

The user reads and writes only its namespace's keys (``~ss:<namespace>:*``, the
namespace escaped as in its key names: :func:`key_pattern`) and cannot
enumerate the keyspace (no ``SCAN``, ``KEYS``, ``RANDOMKEY``: listings read the
namespace's index), read or change the configuration (no ``CONFIG``, ``ACL``), watch
others (no ``MONITOR``, ``CLIENT``, pub/sub) or run Lua of its own: it may call the
functions of this version of the library, each granted by name (``+fcall|<function>``,
``+fcall_ro|<function>`` for one that only reads; an admin installs the library with
``sessionstore doctor --fix``, see :mod:`.library`), never a function of another library,
and not ``EVAL``, ``EVALSHA``, ``SCRIPT`` or ``FUNCTION`` (so no ``FUNCTION LIST``, which
would show every library's code). A function's own calls are held to the user's commands
and key pattern. The function names carry the library's version, so a new version is
granted before its clients start (:func:`grant_functions_args`, additive, for a rolling
upgrade) and the whole line is run again once no older client is left.

A rule cannot limit a command's arguments, so a command whose server work on a big key
of the user's own can grow past what it returns and what it is sent is granted only where
the library cannot do without it. Not granted: ``MEMORY USAGE`` (``SAMPLES 0`` walks a
whole key; session sizes come from the count the appends keep, see :mod:`.logformat`),
``ZREMRANGEBYSCORE`` and ``ZREMRANGEBYRANK`` (the history writes remove versions by
name); ``DEL`` (the functions delete with ``UNLINK``, which frees a big key in the
background). The rest costs what Redis's own commands
cost any client: ``HGETALL``, ``XRANGE``, ``XREAD`` and ``ZRANGE`` by rank cost what they
return (a tenant reading its own big key pays for its own reply). The exceptions, which
the functions need: ``ZRANGEBYSCORE``, ``ZREVRANGEBYSCORE`` and ``ZRANGE ... BYSCORE``
step over a ``LIMIT`` offset (the library's calls use 0); ``SET`` over a big key frees
it at once unless the server frees in the background
(``lazyfree-lazy-user-del``, ``lazyfree-lazy-server-del``; see docs/operations.md).
``INFO`` is
granted only for its ``persistence`` section (``durability="aof"``) and ``cluster``
section (finding out whether the server is a cluster node). Redis checks only the first
argument of such a rule: ``INFO persistence clients`` passes, and so any INFO section may
be read that way: counters and settings of the whole server (memory used and
``maxmemory``, clients connected, commands run, replication, keyspace sizes per
database), never a key name, a value or a secret.

No ``CLIENT`` subcommand is granted, ``CLIENT TRACKING`` included. Redis 7.0 checks it
as a command only: its arguments cannot be limited by a rule, and ``HELLO 3`` (which no
rule refuses) has invalidations sent on the same connection. In ``BCAST`` mode, with or
without ``PREFIX ss:<other>:``, the server then reports every key changed under the
prefix whatever the user's key patterns (Redis filters them only since
redis/redis#15371); only the default mode limits itself to keys the client read. So
this user's ``?cache=yes`` runs without tracking (see :mod:`.tracking`); ``PTTL`` in a
``MULTI``/``EXEC`` lets a cached read note its value's ttl.
"""

from __future__ import annotations

import re
import shlex

from ..arguments import check_namespace
from ..errors import InvalidArgumentError
from ..jsondata import short_repr
from ..keys import namespace_prefix
from .library import library, scripts
from .options import MAX_DB

#: Commands sent by the library itself, by redis-py on its behalf and by the Lua
#: scripts. (redis-py's CLIENT SETINFO on connect, Redis 7.2+, may be refused: redis-py
#: ignores that refusal.)
COMMANDS = (
    # connection and checks
    "ping", "info|persistence", "info|cluster", "wait",
    # cluster topology (RedisCluster asks any node for it, and its command table; doctor
    # lists every node)
    "cluster|slots", "cluster|shards", "cluster|nodes", "readonly", "command",
    # TIME stamps a value write's record (the library's functions: function_rules)
    "time",
    # a cached value read (?cache=yes) notes its ttl in the same transaction
    "multi", "exec",
    # keys, hashes, sorted sets (values, the namespace index) and streams
    "exists", "unlink", "pexpire", "pexpiretime", "pttl", "persist", "get", "set", "strlen",
    "hget", "hmget", "hgetall", "hset", "hdel", "hexists", "hlen", "hstrlen",
    "object|encoding",
    "zadd", "zcard", "zrange", "zrangebyscore", "zrevrangebyscore", "zscore", "zrem",
    "xadd", "xdel", "xlen", "xrange", "xread", "xsetid",
)  # fmt: skip


def check_acl_text(name: str, value: object) -> str:
    """An ACL user name or password: a non-blank string with no white space and nothing
    unprintable (a redis-cli line and the ACL file split on white space). Raises
    :class:`InvalidArgumentError`, which never quotes a password and quotes a user name
    as a string (non-printable characters as escapes)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{name} must be a non-empty string")
    if any(char.isspace() or not char.isprintable() for char in value):
        quoted = "" if name == "password" else f" {short_repr(value)}"
        raise InvalidArgumentError(
            f"{name}{quoted} must not hold white space or control characters"
        )
    return value


#: The characters an ACL key pattern reads as glob syntax (Redis's ``stringmatchlen``).
_GLOB = re.compile(r"[*?\[\]\\]")


def key_pattern(namespace: str) -> str:
    """The ACL key pattern of ``namespace``'s keys and of no other's: its key prefix as
    :mod:`sessionstore.keys` escapes it (``ss:team%20a:``), every glob character in it
    escaped with a backslash, then ``*``. Any namespace the library accepts is taken
    (:func:`~sessionstore.arguments.check_namespace`): its white space, ``:`` and glob
    characters are percent-escaped in the key names themselves, so one namespace's
    prefix never begins another's."""
    prefix = namespace_prefix(check_namespace(namespace))
    return _GLOB.sub(lambda found: "\\" + found.group(), prefix) + "*"


def function_rules() -> list[str]:
    """One ACL rule a function of this version's library: ``+fcall_ro|<name>`` for one
    that only reads (the version check's included), ``+fcall|<name>`` for the others."""
    rules = [f"+fcall_ro|{library().version_function}"]
    for found in scripts().values():
        rules.append(f"+{'fcall_ro' if found.read_only else 'fcall'}|{found.function}")
    return rules


def setuser_args(user: str, password: str, namespace: str, db: int = 0) -> list[str]:
    """``ACL SETUSER`` arguments for a user confined to ``namespace``'s keys, to
    :data:`COMMANDS` and to this version's functions (:func:`function_rules`; no pub/sub
    channels); :func:`check_acl_text` checks each part. A ``db`` other than 0 (the
    database a URL names, which the client selects on connecting) is granted by
    ``+select|<db>``, and no other."""
    for name, value in (("user", user), ("password", password)):
        check_acl_text(name, value)
    keys = key_pattern(namespace)
    if isinstance(db, bool) or not isinstance(db, int) or not 0 <= db <= MAX_DB:
        raise InvalidArgumentError(
            f"the database must be a whole number in [0, {MAX_DB}], not {short_repr(db)}"
        )
    select = [f"+select|{db}"] if db else []
    return [
        "ACL", "SETUSER", user, "reset", "on", f">{password}",
        f"~{keys}", "resetchannels", "-@all",
        *(f"+{command}" for command in COMMANDS), *select, *function_rules(),
    ]  # fmt: skip


def grant_functions_args(user: str) -> list[str]:
    """``ACL SETUSER`` arguments that add this version's commands (:data:`COMMANDS`: its
    functions run with the caller's rights, so a command a new version's functions send
    must be granted too) and functions to an existing user and take nothing away: run
    before a rolling upgrade's new clients start, while older ones still call their own
    version's functions."""
    check_acl_text("user", user)
    return ["ACL", "SETUSER", user, *(f"+{command}" for command in COMMANDS), *function_rules()]


def setuser_line(
    user: str, password: str, namespace: str, db: int = 0, at: tuple[str, int] | None = None
) -> str:
    """:func:`setuser_args` as one ``redis-cli`` command line, sent to the server ``at``
    ``(host, port)`` when given (else redis-cli's default, localhost:6379). Every
    argument is quoted for a POSIX shell; one holding a character that is not printable
    (possible in a namespace) is written in bash's ``$'...'`` form, its bytes as
    ``\\xHH``, so that the line stays printable and gives Redis the exact bytes."""
    return _cli(at) + " ".join(_quote(arg) for arg in setuser_args(user, password, namespace, db))


def grant_functions_line(user: str, at: tuple[str, int] | None = None) -> str:
    """:func:`grant_functions_args` as one ``redis-cli`` command line (``at`` as for
    :func:`setuser_line`)."""
    return _cli(at) + shlex.join(grant_functions_args(user))


def _quote(arg: str) -> str:
    if arg.isprintable():
        return shlex.quote(arg)
    escaped = "".join(
        ("\\" + char if char in "\\'" else char)
        if char.isprintable()
        else "".join(f"\\x{byte:02x}" for byte in char.encode())
        for char in arg
    )
    return f"$'{escaped}'"


def _cli(at: tuple[str, int] | None) -> str:
    if at is None:
        return "redis-cli "
    return f"redis-cli -h {shlex.quote(at[0])} -p {int(at[1])} "
