"""One value handle shared by threads: any interleaving of ``get_data``, ``set_data`` and
``update`` on it raises nothing and keeps the value linearizable, through the sync API
and the async one (each thread running its own event loop), on every backend.

The handle remembers the record it saw last (where its next ``update`` starts); a write
from another thread between the check of that memory and its read used to trip a bare
``AssertionError``. Each thread records its calls with
:func:`~.linearizability.timed_call` and :func:`~.linearizability.check` must find the
history linearizable against the plain-value model; no call may raise at all.
"""

from __future__ import annotations

import asyncio
import functools
import random
import sys
import threading
import time
from typing import Any

import pytest
from conftest import BACKENDS

import sessionstore
from sessionstore import aio, value_flows
from sessionstore.arguments import value_key
from sessionstore.codec import encode_value
from sessionstore.contracts import Stored
from sessionstore.flows import Apply
from sessionstore.session_state import SessionState
from sessionstore.store_state import Lifecycle

from .linearizability import Op, check, register_model, timed_call

THREADS = 6
CALLS = 150
WHEN = 1_718_000_000_000


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def _plan(number: int) -> list[tuple[str, tuple[Any, ...]]]:
    """Thread ``number``'s calls: half the threads update (an increment), half set, all
    read now and then."""
    rng = random.Random(number)
    plan = []
    for i in range(CALLS):
        if rng.random() < 0.2:
            plan.append(("get", (WHEN,)))
        elif number % 2 == 0:
            plan.append(("update_add", (1, WHEN)))
        else:
            plan.append(("set", (number * 1000 + i, WHEN)))
    return plan


def _sync_worker(handle: Any, number: int, ops: list[Op]) -> None:
    for kind, args in _plan(number):
        if kind == "get":
            call = functools.partial(handle.get_data, *args)
        elif kind == "set":
            call = functools.partial(handle.set_data, *args)
        else:
            call = functools.partial(handle.update, functools.partial(_add, args[0]), args[1])
        op = timed_call(number, kind, args, call)
        assert op is not None
        ops.append(op)


async def _async_worker(handle: Any, number: int, ops: list[Op]) -> None:
    """As :func:`_sync_worker`, on this thread's own event loop."""
    for kind, args in _plan(number):
        invoked = time.monotonic()
        try:
            if kind == "get":
                result = await handle.get_data(*args)
            elif kind == "set":
                result = await handle.set_data(*args)
            else:
                result = await handle.update(functools.partial(_add, args[0]), args[1])
        except Exception:  # noqa: BLE001 - recorded as indeterminate, asserted absent
            ops.append(Op(number, kind, args, invoked, time.monotonic(), None, ok=False))
            continue
        ops.append(Op(number, kind, args, invoked, time.monotonic(), result))


def _add(delta: int, value: Any) -> int:
    return (value or 0) + delta


def _errors(ops: list[Op]) -> list[str]:
    return [op.describe() for op in ops if not op.ok]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_threads_sharing_one_handle_stay_linearizable(
    api: str, store_url: str, namespace: str
) -> None:
    store: Any = (sessionstore.connect if api == "sync" else aio.connect)(
        store_url, namespace=namespace
    )
    handle = store.session("BTC", "shared", "x", "1h")
    histories: list[list[Op]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []

    def run(number: int) -> None:
        try:
            if api == "sync":
                _sync_worker(handle, number, histories[number])
            else:
                asyncio.run(_async_worker(handle, number, histories[number]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
    # Threads switch as often as the interpreter lets them, so that a write of one comes
    # between any two steps of another's call.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        sys.setswitchinterval(switch)
        if api == "sync":
            store.close()
        else:
            asyncio.run(store.close())
    assert not errors
    ops = [op for history in histories for op in history]
    assert len(ops) == THREADS * CALLS
    assert _errors(ops) == []
    result = check(ops, register_model())
    assert result.ok, str(result)


class _ForgetfulState(SessionState):
    """A handle's state on which another thread's write (which first makes the handle
    forget its record) lands right after every read of the remembered record: the
    narrowest interleaving, made certain."""

    @property  # type: ignore[override]
    def _last(self) -> Any:
        found = self.__dict__["_remembered"]
        self.__dict__["_remembered"] = self.__dict__["_unknown"]
        return found

    @_last.setter
    def _last(self, value: Any) -> None:
        self.__dict__.setdefault("_unknown", value)
        self.__dict__["_remembered"] = value


def test_an_update_reads_the_remembered_record_once() -> None:
    """``update`` starts from the record the handle remembers, read in one step: a write
    from another thread right after that read changes nothing of this update (it used to
    be read in two, and a write between them raised ``AssertionError``)."""
    plain = value_key("ns", "BTC", "shared", "x", "1h", "backtest")
    state = _ForgetfulState(plain, history=False, max_versions=None)
    state.initialised = True
    state.remember(Stored(encode_value(41, "v"), WHEN))
    flow = value_flows.update(state, Lifecycle(), functools.partial(_add, 1), WHEN)
    step = next(flow)
    assert isinstance(step, Apply) and step.value == 41
