"""Running a flow of :mod:`.access` against the sync or the async event log: the one
place where the saver's calls meet I/O."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from sessionstore import SessionStoreError

from .access import SLEEP, Call, Flow

_T = TypeVar("_T")


class _Driving(Generic[_T]):
    """A flow being run: the call it makes next, given the answer to the one before
    (``reply``, or the store error ``error`` thrown back into it); ``result`` once done."""

    def __init__(self, flow: Flow[_T]) -> None:
        self.flow = flow
        self.reply: Any = None
        self.error: SessionStoreError | None = None
        self.result: _T | None = None

    def next_call(self) -> Call | None:
        """The next call, or None when the flow has returned (its value in ``result``)."""
        try:
            if self.error is None:
                return self.flow.send(self.reply)
            return self.flow.throw(self.error)
        except StopIteration as stop:
            self.result = stop.value
            return None


def call_on(events: Any, step: Call) -> Any:
    """Make ``step`` on the sync event log ``events``."""
    if step.name == SLEEP:
        time.sleep(*step.args)
        return None
    return getattr(events, step.name)(*step.args, **step.kwargs)


async def acall_on(events: Any, step: Call) -> Any:
    """Make ``step`` on the async event log ``events``."""
    if step.name == SLEEP:
        await asyncio.sleep(*step.args)
        return None
    return await getattr(events, step.name)(*step.args, **step.kwargs)


def run(flow: Flow[_T], call: Callable[[Call], Any]) -> _T:
    """Run ``flow`` to its end, each step made by ``call``; its result."""
    driving = _Driving(flow)
    while (step := driving.next_call()) is not None:
        try:
            driving.reply, driving.error = call(step), None
        except SessionStoreError as exc:
            driving.reply, driving.error = None, exc
    return driving.result  # type: ignore[return-value]


async def arun(flow: Flow[_T], call: Callable[[Call], Awaitable[Any]]) -> _T:
    """:func:`run`, each step awaited."""
    driving = _Driving(flow)
    while (step := driving.next_call()) is not None:
        try:
            driving.reply, driving.error = await call(step), None
        except SessionStoreError as exc:
            driving.reply, driving.error = None, exc
    return driving.result  # type: ignore[return-value]


def in_own_loop(coro: Any) -> Any:
    """Run ``coro`` to its end on an event loop of its own, in a thread of its own (the
    caller may be running a loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
