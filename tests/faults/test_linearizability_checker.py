"""The linearizability checker accepts every history some order explains and rejects the
anomalies the fault suite hunts for: stale reads, lost and doubled updates, A-B-A, reads
from the future and history-model violations."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .linearizability import (
    Model,
    Op,
    Verdict,
    assert_linearizable,
    check,
    history_model,
    register_model,
    timed_call,
)

REGISTER = register_model()
HISTORY = history_model()
MODELS = [REGISTER, HISTORY, history_model(max_versions=2)]


def op(
    process: int,
    kind: str,
    *args: Any,
    at: tuple[float, float | None],
    result: Any = None,
    ok: bool = True,
) -> Op:
    return Op(process, kind, args, at[0], at[1], result, ok)


def rejected(history: list[Op], model: Model[Any] = REGISTER) -> bool:
    result = check(history, model)
    assert result.verdict is not Verdict.UNKNOWN, str(result)
    return result.verdict is Verdict.NOT_LINEARIZABLE


# --- generated linearizable histories ---------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """One call to generate: when its process issues it, how long it takes, where in its
    interval it takes effect, and its fate ("ok", "applied": raised but took effect,
    possibly after the caller gave up, "dropped": raised and never took effect)."""

    process: int
    kind: str
    args: tuple[Any, ...]
    gap: float
    duration: float
    point: float
    fate: str = "ok"


def build(plans: list[Planned], model: Model[Any], *, late: float = 4.0) -> list[Op]:
    """A history that is linearizable by construction: each process runs its calls one
    after the other, each call takes effect at a point inside its interval (an applied
    indeterminate one up to ``late`` times its duration after its invocation, so possibly
    after its error surfaced), and results come from the model in point order."""
    clocks: dict[int, float] = {}
    timed: list[tuple[float, int, Op]] = []
    for index, plan in enumerate(plans):
        invoked = clocks.get(plan.process, 0.0) + plan.gap
        completed = invoked + plan.duration
        clocks[plan.process] = completed
        stretch = late if plan.fate == "applied" else 1.0
        point = invoked + plan.point * plan.duration * stretch
        record = Op(plan.process, plan.kind, plan.args, invoked, completed, None, plan.fate == "ok")
        timed.append((point, index, record))
    results: dict[int, Any] = {}
    state = model.initial
    for _, index, record in sorted(timed):
        if plans[index].fate != "dropped":
            state, results[index] = model.step(state, record)
    return [
        replace(record, result=results[index]) if record.ok else record
        for _, index, record in sorted(timed, key=lambda t: t[1])
    ]


WHENS = st.integers(0, 6)


@st.composite
def planned_calls(draw: st.DrawFn, *, indeterminate: bool = False) -> list[Planned]:
    processes = draw(st.integers(3, 5))
    kinds = st.sampled_from(["get", "get", "set", "update_add"])
    fates = st.sampled_from(["ok", "ok", "ok", "applied", "dropped"]) if indeterminate else None
    plans = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(kinds)
        if kind == "get":
            args: tuple[Any, ...] = (draw(WHENS),)
        elif kind == "set":
            args = (draw(st.none() | st.integers(0, 4)), draw(WHENS))
        else:
            args = (draw(st.integers(1, 3)), draw(WHENS))
        plans.append(
            Planned(
                process=draw(st.integers(0, processes - 1)),
                kind=kind,
                args=args,
                gap=draw(st.floats(0, 2)),
                duration=draw(st.floats(0.01, 3)),
                point=draw(st.floats(0, 1)),
                fate=draw(fates) if fates is not None else "ok",
            )
        )
    return plans


def random_plans(rng: random.Random, count: int, processes: int) -> list[Planned]:
    """Like the fault runs: mostly short calls, some slow ones, a few timeouts."""
    plans = []
    for _ in range(count):
        kind = rng.choice(["get", "get", "set", "update_add", "update_add"])
        when = rng.randrange(0, 50)
        args: tuple[Any, ...] = {
            "get": (when,),
            "set": (rng.randrange(0, 100), when),
            "update_add": (rng.randrange(1, 4), when),
        }[kind]
        fate = rng.choices(["ok", "applied", "dropped"], [0.96, 0.02, 0.02])[0]
        plans.append(
            Planned(
                process=rng.randrange(processes),
                kind=kind,
                args=args,
                gap=rng.expovariate(1.0),
                duration=rng.expovariate(0.5 if rng.random() < 0.9 else 0.1),
                point=rng.random(),
                fate=fate,
            )
        )
    return plans


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_accepts_a_sequential_history_produced_by_the_model(model: Model[Any]) -> None:
    state = model.initial
    history = []
    for i, plan in enumerate(random_plans(random.Random(7), 300, 1)):
        call = Op(i % 4, plan.kind, plan.args, 2.0 * i, 2.0 * i + 1, None)
        state, result = model.step(state, call)
        history.append(replace(call, result=result))
    assert_linearizable(history, model)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=planned_calls(), model=st.sampled_from(MODELS))
def test_accepts_concurrent_histories_with_a_linearization_inside_every_interval(
    plans: list[Planned], model: Model[Any]
) -> None:
    assert_linearizable(build(plans, model), model)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=planned_calls(indeterminate=True), model=st.sampled_from(MODELS))
def test_accepts_indeterminate_ops_that_took_effect_late_or_never(
    plans: list[Planned], model: Model[Any]
) -> None:
    assert_linearizable(build(plans, model), model)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=planned_calls(indeterminate=True), model=st.sampled_from(MODELS), data=st.data())
def test_rejects_a_read_of_a_value_no_linearization_gives(
    plans: list[Planned], model: Model[Any], data: st.DataObject
) -> None:
    history = build(plans, model)
    reads = [i for i, o in enumerate(history) if o.ok and o.kind == "get"]
    if not reads:
        history.append(Op(9, "get", (3,), 1e6, 1e6 + 1, None))
        reads = [len(history) - 1]
    victim = data.draw(st.sampled_from(reads))
    # Every value written or computed is >= 0: -1 is never there to be read.
    history[victim] = replace(history[victim], result=-1)
    result = check(history, model)
    assert result.verdict is Verdict.NOT_LINEARIZABLE, str(result)
    assert result.stuck_on is not None


# --- against brute force ---------------------------------------------------------------


def brute_force(history: list[Op], model: Model[Any], horizon: float | None) -> bool:
    """Try every subset of indeterminate ops and every order that real time allows."""
    inf = float("inf")

    def deadline(o: Op) -> float:
        if o.ok:
            return o.completed if o.completed is not None else inf
        if horizon is None:
            return inf
        return (o.invoked if o.completed is None else max(o.invoked, o.completed)) + horizon

    def place(state: Any, left: list[Op]) -> bool:
        if not left:
            return True
        for o in left:
            if any(deadline(other) < o.invoked for other in left if other is not o):
                continue  # something still unplaced had to take effect before o began
            new_state, result = model.step(state, o)
            if o.ok and result != o.result:
                continue
            if place(new_state, [other for other in left if other is not o]):
                return True
        return False

    maybes = [o for o in history if not o.ok]
    certain = [o for o in history if o.ok]
    for chosen in range(1 << len(maybes)):
        taken = [o for bit, o in enumerate(maybes) if chosen >> bit & 1]
        if place(model.initial, certain + taken):
            return True
    return False


@st.composite
def arbitrary_histories(draw: st.DrawFn) -> list[Op]:
    """Small histories with whole-number times (so ties happen) and results that are
    often wrong."""
    history = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["get", "set", "update_add"]))
        when = draw(st.integers(0, 2))
        args: tuple[Any, ...] = {
            "get": (when,),
            "set": (draw(st.none() | st.integers(0, 2)), when),
            "update_add": (1, when),
        }[kind]
        result = None if kind == "set" else draw(st.none() | st.integers(0, 3))
        invoked = draw(st.integers(0, 8))
        completed = invoked + draw(st.integers(0, 4))
        ok = draw(st.integers(0, 4)) > 0
        history.append(Op(draw(st.integers(0, 3)), kind, args, invoked, completed, result, ok))
    return history


@settings(max_examples=400, deadline=None)
@given(
    history=arbitrary_histories(),
    model=st.sampled_from(MODELS),
    horizon=st.none() | st.sampled_from([0.0, 1.0, 3.0]),
)
def test_agrees_with_brute_force(
    history: list[Op], model: Model[Any], horizon: float | None
) -> None:
    result = check(history, model, horizon=horizon)
    assert result.ok == brute_force(history, model, horizon), str(result)
    if result.ok:
        # The witness replays through the model in an order real time allows.
        state = model.initial
        for o in result.linearization:
            state, expected = model.step(state, o)
            assert not o.ok or expected == o.result


# --- indeterminate ops, by hand -----------------------------------------------------------


def timed_out_set() -> list[Op]:
    return [
        op(1, "set", 1, 0, at=(0, 1)),
        op(2, "set", 2, 0, at=(2, 3), ok=False),  # timed out: applied or not, maybe later
    ]


@pytest.mark.parametrize("seen", [1, 2])
def test_a_timed_out_write_may_or_may_not_have_taken_effect(seen: int) -> None:
    assert_linearizable([*timed_out_set(), op(3, "get", 0, at=(10, 11), result=seen)], REGISTER)


def test_a_timed_out_write_may_take_effect_after_later_reads() -> None:
    history = [
        *timed_out_set(),
        op(3, "get", 0, at=(10, 11), result=1),
        op(3, "get", 0, at=(12, 13), result=2),
    ]
    assert_linearizable(history, REGISTER)


def test_a_timed_out_write_cannot_be_undone_once_seen() -> None:
    history = [
        *timed_out_set(),
        op(3, "get", 0, at=(10, 11), result=2),
        op(3, "get", 0, at=(12, 13), result=1),
    ]
    assert rejected(history)


def test_a_timed_out_write_cannot_take_effect_before_it_was_invoked() -> None:
    history = [
        op(1, "set", 1, 0, at=(0, 1)),
        op(3, "get", 0, at=(2, 3), result=2),
        op(2, "set", 2, 0, at=(4, 5), ok=False),
    ]
    assert rejected(history)


def test_a_timed_out_update_counts_at_most_once() -> None:
    base = [op(1, "update_add", 1, 0, at=(0, 1), ok=False)]
    assert_linearizable([*base, op(2, "update_add", 1, 0, at=(2, 3), result=1)], REGISTER)
    assert_linearizable([*base, op(2, "update_add", 1, 0, at=(2, 3), result=2)], REGISTER)
    assert rejected([*base, op(2, "update_add", 1, 0, at=(2, 3), result=3)])


def test_a_horizon_bounds_how_late_a_timed_out_write_lands() -> None:
    history = [
        *timed_out_set(),  # set(2) timed out at 3
        op(3, "get", 0, at=(10, 11), result=1),
        op(3, "get", 0, at=(12, 13), result=2),
    ]
    assert check(history, REGISTER).ok
    assert check(history, REGISTER, horizon=9.5).ok  # it may land in (11, 12.5)
    assert not check(history, REGISTER, horizon=6.0).ok  # landed by 9, before both reads


def test_timed_out_reads_are_ignored() -> None:
    history = [
        op(1, "set", 1, 0, at=(0, 1)),
        op(2, "get", 0, at=(0, None), result="garbage", ok=False),
    ]
    assert_linearizable(history, REGISTER)


# --- injected anomalies -------------------------------------------------------------------


def test_rejects_a_stale_read() -> None:
    history = [
        op(1, "set", 1, 5, at=(0, 1)),
        op(1, "set", 2, 5, at=(2, 3)),
        op(2, "get", 5, at=(4, 5), result=1),
    ]
    assert rejected(history)
    # The same read overlapping the second set is fine.
    assert not rejected([*history[:2], op(2, "get", 5, at=(2.5, 5), result=1)])


def test_rejects_a_lost_update() -> None:
    history = [
        op(1, "update_add", 1, 5, at=(0, 1), result=1),
        op(2, "update_add", 1, 5, at=(2, 3), result=1),
    ]
    assert rejected(history)
    concurrent = [history[0], op(2, "update_add", 1, 5, at=(0.5, 3), result=2)]
    assert not rejected(concurrent)


def test_rejects_an_update_applied_twice() -> None:
    history = [
        op(1, "set", 0, 5, at=(0, 1)),
        op(2, "update_add", 1, 5, at=(2, 3), result=1),
        op(3, "get", 5, at=(4, 5), result=2),
    ]
    assert rejected(history)


def test_rejects_an_old_write_resent_over_a_newer_acknowledged_one() -> None:
    history = [
        op(1, "set", "A", 5, at=(0, 1)),
        op(2, "set", "B", 5, at=(2, 3)),
        op(3, "get", 5, at=(4, 5), result="B"),
        op(3, "get", 5, at=(6, 7), result="A"),  # A came back: a resend of set(A)
    ]
    assert rejected(history)
    # Had set(A) timed out, its request could have landed late: that is not an anomaly.
    assert not rejected([replace(history[0], ok=False), *history[1:]])


def test_rejects_a_read_from_the_future() -> None:
    history = [op(1, "set", 5, 20, at=(0, 1)), op(2, "get", 10, at=(2, 3), result=5)]
    assert rejected(history)
    assert_linearizable(
        [
            history[0],
            op(2, "get", 10, at=(2, 3), result=None),
            op(2, "get", 20, at=(4, 5), result=5),
            op(2, "update_add", 1, 10, at=(6, 7), result=1),  # starts from nothing
        ],
        REGISTER,
    )


def test_a_clear_hides_the_value() -> None:
    history = [
        op(1, "set", 5, 1, at=(0, 1)),
        op(1, "set", None, 1, at=(2, 3)),
        op(2, "get", 9, at=(4, 5), result=5),
    ]
    assert rejected(history)
    assert not rejected([*history[:2], replace(history[2], result=None)])


@pytest.mark.parametrize(
    "tail",
    [
        [op(2, "get", 15, at=(4, 5), result=2)],  # 2 was written for 20: as of 15 it is 1
        [op(2, "get", 5, at=(4, 5), result=1)],  # nothing existed as of 5
        [op(1, "set", 3, 15, at=(4, 5)), op(2, "get", 25, at=(6, 7), result=2)],  # 20 dropped
        [op(1, "update_add", 1, 15, at=(4, 5), result=3)],  # as of 15 the value is 1
    ],
)
def test_rejects_a_history_model_violation(tail: list[Op]) -> None:
    history = [op(1, "set", 1, 10, at=(0, 1)), op(1, "set", 2, 20, at=(2, 3)), *tail]
    assert rejected(history, HISTORY)


def test_the_history_model_keeps_as_of_versions() -> None:
    history = [
        op(1, "set", 1, 10, at=(0, 1)),
        op(1, "set", 2, 20, at=(2, 3)),
        op(2, "get", 15, at=(4, 5), result=1),
        op(2, "get", 25, at=(4, 5), result=2),
        op(1, "update_add", 5, 15, at=(6, 7), result=6),  # drops the version at 20
        op(2, "get", 25, at=(8, 9), result=6),
    ]
    assert_linearizable(history, HISTORY)
    assert rejected(history, REGISTER)  # a plain value forgets the version at 10


def test_max_versions_forgets_the_oldest() -> None:
    history = [
        op(1, "set", 1, 10, at=(0, 1)),
        op(1, "set", 2, 20, at=(2, 3)),
        op(1, "set", 3, 30, at=(4, 5)),
        op(2, "get", 15, at=(6, 7), result=None),
    ]
    assert_linearizable(history, history_model(max_versions=2))
    assert rejected(history, HISTORY)


# --- the explanation, the budget, the recording helper ------------------------------------


def test_a_rejection_names_the_op_that_could_not_be_placed() -> None:
    history = [
        op(1, "set", 1, 5, at=(0, 1)),
        op(1, "set", 2, 5, at=(2, 3)),
        op(2, "get", 5, at=(4, 5), result=1),
    ]
    result = check(history, REGISTER)
    assert not result.ok
    assert result.stuck_on == history[2]
    assert result.linearization == tuple(history[:2])
    assert "p2 get(5) -> 1" in result.explanation
    assert "the model returns 2" in result.explanation


def test_an_exhausted_budget_says_unknown_instead_of_hanging() -> None:
    # Ten concurrent writes and a read of a value none wrote: the search must try every
    # order of them (up to equal states) before it can say no.
    history = [op(p, "set", p, 0, at=(0, 10)) for p in range(10)]
    history.append(op(10, "get", 0, at=(20, 21), result=99))
    result = check(history, REGISTER, max_configs=100)
    assert result.verdict is Verdict.UNKNOWN and not result.ok
    assert "gave up after 100 configurations" in result.explanation
    assert check(history, REGISTER).verdict is Verdict.NOT_LINEARIZABLE


def test_malformed_ops_are_refused() -> None:
    with pytest.raises(ValueError, match="completion time"):
        check([op(1, "get", 0, at=(0, None))], REGISTER)
    with pytest.raises(ValueError, match="before it was invoked"):
        check([op(1, "get", 0, at=(2, 1))], REGISTER)
    with pytest.raises(ValueError, match="no op 'cas'"):
        check([op(1, "cas", 0, at=(0, 1))], REGISTER)


def test_timed_call_records_results_errors_and_calls_without_effect() -> None:
    ticks = iter(range(100))

    def clock() -> float:
        return float(next(ticks))

    def boom() -> None:
        raise TimeoutError

    def refused() -> None:
        raise KeyError

    done = timed_call(1, "get", (0,), lambda: 7, clock=clock)
    assert done == Op(1, "get", (0,), 0.0, 1.0, 7, True)
    lost = timed_call(1, "set", (1, 0), boom, clock=clock)
    assert lost is not None and not lost.ok and lost.invoked == 2.0
    assert timed_call(1, "set", (1, 0), refused, no_effect=(KeyError,), clock=clock) is None


def test_a_thousand_ops_over_five_processes_take_under_a_hundred_configurations_each() -> None:
    """The search's work, counted in configurations (no time limit, so the count does
    not depend on the machine's speed): well within its quick attempts' budgets."""
    for model in (REGISTER, HISTORY):
        history = build(random_plans(random.Random(2024), 1000, 5), model)
        assert sum(not o.ok for o in history) > 10
        result = check(history, model, timeout=None)
        assert result.ok, str(result)
        assert result.explored < 100 * len(history), f"{model.name}: {result.explored}"
