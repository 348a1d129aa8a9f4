"""Session event logs on Redis: the backends, one shell for two clients (sync and
async) around the operations of :mod:`.logops`, which say how each is done."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..contracts import AsyncEventBackend, EventBackend, EventBatch
from ..leases import Lease
from ..models import SessionEvent, SessionHeader
from .boundary import ErrorBoundary
from .client import AsyncClient, SyncClient
from .durability import DurabilityChoice
from .logops import LogOps

# The backends: one shell, two clients --------------------------------------------------------


class _Log:
    """The event backend's methods, each running one :class:`LogOps` operation on the
    handle's client: results on a :class:`SyncClient`, coroutines on an
    :class:`AsyncClient`."""

    _handle: SyncClient | AsyncClient

    def __init__(
        self,
        client: SyncClient | AsyncClient,
        namespace: str,
        boundary: ErrorBoundary,
        durability: DurabilityChoice,
    ) -> None:
        self._handle = client
        self._ops = LogOps(namespace, boundary, durability)

    def check_durable(self) -> Any:
        return self._handle.run(self._ops.check_durable)

    def exists(self, session_id: str) -> Any:
        return self._handle.run(self._ops.exists, session_id)

    def wait_for_events(self, session_id: str, from_seq: int, timeout: float) -> Any:
        return self._handle.run(self._ops.wait_for_events, session_id, from_seq, timeout)

    def append(
        self,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
        lease: Lease | None = None,
    ) -> Any:
        return self._handle.run(self._ops.append, session_id, batch, header, ttl_ms, lease)

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> Any:
        return self._handle.run(self._ops.read, session_id, from_seq, repair, limit)

    def read_records(self, session_id: str, from_seq: int = 0) -> Any:
        return self._handle.run(self._ops.read, session_id, from_seq, False, None, True)

    def acquire_lease(self, session_id: str, owner: str, ttl_ms: int) -> Any:
        return self._handle.run(self._ops.acquire_lease, session_id, owner, ttl_ms)

    def renew_lease(self, session_id: str, lease: Lease, ttl_ms: int) -> Any:
        return self._handle.run(self._ops.renew_lease, session_id, lease, ttl_ms)

    def renew_leases(self, leases: list[tuple[str, Lease, int]]) -> Any:
        """:meth:`renew_lease` of each (session id, lease, ttl ms), in one round trip on
        a single server: a list of bools, in order (see
        :meth:`sessionstore.redis.logops.LogOps.renew_leases`)."""
        return self._handle.run(self._ops.renew_leases, leases)

    def release_lease(self, session_id: str, owner: str) -> Any:
        return self._handle.run(self._ops.release_lease, session_id, owner)

    def lease_busy(self, session_id: str, owner: str | None = None) -> Any:
        return self._handle.run(self._ops.lease_busy, session_id, owner)

    def info(self, session_id: str) -> Any:
        return self._handle.run(self._ops.info, session_id)

    def list_info(self) -> Any:
        return self._handle.run(self._ops.list_info)

    def list(self) -> Any:
        return self._handle.run(self._ops.list)

    def delete(self, session_id: str, *, last: SessionEvent | None = None) -> Any:
        return self._handle.run(self._ops.delete, session_id, last)

    def prune(self, now_ms: int) -> Any:
        return self._handle.run(self._ops.prune)

    def set_retention(self, session_id: str, ttl_ms: int | None) -> Any:
        return self._handle.run(self._ops.set_retention, session_id, ttl_ms)

    def stored_bytes(self, session_id: str) -> Any:
        return self._handle.run(self._ops.stored_bytes, session_id)


class RedisEvents(_Log, EventBackend):
    """:class:`EventBackend` on a redis-py client."""

    _handle: SyncClient

    if TYPE_CHECKING:
        # The shared methods return Any (a result here, a coroutine on an AsyncClient);
        # the type checker gives them the contract's signatures.
        check_durable = EventBackend.check_durable
        exists = EventBackend.exists
        append = EventBackend.append
        read = EventBackend.read
        list = EventBackend.list
        delete = EventBackend.delete
        prune = EventBackend.prune
        set_retention = EventBackend.set_retention
        stored_bytes = EventBackend.stored_bytes
        info = EventBackend.info
        list_info = EventBackend.list_info
        acquire_lease = EventBackend.acquire_lease
        renew_lease = EventBackend.renew_lease
        release_lease = EventBackend.release_lease
        lease_busy = EventBackend.lease_busy
        wait_for_events = EventBackend.wait_for_events

    def locate(self, session_id: str) -> str | None:
        """No file to name: None, without I/O."""
        return None


class AsyncRedisEvents(_Log):
    """The methods of :class:`RedisEvents` as coroutines, on a ``redis.asyncio`` client:
    an :class:`AsyncEventBackend`."""

    _handle: AsyncClient
    renews_leases = True

    if TYPE_CHECKING:
        # As in RedisEvents: the async contract's signatures for the shared methods.
        exists = AsyncEventBackend.exists
        append = AsyncEventBackend.append
        read = AsyncEventBackend.read
        list = AsyncEventBackend.list
        delete = AsyncEventBackend.delete
        prune = AsyncEventBackend.prune
        set_retention = AsyncEventBackend.set_retention
        stored_bytes = AsyncEventBackend.stored_bytes
        info = AsyncEventBackend.info
        list_info = AsyncEventBackend.list_info
        acquire_lease = AsyncEventBackend.acquire_lease
        renew_lease = AsyncEventBackend.renew_lease
        release_lease = AsyncEventBackend.release_lease
        lease_busy = AsyncEventBackend.lease_busy
        wait_for_events = AsyncEventBackend.wait_for_events

    async def locate(self, session_id: str) -> str | None:
        """No file to name: None, without I/O."""
        return None

    async def close(self) -> None:
        """Closing is done once for the pair, by ``AsyncBackends.aclose``."""
