"""Session values on Redis: one hash per plain value, a zset and a hash per history value.

Every method but ``scan`` is one round trip: build the command, call, decode. The build
and decode functions are shared by :class:`RedisValues` (sync) and
:class:`AsyncRedisValues`.

* ``read``: ``HMGET key v w``; ``write``: ``HSET key v <payload> w <when>`` (one
  command, never torn) or ``HDEL key v w`` for None, and with a ttl that command and
  ``PEXPIRE key <ttl>`` in one ``MULTI``/``EXEC`` (still one round trip); ``swap``:
  ``value_swap.lua``.
* ``read_as_of``: ``history_get.lua``; ``write_version`` / ``swap_version``:
  ``history_set.lua``.
* ``scan``: ``SCAN`` (on every primary of a cluster) for value hashes and history
  zsets, then pipelined ``HGET key w`` to leave out value hashes without a value;
  ``forget``: ``value_forget.lua``.

A ttl reaches the scripts as an argument and they set the expiry themselves (both keys of
a history alike); without one, a write leaves the keys' expiry as it was, which is what
``HSET`` does. Redis removes an expired key by itself, so an expired value is simply
absent.

``swap`` and ``swap_version`` are idempotent per call: each call sends a fresh random
token, which the script stores with its write; when redis-py sends the call again after
a lost reply, the script finds its token and reports the swap as applied instead of a
conflict, so ``update`` does not apply ``fn`` again. An uncompared write landing between
the call and its resend forgets the tokens (see :mod:`sessionstore.keys`).
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from .. import keys
from ..contracts import Refused, Stored, ValueBackend
from ..errors import SessionStoreError
from ..keys import ValueKey
from . import scripts
from .client import SCAN_COUNT, AsyncClient, ErrorBoundary, SyncClient, scan_keys, scan_keys_async

FIELD_VALUE = b"v"
FIELD_WHEN = b"w"
#: The swap tokens remembered with a plain value or a history (see :mod:`sessionstore.keys`).
FIELD_TOKENS = b"t"
#: How the history hash stores a recorded clear (msgpack never packs to zero bytes).
CLEARED = b""


# Pure build / decode ---------------------------------------------------------------------


def new_token() -> str:
    """A swap call's token: 16 random bytes as hex (no spaces, never empty)."""
    return secrets.token_hex(16)


def write_command(name: str, payload: bytes | None, when: int) -> tuple[Any, ...]:
    """The one command that replaces a plain value (``HDEL v w`` for None). The swap
    tokens stay: a swap resent after a lost reply must still find its token when a plain
    write landed in between."""
    if payload is None:
        return ("HDEL", name, FIELD_VALUE, FIELD_WHEN)
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


def _ttl_arg(ttl_ms: int | None) -> str:
    """A script's retention argument: ``"0"`` for none."""
    return "0" if ttl_ms is None else str(ttl_ms)


def swap_args(
    expected: Stored | None,
    payload: bytes | None,
    when: int,
    token: str,
    ttl_ms: int | None = None,
) -> list[Any]:
    """ARGV of ``value_swap.lua``; ``token`` from :func:`new_token`, one per call."""
    wanted = ["0", b"", ""] if expected is None else ["1", expected.payload, str(expected.when)]
    new = ["0", b"", ""] if payload is None else ["1", payload, str(when)]
    return [*wanted, *new, token, _ttl_arg(ttl_ms)]


def decode_status(reply: Any) -> bool:
    """``"OK"`` -> True, ``"CONFLICT"`` -> False."""
    return bytes(reply) == b"OK"


def decode_swap(name: str, reply: Any) -> Literal[True] | Refused:
    """``value_swap.lua``'s reply: ``"OK"`` -> True, ``{"CONFLICT", v, w}`` -> the record
    found."""
    if isinstance(reply, list):
        return Refused(decode_plain(name, reply[1:]))
    return True


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
    token: str = "",
    ttl_ms: int | None = None,
) -> list[Any]:
    """ARGV of ``history_set.lua``; ``token`` (from :func:`new_token`) when ``compare``."""
    args: list[Any] = [str(when), CLEARED if payload is None else payload, str(max_versions or 0)]
    if not compare:
        args += ["0", "0", "", b"", ""]
    elif expected is None:
        args += ["1", "0", "", b"", token]
    else:
        old = CLEARED if expected.payload is None else expected.payload
        args += ["1", "1", str(expected.when), old, token]
    return [*args, _ttl_arg(ttl_ms)]


