"""Session event logs on Redis: a meta hash and a stream per session (see ``logformat``).

* ``append``: ``log_append.lua`` (checks, torn-tail cut, XADDs, ``next_seq`` last, then
  ``PEXPIRE`` of both keys for a session with a ttl), then ``WAIT`` in the same round
  trip for ``durability="replicas:N"``. A retry of the same call after a lost reply finds
  its batch stored and returns it as an applied replay.
* ``read``: ``HGETALL meta`` and ``XRANGE`` pipelined, then more XRANGE chunks for long
  logs. Damage is confirmed by reading the meta hash again (a session deleted meanwhile
  is not damage). With ``repair=True`` a torn tail is cut by ``log_cut_tail.lua``,
  which rechecks ``next_seq`` so a concurrent append is never cut.
* ``exists``: ``EXISTS meta``; ``list``: ``SCAN`` (on every primary of a cluster) then
  pipelined ``HGETALL``; ``delete``: ``log_delete.lua``; ``prune``: nothing, the server
  expires sessions itself.

With ``durability="fsync"`` the first write of each backend object (append, torn-tail
cut, delete) verifies the server's AOF settings, on every primary of a cluster (see
:mod:`.durability`); reads never do.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from .. import keys
from ..contracts import EventBackend, StoredEvent
from ..errors import CorruptLogError, SessionNotFoundError
from ..models import SessionEvent, SessionHeader
from . import scripts
from .client import (
    SCAN_COUNT,
    AsyncClient,
    ErrorBoundary,
    SyncClient,
    is_cluster,
    scan_keys,
    scan_keys_async,
)
from .durability import CONFIG_PATTERN, REPLICAS, Durability, FsyncCheck, check_acks, wait_ms
from .logformat import (
    READ_ATTEMPTS,
    LogRead,
    append_args,
    decode_append,
    decode_listed,
    text,
)


def _config_refused(exc: ResponseError) -> bool:
    """CONFIG is not allowed for this user, or renamed away (managed services)."""
    return isinstance(exc, NoPermissionError) or "unknown command" in str(exc).lower()


def _servers(client: Any, display_url: str) -> list[tuple[str, Any]]:
    """(name, cluster node or None) of every server whose AOF settings count."""
    if is_cluster(client):
        return [(node.name, node) for node in client.get_primaries()]
    return [(display_url, None)]


class _LogBase:
    """State shared by the sync and async event backends."""

    def __init__(
        self,
        client: Any,
        namespace: str,
        boundary: ErrorBoundary,
        durability: Durability,
    ) -> None:
        self._handle = client
        self._namespace = namespace
        self._guard = boundary
        self._durability = durability
        self._fsync = FsyncCheck(durability, boundary.display_url)
        self._wait_ms = wait_ms(boundary.timeout)

    def _keys(self, session_id: str) -> tuple[str, str]:
        return keys.log_keys(self._namespace, session_id)

    def _check_acks(self, session_id: str, acks: int, next_seq: int) -> None:
        check_acks(
            self._durability, acks, session_id, next_seq, self._guard.display_url, self._wait_ms
        )


def xread_args(stream: str, from_seq: int, timeout: float, guard: ErrorBoundary) -> list[Any]:
    """``XREAD BLOCK`` for the first entry after ``from_seq - 1``, blocking at most
    ``timeout`` and always less than the socket timeout, so the read never times out."""
    block_ms = max(1, int(min(timeout, guard.timeout * 0.8) * 1000))
    after = keys.stream_id(from_seq - 1) if from_seq > 0 else "0-0"
    return ["XREAD", "COUNT", 1, "BLOCK", block_ms, "STREAMS", stream, after]


class RedisEvents(_LogBase, EventBackend):
    """:class:`EventBackend` on a redis-py client."""

    _handle: SyncClient

    @property
    def _client(self) -> Any:
        return self._handle.get()

    def _ready(self) -> None:
        """Before the first write: the durability check (see the module doc)."""
        if not self._fsync.pending:
            return
        client = self._client
        configs: dict[str, Any] = {}
        for name, node in _servers(client, self._guard.display_url):
            target = {} if node is None else {"target_nodes": node}
            with self._guard("CONFIG GET", None if node is None else name):
                try:
                    configs[name] = client.config_get(CONFIG_PATTERN, **target)
                except ResponseError as exc:
                    if not _config_refused(exc):
                        raise
                    configs[name] = None
        self._fsync.judge(configs)

    def locate(self, session_id: str) -> str | None:
        return None

    def exists(self, session_id: str) -> bool:
        meta, _ = self._keys(session_id)
        with self._guard("EXISTS", meta):
            return bool(self._client.exists(meta))

    def wait_for_events(self, session_id: str, from_seq: int, timeout: float) -> None:
        """``XREAD BLOCK`` on the session's stream for an entry at or past ``from_seq``."""
        _, stream = self._keys(session_id)
        with self._guard("XREAD", stream):
            self._client.execute_command(*xread_args(stream, from_seq, timeout, self._guard))

    def append(
        self,
        session_id: str,
        events: list[StoredEvent],
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
    ) -> int:
        self._ready()
        names = self._keys(session_id)
        args = append_args(events, header, ttl_ms)
        with self._guard("log_append.lua", names[0]):
            if self._durability.mode == REPLICAS:
                reply, acks = scripts.run_then_wait(
                    self._client,
                    "log_append",
                    names,
                    args,
                    self._durability.replicas,
                    self._wait_ms,
                )
            else:
                reply, acks = scripts.run(self._client, "log_append", names, args), 0
        next_seq = decode_append(session_id, events, reply)
        if self._durability.mode == REPLICAS:
            self._check_acks(session_id, acks, next_seq)
        return next_seq

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        meta, stream = self._keys(session_id)
        for attempt in range(READ_ATTEMPTS):
            plan = LogRead(session_id, from_seq, limit)
            try:
                self._fetch(plan, meta, stream)
            except CorruptLogError:
                with self._guard("HGETALL", meta):
                    again = self._client.hgetall(meta)
                if plan.same_meta(again) or attempt == READ_ATTEMPTS - 1:
                    raise
                continue
            if repair:
                self._cut_tail(plan, meta, stream)
            return plan.result()
        raise AssertionError("unreachable")

    def _fetch(self, plan: LogRead, meta: str, stream: str) -> None:
        with self._guard("HGETALL+XRANGE", meta), self._client.pipeline(False) as pipe:
            pipe.hgetall(meta)
            pipe.xrange(stream, *plan.first_range())
            found, entries = pipe.execute()
        plan.take_meta(found)
        plan.take(entries)
        while not plan.done:
            with self._guard("XRANGE", stream):
                entries = self._client.xrange(stream, *plan.next_range())
            plan.take(entries)

    def _cut_tail(self, plan: LogRead, meta: str, stream: str) -> None:
        if plan.tail_unknown:
            with self._guard("XRANGE", stream):
                plan.tail = bool(self._client.xrange(stream, *plan.tail_probe()))
        if plan.tail:
            self._ready()
            with self._guard("log_cut_tail.lua", meta):
                scripts.run(self._client, "log_cut_tail", [meta, stream], plan.cut_args())

    def list(self) -> list[SessionHeader]:
        pattern = keys.log_meta_pattern(self._namespace)
        with self._guard("SCAN", pattern):
            names = scan_keys(self._client, pattern, SCAN_COUNT)
        headers: list[SessionHeader] = []
        for start in range(0, len(names), SCAN_COUNT):
            chunk = names[start : start + SCAN_COUNT]
            with self._guard("HGETALL", pattern), self._client.pipeline(False) as pipe:
                for name in chunk:
                    pipe.hgetall(name)
                replies = pipe.execute()
            headers += decode_listed(chunk, replies)
        return headers

    def delete(self, session_id: str) -> None:
        self._ready()
        names = self._keys(session_id)
        with self._guard("log_delete.lua", names[0]):
            reply = scripts.run(self._client, "log_delete", names, [])
        if text(reply) == "NOTFOUND":
            raise SessionNotFoundError(session_id)

    def prune(self, now_ms: int) -> int:
        """Nothing to do: the server expires sessions by itself, both keys together."""
        return 0


