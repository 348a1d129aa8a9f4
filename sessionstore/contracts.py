# Longer than ~450 lines on purpose: this is one specification, the two backend
# contracts with each method's contract in its docstring, then their async twins, which
# restate every signature so that mypy and tests/test_api_parity.py hold the async
# backends to the same contract. Most of its lines are those contracts' prose.
"""What a backend must do. The facades (:mod:`sessionstore.store`, :mod:`sessionstore.aio`)
hold every decision; a backend only stores and fetches, atomically where stated.

Leases: a live writer holds a lease on its session, visible to every process using
the same store, until it is closed or dies (see :meth:`EventBackend.acquire_lease`).
Each lease taken has an epoch (a fencing token) above every earlier one of its
session, and the newest stays stored with the session. Every append of a writer
carries its :class:`~sessionstore.leases.Lease` (token and epoch), which the backend
checks atomically with the seq (see :meth:`EventBackend.append`): a writer whose lease
another took over writes nothing more, even once the taker released it.

Retention: a value written with ``ttl_ms`` expires ``ttl_ms`` milliseconds (of the
backend's clock: the server's for Redis, the wall clock elsewhere) after that write; an
expired value is absent for every method. An event-log session keeps the ``ttl_ms`` it was
materialised with, and every append that writes moves its expiry to ``ttl_ms`` after it;
an expired session is removed whole, by :meth:`EventBackend.prune` or by the server.

A backend implements :class:`ValueBackend` and :class:`EventBackend` synchronously;
``connect`` opens the pair as :class:`Backends`. The async API runs a blocking backend
in a worker thread, or uses the :class:`AsyncBackends` pair the backend builds where it
has a native one (Redis); either way it sees :class:`AsyncValueBackend` and
:class:`AsyncEventBackend`, the same methods as coroutines. The conformance suites in
``tests/conformance`` prove each backend against these contracts.
"""

from __future__ import annotations

import builtins
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from .keys import ValueKey
from .leases import Lease, ProcessLeases
from .models import SessionEvent, SessionHeader, SessionInfo
from .records import StoredRecord, records_of_events

#: Guards the lazy making of a backend's :class:`ProcessLeases`.
_LEASES_MADE = threading.Lock()


@dataclass(slots=True)
class Stored:
    """One stored version of a value: msgpack ``payload`` (None for a clear) and its
    ``when``. Treated as immutable (not frozen: it is built on every read)."""

    payload: bytes | None
    when: int


@dataclass(frozen=True, slots=True)
class Refused:
    """What :meth:`ValueBackend.swap` returns when the record was not the one expected:
    ``current`` is the record it found instead (None when absent or expired). It is
    falsy, so ``if backend.swap(...)`` still reads as "if it was swapped"."""

    current: Stored | None

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class EventBatch:
    """A batch as ``append`` hands it to a backend: the validated ``events``, contiguous
    and non-empty, and ``texts``, the canonical JSON of each one as it is stored (see
    :func:`sessionstore.eventlog.event_text`). A backend stores the texts, never the
    events' ``data`` objects, which the caller may still change."""

    events: list[SessionEvent]
    texts: list[bytes]

    def __len__(self) -> int:
        return len(self.events)


