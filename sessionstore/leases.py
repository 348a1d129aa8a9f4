"""Live-session leases: what a writer's lease is (:class:`Lease`, its owner token and
epoch), and the leases held within one process (:class:`ProcessLeases`: the memory
backend's, and the default of a backend without its own). No I/O.

Epochs (fencing tokens): every time a session's lease is taken by an owner that does
not hold it, it gets an epoch larger than every epoch of that session's leases before
(:func:`next_epoch`), and the newest epoch stays stored with the session when the lease
expires or is released. An append fenced by a lease whose epoch is older than the
stored one is refused: its writer's lease was taken over, whether the taker still holds
it or not (see :meth:`sessionstore.contracts.EventBackend.append`).

Takeovers: a backend's ``acquire_lease`` returns a :class:`TakenOver` epoch when the lease
it gave was another owner's that lapsed without being released (its writer died, was cut
off or paused past its lease), so that the taker can count it: a dead writer never
reports the lease it lost.
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

from . import forksafe
from .errors import SessionBusyError
from .when import now_ms


class Lease(NamedTuple):
    """A writer's hold on a session's lease: its ``owner`` token and the lease's
    ``epoch``, which fences its appends."""

    owner: str
    epoch: int


class TakenOver(int):
    """An epoch ``acquire_lease`` returns (an ``int``, used as any epoch) for a lease it
    took from another owner whose lease had lapsed without being released; a lease
    taken after a release, a first lease and one its owner renews are a plain ``int``.
    Read by :mod:`sessionstore.telemetry` (``sessionstore.lease.takeovers``)."""

    __slots__ = ()


def taken(epoch: int, lapsed: bool) -> int:
    """``epoch`` as ``acquire_lease`` returns it: a :class:`TakenOver` when ``lapsed``."""
    return TakenOver(epoch) if lapsed else epoch


def taken_over(session_id: str, outcome: str = "") -> SessionBusyError:
    """What a fenced append raises: the writer's lease is held by another writer;
    ``outcome`` (``": ..."``) says what of its writes is stored."""
    return SessionBusyError(session_id, "another writer took its lease over" + outcome)


def next_epoch(stored: int, clock_ms: int) -> int:
    """The epoch of a lease taken now: above the ``stored`` one (0: none), and at least
    the backend's clock in ms, so that it is above the epochs of the session's earlier
    leases even when their record is gone with a deleted or expired session."""
    return max(stored + 1, clock_ms)


class _Held(NamedTuple):
    #: The holder's token; None once released.
    owner: str | None
    epoch: int
    #: Monotonic seconds.
    expires: float


class ProcessLeases:
    """The leases of one backend object, guarded by one lock. A session's entry stays
    after its lease is released or expires: it keeps the newest epoch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        forksafe.renew_locks(self, "_lock")
        self._held: dict[str, _Held] = {}

    def acquire(self, session_id: str, owner: str, ttl_ms: int) -> int:
        """Take or renew the lease for ``owner``: its epoch (a :class:`TakenOver` one
        when another owner's lease lapsed unreleased), or 0 when another owner holds a
        live one."""
        with self._lock:
            now = time.monotonic()
            found = self._held.get(session_id)
            lapsed = False
            if found is not None and found.owner == owner and found.expires > now:
                epoch = found.epoch
            elif found is not None and found.owner is not None and found.expires > now:
                return 0
            else:
                epoch = next_epoch(0 if found is None else found.epoch, now_ms())
                lapsed = found is not None and found.owner not in (None, owner)
            self._held[session_id] = _Held(owner, epoch, now + ttl_ms / 1000)
            return taken(epoch, lapsed)

    def renew(self, session_id: str, lease: Lease, ttl_ms: int) -> bool:
        """Extend ``lease`` for ``ttl_ms`` if it is still the session's newest (also
        after it expired: nobody took it since); False, with nothing changed, once
        another lease was taken or it was released."""
        with self._lock:
            found = self._held.get(session_id)
            if found is None or (found.owner, found.epoch) != lease:
                return False
            self._held[session_id] = _Held(
                lease.owner, lease.epoch, time.monotonic() + ttl_ms / 1000
            )
            return True

    def release(self, session_id: str, owner: str) -> None:
        with self._lock:
            found = self._held.get(session_id)
            if found is not None and found.owner == owner:
                self._held[session_id] = _Held(None, found.epoch, 0.0)

    def busy(self, session_id: str, owner: str | None = None) -> bool:
        """Whether an owner other than ``owner`` holds a live lease on the session."""
        found = self._held.get(session_id)
        return (
            found is not None
            and found.owner is not None
            and found.owner != owner
            and found.expires > time.monotonic()
        )

    def fences_off(self, session_id: str, lease: Lease) -> bool:
        """Whether an append fenced by ``lease`` is refused: a newer epoch is stored."""
        found = self._held.get(session_id)
        return found is not None and found.epoch > lease.epoch