class AsyncRedisEvents(_LogBase):
    """The methods of :class:`RedisEvents` as coroutines, on a ``redis.asyncio`` client."""

    _handle: AsyncClient

    async def _ready(self, client: Any) -> None:
        """Before the first write: the durability check (see the module doc)."""
        if not self._fsync.pending:
            return
        configs: dict[str, Any] = {}
        for name, node in _servers(client, self._guard.display_url):
            target = {} if node is None else {"target_nodes": node}
            with self._guard("CONFIG GET", None if node is None else name):
                try:
                    configs[name] = await client.config_get(CONFIG_PATTERN, **target)
                except ResponseError as exc:
                    if not _config_refused(exc):
                        raise
                    configs[name] = None
        self._fsync.judge(configs)

    async def locate(self, session_id: str) -> str | None:
        return None

    async def exists(self, session_id: str) -> bool:
        meta, _ = self._keys(session_id)
        client = await self._handle.get()
        with self._guard("EXISTS", meta):
            return bool(await client.exists(meta))

    async def wait_for_events(self, session_id: str, from_seq: int, timeout: float) -> None:
        """``XREAD BLOCK`` on the session's stream for an entry at or past ``from_seq``."""
        _, stream = self._keys(session_id)
        client = await self._handle.get()
        with self._guard("XREAD", stream):
            await client.execute_command(*xread_args(stream, from_seq, timeout, self._guard))

    async def append(
        self,
        session_id: str,
        events: list[StoredEvent],
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
    ) -> int:
        names = self._keys(session_id)
        args = append_args(events, header, ttl_ms)
        client = await self._handle.get()
        await self._ready(client)
        with self._guard("log_append.lua", names[0]):
            if self._durability.mode == REPLICAS:
                reply, acks = await scripts.run_then_wait_async(
                    client,
                    "log_append",
                    names,
                    args,
                    self._durability.replicas,
                    self._wait_ms,
                )
            else:
                reply, acks = await scripts.run_async(client, "log_append", names, args), 0
        next_seq = decode_append(session_id, events, reply)
        if self._durability.mode == REPLICAS:
            self._check_acks(session_id, acks, next_seq)
        return next_seq

    async def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        meta, stream = self._keys(session_id)
        client = await self._handle.get()
        for attempt in range(READ_ATTEMPTS):
            plan = LogRead(session_id, from_seq, limit)
            try:
                await self._fetch(client, plan, meta, stream)
            except CorruptLogError:
                with self._guard("HGETALL", meta):
                    again = await client.hgetall(meta)
                if plan.same_meta(again) or attempt == READ_ATTEMPTS - 1:
                    raise
                continue
            if repair:
                await self._cut_tail(client, plan, meta, stream)
            return plan.result()
        raise AssertionError("unreachable")

    async def _fetch(self, client: Any, plan: LogRead, meta: str, stream: str) -> None:
        with self._guard("HGETALL+XRANGE", meta):
            async with client.pipeline(False) as pipe:
                pipe.hgetall(meta)
                pipe.xrange(stream, *plan.first_range())
                found, entries = await pipe.execute()
        plan.take_meta(found)
        plan.take(entries)
        while not plan.done:
            with self._guard("XRANGE", stream):
                entries = await client.xrange(stream, *plan.next_range())
            plan.take(entries)

    async def _cut_tail(self, client: Any, plan: LogRead, meta: str, stream: str) -> None:
        if plan.tail_unknown:
            with self._guard("XRANGE", stream):
                plan.tail = bool(await client.xrange(stream, *plan.tail_probe()))
        if plan.tail:
            await self._ready(client)
            with self._guard("log_cut_tail.lua", meta):
                await scripts.run_async(client, "log_cut_tail", [meta, stream], plan.cut_args())

    async def list(self) -> list[SessionHeader]:
        pattern = keys.log_meta_pattern(self._namespace)
        client = await self._handle.get()
        with self._guard("SCAN", pattern):
            names = await scan_keys_async(client, pattern, SCAN_COUNT)
        headers: list[SessionHeader] = []
        for start in range(0, len(names), SCAN_COUNT):
            chunk = names[start : start + SCAN_COUNT]
            with self._guard("HGETALL", pattern):
                async with client.pipeline(transaction=False) as pipe:
                    for name in chunk:
                        pipe.hgetall(name)
                    replies = await pipe.execute()
            headers += decode_listed(chunk, replies)
        return headers

    async def delete(self, session_id: str) -> None:
        names = self._keys(session_id)
        client = await self._handle.get()
        await self._ready(client)
        with self._guard("log_delete.lua", names[0]):
            reply = await scripts.run_async(client, "log_delete", names, [])
        if text(reply) == "NOTFOUND":
            raise SessionNotFoundError(session_id)

    async def prune(self, now_ms: int) -> int:
        """Nothing to do: the server expires sessions by itself, both keys together."""
        return 0

    async def close(self) -> None:
        """Closing is done once for the pair, by ``AsyncBackends.aclose``."""