class ValueBackend(ABC):
    """Storage of session values. ``when`` is always int epoch ms."""

    def prepare(self, key: ValueKey) -> None:  # noqa: B027 - optional hook
        """Get ready to serve ``key`` (idempotent); e.g. create folders, clean leftovers."""

    @abstractmethod
    def read(self, key: ValueKey) -> Stored | None:
        """The one stored record of a plain value, or None (also once it has expired);
        look-ahead is the caller's job."""

    @abstractmethod
    def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        """Replace the record unconditionally; ``payload=None`` removes it. Never torn.

        With ``ttl_ms`` the record expires ``ttl_ms`` after this write. Without, a record
        that has not expired keeps its expiry, and a new one (or one replacing an expired
        record) never expires.
        """

    @abstractmethod
    def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        """Atomically: if the record equals ``expected`` (None when absent or expired),
        :meth:`write` and return True; else write nothing and return the record found, so
        that a compare-and-set loop needs no second read."""

    @abstractmethod
    def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        """History: the newest version at or before ``when`` (a clear has payload None);
        None once the history has expired."""

    def expiry(self, key: ValueKey, history: bool) -> int | None:
        """When the plain record of ``key`` (``history`` False) or its history (True)
        expires: epoch ms of the backend's clock (the server's for Redis); None when it
        never expires or nothing unexpired is stored. Only reads. This default knows no
        expiry (a backend that keeps none: ``dummy://``)."""
        return None

    def read_versions(self, key: ValueKey, before: int, limit: int) -> list[Stored]:
        """History: the versions at or before ``before``, newest first, at most ``limit``
        (from 1; a backend may return fewer, never none while one is left), as
        :meth:`read_as_of` finds them one by one; an inspection reads a whole history a
        page at a time. This default asks :meth:`read_as_of` once a version; a backend
        with round trips answers a page in one (Redis)."""
        found: list[Stored] = []
        at = before
        while len(found) < limit:
            version = self.read_as_of(key, at)
            if version is None or version.when > at:
                if version is not None:
                    found.append(version)  # the caller refuses a version past its time
                break
            found.append(version)
            at = version.when - 1
        return found

    @abstractmethod
    def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        """History, atomically: drop every version at or after ``when``, record this one
        (``payload=None`` records a clear), then keep only the newest ``max_versions``.

        A history expires whole: ``ttl_ms`` sets the expiry of every version, as
        :meth:`write` does for a record; an expired history is absent, so a write to it
        starts a new one.
        """

    @abstractmethod
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
        """Atomically: if :meth:`read_as_of` ``(when)`` equals ``expected``,
        :meth:`write_version` and return True."""

    @abstractmethod
    def put_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        """History, atomically: record this version at exactly ``when`` (replacing the
        version stored at ``when``, if any; ``payload=None`` records a clear) and discard
        no other, then keep only the newest ``max_versions`` (the oldest go, this one too
        when it is among them). Unlike :meth:`write_version`, versions written by other
        workers, at any time before or after ``when``, stay. ``ttl_ms`` as for
        :meth:`write_version`.
        """

    @abstractmethod
    def acquire_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        """Take, or renew for ``token``, the lease on computing the version of ``key`` at
        ``when`` (``get_or_compute``), for ``ttl_ms``; False, with nothing changed, while
        another token holds a live one (a resend of a take finds the lease its own). The
        lease is visible to every thread and process using the same store and ends when
        released, when ``ttl_ms`` passes without a renewal (:meth:`renew_compute_lease`),
        or with its holder's process (at once where the backend can tell: the file
        store)."""

    @abstractmethod
    def renew_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        """Extend ``token``'s live lease on the version of ``key`` at ``when`` to
        ``ttl_ms`` from now and return True; False, with nothing changed, when ``token``
        does not hold a live one (it lapsed, was released or another took it). A lease
        that lapsed is never taken back: only :meth:`acquire_compute_lease` takes one."""

    @abstractmethod
    def release_compute_lease(self, key: ValueKey, when: int, token: str) -> None:
        """Give up ``token``'s lease on the version of ``key`` at ``when`` (nothing if it
        does not hold it)."""

    @abstractmethod
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
        """The fenced write of ``get_or_compute``'s result, atomically, each check before
        any write:

        * a version is stored at exactly ``when``: write nothing, return it (a
          :class:`Stored`, payload None for a clear);
        * another token holds a live compute lease on the version at ``when``: write
          nothing, return False;
        * else :meth:`put_version` (the same trim and ``ttl_ms``), release the lease if
          ``token`` holds it, and return True.

        So a computer whose lease lapsed never replaces a version another caller stored:
        it gets that version back, or False while another is computing it. Exactly once
        on Redis, as every value write: a resend of a call that wrote returns True.
        """

    @abstractmethod
    def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        """Every key with a stored, unexpired record in ``namespace``, with True for a
        history key."""

    @abstractmethod
    def set_retention(self, key: ValueKey, ttl_ms: int | None) -> bool:
        """Give what is stored of ``key`` (its plain record and its history alike) a
        retention of ``ttl_ms`` from now, or take it away (None: it never expires), as a
        write with that ttl would; later writes without a ttl keep it. True if an
        unexpired record or version was there, False (nothing changed) otherwise."""

    @abstractmethod
    def forget(self, key: ValueKey) -> bool:
        """Remove the plain record and every history version of ``key``, expired ones too;
        True if an unexpired one was there."""

    def cached_read(self, key: ValueKey) -> tuple[Stored | None] | None:
        """``(read(key),)`` when the backend holds the plain record of ``key`` in process
        memory and can answer without I/O, else None (then the caller calls :meth:`read`).
        A record so answered is never older than the backend's cache promises (Redis with
        ``?cache=yes``: see :mod:`sessionstore.redis.tracking`). This default holds
        nothing and returns None."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and handles."""