def forget_keys(key: ValueKey) -> list[str]:
    """KEYS of ``value_forget.lua``: the plain hash, then the two history keys."""
    return [keys.value_key(key), *keys.history_keys(key)]


def decode_scan(
    namespace: str, plain: list[Any], whens: list[Any], history: list[Any]
) -> list[tuple[ValueKey, bool]]:
    """``scan``'s result from the value hashes found (with the ``w`` each holds, None for
    a hash left without a value) and the history zsets found; foreign names are skipped."""
    found: list[tuple[ValueKey, bool]] = []
    for name, when in zip(plain, whens, strict=True):
        key = keys.parse_value_key(_text(name), namespace)
        if key is not None and when is not None:
            found.append((key, False))
    for name in history:
        key = keys.parse_history_key(_text(name), namespace)
        if key is not None:
            found.append((key, True))
    return found


def _text(name: Any) -> str:
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _chunks(names: list[Any]) -> list[list[Any]]:
    return [names[start : start + SCAN_COUNT] for start in range(0, len(names), SCAN_COUNT)]


def _plain_expected_is_possible(expected: Stored | None) -> bool:
    # A plain record never stores a clear, so such an expectation can never match.
    return expected is None or expected.payload is not None


# Synchronous -----------------------------------------------------------------------------


class RedisValues(ValueBackend):
    """:class:`ValueBackend` on a redis-py client (see the module doc for the commands)."""

    def __init__(self, client: SyncClient, boundary: ErrorBoundary) -> None:
        self._handle = client
        self._guard = boundary

    @property
    def _client(self) -> Any:
        return self._handle.get()

    def read(self, key: ValueKey) -> Stored | None:
        name = keys.value_key(key)
        with self._guard("HMGET", name):
            reply = self._client.hmget(name, [FIELD_VALUE, FIELD_WHEN])
        return decode_plain(name, reply)

    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        name = keys.value_key(key)
        command = write_command(name, payload, when)
        if ttl_ms is None:
            with self._guard(command[0], name):
                self._client.execute_command(*command)
            return
        guard = self._guard(f"MULTI {command[0]} PEXPIRE", name)
        with guard, self._client.pipeline(transaction=True) as pipe:
            pipe.execute_command(*command)
            pipe.pexpire(name, ttl_ms)
            pipe.execute()

    def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        if not _plain_expected_is_possible(expected):
            return Refused(self.read(key))
        name = keys.value_key(key)
        args = swap_args(expected, payload, when, new_token(), ttl_ms)
        with self._guard("value_swap.lua", name):
            reply = scripts.run(self._client, "value_swap", [name], args)
        return decode_swap(name, reply)

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        names = keys.history_keys(key)
        with self._guard("history_get.lua", names[0]):
            reply = scripts.run(self._client, "history_get", names, [str(when)])
        return decode_version(names[0], reply)

    def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        self._set_version(key, payload, when, max_versions, None, ttl_ms, compare=False)

    def swap_version(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> bool:
        return self._set_version(key, payload, when, max_versions, expected, ttl_ms, compare=True)

    def _set_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        expected: Stored | None,
        ttl_ms: int | None,
        *,
        compare: bool,
    ) -> bool:
        names = keys.history_keys(key)
        token = new_token() if compare else ""
        args = history_set_args(payload, when, max_versions, expected, compare, token, ttl_ms)
        with self._guard("history_set.lua", names[0]):
            reply = scripts.run(self._client, "history_set", names, args)
        return decode_status(reply)

    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        client = self._client
        plain_pattern = keys.value_pattern(namespace)
        history_pattern = keys.history_pattern(namespace)
        with self._guard("SCAN", plain_pattern):
            plain = scan_keys(client, plain_pattern, SCAN_COUNT)
        with self._guard("SCAN", history_pattern):
            history = scan_keys(client, history_pattern, SCAN_COUNT)
        whens: list[Any] = []
        for chunk in _chunks(plain):
            with self._guard("HGET", plain_pattern), client.pipeline(False) as pipe:
                for name in chunk:
                    pipe.hget(name, FIELD_WHEN)
                whens += pipe.execute()
        return decode_scan(namespace, plain, whens, history)

    def forget(self, key: ValueKey) -> bool:
        names = forget_keys(key)
        with self._guard("value_forget.lua", names[0]):
            return bool(int(scripts.run(self._client, "value_forget", names, [])))


