"""Session values on Redis: one hash per plain value, a zset and a hash per history value.

Every method but ``scan`` is one round trip: build the command, call, decode (the pure
format: :mod:`.valueformat`). Each is written once, in :class:`ValueOps` (see
:mod:`sessionstore.drive`); :class:`RedisValues` (sync) and :class:`AsyncRedisValues` run
the same operations on their client.

* ``read``: ``HMGET key v w`` (from memory with ``?cache=yes``: see :mod:`.tracking`);
  ``write`` and ``swap``: ``value_swap.lua`` (without and
  with a comparison).
* ``read_as_of``: ``history_get.lua``; ``read_versions``: ``history_page.lua`` (a page
  of versions a call); ``write_version`` / ``swap_version``: ``history_set.lua`` (a put:
  the same script, keeping the later versions).
* ``acquire_compute_lease`` / ``renew_compute_lease`` / ``release_compute_lease``:
  ``compute_lease.lua`` on the key of :func:`sessionstore.keys.compute_lease_key` (``SET
  NX PX`` with the caller's token; renewed and deleted only by its holder);
  ``put_computed``: ``compute_put.lua`` (a put fenced by that lease, which it deletes).
* ``scan``: the namespace's values index (see :mod:`.index`): ``ZRANGE``, then
  pipelined ``HGET key w`` (a value hash without a value is left out) or ``EXISTS`` of a
  history; ``forget``: ``value_forget.lua`` (the index entry goes lazily).

Every write that stores a value sends its index entry first (``index_add.lua``, which
writes only when the entry is missing or old: see :mod:`.index`), in the same round trip
on a single server (see :mod:`.scripts`); a clear sends none. On a single server a plain
value's write takes its entry in its own call (``value_swap.lua`` with the index key:
one function call a write instead of two).

With ``durability="replicas:N"`` every write is followed by ``WAIT N`` in the same round
trip (:func:`.scripts.run_then_wait_steps`; the index entry of a creating write too), and
raises ``NotReplicatedError`` when fewer replicas confirmed it: an acknowledged value
survives a failover as an acknowledged event does. Other durabilities check nothing for
values.

A ttl reaches the scripts as an argument and they set the expiry themselves (both keys of
a history alike); without one, a write leaves the keys' expiry as it was, which is what
``HSET`` does. Redis removes an expired key by itself, so an expired value is simply
absent.

Every write is applied at most once: each call takes a writer slot of this backend's
pool (:class:`~.writerslots.WriterSlots`) and the slot's next number, once per call, so redis-py's
resend of the same command after a lost reply or a timeout carries them too, and sends
the resend window of this client's timeout (:func:`~.options.resend_window_ms`). The
script keeps the slot's latest number in the value's ``seq`` hash for at least that
long, whatever windows the other clients writing the value send (a record carries its
own deadline); a resend finds a number at or above its own and returns the first
send's outcome without writing, however many other writes, deletes or expiries landed
in between (see :mod:`sessionstore.keys`). So ``update`` never applies ``fn`` twice, and
a resent ``set_data`` or delete never undoes a newer write; and a value remembers one
record per slot that wrote it, not one per write.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .. import keys
from ..contracts import AsyncValueBackend, Refused, Stored, ValueBackend
from ..drive import Steps
from ..keys import ValueKey
from . import scripts
from .boundary import ErrorBoundary
from .client import AsyncClient, SyncClient
from .durability import DurabilityChoice, check_value_acks, wait_ms
from .index import add_call, list_steps, value_entry
from .options import resend_window_ms
from .scripts import Entry
from .valueformat import (
    ANY,
    FIELD_VALUE,
    FIELD_WHEN,
    PlainNames,
    compute_put_args,
    compute_put_keys,
    decode_compute_put,
    decode_page,
    decode_plain,
    decode_scan,
    decode_status,
    decode_swap,
    decode_version,
    forget_args,
    forget_keys,
    history_set_args,
    history_set_keys,
    plain_expected_is_possible,
    plain_names,
    scan_queue,
    swap_args,
)
from .writerslots import WriterSlots

# The operations, written once --------------------------------------------------------------


class ValueOps:
    """Every value operation as :data:`~sessionstore.drive.Steps` on a client (sync or
    async): build, call, decode. :class:`RedisValues` and :class:`AsyncRedisValues` run
    them."""

    def __init__(
        self,
        boundary: ErrorBoundary,
        durability: DurabilityChoice | None,
        forget: Callable[[str], None] = lambda name: None,
    ) -> None:
        self._guard = boundary
        self._window = resend_window_ms(boundary.timeout)
        self._slots = WriterSlots()
        self._durability = durability
        self._wait_ms = wait_ms(boundary.timeout)
        self._forget = forget

    def _script(
        self,
        client: Any,
        name: str,
        names: Sequence[str],
        args: list[Any],
        first: Entry | None = None,
        sent: Sequence[bytes] | None = None,
    ) -> Steps[Any]:
        """Run a writing script on the keys ``names`` (``sent``: the same, as they are
        sent); with ``replicas:N``, then ``WAIT`` and check the acks. The value's cached
        record (``?cache=yes``) is dropped whatever the outcome."""
        replicas = 0 if self._durability is None else self._durability.replicas
        given = names if sent is None else sent
        try:
            if not replicas:
                return (yield from scripts.run_steps(client, name, given, args, first))
            reply, acks = yield from scripts.run_then_wait_steps(
                client, name, given, args, replicas, self._wait_ms, first
            )
            check_value_acks(replicas, acks, names[0], self._guard.display_url, self._wait_ms)
            return reply
        finally:
            self._forget(names[0])

    @staticmethod
    def _plain(key: ValueKey, payload: bytes | None) -> tuple[PlainNames, Entry | None]:
        """The names of a plain write of ``payload`` and its index entry (as
        :func:`.index.value_entry` makes it: none for a clear, which creates nothing)."""
        names = plain_names(key)
        return names, None if payload is None else add_call(names.values_index, names.member)

    def read(self, client: Any, key: ValueKey, cache: Any = None) -> Steps[Stored | None]:
        name = plain_names(key).keys[0]
        with self._guard("HMGET", name):
            reader = client if cache is None else cache
            reply = yield functools.partial(reader.hmget, name, [FIELD_VALUE, FIELD_WHEN])
        return decode_plain(name, reply)

    def expiry(self, client: Any, key: ValueKey, history: bool) -> Steps[int | None]:
        """``PEXPIRETIME`` of the value's hash or of its history's versions zset (both
        history keys expire together): the server's absolute expiry."""
        name = keys.history_keys(key)[0] if history else keys.value_key(key)
        with self._guard("PEXPIRETIME", name):
            found = yield functools.partial(client.pexpiretime, name)
        return int(found) if int(found) >= 0 else None

    def write(
        self, client: Any, key: ValueKey, payload: bytes | None, when: int, ttl_ms: int | None
    ) -> Steps[None]:
        names, first = self._plain(key, payload)
        with self._slots.take() as mark, self._guard("value_swap.lua", names.keys[0]):
            args = swap_args(ANY, payload, when, mark, self._window, ttl_ms)
            yield from self._script(client, "value_swap", names.keys, args, first, names.sent)

    def swap(
        self,
        client: Any,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        ttl_ms: int | None,
    ) -> Steps[Literal[True] | Refused]:
        if not plain_expected_is_possible(expected):
            return Refused((yield from self.read(client, key)))
        names, first = self._plain(key, payload)
        with self._slots.take() as mark, self._guard("value_swap.lua", names.keys[0]):
            args = swap_args(expected, payload, when, mark, self._window, ttl_ms)
            sent = names.sent
            reply = yield from self._script(client, "value_swap", names.keys, args, first, sent)
        return decode_swap(names.keys[0], reply)

    def read_as_of(self, client: Any, key: ValueKey, when: int) -> Steps[Stored | None]:
        names = keys.history_keys(key)
        with self._guard("history_get.lua", names[0]):
            reply = yield from scripts.run_steps(client, "history_get", names, [str(when)])
        return decode_version(names[0], reply, when)

    def read_versions(
        self, client: Any, key: ValueKey, before: int, limit: int
    ) -> Steps[list[Stored]]:
        names = keys.history_keys(key)
        with self._guard("history_page.lua", names[0]):
            args = [str(before), str(limit)]
            reply = yield from scripts.run_steps(client, "history_page", names, args)
        return decode_page(names[0], reply or [])

    def write_version(
        self,
        client: Any,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        ttl_ms: int | None,
    ) -> Steps[None]:
        yield from self._set_version(client, key, payload, when, max_versions, None, ttl_ms, False)

    def swap_version(
        self,
        client: Any,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        ttl_ms: int | None,
    ) -> Steps[bool]:
        return (
            yield from self._set_version(
                client, key, payload, when, max_versions, expected, ttl_ms, True
            )
        )

    def _set_version(
        self,
        client: Any,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        expected: Stored | None,
        ttl_ms: int | None,
        compare: bool,
    ) -> Steps[bool]:
        names = history_set_keys(key)
        first = value_entry(key, payload, history=True)
        with self._slots.take() as mark, self._guard("history_set.lua", names[0]):
            args = history_set_args(
                payload, when, max_versions, expected, compare, mark, self._window, ttl_ms
            )
            reply = yield from self._script(client, "history_set", names, args, first)
        return decode_status(reply)

    def put_version(
        self,
        client: Any,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        ttl_ms: int | None,
    ) -> Steps[None]:
        names = history_set_keys(key)
        first = value_entry(key, payload, history=True)
        with self._slots.take() as mark, self._guard("history_set.lua", names[0]):
            args = history_set_args(
                payload, when, max_versions, None, "put", mark, self._window, ttl_ms
            )
            yield from self._script(client, "history_set", names, args, first)

    def acquire_compute_lease(
        self, client: Any, key: ValueKey, when: int, token: str, ttl_ms: int
    ) -> Steps[bool]:
        return (yield from self._compute_lease(client, key, when, "take", token, ttl_ms))

    def renew_compute_lease(
        self, client: Any, key: ValueKey, when: int, token: str, ttl_ms: int
    ) -> Steps[bool]:
        return (yield from self._compute_lease(client, key, when, "renew", token, ttl_ms))

    def release_compute_lease(
        self, client: Any, key: ValueKey, when: int, token: str
    ) -> Steps[None]:
        yield from self._compute_lease(client, key, when, "release", token, 0)

    def _compute_lease(
        self, client: Any, key: ValueKey, when: int, op: str, token: str, ttl_ms: int
    ) -> Steps[bool]:
        """``compute_lease.lua``'s ``op`` ("take", "renew", "release") for ``token``."""
        name = keys.compute_lease_key(key, when)
        with self._guard("compute_lease.lua", name):
            reply = yield from scripts.run_steps(
                client, "compute_lease", [name], [op, token, str(ttl_ms)]
            )
        return bool(int(reply))

    def put_computed(
        self,
        client: Any,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        token: str,
        ttl_ms: int | None,
    ) -> Steps[Stored | bool]:
        names = compute_put_keys(key, when)
        first = value_entry(key, payload, history=True)
        with self._slots.take() as mark, self._guard("compute_put.lua", names[0]):
            args = compute_put_args(payload, when, max_versions, token, mark, self._window, ttl_ms)
            reply = yield from self._script(client, "compute_put", names, args, first)
        return decode_compute_put(reply, when)

    def scan(self, client: Any, namespace: str) -> Steps[list[tuple[ValueKey, bool]]]:
        index = keys.index_keys(namespace)[1]
        listing = yield from list_steps(client, self._guard, index, scan_queue(namespace))
        return decode_scan(namespace, listing)

    def set_retention(self, client: Any, key: ValueKey, ttl_ms: int | None) -> Steps[bool]:
        names = [keys.value_key(key), *keys.history_keys(key)]
        with self._guard("value_expire.lua", names[0]):
            found = yield from self._script(client, "value_expire", names, [ttl_ms or 0])
        return bool(int(found))

    def forget(self, client: Any, key: ValueKey) -> Steps[bool]:
        names = forget_keys(key)
        with self._slots.take() as mark, self._guard("value_forget.lua", names[0]):
            args = forget_args(mark, self._window)
            return bool(int((yield from self._script(client, "value_forget", names, args))))


