"""Session values on Redis: one hash per plain value, a zset and a hash per history value.

Every method is one round trip: build the command, call, decode. The build and decode
functions are shared by :class:`RedisValues` (sync) and :class:`AsyncRedisValues`.

* ``read``: ``HMGET key v w``; ``write``: ``HSET key v <payload> w <when>`` (one command,
  never torn) or ``DEL`` for None; ``swap``: ``value_swap.lua``.
* ``read_as_of``: ``history_get.lua``; ``write_version`` / ``swap_version``:
  ``history_set.lua``.
"""

from __future__ import annotations

from typing import Any

from .. import keys
from ..contracts import Stored, ValueBackend
from ..errors import SessionStoreError
from ..keys import ValueKey
from . import scripts
from .client import ErrorBoundary

FIELD_VALUE = b"v"
FIELD_WHEN = b"w"
#: How the history hash stores a recorded clear (msgpack never packs to zero bytes).
CLEARED = b""


# Pure build / decode ---------------------------------------------------------------------


def write_command(name: str, payload: bytes | None, when: int) -> tuple[Any, ...]:
    """The one command that replaces a plain value (``DEL`` for None)."""
    if payload is None:
        return ("DEL", name)
    return ("HSET", name, FIELD_VALUE, payload, FIELD_WHEN, str(when))


def parse_when(name: str, raw: Any) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise SessionStoreError(f"{name} holds a malformed when {raw!r:.40}") from None


def decode_plain(name: str, reply: list[Any]) -> Stored | None:
    """``HMGET key v w`` -> the stored record (None when there is no ``v``)."""
    payload, when = reply
    if payload is None:
        return None
    return Stored(bytes(payload), parse_when(name, when))


def swap_args(expected: Stored | None, payload: bytes | None, when: int) -> list[Any]:
    """ARGV of ``value_swap.lua``."""
    wanted = ["0", b"", ""] if expected is None else ["1", expected.payload, str(expected.when)]
    new = ["0", b"", ""] if payload is None else ["1", payload, str(when)]
    return [*wanted, *new]


def decode_status(reply: Any) -> bool:
    """``"OK"`` -> True, ``"CONFLICT"`` -> False."""
    return bytes(reply) == b"OK"


def decode_version(name: str, reply: list[Any]) -> Stored | None:
    """``history_get.lua``'s reply -> the version in force (payload None for a clear)."""
    if not reply:
        return None
    if len(reply) != 2:
        raise SessionStoreError(f"{name} lacks the value of its version at {reply[0]!r}")
    payload = bytes(reply[1])
    return Stored(payload if payload != CLEARED else None, parse_when(name, reply[0]))


def history_set_args(
    payload: bytes | None,
    when: int,
    max_versions: int | None,
    expected: Stored | None,
    compare: bool,
) -> list[Any]:
    """ARGV of ``history_set.lua``."""
    args: list[Any] = [str(when), CLEARED if payload is None else payload, str(max_versions or 0)]
    if not compare:
        return [*args, "0", "0", "", b""]
    if expected is None:
        return [*args, "1", "0", "", b""]
    old = CLEARED if expected.payload is None else expected.payload
    return [*args, "1", "1", str(expected.when), old]


def _plain_expected_is_possible(expected: Stored | None) -> bool:
    # A plain record never stores a clear, so such an expectation can never match.
    return expected is None or expected.payload is not None


# Synchronous -----------------------------------------------------------------------------


class RedisValues(ValueBackend):
    """:class:`ValueBackend` on a redis-py client (see the module doc for the commands)."""

    def __init__(self, client: Any, boundary: ErrorBoundary) -> None:
        self._client = client
        self._guard = boundary

    def read(self, key: ValueKey) -> Stored | None:
        name = keys.value_key(key)
        with self._guard("HMGET", name):
            reply = self._client.hmget(name, [FIELD_VALUE, FIELD_WHEN])
        return decode_plain(name, reply)

    def write(self, key: ValueKey, payload: bytes | None, when: int) -> None:
        name = keys.value_key(key)
        command = write_command(name, payload, when)
        with self._guard(command[0], name):
            self._client.execute_command(*command)

    def swap(
        self, key: ValueKey, expected: Stored | None, payload: bytes | None, when: int
    ) -> bool:
        if not _plain_expected_is_possible(expected):
            return False
        name = keys.value_key(key)
        with self._guard("value_swap.lua", name):
            reply = scripts.run(
                self._client, "value_swap", [name], swap_args(expected, payload, when)
            )
        return decode_status(reply)

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        names = keys.history_keys(key)
        with self._guard("history_get.lua", names[0]):
            reply = scripts.run(self._client, "history_get", names, [str(when)])
        return decode_version(names[0], reply)

    def write_version(
        self, key: ValueKey, payload: bytes | None, when: int, max_versions: int | None
    ) -> None:
        self._set_version(key, payload, when, max_versions, None, compare=False)

    def swap_version(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
    ) -> bool:
        return self._set_version(key, payload, when, max_versions, expected, compare=True)

    def _set_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        expected: Stored | None,
        *,
        compare: bool,
    ) -> bool:
        names = keys.history_keys(key)
        args = history_set_args(payload, when, max_versions, expected, compare)
        with self._guard("history_set.lua", names[0]):
            reply = scripts.run(self._client, "history_set", names, args)
        return decode_status(reply)


# Asynchronous ----------------------------------------------------------------------------


class AsyncRedisValues:
    """The methods of :class:`RedisValues` as coroutines, on a ``redis.asyncio`` client."""

    def __init__(self, client: Any, boundary: ErrorBoundary) -> None:
        self._client = client
        self._guard = boundary

    async def prepare(self, key: ValueKey) -> None:
        """Nothing to prepare on Redis."""

    async def read(self, key: ValueKey) -> Stored | None:
        name = keys.value_key(key)
        with self._guard("HMGET", name):
            reply = await self._client.hmget(name, [FIELD_VALUE, FIELD_WHEN])
        return decode_plain(name, reply)

    async def write(self, key: ValueKey, payload: bytes | None, when: int) -> None:
        name = keys.value_key(key)
        command = write_command(name, payload, when)
        with self._guard(command[0], name):
            await self._client.execute_command(*command)

    async def swap(
        self, key: ValueKey, expected: Stored | None, payload: bytes | None, when: int
    ) -> bool:
        if not _plain_expected_is_possible(expected):
            return False
        name = keys.value_key(key)
        with self._guard("value_swap.lua", name):
            reply = await scripts.run_async(
                self._client, "value_swap", [name], swap_args(expected, payload, when)
            )
        return decode_status(reply)

    async def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        names = keys.history_keys(key)
        with self._guard("history_get.lua", names[0]):
            reply = await scripts.run_async(self._client, "history_get", names, [str(when)])
        return decode_version(names[0], reply)

    async def write_version(
        self, key: ValueKey, payload: bytes | None, when: int, max_versions: int | None
    ) -> None:
        await self._set_version(key, payload, when, max_versions, None, compare=False)

    async def swap_version(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
    ) -> bool:
        return await self._set_version(key, payload, when, max_versions, expected, compare=True)

    async def _set_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        expected: Stored | None,
        *,
        compare: bool,
    ) -> bool:
        names = keys.history_keys(key)
        args = history_set_args(payload, when, max_versions, expected, compare)
        with self._guard("history_set.lua", names[0]):
            reply = await scripts.run_async(self._client, "history_set", names, args)
        return decode_status(reply)

    async def close(self) -> None:
        """Closing is done once for the pair, by ``AsyncBackends.aclose``."""
