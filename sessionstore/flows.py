"""Every API operation, written once, as a generator that yields what it needs done.

A flow yields :class:`Call` (a backend method), :class:`Sleep` or :class:`Apply` (user
code) and receives the result; :func:`run` drives it with a blocking backend and
:func:`arun` with an async one (both by :mod:`sessionstore.drive`). So
:mod:`sessionstore.store` and :mod:`sessionstore.aio` stay thin and cannot drift apart:
their methods only pick a flow and a runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import secrets
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from .arguments import check_poll, check_ttl
from .backoff import LOST_RACE, Backoff
from .contracts import EventBackend, EventBatch, Refused, Stored, ValueBackend
from .drive import Pause, Step, adrive, drive
from .errors import (
    ComputeTimeoutError,
    ConcurrentModificationError,
    CorruptDataError,
    EventTimeOrderError,
    InvalidArgumentError,
    SeqConflictError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
)
from .eventlog import (
    check_batch,
    check_seq,
    check_session_id,
    closers,
    encode_batch,
    header_differences,
)
from .leases import taken_over
from .models import SessionEvent, SessionHeader, SessionInfo
from .results import LoadedSession, ValueRecords, is_probe
from .session_state import SessionState
from .store_state import Lifecycle, PendingSessions
from .when import MAX_ABS_EPOCH_MS, now_ms, to_epoch_ms

T = TypeVar("T")
P = ParamSpec("P")

#: How many races in a row ``update`` loses before it gives up (it backs off and
#: re-reads after each but the last; see :class:`ConcurrentModificationError`).
UPDATE_ATTEMPTS = 1000
#: How many times in a row ``load`` reads and repairs, its repair overtaken by a
#: concurrent append each time, before it gives up.
REPAIR_ATTEMPTS = 50
#: How long (s) a ``get_or_compute`` lease lasts past its last renewal: renewed every
#: third of it while ``fn`` runs, it ends this long after its holder died.
COMPUTE_LEASE = 5.0
#: How often a ``get_or_compute`` waiter looks again: soon at first, then every 0.1 s at
#: most, jittered so that waiters do not come together.
COMPUTE_POLL = Backoff(base=0.002, cap=0.1, jitter=True)


class Call:
    """Call a method of the backend: ``Call(ValueBackend.read, key)`` calls the running
    backend's ``read(key)`` (the contract's method names it, so the arguments are checked
    against the contract's signature; a plain class: every operation builds one or more)."""

    __slots__ = ("name", "args", "kwargs")

    def __init__(
        self, method: Callable[Concatenate[Any, P], Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        self.name = method.__name__
        self.args = args
        self.kwargs = kwargs


@dataclass(slots=True)
class Sleep:
    seconds: float


@dataclass(slots=True)
class Apply:
    """Call user code; the async runner awaits an awaitable result."""

    fn: Callable[[Any], Any]
    value: Any


@dataclass(slots=True)
class Hold:
    """Call user code ``fn()`` while ``renew`` (a backend call) is repeated every
    ``every`` seconds, in a thread (sync) or a task (async) of its own; the async runner
    awaits an awaitable result. A failed renewal is let go: the lease it renews then
    ends by itself."""

    fn: Callable[[], Any]
    renew: Call
    every: float


Flow = Generator[Call | Sleep | Apply | Hold, Any, T]


def run(flow: Flow[T], backend: Any) -> T:
    """Drive ``flow`` against a blocking backend; backend errors are raised inside it."""
    return drive(flow, functools.partial(_resolve, backend))


async def arun(flow: Flow[T], backend: Any) -> T:
    """Drive ``flow`` against an async backend (methods return awaitables)."""
    return await adrive(flow, functools.partial(_aresolve, backend))


def _resolve(backend: Any, step: Call | Sleep | Apply | Hold) -> Step:
    if isinstance(step, Call):
        return functools.partial(getattr(backend, step.name), *step.args, **step.kwargs)
    if isinstance(step, Sleep):
        return Pause(step.seconds)
    if isinstance(step, Hold):
        return functools.partial(_hold, backend, step)
    return functools.partial(step.fn, step.value)


def _aresolve(backend: Any, step: Call | Sleep | Apply | Hold) -> Step:
    if isinstance(step, Apply):
        return functools.partial(_apply, step.fn, step.value)
    if isinstance(step, Hold):
        return functools.partial(_ahold, backend, step)
    return _resolve(backend, step)


async def _apply(fn: Callable[[Any], Any], value: Any) -> Any:
    """User code in the async API: its result is awaited when it is awaitable."""
    result = fn(value)
    return await result if inspect.isawaitable(result) else result


def _hold(backend: Any, step: Hold) -> Any:
    renew = _resolve(backend, step.renew)
    done = threading.Event()

    def renewing() -> None:
        while not done.wait(step.every):
            with contextlib.suppress(Exception):  # the lease then ends by itself
                renew()  # type: ignore[operator]

    renewer = threading.Thread(target=renewing, name="sessionstore-lease", daemon=True)
    renewer.start()
    try:
        return step.fn()
    finally:
        done.set()
        renewer.join()


async def _ahold(backend: Any, step: Hold) -> Any:
    renew = _resolve(backend, step.renew)

    async def renewing() -> None:
        while True:
            await asyncio.sleep(step.every)
            with contextlib.suppress(Exception):  # the lease then ends by itself
                await renew()  # type: ignore[operator]

    renewer = asyncio.create_task(renewing())
    try:
        result = step.fn()
        return await result if inspect.isawaitable(result) else result
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer


# --- session values -------------------------------------------------------------------


def ready(state: SessionState, lifecycle: Lifecycle) -> Flow[SessionState]:
    state.check_alive()
    lifecycle.check_open()
    if not state.initialised:
        yield Call(ValueBackend.prepare, state.key)
        state.initialised = True
    return state


def _read(state: SessionState, ms: int) -> Call:
    if state.history:
        return Call(ValueBackend.read_as_of, state.key, ms)
    return Call(ValueBackend.read, state.key)


def get_data(state: SessionState, lifecycle: Lifecycle, when: Any) -> Flow[Any]:
    ms = to_epoch_ms(when)
    yield from ready(state, lifecycle)
    found = yield _read(state, ms)
    state.remember(found)
    return state.visible(found, ms)


def get_cached(state: SessionState, lifecycle: Lifecycle, found: Stored | None, when: Any) -> Any:
    """:func:`get_data` of a handle already prepared, given the record a value cache holds
    (no I/O): the same checks, the same look-ahead."""
    ms = to_epoch_ms(when)
    state.check_alive()
    lifecycle.check_open()
    state.remember(found)
    return state.visible(found, ms)


def set_data(state: SessionState, lifecycle: Lifecycle, value: Any, when: Any) -> Flow[None]:
    ms = to_epoch_ms(when)
    yield from ready(state, lifecycle)
    payload = state.encode(value)
    ttl_ms = state.ttl_ms
    if state.history:
        yield Call(
            ValueBackend.write_version, state.key, payload, ms, state.max_versions, ttl_ms=ttl_ms
        )
    else:
        state.forget()
        yield Call(ValueBackend.write, state.key, payload, ms, ttl_ms=ttl_ms)
        state.remember(Stored(payload, ms) if payload is not None else None)


def _history_only(state: SessionState, operation: str) -> None:
    if not state.history:
        raise InvalidArgumentError(
            f"{operation} of {state.key.label()}: it needs a history handle"
            " (store.session(..., history=True))"
        )


def put(state: SessionState, lifecycle: Lifecycle, value: Any, when: Any) -> Flow[None]:
    """Record ``value`` as the version at exactly ``when`` of a history value; no other
    version is discarded (see :meth:`ValueBackend.put_version`)."""
    ms = to_epoch_ms(when)
    _history_only(state, "put")
    yield from ready(state, lifecycle)
    payload = state.encode(value)
    yield Call(
        ValueBackend.put_version, state.key, payload, ms, state.max_versions, ttl_ms=state.ttl_ms
    )


def get_or_compute(
    state: SessionState,
    lifecycle: Lifecycle,
    when: Any,
    fn: Callable[[], Any],
    timeout: float,
    lease: float,
) -> Flow[Any]:
    """The version at exactly ``when``, computed by ``fn()`` and :func:`put` when there
    is none, by one caller at a time among every thread and process of the store.

    A caller that finds no version takes the compute lease of (value, ``when``) and, once
    it holds it, looks again (a holder may have just put it and let go), then runs ``fn``
    while renewing the lease every third of ``lease`` seconds, puts the result and gives
    the lease up, whatever happened. Every other caller looks again, sooner at first
    (:data:`COMPUTE_POLL`), until the version is there, or the lease is free (its holder
    failed, raised or died: then one of them takes it and computes), or ``timeout``
    seconds have passed since the call began: :class:`ComputeTimeoutError`.
    """
    ms = to_epoch_ms(when)
    _history_only(state, "get_or_compute")
    yield from ready(state, lifecycle)
    deadline = time.monotonic() + timeout
    token = secrets.token_hex(16)
    lease_ms = max(1, round(lease * 1000))
    take = Call(ValueBackend.acquire_compute_lease, state.key, ms, token, lease_ms)
    looks = 0
    while True:
        found = yield Call(ValueBackend.read_as_of, state.key, ms)
        if found is not None and found.when == ms:
            return state.stored_value(found.payload)
        if (yield take):
            return (yield from _compute(state, ms, fn, token, take, lease))
        left = deadline - time.monotonic()
        if left <= 0:
            raise ComputeTimeoutError(state.key.label(), ms, timeout)
        yield Sleep(min(left, COMPUTE_POLL.delay(looks)))
        looks += 1


def _compute(
    state: SessionState, ms: int, fn: Callable[[], Any], token: str, take: Call, lease: float
) -> Flow[Any]:
    """:func:`get_or_compute` of the caller holding the lease; gives it up in the end."""
    release = Call(ValueBackend.release_compute_lease, state.key, ms, token)
    try:
        found = yield Call(ValueBackend.read_as_of, state.key, ms)
        if found is not None and found.when == ms:
            payload = found.payload
        else:
            payload = state.encode((yield Hold(fn, take, lease / 3)))
            yield Call(
                ValueBackend.put_version,
                state.key,
                payload,
                ms,
                state.max_versions,
                ttl_ms=state.ttl_ms,
            )
    except BaseException:
        with contextlib.suppress(Exception):  # it expires (or ends with the process)
            yield release
        raise
    with contextlib.suppress(Exception):
        yield release
    return state.stored_value(payload)


def update(
    state: SessionState, lifecycle: Lifecycle, fn: Callable[[Any], Any], when: Any
) -> Flow[Any]:
    """Read-modify-write by compare-and-swap, retried until a swap is accepted.

    Fairness against a writer that updates in a tight loop: a refused plain swap returns
    the record it found under the backend's lock, the freshest start there is, so the
    next attempt goes at once with it. When that loses too, the flow backs off (growing,
    jittered: :data:`~sessionstore.backoff.LOST_RACE`) and then re-reads: after the sleep the
    record the refusal returned is stale, and a swap with it could only lose again. Reads
    take no write lock, so they do not queue behind the fast writer. Gives up with
    :class:`ConcurrentModificationError` once it has lost ``UPDATE_ATTEMPTS`` races in
    a row (after ``UPDATE_ATTEMPTS - 1`` back-offs).
    """
    ms = to_epoch_ms(when)
    yield from ready(state, lifecycle)
    ttl_ms = state.ttl_ms
    # A plain handle starts from the record it saw last, if any: a refused swap returns
    # the record found, so a stale guess costs no extra round trip and is no lost race.
    found = state.remembered() if state.remembers() else (yield _read(state, ms))
    lost = 0
    at_once = False
    while True:
        payload = state.encode((yield Apply(fn, state.visible(found, ms))))
        if state.history:
            args = (state.key, found, payload, ms, state.max_versions)
            done = yield Call(ValueBackend.swap_version, *args, ttl_ms=ttl_ms)
        else:
            state.forget()
            done = yield Call(ValueBackend.swap, state.key, found, payload, ms, ttl_ms=ttl_ms)
        if done is True:
            if not state.history:
                state.remember(Stored(payload, ms) if payload is not None else None)
            return state.stored_value(payload)
        if isinstance(done, Refused) and not at_once:
            found, at_once = done.current, True
            continue
        lost += 1
        if lost == UPDATE_ATTEMPTS:
            raise ConcurrentModificationError(
                f"update of {state.key.label()} lost {UPDATE_ATTEMPTS} races in a row"
            )
        yield Sleep(LOST_RACE.delay(lost))
        found, at_once = (yield _read(state, ms)), False


def set_value_retention(state: SessionState, lifecycle: Lifecycle, ttl: object) -> Flow[bool]:
    ttl_ms = check_ttl(ttl)
    yield from ready(state, lifecycle)
    found: bool = yield Call(ValueBackend.set_retention, state.key, ttl_ms)
    return found


def delete_value(state: SessionState, lifecycle: Lifecycle) -> Flow[bool]:
    yield from ready(state, lifecycle)
    state.forget()
    removed = yield Call(ValueBackend.forget, state.key)
    state.remember(None)
    return bool(removed)


def value_records(state: SessionState, lifecycle: Lifecycle) -> Flow[ValueRecords]:
    """What is stored under the handle's key, plain record and history versions alike
    (whatever the handle's mode), with the times they were stored for, by reads only:
    nothing is prepared or written and nothing is filtered by time."""
    state.check_alive()
    lifecycle.check_open()
    versions: list[Stored] = []
    at = MAX_ABS_EPOCH_MS
    while at >= -MAX_ABS_EPOCH_MS:
        version = yield Call(ValueBackend.read_as_of, state.key, at)
        if version is None:
            break
        if version.when > at:
            # Every step must go back in time, or a damaged history would never end.
            raise CorruptDataError(
                state.key.label(), f"a read as of {at} gave a version of {version.when}"
            )
        versions.append(version)
        at = version.when - 1
    plain = yield Call(ValueBackend.read, state.key)
    return ValueRecords(plain, versions[::-1], state.key.label())


# --- event logs -----------------------------------------------------------------------


def _open(lifecycle: Lifecycle) -> None:
    lifecycle.check_open()


def check_durable(lifecycle: Lifecycle) -> Flow[None]:
    _open(lifecycle)
    yield Call(EventBackend.check_durable)


def create(
    pending: PendingSessions, lifecycle: Lifecycle, header: SessionHeader, ttl_ms: int | None
) -> Flow[None]:
    _open(lifecycle)
    checked = pending.check_new(header)
    if (yield Call(EventBackend.exists, checked.id)):
        raise SessionExistsError(checked.id)
    pending.add(checked, ttl_ms)


def append(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    session_id: str,
    events: Iterable[SessionEvent | Mapping[str, Any]],
) -> Flow[int]:
    _open(lifecycle)
    header, ttl_ms = pending.lookup(session_id)
    batch = encode_batch(session_id, events)
    check_times(session_id, batch.events)
    if not batch:
        if header is not None:
            return 0
        _, stored = yield Call(EventBackend.read, session_id, 0)
        return len(stored)
    next_seq: int = yield Call(EventBackend.append, session_id, batch, header, ttl_ms=ttl_ms)
    if header is not None:
        pending.materialised(header)
    return next_seq


def check_times(session_id: str, events: list[SessionEvent]) -> None:
    """Times never go backwards within a batch: :class:`EventTimeOrderError` naming the
    first event whose time is before the time of the event before it."""
    for before, event in zip(events, events[1:], strict=False):
        if event.time < before.time:
            raise EventTimeOrderError(session_id, event.seq, event.time, before.time)


def append_stored(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    session_id: str,
    batch: EventBatch,
    owner: str,
) -> Flow[int]:
    """:func:`append` of a batch a writer encoded (and so checked) when it was emitted,
    fenced by the writer's lease token ``owner``: :class:`SessionBusyError` when another
    writer took the lease over."""
    _open(lifecycle)
    header, ttl_ms = pending.lookup(session_id)
    call = Call(EventBackend.append, session_id, batch, header, ttl_ms=ttl_ms, owner=owner)
    next_seq: int = yield call
    if header is not None:
        pending.materialised(header)
    return next_seq


def load(lifecycle: Lifecycle, session_id: str, owner: str | None = None) -> Flow[LoadedSession]:
    """Read and repair; a session whose lease a live writer other than ``owner`` holds
    raises :class:`SessionBusyError` (its open turn is not interrupted). The closers of
    a writer opening (``owner`` given) are fenced by its lease."""
    _open(lifecycle)
    check_session_id(session_id)
    if (yield Call(EventBackend.lease_busy, session_id, owner)):
        raise SessionBusyError(session_id)
    for _ in range(REPAIR_ATTEMPTS):
        header, events = yield Call(EventBackend.read, session_id, 0, repair=True)
        extra = closers(events)
        if not extra:
            return LoadedSession(header, events)
        try:
            closing = encode_batch(session_id, extra)
            yield Call(EventBackend.append, session_id, closing, None, owner=owner)
        except SeqConflictError:
            continue
        return LoadedSession(header, events + extra)
    raise ConcurrentModificationError(f"session {session_id!r} kept changing during load")


def inspect_session(lifecycle: Lifecycle, session_id: str) -> Flow[LoadedSession]:
    """What :func:`load` returns, closers included, without writing anything and
    without looking at the lease."""
    _open(lifecycle)
    header, events = yield Call(EventBackend.read, check_session_id(session_id), 0)
    return LoadedSession(header, events + closers(events))


def info(lifecycle: Lifecycle, session_id: str) -> Flow[SessionInfo]:
    _open(lifecycle)
    found: SessionInfo = yield Call(EventBackend.info, check_session_id(session_id))
    return found


def set_retention(lifecycle: Lifecycle, session_id: str, ttl: object) -> Flow[int | None]:
    _open(lifecycle)
    check_session_id(session_id)
    ttl_ms = check_ttl(ttl)
    expires_at: int | None = yield Call(EventBackend.set_retention, session_id, ttl_ms)
    return expires_at


def stored_bytes(lifecycle: Lifecycle, session_id: str) -> Flow[int]:
    _open(lifecycle)
    size: int = yield Call(EventBackend.stored_bytes, check_session_id(session_id))
    return size


def list_info(lifecycle: Lifecycle) -> Flow[list[SessionInfo]]:
    _open(lifecycle)
    found: list[SessionInfo] = yield Call(EventBackend.list_info)
    listed = [info for info in found if not is_probe(info.header.id)]
    return sorted(listed, key=lambda i: (i.header.created_at, i.header.id))


def open_writer(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    header: SessionHeader,
    ttl_ms: int | None,
    owner: str,
    lease_ms: int,
) -> Flow[tuple[int, int]]:
    """Take the session's lease for ``owner``, then find where a writer continues: (next
    seq, last time) of the repaired log, creating the session when it does not exist.

    :class:`SessionBusyError` when another live writer holds the lease;
    :class:`SessionExistsError` naming the differing fields when the stored (or
    pending) header differs from ``header``. On any error the lease is given up (a flow
    its driver closes early can call nothing more: its lease then expires)."""
    _open(lifecycle)
    session_id = header.id
    if not (yield Call(EventBackend.acquire_lease, session_id, owner, lease_ms)):
        raise SessionBusyError(session_id)
    try:
        try:
            loaded = yield from load(lifecycle, session_id, owner)
        except SessionNotFoundError:
            waiting, _ = pending.lookup(session_id)
            if waiting is None:
                yield from create(pending, lifecycle, header, ttl_ms)
            elif waiting != header:
                raise SessionExistsError(session_id, header_differences(waiting, header)) from None
            return 0, 0
        if loaded.header != header:
            raise SessionExistsError(session_id, header_differences(loaded.header, header))
        return next_position(loaded)
    except BaseException as exc:
        if not isinstance(exc, GeneratorExit):  # a closed flow can call nothing more
            yield from release_lease(session_id, owner)
        raise


def renew_lease(session_id: str, owner: str, lease_ms: int) -> Flow[None]:
    """Renew ``owner``'s lease; :class:`SessionBusyError` when another writer took it over
    (it expired meanwhile)."""
    if not (yield Call(EventBackend.acquire_lease, session_id, owner, lease_ms)):
        raise taken_over(session_id)


def release_lease(session_id: str, owner: str) -> Flow[None]:
    """Give the lease up; a failure here is not the caller's: the lease then expires."""
    with contextlib.suppress(Exception):  # it ends by itself (or with the process)
        yield Call(EventBackend.release_lease, session_id, owner)


def fork(
    pending: PendingSessions,
    lifecycle: Lifecycle,
    parent_id: str,
    child_id: str,
    at_seq: int | None,
    ttl_ms: int | None,
) -> Flow[SessionHeader]:
    """Create ``child_id`` from the parent's committed events below ``at_seq`` (all when
    None), written in one atomic append; a fork of no events is created lazily."""
    _open(lifecycle)
    check_session_id(parent_id)
    check_session_id(child_id)
    if at_seq is not None:
        check_seq(at_seq)
    parent, events = yield Call(EventBackend.read, parent_id, 0, limit=at_seq)
    if at_seq is not None and len(events) < at_seq:
        raise InvalidArgumentError(
            f"fork at seq {at_seq}: session {parent_id!r:.80} has only {len(events)}"
            " committed events"
        )
    child = SessionHeader(id=child_id, cwd=parent.cwd, parent_id=parent_id, fork_seq=len(events))
    pending.check_new(child)
    if (yield Call(EventBackend.exists, child_id)):
        raise SessionExistsError(child_id)
    if not events:
        pending.add(child, ttl_ms)
        return child
    yield Call(EventBackend.append, child_id, encode_batch(child_id, events), child, ttl_ms=ttl_ms)
    return child


def read_from(
    lifecycle: Lifecycle, session_id: str, seq: int, limit: int | None = None
) -> Flow[list[SessionEvent]]:
    check_seq(seq)
    _open(lifecycle)
    _, events = yield Call(EventBackend.read, check_session_id(session_id), seq, limit=limit)
    return events


class EventPages:
    """Where a stream of one session's committed events is, and what it reads next: the
    one implementation of ``iter_events`` (:meth:`paged`) and ``follow``
    (:meth:`following`). A shell runs :meth:`next` and hands out the events it returns
    until :attr:`done`."""

    def __init__(
        self, lifecycle: Lifecycle, session_id: str, seq: int, batch: int | None, poll: float
    ) -> None:
        self.lifecycle = lifecycle
        self.session_id = session_id
        #: The seq the next read starts at.
        self.seq = seq
        #: The size of a page; None (follow) reads everything committed from :attr:`seq`.
        self.batch = batch
        self.poll = poll
        #: Set once a page came back short: every committed event was handed out.
        self.done = False

    @classmethod
    def paged(cls, lifecycle: Lifecycle, session_id: str, batch: object) -> EventPages:
        """The events from seq 0, ``batch`` at a time, up to the end of the log: a bad
        ``batch`` (not an int >= 1) raises :class:`InvalidArgumentError`."""
        return cls(lifecycle, session_id, 0, check_batch(batch), 0.0)

    @classmethod
    def following(
        cls, lifecycle: Lifecycle, session_id: str, from_seq: object, poll: object
    ) -> EventPages:
        """The events from ``from_seq`` on, without end: when none is new, :meth:`next`
        waits for one up to ``poll`` seconds (:meth:`EventBackend.wait_for_events`)."""
        return cls(lifecycle, session_id, check_seq(from_seq), None, check_poll(poll))

    def next(self) -> Flow[list[SessionEvent]]:
        """The next page of committed events (none while a follow waits)."""
        chunk = yield from read_from(self.lifecycle, self.session_id, self.seq, self.batch)
        if chunk:
            self.seq = chunk[-1].seq + 1
        if self.batch is not None:
            self.done = len(chunk) < self.batch
        elif not chunk:
            yield Call(EventBackend.wait_for_events, self.session_id, self.seq, self.poll)
        return chunk


def list_sessions(lifecycle: Lifecycle) -> Flow[list[SessionHeader]]:
    _open(lifecycle)
    headers: list[SessionHeader] = yield Call(EventBackend.list)
    return sorted((h for h in headers if not is_probe(h.id)), key=lambda h: (h.created_at, h.id))


def prune(lifecycle: Lifecycle) -> Flow[int]:
    _open(lifecycle)
    removed: int = yield Call(EventBackend.prune, now_ms())
    return removed


def delete_session(pending: PendingSessions, lifecycle: Lifecycle, session_id: str) -> Flow[None]:
    _open(lifecycle)
    check_session_id(session_id)
    if pending.discard(session_id) and not (yield Call(EventBackend.exists, session_id)):
        return
    yield Call(EventBackend.delete, session_id)


def next_position(loaded: LoadedSession) -> tuple[int, int]:
    """(next seq, last time) of a loaded session: where a writer continues."""
    last = loaded.events[-1] if loaded.events else None
    return (last.seq + 1, last.time) if last else (0, 0)