# Asynchronous ----------------------------------------------------------------------------


class AsyncRedisValues:
    """The methods of :class:`RedisValues` as coroutines, on a ``redis.asyncio`` client."""

    def __init__(self, client: AsyncClient, boundary: ErrorBoundary) -> None:
        self._handle = client
        self._guard = boundary

    async def prepare(self, key: ValueKey) -> None:
        """Nothing to prepare on Redis."""

    async def read(self, key: ValueKey) -> Stored | None:
        name = keys.value_key(key)
        client = await self._handle.get()
        with self._guard("HMGET", name):
            reply = await client.hmget(name, [FIELD_VALUE, FIELD_WHEN])
        return decode_plain(name, reply)

    async def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        name = keys.value_key(key)
        command = write_command(name, payload, when)
        client = await self._handle.get()
        if ttl_ms is None:
            with self._guard(command[0], name):
                await client.execute_command(*command)
            return
        with self._guard(f"MULTI {command[0]} PEXPIRE", name):
            async with client.pipeline(transaction=True) as pipe:
                pipe.execute_command(*command)
                pipe.pexpire(name, ttl_ms)
                await pipe.execute()

    async def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        if not _plain_expected_is_possible(expected):
            return Refused(await self.read(key))
        name = keys.value_key(key)
        args = swap_args(expected, payload, when, new_token(), ttl_ms)
        client = await self._handle.get()
        with self._guard("value_swap.lua", name):
            reply = await scripts.run_async(client, "value_swap", [name], args)
        return decode_swap(name, reply)

    async def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        names = keys.history_keys(key)
        client = await self._handle.get()
        with self._guard("history_get.lua", names[0]):
            reply = await scripts.run_async(client, "history_get", names, [str(when)])
        return decode_version(names[0], reply)

    async def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        await self._set_version(key, payload, when, max_versions, None, ttl_ms, compare=False)

    async def swap_version(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> bool:
        return await self._set_version(
            key, payload, when, max_versions, expected, ttl_ms, compare=True
        )

    async def _set_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        expected: Stored | None,
        ttl_ms: int | None,
        *,
        compare: bool,
    ) -> bool:
        names = keys.history_keys(key)
        token = new_token() if compare else ""
        args = history_set_args(payload, when, max_versions, expected, compare, token, ttl_ms)
        client = await self._handle.get()
        with self._guard("history_set.lua", names[0]):
            reply = await scripts.run_async(client, "history_set", names, args)
        return decode_status(reply)

    async def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        client = await self._handle.get()
        plain_pattern = keys.value_pattern(namespace)
        history_pattern = keys.history_pattern(namespace)
        with self._guard("SCAN", plain_pattern):
            plain = await scan_keys_async(client, plain_pattern, SCAN_COUNT)
        with self._guard("SCAN", history_pattern):
            history = await scan_keys_async(client, history_pattern, SCAN_COUNT)
        whens: list[Any] = []
        for chunk in _chunks(plain):
            with self._guard("HGET", plain_pattern):
                async with client.pipeline(transaction=False) as pipe:
                    for name in chunk:
                        pipe.hget(name, FIELD_WHEN)
                    whens += await pipe.execute()
        return decode_scan(namespace, plain, whens, history)

    async def forget(self, key: ValueKey) -> bool:
        names = forget_keys(key)
        client = await self._handle.get()
        with self._guard("value_forget.lua", names[0]):
            return bool(int(await scripts.run_async(client, "value_forget", names, [])))

    async def close(self) -> None:
        """Closing is done once for the pair, by ``AsyncBackends.aclose``."""
