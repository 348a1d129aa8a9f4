"""One operation, two drivers (sans-I/O, as h11 does it).

An operation is written once, as a generator (:data:`Steps`) that yields what it needs
done and receives the outcome:

* a zero-argument callable, which returns its result when driven by :func:`drive` and
  an awaitable of it when driven by :func:`adrive` (a Redis command on a ``redis.Redis``
  or a ``redis.asyncio`` client: redis-py's two clients share their methods' names and
  arguments, so an operation builds the same call for both);
* a :class:`Pause`, for a back-off between attempts.

An error a call raises (any ``BaseException``: a ``KeyboardInterrupt`` or a task's
cancellation too) is thrown into the operation where it yielded the call, so its
``try``/``with`` blocks (retries, reloads, error boundaries, cleanup) see it exactly as
in straight-line code; an operation the driver leaves early is closed at once.
``resolve`` turns what an operation yields into one of the two first
(:mod:`sessionstore.flows` yields backend calls, sleeps and user callbacks).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

_T = TypeVar("_T")


class Pause:
    """Wait ``seconds`` before the next step (a back-off)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


Step = Callable[[], Any] | Pause
#: An operation written once (see the module doc).
Steps = Generator[Step, Any, _T]


def drive(steps: Generator[Any, Any, _T], resolve: Callable[[Any], Step] | None = None) -> _T:
    """Run ``steps``, each call's result handed back as it is."""
    reply: Any = None
    error: BaseException | None = None
    send = steps.send
    try:
        while True:
            try:
                step = send(reply) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if resolve is not None:
                step = resolve(step)
            try:
                if isinstance(step, Pause):
                    time.sleep(step.seconds)
                    reply = None
                else:
                    reply = step()
                error = None
            except BaseException as exc:  # noqa: BLE001 - the operation cleans up, re-raises
                reply, error = None, exc
    finally:
        steps.close()


async def adrive(
    steps: Generator[Any, Any, _T], resolve: Callable[[Any], Step] | None = None
) -> _T:
    """:func:`drive`, each call's result awaited (a cancellation is thrown into the
    operation like any error, so its cleanup runs, and may await, before it ends)."""
    reply: Any = None
    error: BaseException | None = None
    send = steps.send
    try:
        while True:
            try:
                step = send(reply) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if resolve is not None:
                step = resolve(step)
            try:
                if isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                    reply = None
                else:
                    reply = await step()
                error = None
            except BaseException as exc:  # noqa: BLE001 - the operation cleans up, re-raises
                reply, error = None, exc
    finally:
        steps.close()