class EventBackend(ABC):
    """Storage of session event logs: contiguous seqs from 0, all-or-nothing batches."""

    @abstractmethod
    def locate(self, session_id: str) -> str | None:
        """Absolute path of the session's own artifact, or None. No I/O."""

    @abstractmethod
    def exists(self, session_id: str) -> bool:
        """True once the session is materialised (its first batch appended)."""

    @abstractmethod
    def append(
        self,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
        lease: Lease | None = None,
    ) -> int:
        """Durably append a contiguous batch and return the new next seq.

        ``header`` is given when this store created the session and may have to
        materialise it. Atomically, before any write: the session must exist or
        ``header`` be given (else ``SessionNotFoundError``); a stored header that
        differs from ``header`` raises ``SessionExistsError``; the batch's first seq must
        equal the stored next seq (else ``SeqConflictError``), unless every event of
        the batch is already stored identically (the same canonical text), which is an
        applied replay: nothing is written. (Redis tells by the events' digests, kept for
        the newest 65,536 events of a log: a batch reaching further back, or events
        stored by a client of an older version, conflicts.) A torn tail is cut off
        durably before writing.

        ``ttl_ms`` is stored with a session this call materialises (it is ignored for a
        session already stored). In the same atomic step as the events, an append that
        writes sets the expiry of a session stored with a ttl to ``ttl_ms`` after now.

        ``lease`` fences the append: it is the lease of the writer appending (see
        :meth:`acquire_lease`). In the same atomic step as the seq check, and before it,
        a stored epoch newer than ``lease.epoch`` raises ``SessionBusyError`` and
        writes nothing: another writer took the lease over, whether it still holds it
        or has released it since. The writer's own epoch lets the append through,
        also once its lease expired or was released (nobody took it since). Without
        ``lease`` (a plain append) no lease is looked at.
        """

    @abstractmethod
    def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        """The header and the committed events with ``seq >= from_seq`` (at most ``limit``),
        each parsed from its stored text once and validated as a :class:`SessionEvent`
        (``data`` is the parsed JSON object, of the caller's own).

        A torn tail is left out; with ``repair=True`` it is also cut off durably.
        Damage before the end raises ``CorruptLogError`` and rewrites nothing; an
        unknown header version raises ``UnsupportedVersionError``. A backend may
        remember what it validated, so that later reads without ``repair`` cost the
        events they return plus what was appended since; the file store does, and
        still finds damage anywhere in a log on its first read of it, whatever
        ``from_seq`` (see :mod:`sessionstore.backends.jsonl`).
        """

    def read_records(
        self, session_id: str, from_seq: int = 0
    ) -> tuple[SessionHeader, list[StoredRecord]]:
        """:meth:`read` (without ``repair`` or ``limit``) as
        :class:`~sessionstore.records.StoredRecord` objects, for a reader that parses
        only the data it uses: the same damage raises, but within a data value, which
        the caller parses (:func:`~sessionstore.records.parsed_values`). This default
        reads events and serialises their data again; a backend that can keep its
        stored text does (Redis)."""
        header, events = self.read(session_id, from_seq)
        return header, records_of_events(events)

    @abstractmethod
    def list(self) -> list[SessionHeader]:
        """Headers of every materialised session, from metadata only (unsorted).

        One damaged session never hides the others: a session whose stored header
        cannot be read as a :class:`SessionHeader` of this format version (damaged,
        of another version, naming another session) is left out, with a warning on
        the ``logging`` logger ``"sessionstore"`` that names it and says what was
        wrong; ``list`` raises neither ``CorruptLogError`` nor
        ``UnsupportedVersionError``. Events are not read, so a session whose events
        are damaged is listed. ``read`` of a left-out session still raises.
        """

    @abstractmethod
    def delete(self, session_id: str, *, last: SessionEvent | None = None) -> None:
        """Remove the session entirely; ``SessionNotFoundError`` if it is not there.

        With ``last`` (an event of the log, as read), atomically: only if the log still
        ends with exactly that event (its next seq is ``last.seq + 1`` and the event
        stored at ``last.seq`` has the same canonical text: ``event_text`` of :mod:`.eventlog`);
        else ``SeqConflictError`` and nothing is deleted. (Redis tells by the event's
        digest: a last event stored by a client of an older version conflicts.)
        """

    @abstractmethod
    def prune(self, now_ms: int) -> int:
        """Remove every session of the namespace whose expiry is at or before ``now_ms``
        (epoch ms), each entirely and atomically (a session appended to meanwhile, and so
        renewed, stays); return how many. Until then an expired session is still there
        for every other method. A backend whose server expires sessions by itself
        returns 0."""

    @abstractmethod
    def stored_bytes(self, session_id: str) -> int:
        """How many bytes the session takes where it is stored: the log file's size
        (files), the length of its rows' stored text (SQLite), the length of its
        stream entries' stored event text (Redis: counted by the appends in the meta
        hash, read in O(1); estimated from its two ends for a log materialised before
        that count), the canonical text of its events (memory).
        ``SessionNotFoundError`` if it is not materialised."""

    @abstractmethod
    def set_retention(self, session_id: str, ttl_ms: int | None) -> int | None:
        """Give a stored session a retention of ``ttl_ms`` (it expires that long from now,
        and every later append that writes moves its expiry to ``ttl_ms`` after it, as
        for a session created with a ttl), or take it away (None: it never expires).
        Returns its new expiry (epoch ms) or None. ``SessionNotFoundError`` if it is not
        materialised; nothing else of the session changes."""

    def info(self, session_id: str) -> SessionInfo:
        """The session's :class:`SessionInfo` from metadata only: the header, the committed
        ``next_seq``, the ``time`` of the last committed event, the expiry and whether a
        live lease is held. ``SessionNotFoundError`` if it is not materialised; an
        unknown header version raises ``UnsupportedVersionError`` naming the log. This
        default reads the whole log; the backends read only metadata."""
        header, events = self.read(session_id)
        last = events[-1].time if events else None
        return SessionInfo(header, len(events), last, None, self.lease_busy(session_id))

    def list_info(self) -> builtins.list[SessionInfo]:
        """:meth:`info` of every session :meth:`list` lists (unsorted), from metadata
        only; a session that cannot be read is left out as :meth:`list` does."""
        found = []
        for header in self.list():
            try:
                found.append(self.info(header.id))
            except Exception:  # noqa: BLE001, S112 - gone or damaged meanwhile: left out
                continue
        return found

    #: Whether a lease expires unless renewed (False: it lasts until released or until
    #: its holder dies, as an OS file lock does).
    renews_leases: ClassVar[bool] = True

    def _process_leases(self) -> ProcessLeases:
        leases: ProcessLeases | None = getattr(self, "_leases", None)
        if leases is None:
            # Made once: two leases of one backend must never live in two tables.
            with _LEASES_MADE:
                leases = getattr(self, "_leases", None)
                if leases is None:
                    leases = ProcessLeases()
                    self._leases = leases
        return leases

    def acquire_lease(self, session_id: str, owner: str, ttl_ms: int) -> int:
        """Take the session's lease for ``owner`` for ``ttl_ms`` (ignored by a backend
        whose leases do not expire) and return its epoch (> 0); 0, with nothing
        changed, when another owner holds a live one. A lease taken by an owner that
        did not hold it gets an epoch above every earlier epoch of the session, which
        stays stored with the session after the lease expires or is released; one
        ``owner`` holds already is renewed and keeps its epoch. An epoch taken from
        another owner whose lease lapsed unreleased is a
        :class:`~sessionstore.leases.TakenOver` (an ``int``), which the telemetry counts
        as a takeover. The session need not exist. This default holds leases within the
        process."""
        return self._process_leases().acquire(session_id, owner, ttl_ms)

    def renew_lease(self, session_id: str, lease: Lease, ttl_ms: int) -> bool:
        """Extend ``lease`` for ``ttl_ms`` while it is still the session's newest: True
        also when it expired meanwhile and nobody took the lease since; False, with
        nothing changed, once another owner took it (a newer epoch is stored, whether
        or not its holder released it since) or it was released. Never takes a lease
        that is not ``lease``'s."""
        return self._process_leases().renew(session_id, lease, ttl_ms)

    def _fences_off(self, session_id: str, lease: Lease | None) -> bool:
        """Whether this default's leases refuse an append fenced by ``lease`` (see
        :meth:`append`); for a backend holding its leases in :meth:`_process_leases`."""
        return lease is not None and self._process_leases().fences_off(session_id, lease)

    def release_lease(self, session_id: str, owner: str) -> None:
        """Give up ``owner``'s lease on the session (nothing if it holds none); its
        epoch stays stored."""
        self._process_leases().release(session_id, owner)

    def lease_busy(self, session_id: str, owner: str | None = None) -> bool:
        """Whether a live lease on the session is held by an owner other than ``owner``."""
        return self._process_leases().busy(session_id, owner)

    def wait_for_events(self, session_id: str, from_seq: int, timeout: float) -> None:
        """Return once an event with ``seq >= from_seq`` may have landed, or after about
        ``timeout`` seconds. The default just waits; Redis blocks on the stream."""
        time.sleep(timeout)

    def check_durable(self) -> None:  # noqa: B027 - optional hook
        """Raise ``DurabilityError``, writing nothing, when appends cannot be as durable
        as the store was opened to make them (the check a first write makes); backends
        with nothing to check do nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and handles."""


