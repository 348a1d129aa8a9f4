"""Reading and writing a thread's log: the one core every method of the saver runs.

Each operation is a flow (no I/O): a generator that yields the event-log calls it makes
(:class:`Call`) and gets each one's answer back, or the store error it raised thrown
into it; :mod:`.driver` runs flows against the sync or the async event log. A saver's
:class:`Threads` keeps the last 64 threads it read, as folded, and reads only the events
appended since.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

from sessionstore import (
    ConcurrentModificationError,
    EventTimeOrderError,
    SeqConflictError,
    SessionEvent,
    SessionExistsError,
    SessionHeader,
    SessionInfo,
    SessionNotFoundError,
    SessionStoreError,
)
from sessionstore.when import expired

from .layout import (
    AFTER,
    DELETED,
    HOLDING,
    SEAL,
    Entries,
    Names,
    backup_id,
    chained,
    check_writable,
    now_ms,
    session_id,
    thread_ids,
    valid,
)
from .thread import Thread

_T = TypeVar("_T")

#: How often a write retries after losing the race to another writer.
WRITE_ATTEMPTS = 1000
#: Losses in a row before the retries start to wait a little (jittered).
_EAGER_RETRIES = 3
#: How many threads a saver keeps as last read (each read then reads only what is new).
THREADS_KEPT = 64
#: The pseudo call that makes a flow wait (seconds), between retries.
SLEEP = "_sleep"
#: Seconds a log's expiry, once read, is trusted by the reads of a store that leaves
#: expired logs to a prune (an expiry made shorter since by someone else is seen within
#: that long; one this saver knows of, when it passes).
EXPIRY_FRESH = 1.0
#: Seconds after its ``seal`` (by the seal's time) a compaction is taken for abandoned
#: (its process died): the next read of the thread finishes it (see :mod:`.compaction`).
STALE_SEAL = 15.0


class Call(NamedTuple):
    """A call a flow makes: the name of an event-log method (or :data:`SLEEP`), its
    positional and its keyword arguments."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}


Flow = Generator[Call, Any, _T]
#: What finishes an abandoned compaction of a thread (:func:`.compaction.recover`).
Recover = Callable[["Threads", str], Flow[None]]


def backoff(attempt: int, *, eager: int = _EAGER_RETRIES) -> Flow[None]:
    """Wait a little (jittered, growing) once a write lost more than ``eager`` races in
    a row."""
    if attempt > eager:
        yield Call(SLEEP, (random.uniform(0, min(0.001 * 2**attempt, 0.05)),))


def last_event(log: str) -> Flow[SessionEvent | None]:
    """The last event of the log ``log`` (a thread's, or its compaction copy); None when
    there is none."""
    try:
        info = yield Call("info", (log,))
        tail: list[SessionEvent] = yield Call("read_from", (log, max(info.next_seq - 1, 0)))
    except SessionNotFoundError:
        return None
    return tail[-1] if tail else None


def _after(thread: Thread, made: Entries) -> list[SessionEvent]:
    """The events of ``made`` as they follow ``thread``'s last one: from its next seq,
    chained to its last valid event, stamped now (never before its last event)."""
    return chained(made, thread.next_seq, thread.valid_id, max(now_ms(), thread.last_time))


