"""The synchronous API: :func:`connect`, :class:`Store`, :class:`Session` and
:class:`EventLog` (``sessionstore`` exports them).

Each method runs one flow (of :mod:`sessionstore.value_flows` or
:mod:`sessionstore.event_flows`) against the blocking backend; :mod:`sessionstore.aio`
runs the same flows against async backends. What the two APIs share besides (building,
checking and pickling a store, its handles and its event log) is written once in
:mod:`sessionstore.storebase`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from . import event_flows, telemetry, value_flows
from .closing import raise_unclosed
from .connection import open_store
from .contracts import EventBackend, ValueBackend
from .defaults import DEFAULT_LEASE, DEFAULT_NAMESPACE
from .drain import Drain
from .flows import recording, run
from .models import SessionEvent, SessionHeader, SessionInfo
from .records import StoredRecord
from .results import LoadedSession, ValueRecords, ValueRef
from .session_state import SessionState
from .storebase import EventLogBase, SessionBase, StoreBase, open_as
from .writer import SessionWriter


def connect(
    url: str | os.PathLike[str] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    *,
    timeout: float | None = None,
    durability: str | None = None,
    ttl: float | None = None,
    cache: bool | None = None,
) -> Store:
    """Open a store on ``url`` (see :mod:`sessionstore.connection` for the schemes).

    ``timeout`` bounds how long a call waits for an unreachable server before raising
    ``StoreUnavailableError`` (Redis; default 5 s; seconds in (0, 86400], or
    ``InvalidArgumentError``). ``durability`` (Redis event logs):
    ``"fsync"`` (default; ``"replicas:1"`` on a ``redis+sentinel://`` URL whose service
    has replicas), ``"aof"``, ``"replicas:N"`` or ``"none"``; the URL may carry
    ``?durability=...`` instead. ``ttl`` (seconds > 0) is the retention of the event-log
    sessions this store creates (``events.create(..., ttl=...)`` overrides it): each
    expires ``ttl`` after its last append; None (default) keeps them for good. A bad
    ``ttl`` raises ``InvalidArgumentError``. ``cache=True`` (or ``?cache=yes``) answers
    repeated reads of unchanged plain values from process memory, invalidated by the
    server and never more than 100 ms behind it (Redis, sync client, single server or
    Sentinel; see :mod:`sessionstore.redis.tracking`). Opening does no I/O; the first
    call connects.

    The store pickles, and so do its handles and ``store.events``: another process gets
    the URL (password included), namespace and these options, and connects on first use
    (see :meth:`Store.__reduce__`). A ``memory://`` store cannot travel: pickling it
    raises ``SessionStoreError``.
    """
    return open_as(Store, open_store(url, namespace, timeout, durability, ttl, cache))


class Session(SessionBase[ValueBackend]):
    """A handle on one session value: (symbol, strategy, exchange, frame, mode) in a namespace.

    Reads never see the future: ``get_data(when)`` returns None when the stored value was
    written for a time later than ``when``. A handle opened with ``ttl`` makes every write
    through it (``set_data``, ``update``) expire the value ``ttl`` seconds of wall-clock
    time later; an expired value reads as None, is not listed and counts as absent. Safe
    to share between threads.

    A handle pickles as its store (see :meth:`Store.__reduce__`), its key, mode, history
    and retention options and whether it was disposed: a disposed handle arrives disposed.
    """

    def wait_for_init(self, initial: bool = True) -> None:
        """Prepare the backend for this key (e.g. create its folder, clear what an
        interrupted write left). Idempotent and optional: first use does it too.

        ``initial`` is kept for callers written against ports of the same API, where it
        marks the first call; it changes nothing here: every call prepares the key the
        same way, once per handle."""
        run(value_flows.ready(self._state, self._lifecycle), self._backend)

    def get_data(self, when: Any) -> Any:
        """The stored value, or None if there is none or it was written for a later time.

        With ``history=True``: the newest value written for a time at or before ``when``.
        On a store opened with ``?cache=yes`` a plain value may come from memory, never
        past its ttl nor more than 100 ms behind a write by another process (see
        :mod:`sessionstore.redis.tracking`); one made through this store is seen at once.
        """
        state = self._state
        if not state.history and state.initialised:
            # A backend that keeps plain values in memory (Redis with ``?cache=yes``)
            # answers without the flow machinery.
            cached = self._backend.cached_read(state.key)
            if telemetry.current:
                telemetry.cache_read(self._backend, cached is not None)
            if cached is not None:
                return value_flows.get_cached(state, self._lifecycle, cached[0], when)
            if not recording():
                # Nothing to record: the read needs no flow either (a microsecond less).
                return value_flows.get_plain(state, self._lifecycle, when, self._backend)
        return run(value_flows.get_data(state, self._lifecycle, when), self._backend)

    def set_data(self, value: Any, when: Any) -> None:
        """Store ``value`` for logical time ``when``, replacing whatever was stored.

        ``None`` clears. With ``history=True`` every version at or after ``when`` is
        discarded first (a reset: what a restarted backtest needs; workers sharing a
        history use :meth:`put`, which discards nothing). An unserialisable value raises
        ``NotSerializableError`` and leaves the stored record as it was. With the handle's
        ``ttl`` the value (for history: every version) expires ``ttl`` seconds from now;
        without one, a value that was given an expiry by an earlier write keeps it, and a
        new one never expires.
        """
        state = self._state
        if not state.history and state.initialised and not recording():
            # As in get_data: without telemetry, a plain write needs no flow.
            value_flows.set_plain(state, self._lifecycle, value, when, self._backend)
            return
        run(value_flows.set_data(state, self._lifecycle, value, when), self._backend)

    def put(self, value: Any, when: Any) -> None:
        """History: store ``value`` as the version at exactly ``when``, discarding nothing
        else (a version already at ``when`` is replaced; ``None`` records a clear).

        What parallel workers sharing a history use: whatever others put before or after,
        at earlier or later times and in any order, every version stays, and
        ``get_data(t)`` still returns the newest version at or before ``t``. (``set_data``
        resets instead: it discards every version at or after its ``when``, as a restarted
        backtest needs.) With ``max_versions`` the oldest versions beyond it are dropped,
        this one too when it is among the oldest. ``ttl`` as for :meth:`set_data`. A
        plain handle raises ``InvalidArgumentError``.
        """
        run(value_flows.put(self._state, self._lifecycle, value, when), self._backend)

    def get_or_compute(
        self,
        when: Any,
        fn: Callable[[], Any],
        *,
        timeout: float | None = None,
        lease: float = value_flows.COMPUTE_LEASE,
    ) -> Any:
        """History: the version stored at exactly ``when``; when there is none, ``fn()``
        is run by exactly one caller among all the threads and processes using the store,
        its result stored with :meth:`put` and returned to every caller (as stored: as
        ``get_data`` would return it). Never a version of another time.

        The caller that computes holds a lease on (this value, ``when``), renewed every
        third of ``lease`` seconds while ``fn`` runs; the others wait for its result. If
        ``fn`` raises, its caller gets the exception and one waiter computes instead; if
        the computing process dies, its lease ends (at once on a file store, ``lease``
        seconds after its last renewal on Redis and SQLite) and one waiter computes. The
        result is stored fenced by the lease: a caller paused past its lease while another
        took it and computed returns the version the other stored, never its own. A
        waiter gives up after ``timeout`` seconds (default: the ``timeout`` given to
        ``connect``, else 30 s) with ``ComputeTimeoutError``. A bad ``timeout`` or
        ``lease`` raises ``InvalidArgumentError``; so do a plain handle and an ``fn`` that
        is not callable. With ``max_versions``, the version of a ``when`` older than
        every version kept is dropped as it is stored (see :meth:`put`): its computer
        returns it, and each later call at that ``when`` computes again.
        """
        return run(self._compute(when, fn, timeout, lease), self._backend)

    def update(self, fn: Callable[[Any], Any], when: Any) -> Any:
        """Atomically replace the value visible at ``when`` by ``fn(value)`` and return
        what was stored. ``fn`` may run more than once when other writers race, or when
        another handle wrote since this one last read or wrote the value: the handle
        starts from the record it saw last (one round trip when nobody else wrote)."""
        return run(value_flows.update(self._state, self._lifecycle, fn, when), self._backend)

    def set_ttl(self, ttl: float | None) -> bool:
        """Give what is stored of this value (its record and its history alike) a
        retention of ``ttl`` seconds from now, or take it away with None (it never
        expires); later writes without a ttl keep it, a write through a handle with a
        ttl sets its own. True if something unexpired was stored, False (nothing
        changed) otherwise; a bad ``ttl`` raises ``InvalidArgumentError``."""
        return run(
            value_flows.set_value_retention(self._state, self._lifecycle, ttl), self._backend
        )

    def delete(self) -> bool:
        """Remove every stored record of this key, plain and history alike; True if there
        was one that had not expired. The handle stays usable."""
        return run(value_flows.delete_value(self._state, self._lifecycle), self._backend)

    def records(self) -> ValueRecords:
        """What is stored under this handle's key, as stored: the plain record and every
        history version (oldest first), each with the logical time it was stored for,
        whatever the handle's ``history`` mode and with no look-ahead filter. Reads only:
        nothing is prepared or written. A history whose versions do not go back in time
        raises ``CorruptDataError``."""
        return run(value_flows.value_records(self._state, self._lifecycle), self._backend)


class EventLog(EventLogBase[EventBackend]):
    """Durable, append-only session event logs (see the package README for the contract).

    Retention: a session created with a ``ttl`` (or by a store connected with one) keeps
    it from its first append on, and every append, by any store, moves its expiry to
    ``ttl`` seconds from then. On Redis the server removes an expired session by itself,
    all its keys at once. On the local backends (memory, files, SQLite) :meth:`prune`
    removes expired sessions, each whole; until it runs, an expired session is still
    listed, readable and appendable (an append then renews it).
    """

    def locate(self, header: SessionHeader | str) -> str | None:
        """Absolute path of the session's own file, or None (SQLite, Redis, memory). No I/O."""
        return self._backend.locate(self._located(header))

    def create(self, header: SessionHeader, *, ttl: float | None = None) -> None:
        """Register a new session. Nothing is written until its first append.

        ``ttl`` (seconds > 0) is the session's retention, stored with it at its first
        append; it replaces the store's ``ttl`` for this session. A bad ``ttl`` raises
        ``InvalidArgumentError``. ``SessionExistsError`` when the id is stored already;
        when another process stores it first (with another header), that first append
        raises it instead and this header is forgotten: later appends go to the stored
        session.
        """
        flow = event_flows.create(self._pending, self._lifecycle, header, self._retention(ttl))
        run(flow, self._backend)

    def append(
        self,
        session_id: str,
        events: Iterable[SessionEvent | Mapping[str, Any]],
        *,
        header: SessionHeader | None = None,
    ) -> int:
        """Durably append a contiguous batch starting at the stored next seq; return the
        new next seq. A batch identical to what is stored at those seqs is an applied
        replay and writes nothing; anything else raises ``SeqConflictError``. Each event
        keeps the ``time`` it carries, in any order (only a writer's ``emit`` refuses a
        time before the event before it).

        ``header`` (the session's header as :meth:`info` or :meth:`load` gave it) makes
        the append land only in that session: one deleted and created again since (so
        stored with another header, even at the same next seq) raises
        ``SessionExistsError`` (an empty batch checks it too), and one not stored is
        stored with ``header`` when the batch starts at seq 0 (as after :meth:`create`),
        else ``SeqConflictError``; nothing is written then. The check is in the same
        atomic step as the seq's. A :meth:`create` of this store not written yet, under
        another header, is dropped."""
        flow = event_flows.append(self._pending, self._lifecycle, session_id, events, header)
        return run(flow, self._backend)

    def load(self, session_id: str) -> LoadedSession:
        """The header and a balanced log: a torn tail is cut off, an interrupted final
        turn is closed by durably appended closers. While a live writer, in any process,
        holds the session's lease, raises ``SessionBusyError`` instead (its turn is not
        interrupted); once the writer is closed or dies (its lease ends) load repairs."""
        return run(event_flows.load(self._lifecycle, session_id), self._backend)

    def inspect(self, session_id: str) -> LoadedSession:
        """What :meth:`load` would return, closers included, without writing anything
        and without looking at the lease: a live session can be looked at."""
        return run(event_flows.inspect_session(self._lifecycle, session_id), self._backend)

    def info(self, session_id: str) -> SessionInfo:
        """The session's header, ``next_seq``, ``last_time``, ``expires_at`` and ``busy``,
        from metadata only (the log is not parsed). ``SessionNotFoundError`` if it is not
        materialised."""
        return run(event_flows.info(self._lifecycle, session_id), self._backend)

    def list_info(self) -> list[SessionInfo]:
        """:meth:`info` of every session :meth:`list` lists, in the same order."""
        return run(event_flows.list_info(self._lifecycle), self._backend)

    def stored_bytes(self, session_id: str) -> int:
        """How many bytes the session takes in the store (files: its log file; SQLite:
        its rows' text; Redis: its events' stored text, as the appends counted it, or
        estimated for a log written before they did).
        ``SessionNotFoundError`` if it is not materialised."""
        return run(event_flows.stored_bytes(self._lifecycle, session_id), self._backend)

    def set_ttl(self, session_id: str, ttl: float | None) -> int | None:
        """Give a stored session a retention of ``ttl`` seconds from now (every later
        append moves its expiry to ``ttl`` after it, as for a session created with that
        ``ttl``), or take it away with None (it never expires); returns the new expiry
        (epoch ms) or None. ``SessionNotFoundError`` if it is not materialised, a bad
        ``ttl`` ``InvalidArgumentError``; nothing else of the session changes."""
        return run(event_flows.set_retention(self._lifecycle, session_id, ttl), self._backend)

    def fork(self, parent_id: str, child_id: str, *, at_seq: int | None = None) -> SessionHeader:
        """Create ``child_id`` whose log begins with the parent's committed events
        ``[0, at_seq)`` (all when None): same seqs, types, times, data and ids, written
        atomically. Its header has ``parent_id``, ``fork_seq`` (the number of events
        copied: ``at_seq`` when given) and the parent's ``cwd``; later parent appends
        never reach it. An ``at_seq`` inside a turn gives a child whose ``load`` closes
        that turn as interrupted. ``SessionExistsError`` if ``child_id`` exists;
        ``InvalidArgumentError`` for an ``at_seq`` past the parent's end."""
        flow = event_flows.fork(
            self._pending, self._lifecycle, parent_id, child_id, at_seq, self._ttl_ms
        )
        return run(flow, self._backend)

    def read_from(self, session_id: str, seq: int) -> list[SessionEvent]:
        """Committed events with seq >= ``seq``; no repair, no writes."""
        return run(event_flows.read_from(self._lifecycle, session_id, seq), self._backend)

    def read_records_from(self, session_id: str, seq: int) -> list[StoredRecord]:
        """:meth:`read_from` as :class:`~sessionstore.records.StoredRecord` objects:
        the same checks, but each value of an event's ``data`` is kept as its JSON text
        (``msgspec.Raw``), for a reader that parses only what it uses (and must parse
        it to find damage within it: :func:`~sessionstore.records.parsed_values`)."""
        flow = event_flows.read_records_from(self._lifecycle, session_id, seq)
        return run(flow, self._backend)

    def iter_events(self, session_id: str, batch: int = 1000) -> Iterator[SessionEvent]:
        """Stream the committed events ``batch`` at a time, without repair. A bad
        ``batch`` (not an int >= 1) raises ``InvalidArgumentError`` at the first step."""
        yield from self._stream(event_flows.EventPages.paged(self._lifecycle, session_id, batch))

    def follow(
        self, session_id: str, from_seq: int = 0, *, poll: float = 0.5
    ) -> Iterator[SessionEvent]:
        """The committed events from ``from_seq`` on, then each new one as it lands, without
        end (stop by leaving the loop). Redis blocks on the stream (``XREAD BLOCK``);
        the other backends look again every ``poll`` seconds."""
        pages = event_flows.EventPages.following(self._lifecycle, session_id, from_seq, poll)
        yield from self._stream(pages)

    def _stream(self, pages: event_flows.EventPages) -> Iterator[SessionEvent]:
        while not pages.done:
            yield from run(pages.next(), self._backend)

    def list(self) -> list[SessionHeader]:
        """Headers of the materialised sessions, by ``created_at`` then id; metadata only."""
        return run(event_flows.list_sessions(self._lifecycle), self._backend)

    def delete(self, session_id: str, *, last: SessionEvent | None = None) -> None:
        """Remove the session entirely; ``SessionNotFoundError`` if it does not exist.

        With ``last`` (an event read from the log): only if the log still ends with
        exactly that event, checked in the same atomic step as the delete: else
        ``SeqConflictError`` and nothing is deleted (another writer appended since, or
        the session was deleted and written again, even to the same length). On Redis
        the event must have been stored by this version (it is told by its digest).
        """
        flow = event_flows.delete_session(self._pending, self._lifecycle, session_id, last)
        run(flow, self._backend)

    def prune(self) -> int:
        """Remove the expired sessions of the namespace, each whole and atomically, and
        return how many. Always 0 on Redis, where the server expires sessions itself."""
        return run(event_flows.prune(self._lifecycle), self._backend)

    def writer(
        self,
        header: SessionHeader,
        *,
        window: float = 0.2,
        ttl: float | None = None,
        lease: float = DEFAULT_LEASE,
    ) -> SessionWriter:
        """A write-behind writer for ``header``'s session (created here, with ``ttl``
        as in :meth:`create`, if new; a stored session continues at its next seq after
        :meth:`load` repaired it). ``header`` must be a :class:`SessionHeader`, ``window``
        seconds in [0, 86400], ``lease`` seconds in (0, 86400], else
        ``InvalidArgumentError``; a stored header that differs from ``header`` raises
        ``SessionExistsError`` naming the differing fields.

        The writer holds the session's lease until :meth:`SessionWriter.close`, visible
        to every process using the same store: ``load`` and another ``writer`` of the
        session raise ``SessionBusyError`` meanwhile. Redis and SQLite leases expire
        ``lease`` seconds after the writer's last renewal (it renews between three
        tenths and a third of it); a file lock ends with the process; memory leases
        within the process.
        """
        context, ttl_ms, lease_ms = self._writer_args(header, window, ttl, lease)
        return SessionWriter(context, header, window=window, ttl_ms=ttl_ms, lease_ms=lease_ms)