class AsyncValueBackend(Protocol):
    """The methods of :class:`ValueBackend` that the async API calls, as coroutines:
    the same names, arguments and results, the same contracts."""

    async def prepare(self, key: ValueKey) -> None:
        """:meth:`ValueBackend.prepare`."""

    async def read(self, key: ValueKey) -> Stored | None:
        """:meth:`ValueBackend.read`."""

    async def write(
        self, key: ValueKey, payload: bytes | None, when: int, *, ttl_ms: int | None = None
    ) -> None:
        """:meth:`ValueBackend.write`."""

    async def swap(
        self,
        key: ValueKey,
        expected: Stored | None,
        payload: bytes | None,
        when: int,
        *,
        ttl_ms: int | None = None,
    ) -> Literal[True] | Refused:
        """:meth:`ValueBackend.swap`."""

    async def read_as_of(self, key: ValueKey, when: int) -> Stored | None:
        """:meth:`ValueBackend.read_as_of`."""

    async def read_versions(self, key: ValueKey, before: int, limit: int) -> list[Stored]:
        """:meth:`ValueBackend.read_versions`."""

    async def expiry(self, key: ValueKey, history: bool) -> int | None:
        """:meth:`ValueBackend.expiry`."""

    async def write_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        """:meth:`ValueBackend.write_version`."""

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
        """:meth:`ValueBackend.swap_version`."""

    async def put_version(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        *,
        ttl_ms: int | None = None,
    ) -> None:
        """:meth:`ValueBackend.put_version`."""

    async def acquire_compute_lease(
        self, key: ValueKey, when: int, token: str, ttl_ms: int
    ) -> bool:
        """:meth:`ValueBackend.acquire_compute_lease`."""

    async def renew_compute_lease(self, key: ValueKey, when: int, token: str, ttl_ms: int) -> bool:
        """:meth:`ValueBackend.renew_compute_lease`."""

    async def release_compute_lease(self, key: ValueKey, when: int, token: str) -> None:
        """:meth:`ValueBackend.release_compute_lease`."""

    async def put_computed(
        self,
        key: ValueKey,
        payload: bytes | None,
        when: int,
        max_versions: int | None,
        token: str,
        *,
        ttl_ms: int | None = None,
    ) -> Stored | bool:
        """:meth:`ValueBackend.put_computed`."""

    async def scan(self, namespace: str) -> list[tuple[ValueKey, bool]]:
        """:meth:`ValueBackend.scan`."""

    async def set_retention(self, key: ValueKey, ttl_ms: int | None) -> bool:
        """:meth:`ValueBackend.set_retention`."""

    async def forget(self, key: ValueKey) -> bool:
        """:meth:`ValueBackend.forget`."""