class Threads:
    """The threads of one saver: how each is read (folded, kept, brought up to date) and
    written (seq-checked appends, retried after a lost race), and the retention of the
    logs it creates (see :mod:`.retention`)."""

    def __init__(
        self,
        ttl: float | None = None,
        refresh_on_read: bool = False,
        recover: Recover | None = None,
    ) -> None:
        #: Seconds a thread is kept after its last write (None: for good).
        self.ttl = ttl
        #: Whether a read moves the thread's expiry to ``ttl`` from then, as a write does.
        self.refresh_on_read = refresh_on_read
        #: What a read does with a thread sealed for :attr:`stale_seal` seconds.
        self.recover = recover
        #: Seconds after which a compaction's seal is taken for abandoned.
        self.stale_seal = STALE_SEAL
        #: Whether the store leaves an expired log to a prune (memory, files, SQLite):
        #: a read then asks for its expiry (see :meth:`_fetch`). Redis drops it itself.
        self.prunes = True
        #: The threads read last, as folded (log id -> thread), the least recent first.
        self._known: OrderedDict[str, Thread] = OrderedDict()
        #: The expiry (epoch ms, None: none) each of those logs' metadata last told,
        #: before the events kept were read (a write since moves it later), and when
        #: it was read (epoch ms).
        self._expiry: dict[str, tuple[int | None, int]] = {}
        self._lock = threading.Lock()

    def read(self, thread_id: str, *, refresh: bool = False) -> Flow[Thread]:
        """The thread as stored now (see :meth:`_fetch`: a thread past its expiry is
        gone, whoever set it). With ``refresh`` (a read by the saver's user when it was
        made with ``refresh_on_read``) the thread's expiry moves to ``ttl`` from now. A
        thread whose compaction was abandoned (sealed for :attr:`stale_seal` seconds) is
        recovered first (:attr:`recover`), and the copy that a compaction whose process
        died at its very end left behind is deleted (see :mod:`.compaction`)."""
        sid = session_id(thread_id)
        thread = yield from self._fetch(thread_id)
        if thread.sealed and self.recover is not None and self.abandoned(thread):
            yield from self.recover(self, thread_id)
            thread = yield from self._fetch(thread_id)
        elif thread.reopened is not None:
            thread = yield from self._drop_copy(thread_id, thread)
        if refresh and self.refresh_on_read and self.ttl is not None and thread.next_seq:
            with contextlib.suppress(SessionNotFoundError):
                yield Call("set_ttl", (sid, self.ttl))
        return thread

    def abandoned(self, thread: Thread) -> bool:
        """Whether the ``seal`` of the sealed ``thread`` is :attr:`stale_seal` old."""
        return thread.sealed_at + self.stale_seal * 1000 < now_ms()

    def _drop_copy(self, thread_id: str, thread: Thread) -> Flow[Thread]:
        """Delete the copy that the compaction which ended with the thread's last
        ``open`` left behind, if its process died before deleting it: the copy whose
        last event is the ``seal`` that ``open`` counted after (a later compaction's
        copy ends with its own seal). The thread, kept as having none."""
        backup = backup_id(thread_id)
        last = yield from last_event(backup)
        if last is not None and last.id == thread.reopened:
            # Guarded: a compaction begun since may have made a copy of its own.
            with contextlib.suppress(SessionNotFoundError, SeqConflictError):
                yield Call("delete", (backup,), {"last": last})
        return self.keep(session_id(thread_id), dataclasses.replace(thread, reopened=None))

    def _fetch(self, thread_id: str) -> Flow[Thread]:
        """The log as stored: a thread read before is brought up to date with the events
        appended since, once its last known event is found where it was (the log was not
        deleted and written again meanwhile, at whatever length); else it is read whole,
        its header (``info``) read first. A log past the expiry stored with it (set by
        whichever saver or command) is gone: on memory, files and SQLite, which leave
        that to a prune (:attr:`prunes`), its metadata is read first (unless read less
        than :data:`EXPIRY_FRESH` ago and not passed) and the store's prune removes it.
        While a compaction has deleted the log and not yet written it anew, the sealed
        log it keeps meanwhile (see :mod:`.compaction`)."""
        sid = session_id(thread_id)
        for attempt in range(2):
            info: SessionInfo | None = None
            if self.prunes and not self._expiry_known(sid):
                try:
                    info = yield Call("info", (sid,))
                except SessionNotFoundError:
                    break
            if info is None or not expired(info.expires_at) or attempt:
                with contextlib.suppress(SessionNotFoundError):
                    return (yield from self._read_log(sid, info))
                break  # deleted since
            # The store decides: its prune removes the log only when it has expired.
            yield Call("prune")
        events = yield from self.events(thread_id)
        return self.keep(sid, Thread().extended(events))

    def _read_log(self, sid: str, info: SessionInfo | None) -> Flow[Thread]:
        """The log ``sid`` (see :meth:`_fetch`; ``info``: its metadata, when read), kept
        with its header; its expiry is noted (:meth:`_writable`)."""
        with self._lock:
            known = self._known.get(sid)
            if info is not None:
                self._expiry[sid] = (info.expires_at, now_ms())
        if (
            known is not None
            and known.next_seq > 0
            and known.header is not None
            and (info is None or (known.header == info.header and known.next_seq <= info.next_seq))
        ):
            events = yield Call("read_from", (sid, known.next_seq - 1))
            if events and known.continued_by(events[0]):
                return self.keep(sid, known.extended(events[1:]))
        if info is None:
            info = yield Call("info", (sid,))
        events = yield Call("read_from", (sid, 0))
        return self.keep(sid, Thread(header=info.header).extended(events))

    def events(self, thread_id: str) -> Flow[list[SessionEvent]]:
        """Every event of the thread's log (none when there is no log); while a
        compaction has deleted it and not yet written it anew, those of the sealed log
        it keeps meanwhile (see :mod:`.compaction`): a copy that does not end with a
        seal is no such log (a compaction copies its log sealed), and counts for none."""
        with contextlib.suppress(SessionNotFoundError):
            events: list[SessionEvent] = yield Call("read_from", (session_id(thread_id), 0))
            return events
        with contextlib.suppress(SessionNotFoundError):
            copied: list[SessionEvent] = yield Call("read_from", (backup_id(thread_id), 0))
            if copied and copied[-1].type == SEAL:
                return copied
        return []

    def keep(self, sid: str, thread: Thread) -> Thread:
        """Remember ``thread`` as the log ``sid`` was last seen; return it."""
        with self._lock:
            self._known[sid] = thread
            self._known.move_to_end(sid)
            while len(self._known) > THREADS_KEPT:
                self._expiry.pop(self._known.popitem(last=False)[0], None)
        return thread

    def _expired(self, sid: str) -> bool:
        """Whether the expiry last read of log ``sid`` has passed (a write since may have
        moved it: only a read tells)."""
        with self._lock:
            expires_at = self._expiry.get(sid, (None, 0))[0]
        return expired(expires_at)

    def _expiry_known(self, sid: str) -> bool:
        """Whether the expiry of log ``sid`` was read less than :data:`EXPIRY_FRESH`
        seconds ago and has not passed: a read may go without asking it again."""
        now = now_ms()
        with self._lock:
            expires_at, read_at = self._expiry.get(sid, (None, None))
        return (
            read_at is not None
            and now - read_at < EXPIRY_FRESH * 1000
            and not expired(expires_at, now)
        )

    def create(
        self, sid: str, replacing: SessionHeader | None = None
    ) -> Flow[SessionHeader | None]:
        """Create the log ``sid`` (with the saver's ttl), unless another did first; its
        header (None when another made it first: that log is kept). A log made in place
        of one deleted (``replacing``: its header) is made later than it, so the two
        headers differ (see :meth:`append`)."""
        header = SessionHeader(id=sid)
        if replacing is not None and header.created_at <= replacing.created_at:
            header = SessionHeader(id=sid, created_at=replacing.created_at + 1)
        try:
            yield Call("create", (header,), {"ttl": self.ttl})
        except SessionExistsError:
            return None
        return header

    def append(
        self,
        thread_id: str,
        entries: Callable[[Thread], Entries],
        *,
        create: bool = True,
    ) -> Flow[list[SessionEvent]]:
        """Append the events ``entries(thread)`` ((type, data) pairs, made from the
        thread as stored; it raises to refuse the write) where the log ends, as one
        batch, and return them; after a lost race, read what landed first and make them
        again; while the thread is sealed (a compaction is under way), wait. A log that
        does not exist is created when ``create``, else nothing is written (nor when
        ``entries`` makes none): ``[]``.

        Each append names the log's header, read before the thread it was made from:
        it lands only where that thread ends in that very log, not in one deleted and
        made again since (at whatever length). So the thread as this saver last saw it
        (kept with its header) is written to without reading it first: an append that
        lands proves it was the log as stored; one refused, or an ``entries`` that
        raises or makes nothing from it, is made again from the thread read anew."""
        sid = session_id(thread_id)
        if create:
            check_writable(thread_id)
        known = self._writable(sid)
        if known is not None:
            landed = yield from self._append_to(sid, known, entries)
            if landed is not None:
                return landed
        created: SessionHeader | None = None  # the header of the log this call created
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            thread = yield from self.read(thread_id)
            if thread.sealed:
                yield from backoff(attempt, eager=0)
                continue
            made = entries(thread)
            if not made:
                return []
            # A log created and not yet written (the store writes it with its first
            # events) has no header to read: only this call's own create writes a log
            # anew (a header read from a log since gone, lapsed and pruned or deleted,
            # would bring that log back); the read names the header of a stored one.
            header = thread.header if thread.next_seq else created
            if thread.header != header:
                thread = self.keep(sid, dataclasses.replace(thread, header=header))
            batch = _after(thread, made)
            try:
                yield Call("append", (sid, batch), {"header": thread.header})
            except (SeqConflictError, EventTimeOrderError):
                pass
            except SessionExistsError:
                self.forget(sid)  # made again since its header was read: read it anew
            except SessionNotFoundError:
                if not create:
                    return []
                created = yield from self.create(sid)
            else:
                # Without a header the log may have been made again between the read
                # and the append: the thread is kept as read, its next read finds out.
                self.keep(sid, thread if thread.header is None else thread.extended(batch))
                return batch
            yield from backoff(attempt)
        raise ConcurrentModificationError(
            f"a write to thread {thread_id!r} lost {WRITE_ATTEMPTS} races in a row, or "
            f"waited that long for a compaction to end (its sealed log is kept as "
            f"{backup_id(thread_id)!r} while it runs)"
        )

    def _writable(self, sid: str) -> Thread | None:
        """The thread of log ``sid`` as last seen, when it may be written to without
        reading it first: its header known, not empty, not sealed, no compaction copy
        to drop, not past the expiry last read nor (written since) past the saver's ttl
        after its last event."""
        with self._lock:
            known = self._known.get(sid)
        if (
            known is None
            or known.header is None
            or not known.next_seq
            or known.sealed
            or known.reopened is not None
            or self._expired(sid)
            or (self.ttl is not None and known.last_time + self.ttl * 1000 < now_ms())
        ):
            return None
        return known

    def _append_to(
        self, sid: str, known: Thread, entries: Callable[[Thread], Entries]
    ) -> Flow[list[SessionEvent] | None]:
        """Append ``entries(known)`` to the log ``sid`` as ``known`` (its header and
        next seq); the batch when it landed, None when anything else happened (the
        thread may have changed: nothing made from ``known`` is trusted then)."""
        try:
            made = entries(known)
        except SessionStoreError:
            return None  # judged from what may be stale: judged again from a read
        if not made:
            return None
        batch = _after(known, made)
        try:
            yield Call("append", (sid, batch), {"header": known.header})
        except SessionExistsError:
            self.forget(sid)
            return None
        except (SeqConflictError, EventTimeOrderError, SessionNotFoundError):
            return None
        self.keep(sid, known.extended(batch))
        return batch

    def header_of(self, sid: str) -> SessionHeader | None:
        """The header of the thread kept for log ``sid`` (None when none is known)."""
        with self._lock:
            known = self._known.get(sid)
        return None if known is None else known.header

    def forget(self, sid: str) -> None:
        """Forget the thread kept for log ``sid``: its next read reads it whole."""
        with self._lock:
            self._known.pop(sid, None)
            self._expiry.pop(sid, None)

    def names(self, thread_id: str | None) -> Flow[Names]:
        """``[thread_id]``, or every thread of the namespace when it is None."""
        if thread_id is not None:
            return [thread_id]
        headers = yield Call("list")
        return thread_ids([h.id for h in headers])

    def copy(self, source: str, target: str) -> Flow[None]:
        """Append what counts of the source (since its last deletion) to the target, as
        one batch: the target gets it all at once, after what it holds."""
        events = yield from self.events(source)
        counted = valid(events)
        starts = [i + 1 for i, event in enumerate(counted) if event.type == DELETED]
        copied = [
            (e.type, {k: v for k, v in e.data.items() if k != AFTER})
            for e in counted[starts[-1] if starts else 0 :]
            if e.type in HOLDING
        ]
        yield from self.append(target, lambda thread: copied)
