"""The least-privilege Redis user for one namespace: exactly the commands sessionstore sends.

``setuser_args`` builds the ``ACL SETUSER`` arguments; ``setuser_line`` the same as one
``redis-cli`` line (docs/operations.md shows it, and a test runs both conformance
suites through a user made from it).
"""

from __future__ import annotations

import shlex

from ..keys import namespace_pattern

#: Commands sent by the library itself and by its Lua scripts. (redis-py's CLIENT SETINFO
#: on connect, Redis 7.2+, may be refused: redis-py ignores that refusal.)
COMMANDS = (
    # connection and checks
    "ping", "info", "config|get", "wait",
    # cluster topology (RedisCluster asks any node for it, and its command table)
    "cluster|slots", "cluster|shards", "cluster|info", "readonly", "command",
    # scripts: called by SHA, loaded on NOSCRIPT
    "evalsha", "script|load",
    # a plain write with a ttl: the write and PEXPIRE in one transaction
    "multi", "exec",
    # keys, hashes, sorted sets and streams (direct and inside the scripts)
    "scan", "exists", "del", "pexpire",
    "hget", "hmget", "hgetall", "hset", "hdel",
    "zadd", "zcard", "zrange", "zrangebyscore", "zrevrangebyscore",
    "zremrangebyscore", "zremrangebyrank",
    "xadd", "xdel", "xlen", "xrange", "xread", "xsetid",
)  # fmt: skip


def setuser_args(user: str, password: str, namespace: str) -> list[str]:
    """``ACL SETUSER`` arguments for a user confined to ``namespace``'s keys and to
    :data:`COMMANDS` (no pub/sub channels)."""
    return [
        "ACL", "SETUSER", user, "reset", "on", f">{password}",
        f"~{namespace_pattern(namespace)}", "resetchannels", "-@all",
        *(f"+{command}" for command in COMMANDS),
    ]  # fmt: skip


def setuser_line(user: str, password: str, namespace: str) -> str:
    """:func:`setuser_args` as one ``redis-cli`` command line."""
    return "redis-cli " + shlex.join(setuser_args(user, password, namespace))
