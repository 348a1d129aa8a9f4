"""The two drivers of an operation written once (sessionstore.drive): what a call
returns or raises reaches the operation where it yielded the call, whatever the error."""

from __future__ import annotations

import asyncio
import functools

import pytest

from sessionstore import drive as drive_module
from sessionstore.drive import Pause, Steps, adrive, drive


class Interrupt(BaseException):
    """Stands for a ``KeyboardInterrupt`` raised while a call runs."""


def raising(error: BaseException) -> None:
    raise error


async def araising(error: BaseException) -> None:
    raise error


def value(result: object) -> object:
    return result


async def avalue(result: object) -> object:
    return result


def operation(call, cleanup, log: list[str]) -> Steps[str]:  # noqa: ANN001
    """Two calls; the second's error is handled, or cleaned up after and re-raised."""
    first = yield call("first")
    log.append(f"got {first}")
    try:
        yield call(None)
    except ValueError:
        log.append("recovered")
        return "recovered"
    except BaseException as exc:
        log.append(f"cleaning up after {type(exc).__name__}")
        yield cleanup
        log.append("cleaned up")
        raise
    return "done"


@pytest.mark.parametrize("error", [ValueError("x"), Interrupt(), KeyboardInterrupt()])
def test_a_sync_call_s_error_reaches_the_operation(error):
    log: list[str] = []
    calls = iter([functools.partial(value, "first"), functools.partial(raising, error)])
    steps = operation(lambda _: next(calls), functools.partial(value, None), log)
    if isinstance(error, ValueError):
        assert drive(steps) == "recovered"
        assert log == ["got first", "recovered"]
        return
    with pytest.raises(type(error)):
        drive(steps)
    assert log == ["got first", f"cleaning up after {type(error).__name__}", "cleaned up"]


def test_a_cancelled_task_runs_the_operation_s_cleanup_which_may_await():
    log: list[str] = []
    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await asyncio.sleep(30)

    async def scenario() -> None:
        calls = iter([functools.partial(avalue, "first"), hang])
        steps = operation(lambda _: next(calls), functools.partial(asyncio.sleep, 0), log)
        task = asyncio.create_task(adrive(steps))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert log == ["got first", "cleaning up after CancelledError", "cleaned up"]


def test_an_operation_the_driver_leaves_early_is_closed_at_once():
    closed: list[bool] = []

    def steps() -> Steps[None]:
        try:
            yield functools.partial(value, 1)
        finally:
            closed.append(True)

    def resolve(step: object) -> object:
        raise Interrupt

    with pytest.raises(Interrupt):
        drive(steps(), resolve)
    assert closed == [True]


def test_a_pause_waits_and_returns_nothing_on_both_drivers(monkeypatch):
    """Each driver hands the whole pause to its clock's sleep (counted, not waited)."""
    slept: list[tuple[str, float]] = []
    real_async_sleep = asyncio.sleep

    async def async_sleep(seconds: float) -> None:
        slept.append(("async", seconds))
        await real_async_sleep(0)

    monkeypatch.setattr(drive_module.time, "sleep", lambda s: slept.append(("sync", s)))
    monkeypatch.setattr(drive_module.asyncio, "sleep", async_sleep)

    def steps() -> Steps[object]:
        return (yield Pause(0.05))

    assert drive(steps()) is None
    assert asyncio.run(adrive(steps())) is None
    assert slept == [("sync", 0.05), ("async", 0.05)]


def test_the_async_driver_hands_back_awaited_results_and_errors():
    log: list[str] = []
    calls = iter([functools.partial(avalue, "first"), functools.partial(araising, ValueError())])
    steps = operation(lambda _: next(calls), functools.partial(avalue, None), log)
    assert asyncio.run(adrive(steps)) == "recovered"
    assert log == ["got first", "recovered"]
