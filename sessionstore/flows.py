"""Every API operation, written once, as a generator that yields what it needs done.

A flow yields :class:`Call` (a backend method), :class:`Sleep` or :class:`Apply` (user
code) and receives the result; :func:`run` drives it with a blocking backend and
:func:`arun` with an async one. So :mod:`sessionstore.store` and :mod:`sessionstore.aio`
stay thin and cannot drift apart: their methods only pick a flow and a runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from .contracts import EventBatch, Refused, Stored
from .core import (
    REPAIR_ATTEMPTS,
    UPDATE_ATTEMPTS,
    Lifecycle,
    LoadedSession,
    PendingSessions,
    SessionState,
    backoff,
    check_from_seq,
)
from .errors import (
    ConcurrentModificationError,
    InvalidArgumentError,
    SeqConflictError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
)
from .eventlog import check_seq, check_session_id, closers, encode_batch, header_differences
from .models import SessionEvent, SessionHeader, SessionInfo
from .when import now_ms, to_epoch_ms

T = TypeVar("T")


_NO_OPTIONS: Mapping[str, Any] = MappingProxyType({})


class Call:
    """Call ``method`` of the backend with these arguments (a plain class: every
    operation builds one or more)."""

    __slots__ = ("method", "args", "kwargs")

    def __init__(
        self, method: str, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] = _NO_OPTIONS
    ) -> None:
        self.method = method
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


Flow = Generator[Call | Sleep | Apply, Any, T]


def run(flow: Flow[T], backend: Any) -> T:
    """Drive ``flow`` against a blocking backend; backend errors are raised inside it."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = flow.throw(error) if error is not None else flow.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            if isinstance(step, Call):
                reply = getattr(backend, step.method)(*step.args, **step.kwargs)
            elif isinstance(step, Sleep):
                time.sleep(step.seconds)
            else:
                reply = step.fn(step.value)
        except Exception as exc:  # noqa: BLE001 - handed to the flow, which may recover
            error = exc


async def arun(flow: Flow[T], backend: Any) -> T:
    """Drive ``flow`` against an async backend (methods are coroutines)."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = flow.throw(error) if error is not None else flow.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            if isinstance(step, Call):
                reply = await getattr(backend, step.method)(*step.args, **step.kwargs)
            elif isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
            else:
                reply = step.fn(step.value)
                if inspect.isawaitable(reply):
                    reply = await reply
        except Exception as exc:  # noqa: BLE001 - handed to the flow, which may recover
            error = exc


# --- session values -------------------------------------------------------------------


def ready(state: SessionState, lifecycle: Lifecycle) -> Flow[SessionState]:
    state.check_alive()
    lifecycle.check_open()
    if not state.initialised:
        yield Call("prepare", (state.key,))
        state.initialised = True
    return state


def _ttl(ttl_ms: int | None) -> Mapping[str, Any]:
    """The keyword arguments that pass a retention to a backend write (none without one)."""
    return _NO_OPTIONS if ttl_ms is None else {"ttl_ms": ttl_ms}


def _read(state: SessionState, ms: int) -> Call:
    if state.history:
        return Call("read_as_of", (state.key, ms))
    return Call("read", (state.key,))


def get_data(state: SessionState, lifecycle: Lifecycle, when: Any) -> Flow[Any]:
    ms = to_epoch_ms(when)
    yield from ready(state, lifecycle)
    found = yield _read(state, ms)
    state.remember(found)
    return state.visible(found, ms)


def set_data(state: SessionState, lifecycle: Lifecycle, value: Any, when: Any) -> Flow[None]:
    ms = to_epoch_ms(when)
    yield from ready(state, lifecycle)
    payload = state.encode(value)
    options = _ttl(state.ttl_ms)
    if state.history:
        yield Call("write_version", (state.key, payload, ms, state.max_versions), options)
    else:
        state.forget()
        yield Call("write", (state.key, payload, ms), options)
        state.remember(Stored(payload, ms) if payload is not None else None)


def update(
    state: SessionState, lifecycle: Lifecycle, fn: Callable[[Any], Any], when: Any
) -> Flow[Any]:
    """Read-modify-write by compare-and-swap, retried until a swap is accepted.

    Fairness against a writer that updates in a tight loop: a refused plain swap returns
    the record it found under the backend's lock, the freshest start there is, so the
    next attempt goes at once with it. When that loses too, the flow backs off (growing,
    jittered: :func:`~sessionstore.core.backoff`) and then re-reads: after the sleep the
    record the refusal returned is stale, and a swap with it could only lose again. Reads
    take no write lock, so they do not queue behind the fast writer. Gives up with
    :class:`ConcurrentModificationError` after ``UPDATE_ATTEMPTS`` back-offs.
    """
    ms = to_epoch_ms(when)
    yield from ready(state, lifecycle)
    options = _ttl(state.ttl_ms)
    # A plain handle starts from the record it saw last, if any: a refused swap returns
    # the record found, so a stale guess costs no extra round trip and is no lost race.
    found = state.remembered() if state.remembers() else (yield _read(state, ms))
    lost = 0
    at_once = False
    while True:
        payload = state.encode((yield Apply(fn, state.visible(found, ms))))
        if state.history:
            args: tuple[Any, ...] = (state.key, found, payload, ms, state.max_versions)
            done = yield Call("swap_version", args, options)
        else:
            state.forget()
            done = yield Call("swap", (state.key, found, payload, ms), options)
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
        yield Sleep(backoff(lost))
        found, at_once = (yield _read(state, ms)), False


def delete_value(state: SessionState, lifecycle: Lifecycle) -> Flow[bool]:
    yield from ready(state, lifecycle)
    state.forget()
    removed = yield Call("forget", (state.key,))
    state.remember(None)
    return bool(removed)


# --- event logs -----------------------------------------------------------------------


def _open(lifecycle: Lifecycle) -> None:
    lifecycle.check_open()


def create(
    pending: PendingSessions, lifecycle: Lifecycle, header: SessionHeader, ttl_ms: int | None
) -> Flow[None]:
    _open(lifecycle)
    checked = pending.check_new(header)
    if (yield Call("exists", (checked.id,))):
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
    if not batch:
        if header is not None:
            return 0
        _, stored = yield Call("read", (session_id, 0))
        return len(stored)
    next_seq: int = yield Call("append", (session_id, batch, header), _ttl(ttl_ms))
    if header is not None:
        pending.materialised(header)
    return next_seq


def append_stored(
    pending: PendingSessions, lifecycle: Lifecycle, session_id: str, batch: EventBatch
) -> Flow[int]:
    """:func:`append` of a batch a writer encoded (and so checked) when it was emitted."""
    _open(lifecycle)
    header, ttl_ms = pending.lookup(session_id)
    next_seq: int = yield Call("append", (session_id, batch, header), _ttl(ttl_ms))
    if header is not None:
        pending.materialised(header)
    return next_seq


def load(lifecycle: Lifecycle, session_id: str, owner: str | None = None) -> Flow[LoadedSession]:
    """Read and repair; a session whose lease a live writer other than ``owner`` holds
    raises :class:`SessionBusyError` (its open turn is not interrupted)."""
    _open(lifecycle)
    check_session_id(session_id)
    if (yield Call("lease_busy", (session_id, owner))):
        raise SessionBusyError(session_id)
    for _ in range(REPAIR_ATTEMPTS):
        header, events = yield Call("read", (session_id, 0), {"repair": True})
        extra = closers(events)
        if not extra:
            return LoadedSession(header, events)
        try:
            yield Call("append", (session_id, encode_batch(session_id, extra), None))
        except SeqConflictError:
            continue
        return LoadedSession(header, events + extra)
    raise ConcurrentModificationError(f"session {session_id!r} kept changing during load")


def inspect_session(lifecycle: Lifecycle, session_id: str) -> Flow[LoadedSession]:
    """What :func:`load` returns, closers included, without writing anything and
    without looking at the lease."""
    _open(lifecycle)
    header, events = yield Call("read", (check_session_id(session_id), 0))
    return LoadedSession(header, events + closers(events))


def info(lifecycle: Lifecycle, session_id: str) -> Flow[SessionInfo]:
    _open(lifecycle)
    found: SessionInfo = yield Call("info", (check_session_id(session_id),))
    return found


def list_info(lifecycle: Lifecycle) -> Flow[list[SessionInfo]]:
    _open(lifecycle)
    found: list[SessionInfo] = yield Call("list_info")
    return sorted(found, key=lambda i: (i.header.created_at, i.header.id))


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
    pending) header differs from ``header``. On any error the lease is given up."""
    _open(lifecycle)
    session_id = header.id
    if not (yield Call("acquire_lease", (session_id, owner, lease_ms))):
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
    except BaseException:
        yield from release_lease(session_id, owner)
        raise


