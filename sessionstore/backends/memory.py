"""In-process backend (``memory://``): thread-safe, private to one ``connect`` call.

Expiry times are wall-clock epoch ms kept next to each record, history and log.

Fork: a child gets new locks (:mod:`sessionstore.forksafe`) and a copy of the data. Each
change is published by one store into a dict (or one list extension), so a child forked
while a thread of the parent was in the middle of a change sees it made or not made.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Literal

from .. import forksafe
from ..contracts import EventBackend, EventBatch, Refused, Stored, ValueBackend
from ..errors import SessionExistsError, SessionNotFoundError
from ..eventlog import check_ends_with, events_of_texts, plan_append
from ..keys import ValueKey
from ..leases import Lease, taken_over
from ..models import SessionEvent, SessionHeader, SessionInfo
from ..when import now_ms as wall_clock_ms

Versions = dict[int, bytes | None]


def _live(expires_at: int | None, now: int) -> bool:
    return expires_at is None or expires_at > now


def _expiry(ttl_ms: int | None, kept: int | None, now: int) -> int | None:
    """The expiry of a record written now: ``ttl_ms`` from now, else the one it ``kept``."""
    return kept if ttl_ms is None else now + ttl_ms


class MemoryValues(ValueBackend):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        forksafe.renew_locks(self, "_lock")
        # Each record and each history with its expiry (None: never).
        self._plain: dict[ValueKey, tuple[Stored, int | None]] = {}
        self._history: dict[ValueKey, tuple[Versions, int | None]] = {}
        # The compute leases of ``get_or_compute``: (key, when) -> (token, expires_at).
        # Their holders are threads of this process, so a forked child starts without.
        self._leases: dict[tuple[ValueKey, int], tuple[str, int]] = {}
        forksafe.at_fork(self, "_forget_leases")

    def _forget_leases(self) -> None:
        self._leases = {}

    def read(self, key: ValueKey) -> Stored | None:
        with self._lock:
            return self._read(key, wall_clock_ms())

    def _read(self, key: ValueKey, now: int) -> Stored | None:
        found = self._plain.get(key)
        return found[0] if found is not None and _live(found[1], now) else None

    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        with self._lock:
            self._write(key, payload, when, ttl_ms, wall_clock_ms())

    def _write(
        self, key: ValueKey, payload: bytes | None, when: int, ttl_ms: int | None, now: int
    ) -> None:
        if payload is None:
            self._plain.pop(key, None)
            return
        found = self._plain.get(key)
        kept = found[1] if found is not None and _live(found[1], now) else None
        self._plain[key] = (Stored(payload, when), _expiry(ttl_ms, kept, now))

    def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        with self._lock:
            now = wall_clock_ms()
            current = self._read(key, now)
            if current != expected:
                return Refused(current)
            self._write(key, payload, when, ttl_ms, now)
            return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        with self._lock:
            return self._as_of(key, when, wall_clock_ms())

    def expiry(self, key: ValueKey, history: bool) -> int | None:
        with self._lock:
            now = wall_clock_ms()
            if history:
                versions, expires = self._versions(key, now)
                return expires if versions else None
            found = self._plain.get(key)
            return found[1] if found is not None and _live(found[1], now) else None

    def _versions(self, key: ValueKey, now: int) -> tuple[Versions, int | None]:
        """The live history of ``key`` and its expiry; an expired one is empty."""
        found = self._history.get(key)
        if found is None or not _live(found[1], now):
            return {}, None
        return found

    def _as_of(self, key: ValueKey, when: int, now: int) -> Stored | None:
        versions, _ = self._versions(key, now)
        at = max((w for w in versions if w <= when), default=None)
        return None if at is None else Stored(versions[at], at)

    def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        with self._lock:
            self._write_version(key, payload, when, max_versions, ttl_ms, wall_clock_ms())

    def put_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        with self._lock:
            now = wall_clock_ms()
            self._write_version(key, payload, when, max_versions, ttl_ms, now, reset=False)

    def _write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        ttl_ms: int | None,
        now: int,
        *,
        reset: bool = True,
    ) -> None:
        """Record a version; ``reset`` drops every version at or after ``when`` first."""
        versions, expires_at = self._versions(key, now)
        kept = {w: v for w, v in versions.items() if w < when or not reset}
        kept[when] = payload
        if max_versions is not None:
            kept = dict(sorted(kept.items())[-max_versions:])
        self._history[key] = (kept, _expiry(ttl_ms, expires_at, now))

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
        with self._lock:
            now = wall_clock_ms()
            if self._as_of(key, when, now) != expected:
                return False
            self._write_version(key, payload, when, max_versions, ttl_ms, now)
            return True

    def acquire_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        with self._lock:
            now = wall_clock_ms()
            held = self._leases.get((key, when))
            if held is not None and held[0] != token and held[1] > now:
                return False
            self._leases[(key, when)] = (token, now + ttl_ms)
            return True

    def renew_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        with self._lock:
            now = wall_clock_ms()
            held = self._leases.get((key, when))
            if held is None or held[0] != token or held[1] <= now:
                return False
            self._leases[(key, when)] = (token, now + ttl_ms)
            return True

    def release_compute_lease(self, key: ValueKey, when: int, token: str) -> None:
        with self._lock:
            self._release(key, when, token)

    def _release(self, key: ValueKey, when: int, token: str) -> None:
        held = self._leases.get((key, when))
        if held is not None and held[0] == token:
            del self._leases[(key, when)]

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
        with self._lock:
            now = wall_clock_ms()
            versions, _ = self._versions(key, now)
            if when in versions:
                return Stored(versions[when], when)
            held = self._leases.get((key, when))
            if held is not None and held[0] != token and held[1] > now:
                return False
            self._write_version(key, payload, when, max_versions, ttl_ms, now, reset=False)
            self._release(key, when, token)
            return True

    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        with self._lock:
            now = wall_clock_ms()
            found = [
                (key, False)
                for key, (_, expires_at) in self._plain.items()
                if key.namespace == namespace and _live(expires_at, now)
            ]
            return found + [
                (key, True)
                for key, (_, expires_at) in self._history.items()
                if key.namespace == namespace and _live(expires_at, now)
            ]

    def set_retention(self, key: ValueKey, ttl_ms: int | None) -> bool:
        with self._lock:
            now = wall_clock_ms()
            expires_at = None if ttl_ms is None else now + ttl_ms
            found = False
            for stored in (self._plain, self._history):
                held = stored.get(key)
                if held is not None and _live(held[1], now):
                    stored[key] = (held[0], expires_at)  # type: ignore[assignment]
                    found = True
            return found

    def forget(self, key: ValueKey) -> bool:
        with self._lock:
            now = wall_clock_ms()
            plain = self._plain.pop(key, None)
            history = self._history.pop(key, None)
            return any(found is not None and _live(found[1], now) for found in (plain, history))


@dataclass
class _Log:
    """One session: its header, the canonical text of each event, the time of the last
    one, retention and expiry (None: never)."""

    header: SessionHeader
    events: list[bytes] = field(default_factory=list)
    last_time: int | None = None
    ttl_ms: int | None = None
    expires_at: int | None = None


class MemoryEvents(EventBackend):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        forksafe.renew_locks(self, "_lock")
        self._logs: dict[str, _Log] = {}

    def locate(self, session_id: str) -> str | None:
        return None

    def exists(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._logs

    def append(
        self,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
        lease: Lease | None = None,
    ) -> int:
        with self._lock:
            if self._fences_off(session_id, lease):
                raise taken_over(session_id)
            found = self._logs.get(session_id)
            if found is None:
                if header is None:
                    raise SessionNotFoundError(session_id)
                found = _Log(header, ttl_ms=ttl_ms)
            elif header is not None and header != found.header:
                raise SessionExistsError(session_id)
            stored = found.events
            if plan_append(session_id, len(stored), batch, lambda a, b: stored[a : b + 1]):
                stored.extend(batch.texts)
                found.last_time = batch.events[-1].time
                if found.ttl_ms is not None:
                    found.expires_at = wall_clock_ms() + found.ttl_ms
                self._logs[session_id] = found
            return len(stored)

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        with self._lock:
            found = self._logs.get(session_id)
            if found is None:
                raise SessionNotFoundError(session_id)
            end = None if limit is None else from_seq + limit
            header, texts = found.header, found.events[from_seq:end]
        return header, events_of_texts(texts, from_seq)

    def info(self, session_id: str) -> SessionInfo:
        with self._lock:
            found = self._logs.get(session_id)
            if found is None:
                raise SessionNotFoundError(session_id)
            return self._info(session_id, found)

    def stored_bytes(self, session_id: str) -> int:
        with self._lock:
            found = self._logs.get(session_id)
            if found is None:
                raise SessionNotFoundError(session_id)
            return sum(len(text) for text in found.events)

    def set_retention(self, session_id: str, ttl_ms: int | None) -> int | None:
        with self._lock:
            found = self._logs.get(session_id)
            if found is None:
                raise SessionNotFoundError(session_id)
            expires_at = None if ttl_ms is None else wall_clock_ms() + ttl_ms
            self._logs[session_id] = replace(found, ttl_ms=ttl_ms, expires_at=expires_at)
            return expires_at

    def _info(self, session_id: str, log: _Log) -> SessionInfo:
        busy = self.lease_busy(session_id)
        return SessionInfo(log.header, len(log.events), log.last_time, log.expires_at, busy)

    def list_info(self) -> list[SessionInfo]:
        with self._lock:
            return [self._info(session_id, log) for session_id, log in self._logs.items()]

    def list(self) -> list[SessionHeader]:
        with self._lock:
            return [log.header for log in self._logs.values()]

    def delete(self, session_id: str, *, last: SessionEvent | None = None) -> None:
        with self._lock:
            found = self._logs.get(session_id)
            if found is None:
                raise SessionNotFoundError(session_id)
            if last is not None:
                texts = found.events
                stored = texts[last.seq] if 0 <= last.seq < len(texts) else None
                check_ends_with(session_id, last, len(texts), stored)
            del self._logs[session_id]

    def prune(self, now_ms: int) -> int:
        with self._lock:
            expired = [
                session_id
                for session_id, log in self._logs.items()
                if log.expires_at is not None and log.expires_at <= now_ms
            ]
            for session_id in expired:
                del self._logs[session_id]
            return len(expired)
