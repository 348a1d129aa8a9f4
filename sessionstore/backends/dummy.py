"""``dummy://``: accepts everything, stores nothing, every read is empty."""

from __future__ import annotations

from typing import Literal

from ..contracts import EventBackend, EventBatch, Refused, Stored, ValueBackend
from ..errors import SessionNotFoundError
from ..keys import ValueKey
from ..leases import Lease, taken_over
from ..models import SessionEvent, SessionHeader


class DummyValues(ValueBackend):
    def read(self, key: ValueKey) -> Stored | None:
        return None

    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        return None

    def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        return None

    def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        return None

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
        return True

    def put_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        return None

    def acquire_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        return True

    def renew_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        return True

    def release_compute_lease(self, key: ValueKey, when: int, token: str) -> None:
        return None

    def put_computed(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        token: str,
        *,
        ttl_ms: int | None = None,
    ) -> Stored | bool:
        return True

    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        return []

    def forget(self, key: ValueKey) -> bool:
        return False

    def set_retention(self, key: ValueKey, ttl_ms: int | None) -> bool:
        return False


class DummyEvents(EventBackend):
    """Appends are accepted (any seq, any session) and forgotten; nothing is ever found.
    Leases are held within the process, and fence appends as the contract says."""

    def locate(self, session_id: str) -> str | None:
        return None

    def exists(self, session_id: str) -> bool:
        return False

    def append(
        self,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
        lease: Lease | None = None,
    ) -> int:
        if self._fences_off(session_id, lease):
            raise taken_over(session_id)
        return batch.events[-1].seq + 1 if batch.events else 0

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        raise SessionNotFoundError(session_id)

    def list(self) -> list[SessionHeader]:
        return []

    def delete(self, session_id: str, *, last: SessionEvent | None = None) -> None:
        raise SessionNotFoundError(session_id)

    def set_retention(self, session_id: str, ttl_ms: int | None) -> int | None:
        raise SessionNotFoundError(session_id)

    def stored_bytes(self, session_id: str) -> int:
        raise SessionNotFoundError(session_id)

    def prune(self, now_ms: int) -> int:
        return 0