class Store(StoreBase[Session, EventLog]):
    """A connection to one backend, scoped to one namespace.

    ``store.session(...)`` gives value sessions, ``store.events`` the event logs.
    Usable as a context manager; ``close()`` releases connections.

    A store opened by :func:`sessionstore.connect` pickles, so it can be a task argument
    of a process pool, joblib or Dask: see :meth:`__reduce__`.
    """

    def _handle(self, state: SessionState) -> Session:
        return Session(self._backends.values, state, self._lifecycle, self)

    def _start(self, ttl_ms: int | None) -> EventLog:
        self._drain = Drain()
        return EventLog(self._backends.events, self._lifecycle, self._drain, ttl_ms, self)

    def list_values(self) -> list[ValueRef]:
        """Every stored session value of this namespace (plain and history) that has not
        expired, sorted."""
        return run(value_flows.list_values(self._lifecycle, self.namespace), self._backends.values)

    def check_durable(self) -> None:
        """Raise ``DurabilityError``, writing nothing, when the store cannot make
        event-log appends as durable as its URL asks: on Redis the check the first write
        makes (``CONFIG GET`` or ``INFO persistence``, on every primary of a cluster);
        nothing to check on the other stores."""
        run(event_flows.check_durable(self._lifecycle), self._backends.events)

    def close(self) -> None:
        """Close every writer still open (each flushes what it queued, then gives its
        lease up), then release connections; idempotent. Everything is closed whatever
        happens; if a writer's close raised, the first such error is raised at the end
        (naming its session; what that writer had not written is not stored)."""
        if self._lifecycle.closed:
            return
        failed: list[tuple[str, BaseException]] = []
        for writer in self._drain.open_writers():
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001 - raised once everything is closed
                failed.append((writer.session_id, exc))
        self._lifecycle.closed = True
        self._drain.close()
        self._backends.close()
        raise_unclosed(failed)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
