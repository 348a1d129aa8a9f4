"""A linearizability checker for concurrent histories of session-value operations.

The fault tests run 4-6 processes against one session value while replies are lost,
delayed and servers are killed, and record every call as an :class:`Op`. :func:`check`
then decides whether some total order of those calls (a *linearization*) exists that

* respects real time: an op that completed before another was invoked comes first, and
* replays through a sequential :class:`Model` giving every completed op the result it
  recorded.

This is the Wing & Gong search with Lowe's memoization, as in Knossos and Porcupine:
call and return entries in one doubly linked list sorted by time; repeatedly take the
first pending call that may go next (it lies before the first pending return), step the
model, and backtrack (undo via the linked list, "dancing links") when a return is reached
that nothing can satisfy. A configuration - the set of linearized ops, as an int bitset,
plus the model state - that has already failed is never explored twice.

Recording a history
-------------------
Each process records ``invoked = time.monotonic()`` just before the call and
``completed = time.monotonic()`` just after it returned. On Linux ``CLOCK_MONOTONIC`` is
one clock for the whole machine, so timestamps from different processes on one host
compare directly (not across hosts). :func:`timed_call` does this and also turns an
exception into an indeterminate op.

Indeterminate ops
-----------------
An op with ``ok=False`` raised (a timeout, a dropped connection, a killed server): it may
or may not have taken effect, at any moment after its invocation, even long after the
caller gave up (a delayed request, a resend). As in Knossos its completion is taken as
infinite and its result as unknown: it may be linearized anywhere after its invocation,
or never. Ops that are known *not* to have taken effect (a refused argument, a
``ConcurrentModificationError`` that wrote nothing) should be left out of the history.

An indeterminate op never constrains another op's position, so with the same state and
the same completed ops linearized, a configuration that leaves it pending is at least as
good as one that applied it: the cache prunes a configuration when one at least as open
already failed. The search tries completed ops before indeterminate ones, and drops
indeterminate reads (model kinds in :attr:`Model.read_only`) up front.

Search cost
-----------
Without indeterminate ops a mostly sequential history costs about two configurations per
op. Each indeterminate op stays a candidate for the rest of the history, and with a model
whose state keeps its effects (the history model) the search can grow exponentially in
their number. :func:`check` therefore first makes quick attempts assuming that effects
land soon after the error surfaced (the ``horizon``; a linearization found so is a valid
one), and a budget turns a hopeless search into :attr:`Verdict.UNKNOWN`. A test that
knows how late a request can land (the injected latency plus the client timeout) should
pass it as ``horizon``: the search is then nearly linear.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

__all__ = [
    "Op",
    "Model",
    "Verdict",
    "Result",
    "check",
    "assert_linearizable",
    "timed_call",
    "register_model",
    "history_model",
    "RegisterState",
    "HistoryState",
]

S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Op:
    """One call as a process saw it.

    ``kind`` and ``args`` name the operation for the model (``Op(1, "set", (5, 10), ...)``
    is ``set_data(5, when=10)``). ``invoked`` and ``completed`` are readings of one
    system-wide clock taken before the call and after its reply. ``ok=False`` marks an
    indeterminate op: the call raised, so it may or may not have taken effect; its
    ``completed`` (when the error surfaced, or None) and ``result`` are ignored.
    A completed op (``ok=True``) needs ``completed >= invoked``.
    """

    process: int
    kind: str
    args: tuple[Any, ...]
    invoked: float
    completed: float | None
    result: Any = None
    ok: bool = True

    def describe(self) -> str:
        """``p2 get(10) -> 5 [1.000000, 2.000000]``, or ``... -> ? [1.000000, ...)``."""
        call = f"p{self.process} {self.kind}({', '.join(map(repr, self.args))})"
        if not self.ok:
            return f"{call} -> ? (indeterminate) [{self.invoked:.6f}, ...)"
        return f"{call} -> {self.result!r} [{self.invoked:.6f}, {self.completed:.6f}]"


@dataclass(frozen=True)
class Model(Generic[S]):
    """A sequential specification.

    ``step(state, op)`` returns ``(new_state, result)``: the state after ``op`` and the
    result ``op`` must have returned; it raises ``ValueError`` for an unknown kind.
    States must be hashable and compare by value (they key the search cache): use
    tuples, ints, strings and None. A completed op is accepted when its recorded result
    ``==`` the model's. ``read_only`` names kinds that never change the state.
    """

    name: str
    initial: S
    step: Callable[[S, Op], tuple[S, Any]]
    read_only: frozenset[str] = frozenset()


class Verdict(enum.Enum):
    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not linearizable"
    UNKNOWN = "unknown (search budget exhausted)"


@dataclass(frozen=True)
class Result:
    """What :func:`check` found.

    ``linearization`` is a witness order when linearizable (completed and applied
    indeterminate ops; indeterminate ops left out never took effect), else the longest
    linearizable prefix the search reached. ``stuck_on`` is the completed op that could
    not be placed after that prefix. ``explanation`` says all this in a few lines.
    """

    verdict: Verdict
    explanation: str
    linearization: tuple[Op, ...] = ()
    stuck_on: Op | None = None
    explored: int = 0
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        """True only when a linearization was found (False for not linearizable and unknown)."""
        return self.verdict is Verdict.LINEARIZABLE

    @property
    def unknown(self) -> bool:
        return self.verdict is Verdict.UNKNOWN

    def __str__(self) -> str:
        return f"{self.verdict.value}: {self.explanation}"


def timed_call(
    process: int,
    kind: str,
    args: tuple[Any, ...],
    call: Callable[[], Any],
    *,
    no_effect: tuple[type[BaseException], ...] = (),
    clock: Callable[[], float] = time.monotonic,
) -> Op | None:
    """Run ``call()`` and record it: a completed op, or an indeterminate one if it raised.

    An exception in ``no_effect`` is one known to have written nothing: it returns None
    (leave the call out of the history). Any other ``Exception`` gives ``ok=False``. The
    exception itself is not re-raised; ``BaseException`` (KeyboardInterrupt) propagates.
    """
    invoked = clock()
    try:
        result = call()
    except no_effect:
        return None
    except Exception:
        return Op(process, kind, args, invoked, clock(), None, ok=False)
    return Op(process, kind, args, invoked, clock(), result)


# --- the search ----------------------------------------------------------------------

_HEAD = 0
# A right assumption about when indeterminate ops took effect makes the search nearly
# linear (about 2 configurations per op on fault-run histories); a wrong one is dropped
# after this many configurations per op rather than refuted at length.
_QUICK_CONFIGS_PER_OP = 50


def check(
    history: Iterable[Op],
    model: Model[Any],
    *,
    horizon: float | None = None,
    max_configs: int | None = 2_000_000,
    timeout: float | None = 30.0,
) -> Result:
    """Decide whether ``history`` is linearizable with respect to ``model``.

    ``horizon=None`` (the default, as Knossos) lets an indeterminate op take effect at
    any time after its invocation, or never. A number is an assumption that narrows the
    search: an indeterminate op takes effect before ``completed + horizon`` (``invoked +
    horizon`` if it has no ``completed``), or never.

    Without a horizon the search first makes quick attempts under narrow assumptions:
    ``horizon=0`` (effects land before the error surfaces: a lost reply), then 1, 4, 16
    and 64 times the median duration of a completed call, each with a small budget. A
    linearization found under an assumption is one without it too. If none is found,
    the unrestricted search decides; should it run out of budget, its "unknown" quotes
    the widest assumption under which a quick attempt proved the history wrong.

    The search stops with :attr:`Verdict.UNKNOWN` after exploring ``max_configs``
    configurations or after ``timeout`` seconds in all (None: no limit).

    Raises ``ValueError`` for a malformed op (a completed op without ``completed``, or
    completing before it was invoked) and whatever ``model.step`` raises for an unknown kind.
    """
    started = time.monotonic()
    ops = _validate(history, model)
    if horizon is not None or all(op.ok for op in ops):
        deadline = None if timeout is None else started + timeout
        return _search(ops, model, horizon, max_configs, deadline, started)
    durations = sorted(op.completed - op.invoked for op in ops if op.ok and op.completed)
    typical = durations[len(durations) // 2] if durations else 0.0
    deadline = None if timeout is None else started + timeout
    quick = _QUICK_CONFIGS_PER_OP * len(ops)
    used = 0
    refuted: tuple[float, Result] | None = None
    for assumed in sorted({0.0, typical, 4 * typical, 16 * typical, 64 * typical}):
        if max_configs is not None:
            quick = min(quick, (max_configs - used) // 8)
        attempt = _search(
            ops,
            model,
            assumed,
            quick,
            None if deadline is None else time.monotonic() + (deadline - time.monotonic()) / 8,
            started,
        )
        used += attempt.explored
        if attempt.ok:
            return replace(attempt, explored=used)
        if attempt.verdict is Verdict.NOT_LINEARIZABLE:
            refuted = (assumed, attempt)
    full = _search(
        ops,
        model,
        None,
        None if max_configs is None else max_configs - used,
        deadline,
        started,
    )
    full = replace(full, explored=full.explored + used)
    if full.verdict is Verdict.UNKNOWN and refuted is not None:
        assumed, attempt = refuted
        return replace(
            full,
            explanation=f"{full.explanation}\nassuming every indeterminate op took effect "
            f"within {assumed:g} s of its error, or never, it is not linearizable:\n"
            f"{attempt.explanation}",
            stuck_on=attempt.stuck_on,
        )
    return full


def _search(
    ops: list[Op],
    model: Model[Any],
    horizon: float | None,
    max_configs: int | None,
    deadline: float | None,
    started: float,
) -> Result:
    """The WGL search over ``ops``, until ``max_configs`` or the monotonic ``deadline``;
    ``started`` is when :func:`check` began."""
    n = len(ops)
    indet = [not op.ok for op in ops]
    remaining = n - sum(indet)

    # Entries: every op's call; the return of each completed op; the deadline of each
    # indeterminate op when there is a horizon. Sorted by time, calls first at equal
    # times, so touching intervals count as concurrent (the lenient reading).
    entries: list[tuple[float, int, int]] = []
    for i, op in enumerate(ops):
        entries.append((op.invoked, 0, i))
        if op.ok:
            assert op.completed is not None
            entries.append((op.completed, 1, i))
        elif horizon is not None:
            since = op.invoked if op.completed is None else max(op.invoked, op.completed)
            entries.append((since + horizon, 1, i))
    entries.sort()
    end = len(entries) + 1
    nxt = [*range(1, end + 1), end]
    prv = [_HEAD, *range(0, end)]
    node_op = [-1] * (end + 1)
    node_is_call = [False] * (end + 1)
    call_node = [0] * n
    ret_node = [0] * n  # 0: no return entry (an indeterminate op without a horizon)
    for node, (_, is_return, i) in enumerate(entries, start=1):
        node_op[node] = i
        node_is_call[node] = not is_return
        if is_return:
            ret_node[i] = node
        else:
            call_node[i] = node

    def lift(i: int) -> None:
        c = call_node[i]
        nxt[prv[c]] = nxt[c]
        prv[nxt[c]] = prv[c]
        r = ret_node[i]
        if r:
            nxt[prv[r]] = nxt[r]
            prv[nxt[r]] = prv[r]

    def unlift(i: int) -> None:
        r = ret_node[i]
        if r:
            nxt[prv[r]] = r
            prv[nxt[r]] = r
        c = call_node[i]
        nxt[prv[c]] = c
        prv[nxt[c]] = c

    def boundary() -> int:
        """The first pending return (or the end): only calls before it may go next."""
        node = nxt[_HEAD]
        while node != end and node_is_call[node]:
            node = nxt[node]
        return node

    step = model.step
    # (completed ops linearized, state) -> the (applied, resolved) indeterminate-op sets
    # with which that configuration failed. An indeterminate op is pending, skipped
    # (resolved: it never took effect) or applied. With the rest equal, a configuration
    # fails if one that has each op at least as open (pending > skipped > applied)
    # failed: every completion of the narrower one completes the wider one too.
    failed: dict[tuple[int, Hashable], list[tuple[int, int]]] = {}
    stack: list[tuple[int, Any, bool]] = []  # (op, state before it, took effect?)
    state: Any = model.initial
    done = 0  # bitset: completed ops linearized
    applied = 0  # bitset: indeterminate ops that took effect
    resolved = 0  # bitset: indeterminate ops applied or skipped
    # The moves from a configuration, in this order: (0) each completed op's call before
    # the boundary; (1) each indeterminate op's call before it; (2) skipping the
    # indeterminate op whose deadline is the boundary. ``node`` is the scan position.
    phase = 0
    node = nxt[_HEAD]
    explored = 0
    best: list[int] = []
    best_done = -1
    best_state: Any = state
    best_blocker = -1

    while True:
        if remaining == 0:
            order = tuple(ops[i] for i, _, took_effect in stack if took_effect)
            return Result(
                Verdict.LINEARIZABLE,
                f"{len(order)} ops linearized; {sum(indet)} indeterminate ops considered, "
                f"{sum(1 for o in order if not o.ok)} of them applied"
                + ("" if horizon is None else f" (horizon {horizon:g})"),
                order,
                explored=explored,
                elapsed=time.monotonic() - started,
            )
        cand = -1
        take = True
        while phase < 3:
            if node == end or not node_is_call[node]:
                # Past the boundary: on to the next phase.
                phase += 1
                if phase == 1:
                    node = nxt[_HEAD]
                elif phase == 2:
                    last = boundary()
                    phase = 3
                    if last != end and indet[node_op[last]]:
                        cand, take = node_op[last], False
                continue
            if indet[node_op[node]] == (phase == 1):
                cand = node_op[node]
                break
            node = nxt[node]

        if cand >= 0:
            bit = 1 << cand
            op = ops[cand]
            new_state: Any = state
            new_done, new_applied, new_resolved = done, applied, resolved | bit
            if take:
                new_state, result = step(state, op)
                if op.ok:
                    new_done, new_resolved = done | bit, resolved
                    fits = result == op.result
                else:
                    new_applied = applied | bit
                    # Applying it and changing nothing: the configuration without it is wider.
                    fits = new_state != state
                if not fits:
                    node = nxt[node]
                    continue
            masks = failed.get((new_done, new_state))
            if masks is not None and any(
                fa & ~new_applied == 0 and fr & ~new_resolved == 0 for fa, fr in masks
            ):
                if phase < 3:
                    node = nxt[node]
                continue
            explored += 1
            if (max_configs is not None and explored > max_configs) or (
                deadline is not None and explored % 1024 == 0 and time.monotonic() > deadline
            ):
                return Result(
                    Verdict.UNKNOWN,
                    f"gave up after {explored - 1} configurations in "
                    f"{time.monotonic() - started:.2f} s; the deepest prefix reached holds "
                    f"{max(best_done, 0)} of {n - sum(indet)} completed ops",
                    tuple(ops[i] for i in best),
                    explored=explored - 1,
                    elapsed=time.monotonic() - started,
                )
            stack.append((cand, state, take))
            state, done, applied, resolved = new_state, new_done, new_applied, new_resolved
            if op.ok:
                remaining -= 1
            lift(cand)
            phase, node = 0, nxt[_HEAD]
            continue

        # Every move from here fails: remember that, and backtrack.
        depth = done.bit_count()
        if depth > best_done:
            last = boundary()
            best_done, best_state = depth, state
            best_blocker = node_op[last] if last != end else -1
            best = [i for i, _, took_effect in stack if took_effect]
        if not stack:
            return _refuted(ops, model, best, best_state, best_blocker, explored, started)
        failed.setdefault((done, state), []).append((applied, resolved))
        i, state, took_effect = stack.pop()
        unlift(i)
        bit = 1 << i
        if not indet[i]:
            done &= ~bit
            remaining += 1
            phase, node = 0, nxt[call_node[i]]
        elif took_effect:
            applied &= ~bit
            resolved &= ~bit
            phase, node = 1, nxt[call_node[i]]
        else:
            resolved &= ~bit
            phase = 3


def assert_linearizable(history: Iterable[Op], model: Model[Any], **budget: Any) -> Result:
    """:func:`check`, raising ``AssertionError`` with the explanation unless linearizable."""
    result = check(history, model, **budget)
    assert result.ok, str(result)
    return result


def _validate(history: Iterable[Op], model: Model[Any]) -> list[Op]:
    ops: list[Op] = []
    for op in history:
        if op.ok:
            if op.completed is None:
                raise ValueError(f"a completed op needs a completion time: {op}")
            if op.completed < op.invoked:
                raise ValueError(f"op completes before it was invoked: {op}")
        elif op.kind in model.read_only:
            continue  # an indeterminate read changes nothing and constrains nothing
        ops.append(op)
    return ops


def _refuted(
    ops: Sequence[Op],
    model: Model[Any],
    best: list[int],
    state: Any,
    blocker: int,
    explored: int,
    started: float,
) -> Result:
    prefix = tuple(ops[i] for i in best)
    completed = sum(1 for o in ops if o.ok)
    lines = [
        f"no linearization of {completed} completed ops ({len(ops) - completed} "
        f"indeterminate); the longest linearizable prefix holds "
        f"{sum(1 for o in prefix if o.ok)} completed ops, ending in state {state!r}"
    ]
    lines += [f"  ... {o.describe()}" for o in prefix[-3:]]
    stuck = ops[blocker] if blocker >= 0 else None
    if stuck is not None:
        _, expected = model.step(state, stuck)
        lines.append(
            f"then cannot place {stuck.describe()}: from that state the model returns "
            f"{expected!r} (and no other pending op can go first)"
        )
    return Result(
        Verdict.NOT_LINEARIZABLE,
        "\n".join(lines),
        prefix,
        stuck,
        explored,
        time.monotonic() - started,
    )


# --- models of our API -----------------------------------------------------------------

RegisterState = tuple[Hashable, int] | None
"""A plain session value: ``(value, when)`` as last written, or None when absent/cleared."""

HistoryState = tuple[tuple[int, Hashable], ...]
"""A history session value: its versions ``(when, value)``, oldest first (value None: a clear)."""


def _visible(state: RegisterState, when: int) -> Hashable:
    if state is None or state[1] > when:
        return None  # look-ahead: a value written for a later time is invisible
    return state[0]


def _register_step(state: RegisterState, op: Op) -> tuple[RegisterState, Any]:
    if op.kind == "get":
        (when,) = op.args
        return state, _visible(state, when)
    if op.kind == "set":
        value, when = op.args
        return (None if value is None else (value, when)), None
    if op.kind == "update_add":
        delta, when = op.args
        new = (_visible(state, when) or 0) + delta
        return (new, when), new
    raise ValueError(f"register model has no op {op.kind!r}")


def register_model() -> Model[RegisterState]:
    """A plain session value with look-ahead protection.

    * ``set(value, when)`` -> None: overwrite unconditionally; ``value`` None clears;
    * ``get(when)`` -> the value if it was written for a time ``<= when``, else None;
    * ``update_add(delta, when)`` -> ``(get(when) or 0) + delta``, stored at ``when``.
    """
    return Model("register", None, _register_step, frozenset({"get"}))


def _as_of(state: HistoryState, when: int) -> Hashable:
    for at, value in reversed(state):
        if at <= when:
            return value
    return None


def history_model(max_versions: int | None = None) -> Model[HistoryState]:
    """A history session value (``history=True``): as-of versions.

    * ``set(value, when)`` -> None: drop every version at or after ``when``, add
      ``(when, value)`` (None records a clear), keep the newest ``max_versions``;
    * ``get(when)`` -> the value of the newest version at or before ``when``, else None;
    * ``update_add(delta, when)`` -> ``(get(when) or 0) + delta``, written as ``set``.
    """

    def write(state: HistoryState, value: Hashable, when: int) -> HistoryState:
        kept = tuple(v for v in state if v[0] < when) + ((when, value),)
        return kept if max_versions is None else kept[-max_versions:]

    def step(state: HistoryState, op: Op) -> tuple[HistoryState, Any]:
        if op.kind == "get":
            (when,) = op.args
            return state, _as_of(state, when)
        if op.kind == "set":
            value, when = op.args
            return write(state, value, when), None
        if op.kind == "update_add":
            delta, when = op.args
            new = (_as_of(state, when) or 0) + delta
            return write(state, new, when), new
        raise ValueError(f"history model has no op {op.kind!r}")

    name = "history" if max_versions is None else f"history(max_versions={max_versions})"
    return Model(name, (), step, frozenset({"get"}))
