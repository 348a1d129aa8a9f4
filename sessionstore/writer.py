"""Write-behind writer for harnesses: ``emit`` buffers, a background drain appends in
batches within a bounded window, ``flush`` is a durability checkpoint.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .core import check_ttl
from .errors import SessionNotFoundError, StoreClosedError
from .eventlog import encode_batch
from .flows import next_position
from .models import SessionEvent, SessionHeader
from .when import now_ms

if TYPE_CHECKING:
    from .store import EventLog


class WriterBuffer:
    """Seq and time assignment plus the pending queue; shared by the sync and async writers."""

    def __init__(self, session_id: str, next_seq: int, last_time: int) -> None:
        self.session_id = session_id
        self.next_seq = next_seq
        self.last_time = last_time
        self.pending: list[SessionEvent] = []
        self.error: BaseException | None = None
        self.closed = False

    def make(self, type: str, data: dict[str, Any] | None) -> SessionEvent:
        """Build the next event; its data is checked now, so a bad emit raises at once."""
        self.last_time = max(self.last_time, now_ms())
        event = SessionEvent(
            seq=self.next_seq, type=type, time=self.last_time, data={} if data is None else data
        )
        encode_batch(self.session_id, [event])
        self.next_seq += 1
        self.pending.append(event)
        return event

    def take_error(self) -> BaseException | None:
        error, self.error = self.error, None
        return error


def resume_point(log: EventLog, header: SessionHeader, ttl: float | None) -> tuple[int, int]:
    """(next seq, last time) of the session, creating it (with ``ttl``) when it does not
    exist yet."""
    try:
        return next_position(log.load(header.id))
    except SessionNotFoundError:
        log.create(header, ttl=ttl)
        return 0, 0


class SessionWriter:
    """Buffers events and drains them to the log at most ``window`` seconds after ``emit``.

    A failed background append keeps its batch, in order, at the head of the queue
    and the error is raised by the next :meth:`flush` (which may then be retried).
    """

    def __init__(
        self,
        log: EventLog,
        header: SessionHeader,
        *,
        window: float = 0.2,
        ttl: float | None = None,
    ) -> None:
        check_ttl(ttl)
        self._log = log
        self._window = window
        self._buffer = WriterBuffer(header.id, *resume_point(log, header, ttl))
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"sessionstore-writer-{header.id}", daemon=True
        )
        self._thread.start()

    @property
    def session_id(self) -> str:
        return self._buffer.session_id

    @property
    def next_seq(self) -> int:
        return self._buffer.next_seq

    def emit(self, type: str, data: dict[str, Any] | None = None) -> SessionEvent:
        """Queue one event (seq and time assigned here) and return it."""
        with self._lock:
            if self._buffer.closed:
                raise StoreClosedError(f"writer of session {self.session_id!r} is closed")
            event = self._buffer.make(type, data)
        self._wake.set()
        return event

    def flush(self) -> None:
        """Return once every event emitted before this call is durable, or raise the
        error that stopped the background drain."""
        with self._lock:
            error = self._buffer.take_error()
        if error is not None:
            raise error
        self._drain()

    def close(self) -> None:
        """Flush and stop the background drain."""
        with self._lock:
            self._buffer.closed = True
        self._stop.set()
        self._wake.set()
        self._thread.join()
        self.flush()

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drain(self) -> None:
        with self._drain_lock:
            with self._lock:
                batch = list(self._buffer.pending)
            if not batch:
                return
            self._log.append(self.session_id, batch)
            with self._lock:
                del self._buffer.pending[: len(batch)]

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._stop.wait(self._window)
            self._wake.clear()
            with self._lock:
                if self._buffer.closed:
                    return
                if self._buffer.error is not None:
                    continue
            try:
                self._drain()
            except Exception as exc:  # noqa: BLE001 - surfaced by the next flush
                with self._lock:
                    self._buffer.error = exc
