"""Every API operation, written once, as a generator that yields what it needs done.

A flow yields :class:`Call` (a backend method), :class:`Sleep` or :class:`Apply` (user
code) and receives the result; :func:`run` drives it with a blocking backend and
:func:`arun` with an async one. So :mod:`sessionstore.store` and :mod:`sessionstore.aio`
stay thin and cannot drift apart: their methods only pick a flow and a runner.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from .contracts import Refused, Stored
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
from .errors import ConcurrentModificationError, SeqConflictError, SessionExistsError
from .eventlog import check_session_id, closers, encode_batch
from .models import SessionEvent, SessionHeader
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
    ms = to_epoch_ms(when)
    yield from ready(state, lifecycle)
    options = _ttl(state.ttl_ms)
    # A plain handle starts from the record it saw last, if any: a refused swap returns
    # the record found, so a stale guess costs no extra round trip and is no lost race.
    guessed = state.remembers()
    found = state.remembered() if guessed else (yield _read(state, ms))
    lost = 0
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
        if guessed:
            guessed = False
        else:
            lost += 1
            if lost == UPDATE_ATTEMPTS:
                raise ConcurrentModificationError(
                    f"update of {state.key.label()} lost {UPDATE_ATTEMPTS} races in a row"
                )
            yield Sleep(backoff(lost))
        found = done.current if isinstance(done, Refused) else (yield _read(state, ms))


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


def load(lifecycle: Lifecycle, session_id: str) -> Flow[LoadedSession]:
    _open(lifecycle)
    check_session_id(session_id)
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