def renew_lease(session_id: str, owner: str, lease_ms: int) -> Flow[None]:
    """Renew ``owner``'s lease; :class:`SessionBusyError` when another writer took it over
    (it expired meanwhile)."""
    if not (yield Call("acquire_lease", (session_id, owner, lease_ms))):
        raise SessionBusyError(session_id, "its lease expired and another writer took it over")


def release_lease(session_id: str, owner: str) -> Flow[None]:
    """Give the lease up; a failure here is not the caller's: the lease then expires."""
    with contextlib.suppress(Exception):  # it ends by itself (or with the process)
        yield Call("release_lease", (session_id, owner))


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
    parent, events = yield Call("read", (parent_id, 0), {"limit": at_seq})
    if at_seq is not None and len(events) < at_seq:
        raise InvalidArgumentError(
            f"fork at seq {at_seq}: session {parent_id!r:.80} has only {len(events)}"
            " committed events"
        )
    child = SessionHeader(id=child_id, cwd=parent.cwd, parent_id=parent_id, fork_seq=len(events))
    pending.check_new(child)
    if (yield Call("exists", (child_id,))):
        raise SessionExistsError(child_id)
    if not events:
        pending.add(child, ttl_ms)
        return child
    yield Call("append", (child_id, encode_batch(child_id, events), child), _ttl(ttl_ms))
    return child


def read_from(
    lifecycle: Lifecycle, session_id: str, seq: int, limit: int | None = None
) -> Flow[list[SessionEvent]]:
    _open(lifecycle)
    check_from_seq(seq)
    _, events = yield Call("read", (check_session_id(session_id), seq), {"limit": limit})
    return events


def list_sessions(lifecycle: Lifecycle) -> Flow[list[SessionHeader]]:
    _open(lifecycle)
    headers: list[SessionHeader] = yield Call("list")
    return sorted(headers, key=lambda h: (h.created_at, h.id))


def prune(lifecycle: Lifecycle) -> Flow[int]:
    _open(lifecycle)
    removed: int = yield Call("prune", (now_ms(),))
    return removed


def delete_session(pending: PendingSessions, lifecycle: Lifecycle, session_id: str) -> Flow[None]:
    _open(lifecycle)
    check_session_id(session_id)
    if pending.discard(session_id) and not (yield Call("exists", (session_id,))):
        return
    yield Call("delete", (session_id,))


def next_position(loaded: LoadedSession) -> tuple[int, int]:
    """(next seq, last time) of a loaded session: where a writer continues."""
    last = loaded.events[-1] if loaded.events else None
    return (last.seq + 1, last.time) if last else (0, 0)
