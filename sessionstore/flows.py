"""The steps an operation yields, and the two runners that do them.

Every API operation is written once, as a generator (a :data:`Flow`) that yields what
it needs done, :class:`Call` (a backend method), :class:`Sleep`, :class:`Apply` or
:class:`Hold` (user code), and receives the result: :mod:`sessionstore.value_flows`
holds the operations on session values, :mod:`sessionstore.event_flows` those on event
logs. :func:`run` drives a flow with a blocking backend and :func:`arun` with an async one
(both by :mod:`sessionstore.drive`). So :mod:`sessionstore.store` and
:mod:`sessionstore.aio` stay thin and cannot drift apart: their methods only pick a flow
and a runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from . import telemetry
from .drive import Pause, Step, adrive, drive

T = TypeVar("T")
P = ParamSpec("P")


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
    ``every`` seconds, in a thread (sync) or a task (async) of its own. The async
    runner awaits a coroutine function ``fn`` and runs any other in a worker thread, so
    that the renewals go on while it runs (an awaitable it returns is awaited). A
    renewal that raises is let go (the lease it renews then ends by itself); one that
    returns False (the lease is no longer held) ends the renewals."""

    fn: Callable[[], Any]
    renew: Call
    every: float


Flow = Generator[Call | Sleep | Apply | Hold, Any, T]


def recording() -> telemetry.Telemetry | None:
    """The :class:`~sessionstore.telemetry.Telemetry` that records operations, or None
    when telemetry is off (then an operation may also be run without a flow)."""
    found = telemetry.current
    return (found or None) if found is not None else telemetry.look()


def run(flow: Flow[T], backend: Any) -> T:
    """Drive ``flow`` against a blocking backend; backend errors are raised inside it.
    Recorded (a span, metrics) when :mod:`sessionstore.telemetry` is on."""
    found = recording()
    if found:
        return found.run(flow, backend, _resolve, drive)  # type: ignore[no-any-return]
    return drive(flow, functools.partial(_resolve, backend))


async def arun(flow: Flow[T], backend: Any) -> T:
    """Drive ``flow`` against an async backend (methods return awaitables); recorded as
    :func:`run` is."""
    found = recording()
    if found:
        return await found.arun(flow, backend, _aresolve, adrive)  # type: ignore[no-any-return]
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
                if renew() is False:  # type: ignore[operator]
                    return

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
                if await renew() is False:  # type: ignore[operator]
                    return

    renewer = asyncio.create_task(renewing())
    try:
        if _is_async(step.fn):
            result = step.fn()
        else:
            # Off the event loop: a blocking fn would stop the renewals (and every task).
            result = await asyncio.to_thread(step.fn)
        return await result if inspect.isawaitable(result) else result
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` makes a coroutine: a coroutine function, a partial of one,
    or an object whose ``__call__`` is one."""
    call = getattr(fn, "__call__", None)  # noqa: B004 - the method itself is looked at
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