class AsyncEventBackend(Protocol):
    """The methods of :class:`EventBackend` that the async API calls, as coroutines (the
    same names, arguments and results, the same contracts), and its ``renews_leases``."""

    async def locate(self, session_id: str) -> str | None:
        """:meth:`EventBackend.locate`."""

    async def check_durable(self) -> None:
        """:meth:`EventBackend.check_durable`."""

    async def exists(self, session_id: str) -> bool:
        """:meth:`EventBackend.exists`."""

    async def append(
        self,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        *,
        ttl_ms: int | None = None,
        lease: Lease | None = None,
    ) -> int:
        """:meth:`EventBackend.append`."""

    async def read(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        repair: bool = False,
        limit: int | None = None,
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """:meth:`EventBackend.read`."""

    async def read_records(
        self, session_id: str, from_seq: int = 0
    ) -> tuple[SessionHeader, builtins.list[StoredRecord]]:
        """:meth:`EventBackend.read_records`."""

    async def list(self) -> builtins.list[SessionHeader]:
        """:meth:`EventBackend.list`."""

    async def delete(self, session_id: str, *, last: SessionEvent | None = None) -> None:
        """:meth:`EventBackend.delete`."""

    async def prune(self, now_ms: int) -> int:
        """:meth:`EventBackend.prune`."""

    async def set_retention(self, session_id: str, ttl_ms: int | None) -> int | None:
        """:meth:`EventBackend.set_retention`."""

    async def stored_bytes(self, session_id: str) -> int:
        """:meth:`EventBackend.stored_bytes`."""

    async def info(self, session_id: str) -> SessionInfo:
        """:meth:`EventBackend.info`."""

    async def list_info(self) -> builtins.list[SessionInfo]:
        """:meth:`EventBackend.list_info`."""

    @property
    def renews_leases(self) -> bool:
        """:attr:`EventBackend.renews_leases`."""

    async def acquire_lease(self, session_id: str, owner: str, ttl_ms: int) -> int:
        """:meth:`EventBackend.acquire_lease`."""

    async def renew_lease(self, session_id: str, lease: Lease, ttl_ms: int) -> bool:
        """:meth:`EventBackend.renew_lease`."""

    async def release_lease(self, session_id: str, owner: str) -> None:
        """:meth:`EventBackend.release_lease`."""

    async def lease_busy(self, session_id: str, owner: str | None = None) -> bool:
        """:meth:`EventBackend.lease_busy`."""

    async def wait_for_events(self, session_id: str, from_seq: int, timeout: float) -> None:
        """:meth:`EventBackend.wait_for_events`."""


@dataclass
class AsyncBackends:
    """What the async API runs on: the backend's native async pair, or its blocking pair
    in worker threads (:mod:`sessionstore.aio`); and how to close it."""

    values: AsyncValueBackend
    events: AsyncEventBackend
    aclose: Callable[[], Awaitable[None]]


@dataclass
class Backends:
    """What ``connect`` opens: the two backends and how to show and close them."""

    values: ValueBackend
    events: EventBackend
    display_url: str
    #: Builds the native async pair, when the backend has one (else threads are used).
    make_async: Callable[[], AsyncBackends] | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in self.closers:
            close()
