"""get_or_compute as a state machine (driven by scripted backend replies, as in
test_flows), and the runners of its ``Hold`` step: a computer whose lease lapsed never
returns a result nobody stored, a renewal that finds the lease gone stops, a flow closed
early raises nothing of its own, and the async runner keeps renewing while a plain
``fn`` runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest
from test_flows import ANY, Script, Step, call, plain, stored

from sessionstore import flows, value_flows
from sessionstore.contracts import Stored, ValueBackend
from sessionstore.errors import InvalidArgumentError
from sessionstore.flows import Call, Hold, Sleep
from sessionstore.session_state import SessionState
from sessionstore.store_state import Lifecycle

WHEN = 1_700_000_000_000
LEASE = 0.3
LEASE_MS = 300


class ComputeScript(Script):
    """A :class:`Script` that also answers ``Hold`` steps: it runs ``fn`` and records
    the renewal the flow asked for."""

    def __init__(self, *steps: Step) -> None:
        super().__init__(*steps)
        self.renewals: list[Call] = []

    def answer(self, step: object) -> tuple[Any, BaseException | None]:
        if isinstance(step, Hold):
            expected = self.steps.pop(0)
            assert expected.expected is Hold, f"expected {expected}, got a Hold"
            self.renewals.append(step.renew)
            return step.fn(), None
        return super().answer(step)


#: User code held under the lease (run, its renewal recorded).
HOLD = Step(Hold)
PAUSE = Step(Sleep)


def history() -> SessionState:
    state = plain(history=True)
    state.initialised = True
    return state


def flow(state: SessionState, fn: Any) -> Generator[Any, Any, Any]:
    return value_flows.get_or_compute(state, Lifecycle(), WHEN, fn, 30.0, LEASE)


def read(state: SessionState, found: Stored | None = None) -> Step:
    return call(ValueBackend.read_as_of, state.key, WHEN, returns=found)


def take(state: SessionState, held: bool) -> Step:
    return call(ValueBackend.acquire_compute_lease, state.key, WHEN, ANY, LEASE_MS, returns=held)


def put(state: SessionState, value: Any, reply: Any) -> Step:
    payload = state.encode(value)
    args = (state.key, payload, WHEN, None, ANY)
    return call(ValueBackend.put_computed, *args, ttl_ms=None, returns=reply)


def release(state: SessionState) -> Step:
    return call(ValueBackend.release_compute_lease, state.key, WHEN, ANY)


def counted(result: Any) -> tuple[Callable[[], Any], list[int]]:
    """A ``fn`` returning ``result``, and the list of its calls."""
    calls: list[int] = []

    def fn() -> Any:
        calls.append(1)
        return result

    return fn, calls


def computes(state: SessionState, reply: Any) -> list[Step]:
    """A caller that finds nothing, takes the lease, runs ``fn`` (giving ``{"by": "A"}``)
    and puts it, the put answering ``reply``."""
    return [read(state), take(state, True), read(state), HOLD, put(state, {"by": "A"}, reply)]


def refused_put(state: SessionState) -> list[Step]:
    """:func:`computes`, the put finding another holding the lease, up to the next look."""
    return [*computes(state, False), PAUSE, read(state)]


def test_the_result_is_put_fenced_by_the_lease_which_the_put_gives_up():
    state = history()
    script = ComputeScript(*computes(state, True))
    assert script.play(flow(state, lambda: {"by": "A"})) == {"by": "A"}
    [renewal] = script.renewals
    assert renewal.name == "renew_compute_lease"
    assert renewal.args == (state.key, WHEN, renewal.args[2], LEASE_MS)


def test_a_lapsed_computer_returns_the_version_another_stored_and_lets_go():
    state = history()
    script = ComputeScript(*computes(state, stored({"by": "B"})), release(state))
    assert script.play(flow(state, lambda: {"by": "A"})) == {"by": "B"}


def test_a_computer_whose_put_finds_the_lease_busy_waits_for_the_other_s_version():
    """Refused (another caller holds the lease now), the computer writes nothing and
    releases nothing (the lease is not its own): it waits as a waiter does and returns
    the version the other stores, never its own unstored result."""
    state, fn, calls = history(), *counted({"by": "A"})
    script = ComputeScript(
        *refused_put(state),
        take(state, False),
        PAUSE,
        read(state, stored({"by": "B"})),
    )
    assert script.play(flow(state, fn)) == {"by": "B"}
    assert calls == [1]


def test_a_busy_computer_that_takes_the_lease_again_puts_what_it_computed_without_rerunning():
    state, fn, calls = history(), *counted({"by": "A"})
    script = ComputeScript(
        *refused_put(state),
        take(state, True),  # the other's fn raised and let go
        read(state),
        put(state, {"by": "A"}, True),
    )
    assert script.play(flow(state, fn)) == {"by": "A"}
    assert calls == [1]


def test_a_flow_closed_early_while_fn_runs_raises_nothing_of_its_own():
    """``close()`` at the Hold (a driver leaving early): a closed generator cannot yield,
    so the flow ends without a release (the lease expires) and without RuntimeError."""
    state = history()
    steps = flow(state, lambda: "never run")
    assert steps.send(None).name == "read_as_of"
    assert steps.send(None).name == "acquire_compute_lease"
    assert steps.send(True).name == "read_as_of"
    assert isinstance(steps.send(None), Hold)
    steps.close()  # raised RuntimeError: generator ignored GeneratorExit


def test_a_flow_closed_early_while_putting_raises_nothing_of_its_own():
    state = history()
    steps = flow(state, lambda: "computed")
    steps.send(None)
    steps.send(None)
    steps.send(True)
    steps.send(None)
    assert steps.send("computed").name == "put_computed"
    steps.close()


@pytest.mark.parametrize("fn", [5, None, "not callable"])
def test_a_fn_that_cannot_be_called_is_refused_before_any_io(fn):
    state = plain(history=True)
    with pytest.raises(InvalidArgumentError, match="callable"):
        ComputeScript().play(flow(state, fn))


# --- the runners of Hold ---------------------------------------------------------------------


class Renewals:
    """A backend answering only renewals, each with ``reply``; counts them."""

    def __init__(self, reply: bool) -> None:
        self.reply = reply
        self.count = 0
        self.lock = threading.Lock()

    def renew_compute_lease(self, *args: Any) -> bool:
        with self.lock:
            self.count += 1
        return self.reply


def hold(fn: Any, every: float) -> Hold:
    return Hold(fn, Call(ValueBackend.renew_compute_lease, None, WHEN, "t", 1), every)


def test_the_sync_runner_stops_renewing_once_a_renewal_finds_the_lease_gone():
    backend = Renewals(False)
    assert flows._hold(backend, hold(lambda: time.sleep(0.3) or "done", 0.02)) == "done"
    assert backend.count == 1


class AsyncRenewals(Renewals):
    async def renew_compute_lease(self, *args: Any) -> bool:  # type: ignore[override]
        return super().renew_compute_lease(*args)


def test_the_async_runner_stops_renewing_once_a_renewal_finds_the_lease_gone():
    backend = AsyncRenewals(False)

    async def fn() -> str:
        await asyncio.sleep(0.3)
        return "done"

    assert asyncio.run(flows._ahold(backend, hold(fn, 0.02))) == "done"
    assert backend.count == 1


def test_the_async_runner_keeps_renewing_while_a_plain_fn_blocks():
    """A plain ``fn`` runs off the event loop: the renewal task keeps its pace."""
    backend = AsyncRenewals(True)
    on_loop: list[bool] = []

    def blocking() -> str:
        on_loop.append(_on_a_loop())
        time.sleep(0.4)
        return "done"

    assert asyncio.run(flows._ahold(backend, hold(blocking, 0.05))) == "done"
    assert on_loop == [False]
    assert backend.count >= 4  # eight due; none would run with fn on the loop


def test_the_async_runner_awaits_an_async_fn_and_what_a_plain_fn_returns_awaitable():
    backend = AsyncRenewals(True)

    async def coroutine() -> str:
        return "awaited"

    class Model:
        async def __call__(self) -> str:
            return "called"

    assert asyncio.run(flows._ahold(backend, hold(coroutine, 1))) == "awaited"
    assert asyncio.run(flows._ahold(backend, hold(Model(), 1))) == "called"
    assert asyncio.run(flows._ahold(backend, hold(lambda: coroutine(), 1))) == "awaited"


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
