"""In-process backend (``memory://``): thread-safe, private to one ``connect`` call."""

from __future__ import annotations

import threading

from ..contracts import EventBackend, Stored, StoredEvent, ValueBackend
from ..errors import SessionExistsError, SessionNotFoundError
from ..eventlog import plan_append
from ..keys import ValueKey
from ..models import SessionHeader


class MemoryValues(ValueBackend):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plain: dict[ValueKey, Stored] = {}
        self._history: dict[ValueKey, dict[int, bytes | None]] = {}

    def read(self, key: ValueKey) -> Stored | None:
        with self._lock:
            return self._plain.get(key)

    def write(self, key: ValueKey, payload: bytes | None, when: int) -> None:
        with self._lock:
            self._write(key, payload, when)

    def _write(self, key: ValueKey, payload: bytes | None, when: int) -> None:
        if payload is None:
            self._plain.pop(key, None)
        else:
            self._plain[key] = Stored(payload, when)

    def swap(
        self, key: ValueKey, expected: Stored | None, payload: bytes | None, when: int
    ) -> bool:
        with self._lock:
            if self._plain.get(key) != expected:
                return False
            self._write(key, payload, when)
            return True

    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        with self._lock:
            return self._as_of(key, when)

    def _as_of(self, key: ValueKey, when: int) -> Stored | None:
        versions = self._history.get(key, {})
        at = max((w for w in versions if w <= when), default=None)
        return None if at is None else Stored(versions[at], at)

    def write_version(
        self, key: ValueKey, payload: bytes | None, when: int, max_versions: int | None
    ) -> None:
        with self._lock:
            self._write_version(key, payload, when, max_versions)

    def _write_version(
        self, key: ValueKey, payload: bytes | None, when: int, max_versions: int | None
    ) -> None:
        kept = {w: v for w, v in self._history.get(key, {}).items() if w < when}
        kept[when] = payload
        if max_versions is not None:
            kept = dict(sorted(kept.items())[-max_versions:])
        self._history[key] = kept

    def swap_version(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
    ) -> bool:
        with self._lock:
            if self._as_of(key, when) != expected:
                return False
            self._write_version(key, payload, when, max_versions)
            return True


    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        with self._lock:
            plain = [(key, False) for key in self._plain if key.namespace == namespace]
            return plain + [(key, True) for key in self._history if key.namespace == namespace]

    def forget(self, key: ValueKey) -> bool:
        with self._lock:
            found = self._plain.pop(key, None) is not None
            return self._history.pop(key, None) is not None or found


class MemoryEvents(EventBackend):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[str, tuple[SessionHeader, list[StoredEvent]]] = {}

    def locate(self, session_id: str) -> str | None:
        return None

    def exists(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._logs

    def append(
        self, session_id: str, events: list[StoredEvent], header: SessionHeader | None
    ) -> int:
        with self._lock:
            found = self._logs.get(session_id)
            if found is None:
                if header is None:
                    raise SessionNotFoundError(session_id)
                found = (header, [])
            elif header is not None and header != found[0]:
                raise SessionExistsError(session_id)
            stored = found[1]
            if plan_append(session_id, len(stored), events, lambda a, b: stored[a : b + 1]):
                stored.extend(events)
                self._logs[session_id] = found
            return len(stored)

    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[StoredEvent]]:
        with self._lock:
            found = self._logs.get(session_id)
            if found is None:
                raise SessionNotFoundError(session_id)
            end = None if limit is None else from_seq + limit
            return found[0], found[1][from_seq:end]

    def list(self) -> list[SessionHeader]:
        with self._lock:
            return [header for header, _ in self._logs.values()]

    def delete(self, session_id: str) -> None:
        with self._lock:
            if self._logs.pop(session_id, None) is None:
                raise SessionNotFoundError(session_id)