# The backends: one shell, two clients --------------------------------------------------------


class _Values:
    """The value backend's methods, each running one :class:`ValueOps` operation on the
    handle's client: results on a :class:`SyncClient`, coroutines on an
    :class:`AsyncClient`."""

    _handle: SyncClient | AsyncClient

    def __init__(
        self,
        client: SyncClient | AsyncClient,
        boundary: ErrorBoundary,
        durability: DurabilityChoice | None = None,
    ) -> None:
        self._handle = client
        forget = client.forget_cached if isinstance(client, SyncClient) else (lambda name: None)
        self._ops = ValueOps(boundary, durability, forget)

    def read(self, key: ValueKey) -> Any:
        return self._handle.run(self._ops.read, key, self._handle.cache())

    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> Any:
        return self._handle.run(self._ops.write, key, payload, when, ttl_ms)

    def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Any:
        return self._handle.run(self._ops.swap, key, expected, payload, when, ttl_ms)

    def read_as_of(self, key: ValueKey, when: int) -> Any:
        return self._handle.run(self._ops.read_as_of, key, when)

    def read_versions(self, key: ValueKey, before: int, limit: int) -> Any:
        return self._handle.run(self._ops.read_versions, key, before, limit)

    def expiry(self, key: ValueKey, history: bool) -> Any:
        return self._handle.run(self._ops.expiry, key, history)

    def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> Any:
        return self._handle.run(self._ops.write_version, key, payload, when, max_versions, ttl_ms)

    def swap_version(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> Any:
        swap_version = self._ops.swap_version
        return self._handle.run(swap_version, key, expected, payload, when, max_versions, ttl_ms)

    def put_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> Any:
        return self._handle.run(self._ops.put_version, key, payload, when, max_versions, ttl_ms)

    def acquire_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> Any:
        return self._handle.run(self._ops.acquire_compute_lease, key, when, token, ttl_ms)

    def renew_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> Any:
        return self._handle.run(self._ops.renew_compute_lease, key, when, token, ttl_ms)

    def release_compute_lease(self, key: ValueKey, when: int, token: str) -> Any:
        return self._handle.run(self._ops.release_compute_lease, key, when, token)

    def put_computed(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        token: str,
        *,
        ttl_ms: int | None = None,
    ) -> Any:
        put_computed = self._ops.put_computed
        return self._handle.run(put_computed, key, payload, when, max_versions, token, ttl_ms)

    def scan(self, namespace: str) -> Any:
        return self._handle.run(self._ops.scan, namespace)

    def forget(self, key: ValueKey) -> Any:
        return self._handle.run(self._ops.forget, key)

    def set_retention(self, key: ValueKey, ttl_ms: int | None) -> Any:
        return self._handle.run(self._ops.set_retention, key, ttl_ms)


class RedisValues(_Values, ValueBackend):
    """:class:`ValueBackend` on a redis-py client (see the module doc for the commands)."""

    _handle: SyncClient

    if TYPE_CHECKING:
        # The shared methods return Any (a result here, a coroutine on an AsyncClient);
        # the type checker gives them the contract's signatures.
        read = ValueBackend.read
        write = ValueBackend.write
        swap = ValueBackend.swap
        read_as_of = ValueBackend.read_as_of
        read_versions = ValueBackend.read_versions
        expiry = ValueBackend.expiry
        write_version = ValueBackend.write_version
        swap_version = ValueBackend.swap_version
        put_version = ValueBackend.put_version
        acquire_compute_lease = ValueBackend.acquire_compute_lease
        renew_compute_lease = ValueBackend.renew_compute_lease
        release_compute_lease = ValueBackend.release_compute_lease
        put_computed = ValueBackend.put_computed
        scan = ValueBackend.scan
        forget = ValueBackend.forget
        set_retention = ValueBackend.set_retention

    def cached_read(self, key: ValueKey) -> tuple[Stored | None] | None:
        """``(read(key),)`` when ``?cache=yes`` holds the record in memory, else None
        (then ``read`` asks the server). No round trip."""
        cache = self._handle.cached()
        if cache is None:
            return None
        name = keys.value_key(key)
        reply = cache.lookup(name)
        return None if reply is None else (decode_plain(name, reply),)


class AsyncRedisValues(_Values):
    """The methods of :class:`RedisValues` as coroutines, on a ``redis.asyncio`` client:
    an :class:`AsyncValueBackend`."""

    _handle: AsyncClient

    if TYPE_CHECKING:
        # As in RedisValues: the async contract's signatures for the shared methods.
        read = AsyncValueBackend.read
        write = AsyncValueBackend.write
        swap = AsyncValueBackend.swap
        read_as_of = AsyncValueBackend.read_as_of
        read_versions = AsyncValueBackend.read_versions
        expiry = AsyncValueBackend.expiry
        write_version = AsyncValueBackend.write_version
        swap_version = AsyncValueBackend.swap_version
        put_version = AsyncValueBackend.put_version
        acquire_compute_lease = AsyncValueBackend.acquire_compute_lease
        renew_compute_lease = AsyncValueBackend.renew_compute_lease
        release_compute_lease = AsyncValueBackend.release_compute_lease
        put_computed = AsyncValueBackend.put_computed
        scan = AsyncValueBackend.scan
        forget = AsyncValueBackend.forget
        set_retention = AsyncValueBackend.set_retention

    async def prepare(self, key: ValueKey) -> None:
        """Nothing to prepare on Redis."""

    async def close(self) -> None:
        """Closing is done once for the pair, by ``AsyncBackends.aclose``."""
