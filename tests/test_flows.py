"""The operations of sessionstore.value_flows and sessionstore.event_flows as state
machines, driven without I/O.

Each test plays a flow against a script (as h11 tests its state machine): every step
the flow yields must be the next one scripted, a backend ``Call`` by its contract
method (``sessionstore.contracts``) with exactly the scripted arguments, a ``Sleep`` or
an ``Apply``; the scripted result is sent back, or the scripted error thrown in where
the flow yielded. A flow that yields a step out of order, or ends before its script
does, fails the test. Nothing sleeps: a back-off is a yielded ``Sleep``, counted.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

from sessionstore import event_flows, flows, value_flows
from sessionstore.backoff import LOST_RACE
from sessionstore.contracts import EventBackend, EventBatch, Refused, Stored, ValueBackend
from sessionstore.drain import OpenWriters
from sessionstore.drive import drive
from sessionstore.errors import (
    ConcurrentModificationError,
    InvalidArgumentError,
    SeqConflictError,
    SessionBusyError,
    SessionDisposedError,
    SessionExistsError,
    SessionNotFoundError,
    StoreClosedError,
    StoreUnavailableError,
)
from sessionstore.flows import Apply, Call, Sleep
from sessionstore.leases import Lease
from sessionstore.models import EARLIEST_TIME, SessionEvent, SessionHeader, SessionInfo
from sessionstore.results import LoadedSession
from sessionstore.session_state import SessionState, session_state
from sessionstore.store_state import Lifecycle, PendingSessions
from sessionstore.writer import SessionWriter
from sessionstore.writer_buffer import WriterBuffer, WriterContext, open_buffer

SID = "s-1"
OWNER = "token-a"
LEASE = Lease(OWNER, 7)
WHEN = 1_700_000_000_000


class Matches:
    """An expected argument checked by a predicate (what the flow computes itself)."""

    def __init__(self, check: Callable[[Any], bool], what: str) -> None:
        self.check = check
        self.what = what

    def __eq__(self, other: object) -> bool:
        return bool(self.check(other))

    def __repr__(self) -> str:
        return self.what


ANY = Matches(lambda _: True, "ANY")


def batch_of(field: str, expected: tuple[Any, ...]) -> Matches:
    """An ``EventBatch`` whose events' ``field`` are ``expected``, in order."""
    return Matches(
        lambda batch: (
            isinstance(batch, EventBatch)
            and [getattr(event, field) for event in batch.events] == list(expected)
        ),
        f"batch of {field}s {list(expected)}",
    )


def seqs(*expected: int) -> Matches:
    return batch_of("seq", expected)


def types(*expected: str) -> Matches:
    return batch_of("type", expected)


class Step:
    """One scripted step: what the flow must yield, and what it gets back."""

    def __init__(self, expected: Call | type, reply: Any = None, error: Any = None) -> None:
        self.expected = expected
        self.reply = reply
        self.error = error

    def __repr__(self) -> str:
        return describe(self.expected)


def call(
    method: Callable[..., Any], *args: Any, returns: Any = None, raises: Any = None, **kw: Any
) -> Step:
    return Step(Call(method, *args, **kw), returns, raises)


#: A back-off the flow must yield (its seconds are recorded, never slept).
PAUSE = Step(Sleep)
#: User code the flow must hand over (it is run, and what it saw is recorded).
APPLY = Step(Apply)


def swap(state: SessionState, expected: Stored | None, payload: Any = ANY, **reply: Any) -> Step:
    """A plain update's compare-and-swap (at ``WHEN``, no ttl)."""
    return call(ValueBackend.swap, state.key, expected, payload, WHEN, ttl_ms=None, **reply)


def describe(step: object) -> str:
    if isinstance(step, Call):
        args = [repr(arg) for arg in step.args] + [f"{k}={v!r}" for k, v in step.kwargs.items()]
        return f"{step.name}({', '.join(args)})"
    return repr(step)


class Script:
    """A flow's expected steps, and a driver that holds the flow to them."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.slept: list[float] = []
        self.applied: list[Any] = []

    def play(self, flow: Generator[Any, Any, Any]) -> Any:
        reply: Any = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    step = flow.throw(error) if error is not None else flow.send(reply)
                except StopIteration as done:
                    self.check_done()
                    return done.value
                except BaseException:
                    self.check_done()
                    raise
                reply, error = self.answer(step)
        finally:
            flow.close()

    def answer(self, step: object) -> tuple[Any, BaseException | None]:
        assert self.steps, f"the flow yielded {describe(step)} after its script ended"
        expected = self.steps.pop(0)
        want = expected.expected
        if want is Sleep:
            assert isinstance(step, Sleep), f"expected a back-off, got {describe(step)}"
            self.slept.append(step.seconds)
            return None, None
        if want is Apply:
            assert isinstance(step, Apply), f"expected user code, got {describe(step)}"
            self.applied.append(step.value)
            return step.fn(step.value), None
        assert isinstance(step, Call) and isinstance(want, Call), describe(step)
        assert (want.name, want.args, want.kwargs) == (step.name, step.args, step.kwargs), (
            f"expected {describe(want)}, got {describe(step)}"
        )
        return expected.reply, expected.error

    def check_done(self) -> None:
        assert not self.steps, f"the flow ended before {self.steps}"


def play(flow: Generator[Any, Any, Any], *steps: Step) -> Any:
    return Script(*steps).play(flow)


class Backend:
    """A backend whose every method is answered by a script: what ``flows.run`` and
    ``flows.arun`` (and the writer's shell) drive a flow against. Its method of a
    contract name stands for that contract method."""

    renews_leases = False

    def __init__(self, script: Script, asynchronous: bool = False) -> None:
        self.script = script
        self.asynchronous = asynchronous

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(ValueBackend, name, None) or getattr(EventBackend, name)

        def answer(*args: Any, **kwargs: Any) -> Any:
            reply, error = self.script.answer(Call(method, *args, **kwargs))
            if error is not None:
                raise error
            return reply

        async def aanswer(*args: Any, **kwargs: Any) -> Any:
            return answer(*args, **kwargs)

        return aanswer if self.asynchronous else answer


def plain(history: bool = False, max_versions: int | None = None, ttl: Any = None) -> SessionState:
    parts = ("BTC", "momentum", "binance", "1m")
    return session_state("ns", parts, "backtest", history, max_versions, ttl)


def header(session_id: str = SID, **fields: Any) -> SessionHeader:
    return SessionHeader(id=session_id, created_at=1, **fields)


def event(seq: int, type: str = "note", time: int = 10, **data: Any) -> SessionEvent:
    return SessionEvent(seq=seq, type=type, time=time, data=data)


def open_turn(length: int = 2) -> list[SessionEvent]:
    """A log whose last turn was interrupted: load closes it with a ``turn/end``."""
    return [event(0, "turn/start", turn=1)] + [event(seq) for seq in range(1, length)]


def closed_turn(length: int = 2) -> list[SessionEvent]:
    return open_turn(length - 1) + [event(length - 1, "turn/end", turn=1)]


def down() -> StoreUnavailableError:
    return StoreUnavailableError("the server is down")


def stored(value: Any, when: int = WHEN) -> Stored:
    return Stored(plain().encode(value), when)


# --- the documented limits ------------------------------------------------------------


def test_the_retry_limits_are_those_the_docs_state():
    """ConcurrentModificationError's docstring states both limits; the constants agree."""
    doc = " ".join((ConcurrentModificationError.__doc__ or "").split())
    update = re.search(r"``update\(\)`` lost ([\d,]+) races in a row", doc)
    load = re.search(r"overtaken by a concurrent append ([\d,]+) times in a row", doc)
    assert update and load, doc
    assert int(update.group(1).replace(",", "")) == value_flows.UPDATE_ATTEMPTS == 1000
    assert int(load.group(1).replace(",", "")) == event_flows.REPAIR_ATTEMPTS == 50


@pytest.mark.parametrize("asynchronous", [False, True])
def test_both_runners_call_the_contract_method_and_hand_user_code_its_value(asynchronous):
    """``run`` and ``arun`` turn a ``Call`` into the backend method of its name and an
    ``Apply`` into a call of the user's function (awaited by ``arun``)."""
    state = plain()
    state.initialised = True
    script = Script(
        call(ValueBackend.read, state.key, returns=stored(1)),
        swap(state, stored(1), returns=Refused(stored(4))),
        swap(state, stored(4), state.encode(5), returns=True),
    )
    backend = Backend(script, asynchronous)
    seen: list[Any] = []

    def bump(value: Any) -> Any:
        seen.append(value)
        return value + 1

    async def abump(value: Any) -> Any:
        return bump(value)

    if asynchronous:
        flow = value_flows.update(state, Lifecycle(), abump, WHEN)
        assert asyncio.run(flows.arun(flow, backend)) == 5
    else:
        assert flows.run(value_flows.update(state, Lifecycle(), bump, WHEN), backend) == 5
    assert seen == [1, 4]
    script.check_done()


# --- session values -------------------------------------------------------------------


def test_get_data_prepares_once_then_reads():
    state, lifecycle = plain(), Lifecycle()
    first = play(
        value_flows.get_data(state, lifecycle, WHEN),
        call(ValueBackend.prepare, state.key),
        call(ValueBackend.read, state.key, returns=stored({"a": 1})),
    )
    again = play(value_flows.get_data(state, lifecycle, WHEN), call(ValueBackend.read, state.key))
    assert (first, again) == ({"a": 1}, None)


@pytest.mark.parametrize(
    ("found", "seen"),
    [
        (stored(7, WHEN + 1), None),  # written for a later time: not visible yet
        (stored(7, WHEN), 7),
        (Stored(None, WHEN), None),  # a clear
        (None, None),
    ],
)
def test_get_data_does_not_look_ahead(found, seen):
    state = plain()
    state.initialised = True
    read = call(ValueBackend.read, state.key, returns=found)
    assert play(value_flows.get_data(state, Lifecycle(), WHEN), read) == seen


def test_a_cached_record_is_read_as_get_data_reads_it():
    state = plain()
    assert value_flows.get_cached(state, Lifecycle(), stored(2, WHEN + 1), WHEN) is None
    assert value_flows.get_cached(state, Lifecycle(), stored(2, WHEN), WHEN) == 2
    # The next update starts from the cached record.
    state.initialised = True
    updated = play(
        value_flows.update(state, Lifecycle(), lambda v: v + 1, WHEN),
        APPLY,
        swap(state, stored(2), state.encode(3), returns=True),
    )
    assert updated == 3


def test_a_history_handle_reads_as_of_when_and_hides_a_later_version():
    state = plain(history=True)
    state.initialised = True
    steps = call(ValueBackend.read_as_of, state.key, WHEN, returns=stored(3, WHEN + 5))
    assert play(value_flows.get_data(state, Lifecycle(), WHEN), steps) is None
    steps = call(ValueBackend.read_as_of, state.key, WHEN, returns=stored(3, WHEN - 5))
    assert play(value_flows.get_data(state, Lifecycle(), WHEN), steps) == 3


def test_a_closed_store_or_disposed_handle_does_no_io():
    state, closed = plain(), Lifecycle()
    closed.closed = True
    with pytest.raises(StoreClosedError):
        play(value_flows.get_data(state, closed, WHEN))
    state.disposed = True
    with pytest.raises(SessionDisposedError):
        play(value_flows.update(state, Lifecycle(), lambda v: v, WHEN))


def test_set_data_writes_plain_or_a_version():
    state = plain(ttl=5)
    state.initialised = True
    payload = state.encode({"x": 1})
    play(
        value_flows.set_data(state, Lifecycle(), {"x": 1}, WHEN),
        call(ValueBackend.write, state.key, payload, WHEN, ttl_ms=5000),
    )
    history = plain(history=True, max_versions=3)
    history.initialised = True
    play(
        value_flows.set_data(history, Lifecycle(), {"x": 1}, WHEN),
        call(ValueBackend.write_version, history.key, payload, WHEN, 3, ttl_ms=None),
    )


def test_update_starts_from_the_record_a_write_left_and_reads_after_a_failed_write():
    state = plain()
    state.initialised = True
    play(
        value_flows.set_data(state, Lifecycle(), 1, WHEN),
        call(ValueBackend.write, state.key, ANY, WHEN, ttl_ms=None),
    )
    script = Script(APPLY, swap(state, stored(1), state.encode(2), returns=True))
    assert script.play(value_flows.update(state, Lifecycle(), lambda v: v + 1, WHEN)) == 2
    assert script.applied == [1]

    # A write whose outcome is unknown leaves nothing to start from: the next update reads.
    with pytest.raises(StoreUnavailableError):
        play(
            value_flows.set_data(state, Lifecycle(), 5, WHEN),
            call(
                ValueBackend.write,
                state.key,
                ANY,
                WHEN,
                ttl_ms=None,
                raises=StoreUnavailableError("lost"),
            ),
        )
    updated = play(
        value_flows.update(state, Lifecycle(), lambda v: v + 1, WHEN),
        call(ValueBackend.read, state.key, returns=stored(5)),
        APPLY,
        swap(state, stored(5), state.encode(6), returns=True),
    )
    assert updated == 6


def test_a_refused_swap_is_retried_at_once_with_the_record_it_returned():
    state = plain()
    state.initialised = True
    script = Script(
        call(ValueBackend.read, state.key, returns=stored(1)),
        APPLY,
        swap(state, stored(1), returns=Refused(stored(4))),
        APPLY,
        swap(state, stored(4), state.encode(5), returns=True),
    )
    assert script.play(value_flows.update(state, Lifecycle(), lambda v: v + 1, WHEN)) == 5
    assert script.applied == [1, 4] and script.slept == []


def lost_race(state: SessionState) -> list[Step]:
    """One race a plain update loses: a swap refused, its at-once retry refused too."""
    refused = Refused(stored(2))
    return [
        APPLY,
        swap(state, stored(1), returns=refused),
        APPLY,
        swap(state, stored(2), returns=refused),
    ]


def test_update_gives_up_after_update_attempts_lost_races_pausing_between_them():
    """The real limit: 1000 races lost, a yielded back-off after each but the last."""
    state = plain()
    state.initialised = True
    races = value_flows.UPDATE_ATTEMPTS
    read = call(ValueBackend.read, state.key, returns=stored(1))
    steps = [read, *lost_race(state)]
    for _ in range(races - 1):
        steps += [PAUSE, read, *lost_race(state)]
    script = Script(*steps)
    with pytest.raises(ConcurrentModificationError, match=f"lost {races} races in a row"):
        script.play(value_flows.update(state, Lifecycle(), lambda v: v + 1, WHEN))
    assert len(script.slept) == races - 1
    for lost, seconds in enumerate(script.slept, start=1):
        assert 0 <= seconds <= min(LOST_RACE.cap, LOST_RACE.base * 2**lost)


def test_a_race_won_after_losing_some_returns_what_was_stored(monkeypatch):
    monkeypatch.setattr(value_flows, "UPDATE_ATTEMPTS", 3)
    state = plain()
    state.initialised = True
    read = call(ValueBackend.read, state.key, returns=stored(1))
    steps = [read, *lost_race(state), PAUSE, read, *lost_race(state), PAUSE]
    steps += [
        call(ValueBackend.read, state.key, returns=stored(9)),
        APPLY,
        swap(state, stored(9), state.encode(10), returns=True),
    ]
    script = Script(*steps)
    assert script.play(value_flows.update(state, Lifecycle(), lambda v: v + 1, WHEN)) == 10
    assert len(script.slept) == 2


def test_a_history_update_that_loses_backs_off_then_reads_as_of_again(monkeypatch):
    """A refused version swap returns no record: each refusal is a lost race."""
    monkeypatch.setattr(value_flows, "UPDATE_ATTEMPTS", 2)
    state = plain(history=True, max_versions=2)
    state.initialised = True

    def attempt(found: Stored, done: bool) -> list[Step]:
        return [
            call(ValueBackend.read_as_of, state.key, WHEN, returns=found),
            APPLY,
            call(
                ValueBackend.swap_version, state.key, found, ANY, WHEN, 2, ttl_ms=None, returns=done
            ),
        ]

    script = Script(*attempt(stored(1), False), PAUSE, *attempt(stored(3), True))
    assert script.play(value_flows.update(state, Lifecycle(), lambda v: v * 10, WHEN)) == 30
    assert script.applied == [1, 3]
    # History handles remember nothing: the next update reads first again.
    script = Script(*attempt(stored(1), False), PAUSE, *attempt(stored(1), False))
    with pytest.raises(ConcurrentModificationError, match="lost 2 races"):
        script.play(value_flows.update(state, Lifecycle(), lambda v: v, WHEN))
    assert len(script.slept) == 1


def test_delete_value_leaves_the_handle_knowing_nothing_is_there():
    state = plain()
    state.initialised = True
    removed = play(
        value_flows.delete_value(state, Lifecycle()),
        call(ValueBackend.forget, state.key, returns=1),
    )
    assert removed is True
    # It starts from "nothing there" without reading.
    updated = play(
        value_flows.update(state, Lifecycle(), lambda v: [v], WHEN),
        APPLY,
        swap(state, None, state.encode([None]), returns=True),
    )
    assert updated == [None]


# --- event logs: create, append, delete -----------------------------------------------


def test_create_of_a_stored_id_raises_and_leaves_nothing_pending():
    pending = PendingSessions()
    with pytest.raises(SessionExistsError):
        play(
            event_flows.create(pending, Lifecycle(), header(), None),
            call(EventBackend.exists, SID, returns=True),
        )
    assert pending.lookup(SID) == (None, None)
    play(
        event_flows.create(pending, Lifecycle(), header(), 60_000),
        call(EventBackend.exists, SID, returns=False),
    )
    assert pending.lookup(SID) == (header(), 60_000)
    with pytest.raises(SessionExistsError):  # pending here: refused without asking the backend
        play(event_flows.create(pending, Lifecycle(), header(), None))


def test_append_materialises_a_pending_session_only_once_written():
    pending = PendingSessions()
    pending.add(header(), 60_000)
    events = [event(0), event(1)]
    conflict = SeqConflictError(SID, 0, 0, "another store wrote it first")
    with pytest.raises(SeqConflictError):
        play(
            event_flows.append(pending, Lifecycle(), SID, events),
            call(EventBackend.append, SID, seqs(0, 1), header(), ttl_ms=60_000, raises=conflict),
        )
    with pytest.raises(StoreUnavailableError):  # a lost reply: applied or not, unknown
        play(
            event_flows.append(pending, Lifecycle(), SID, events),
            call(
                EventBackend.append,
                SID,
                seqs(0, 1),
                header(),
                ttl_ms=60_000,
                raises=StoreUnavailableError("lost"),
            ),
        )
    assert pending.lookup(SID) == (header(), 60_000)
    # The same batch again: an applied replay is answered with its next seq.
    replayed = play(
        event_flows.append(pending, Lifecycle(), SID, events),
        call(EventBackend.append, SID, seqs(0, 1), header(), ttl_ms=60_000, returns=2),
    )
    assert replayed == 2 and pending.lookup(SID) == (None, None)
    # Materialised: later appends carry no header.
    later = play(
        event_flows.append(pending, Lifecycle(), SID, [event(2)]),
        call(EventBackend.append, SID, seqs(2), None, ttl_ms=None, returns=3),
    )
    assert later == 3


def test_an_empty_append_reads_the_next_seq_unless_pending():
    pending = PendingSessions()
    read = call(EventBackend.read, SID, 0, returns=(header(), [event(0)]))
    assert play(event_flows.append(pending, Lifecycle(), SID, []), read) == 1
    pending.add(header())
    assert play(event_flows.append(pending, Lifecycle(), SID, [])) == 0


def test_deleting_a_pending_session_touches_the_backend_only_if_it_was_materialised():
    pending = PendingSessions()
    pending.add(header())
    play(
        event_flows.delete_session(pending, Lifecycle(), SID),
        call(EventBackend.exists, SID, returns=False),
    )
    assert pending.lookup(SID) == (None, None)
    pending.add(header())
    play(
        event_flows.delete_session(pending, Lifecycle(), SID),
        call(EventBackend.exists, SID, returns=True),
        call(EventBackend.delete, SID),
    )
    with pytest.raises(SessionNotFoundError):
        play(
            event_flows.delete_session(pending, Lifecycle(), SID),
            call(EventBackend.delete, SID, raises=SessionNotFoundError(SID)),
        )


# --- load and its repair --------------------------------------------------------------


def test_load_of_a_balanced_log_writes_nothing():
    found = play(
        event_flows.load(Lifecycle(), SID),
        call(EventBackend.lease_busy, SID, None, returns=False),
        call(EventBackend.read, SID, 0, repair=True, returns=(header(), closed_turn())),
    )
    assert found == LoadedSession(header(), closed_turn())


def test_load_of_a_session_a_writer_holds_reads_nothing():
    with pytest.raises(SessionBusyError):
        play(
            event_flows.load(Lifecycle(), SID),
            call(EventBackend.lease_busy, SID, None, returns=True),
        )


def test_load_appends_the_closers_fenced_by_the_owner():
    loaded = play(
        event_flows.load(Lifecycle(), SID, LEASE),
        call(EventBackend.lease_busy, SID, OWNER, returns=False),
        call(EventBackend.read, SID, 0, repair=True, returns=(header(), open_turn(2))),
        call(EventBackend.append, SID, types("turn/end"), None, lease=LEASE, returns=3),
    )
    assert [e.type for e in loaded.events] == ["turn/start", "note", "turn/end"]
    assert [e.seq for e in loaded.events] == [0, 1, 2]


def overtaken(length: int) -> list[Step]:
    """A repair whose closers a concurrent append overtook."""
    conflict = SeqConflictError(SID, length + 1, length, "a concurrent append")
    return [
        call(EventBackend.read, SID, 0, repair=True, returns=(header(), open_turn(length))),
        call(EventBackend.append, SID, seqs(length), None, lease=None, raises=conflict),
    ]


def test_load_re_reads_when_a_concurrent_append_overtakes_its_repair(monkeypatch):
    monkeypatch.setattr(event_flows, "REPAIR_ATTEMPTS", 3)
    busy = call(EventBackend.lease_busy, SID, None, returns=False)
    loaded = play(
        event_flows.load(Lifecycle(), SID),
        busy,
        *overtaken(2),
        *overtaken(3),
        call(EventBackend.read, SID, 0, repair=True, returns=(header(), open_turn(4))),
        call(EventBackend.append, SID, seqs(4), None, lease=None, returns=5),
    )
    assert [e.seq for e in loaded.events] == [0, 1, 2, 3, 4]
    # The other appender closed the turn itself: nothing left to write.
    assert play(
        event_flows.load(Lifecycle(), SID),
        busy,
        *overtaken(2),
        call(EventBackend.read, SID, 0, repair=True, returns=(header(), closed_turn(4))),
    ) == LoadedSession(header(), closed_turn(4))


def test_load_gives_up_after_repair_attempts_overtaken_repairs():
    """The real limit: 50 reads, each repair overtaken, then ConcurrentModificationError."""
    steps = [call(EventBackend.lease_busy, SID, None, returns=False)]
    for attempt in range(event_flows.REPAIR_ATTEMPTS):
        steps += overtaken(2 + attempt)
    with pytest.raises(ConcurrentModificationError, match="kept changing during load"):
        play(event_flows.load(Lifecycle(), SID), *steps)


def test_load_raises_what_is_not_a_lost_race():
    with pytest.raises(StoreUnavailableError):
        play(
            event_flows.load(Lifecycle(), SID),
            call(EventBackend.lease_busy, SID, None, returns=False),
            call(EventBackend.read, SID, 0, repair=True, returns=(header(), open_turn(2))),
            call(
                EventBackend.append,
                SID,
                seqs(2),
                None,
                lease=None,
                raises=down(),
            ),
        )


def test_inspect_closes_the_turn_without_writing_or_looking_at_the_lease():
    found = play(
        event_flows.inspect_session(Lifecycle(), SID),
        call(EventBackend.read, SID, 0, returns=(header(), open_turn(2))),
    )
    assert [e.type for e in found.events] == ["turn/start", "note", "turn/end"]


# --- writers and their lease ----------------------------------------------------------

ACQUIRE = call(EventBackend.acquire_lease, SID, OWNER, 30_000, returns=LEASE.epoch)
RENEW = call(EventBackend.renew_lease, SID, LEASE, 30_000, returns=True)
RELEASE = call(EventBackend.release_lease, SID, OWNER)


def open_writer(pending: PendingSessions | None = None) -> Generator[Any, Any, Any]:
    pending = pending or PendingSessions()
    return event_flows.open_writer(pending, Lifecycle(), header(), None, OWNER, 30_000)


def loading(
    events: list[SessionEvent] | None = None,
    stored_header: SessionHeader | None = None,
    owner: Any = OWNER,
    **reply: Any,
) -> list[Step]:
    """What an opening writer's load reads: its lease not busy, then the log."""
    found = (stored_header or header(), events or [])
    return [
        call(EventBackend.lease_busy, SID, owner, returns=False),
        call(EventBackend.read, SID, 0, repair=True, **(reply or {"returns": found})),
    ]


def test_a_writer_continues_after_the_repaired_log_and_keeps_its_lease():
    events = [event(0, time=5), event(1, time=9)]
    assert play(open_writer(), ACQUIRE, *loading(events)) == (2, 9, LEASE)
    position = play(
        open_writer(),
        ACQUIRE,
        *loading(open_turn(2)),
        call(EventBackend.append, SID, types("turn/end"), None, lease=LEASE, returns=3),
    )
    assert position == (3, 10, LEASE)


def test_a_writer_of_a_new_session_creates_it_pending():
    pending = PendingSessions()
    missing = loading(raises=SessionNotFoundError(SID))
    assert play(
        open_writer(pending), ACQUIRE, *missing, call(EventBackend.exists, SID, returns=False)
    ) == (0, EARLIEST_TIME, LEASE)
    assert pending.lookup(SID) == (header(), None)
    # Pending with the same header: opened again without asking whether it exists.
    assert play(open_writer(pending), ACQUIRE, *missing) == (0, EARLIEST_TIME, LEASE)


def test_a_lease_held_by_another_writer_is_not_released():
    with pytest.raises(SessionBusyError):
        play(open_writer(), call(EventBackend.acquire_lease, SID, OWNER, 30_000, returns=0))


def differing_pending() -> PendingSessions:
    pending = PendingSessions()
    pending.add(header(cwd="/elsewhere"))
    return pending


@pytest.mark.parametrize(
    ("name", "pending", "steps", "error"),
    [
        (
            "busy at load",
            None,
            [call(EventBackend.lease_busy, SID, OWNER, returns=True)],
            SessionBusyError,
        ),
        (
            "stored header differs",
            None,
            loading(stored_header=header(cwd="/x")),
            SessionExistsError,
        ),
        (
            "created meanwhile by another store",
            None,
            [
                *loading(raises=SessionNotFoundError(SID)),
                call(EventBackend.exists, SID, returns=True),
            ],
            SessionExistsError,
        ),
        (
            "pending header differs",
            differing_pending,
            loading(raises=SessionNotFoundError(SID)),
            SessionExistsError,
        ),
        ("read fails", None, loading(raises=down()), StoreUnavailableError),
        ("interrupted", None, loading(raises=KeyboardInterrupt()), KeyboardInterrupt),
        (
            "repair fails",
            None,
            [
                *loading(open_turn(2)),
                call(
                    EventBackend.append,
                    SID,
                    seqs(2),
                    None,
                    lease=LEASE,
                    raises=down(),
                ),
            ],
            StoreUnavailableError,
        ),
    ],
)
def test_a_writer_that_cannot_open_gives_its_lease_up(name, pending, steps, error):
    with pytest.raises(error) as raised:
        play(open_writer(pending() if pending else None), ACQUIRE, *steps, RELEASE)
    if error is SessionExistsError and "header" in name:
        assert raised.value.fields == ("cwd",)


def test_a_failed_release_does_not_hide_why_the_writer_could_not_open():
    with pytest.raises(SessionBusyError):
        play(
            open_writer(),
            ACQUIRE,
            call(EventBackend.lease_busy, SID, OWNER, returns=True),
            call(EventBackend.release_lease, SID, OWNER, raises=down()),
        )


def test_open_writer_gives_up_its_lease_when_its_repair_keeps_being_overtaken(monkeypatch):
    monkeypatch.setattr(event_flows, "REPAIR_ATTEMPTS", 2)
    conflict = SeqConflictError(SID, 3, 2, "a concurrent append")
    overtaken_repair = [
        call(EventBackend.read, SID, 0, repair=True, returns=(header(), open_turn(2))),
        call(EventBackend.append, SID, seqs(2), None, lease=LEASE, raises=conflict),
    ]
    with pytest.raises(ConcurrentModificationError):
        play(
            open_writer(),
            ACQUIRE,
            call(EventBackend.lease_busy, SID, OWNER, returns=False),
            *overtaken_repair,
            *overtaken_repair,
            RELEASE,
        )


def test_a_driver_that_leaves_open_writer_early_closes_it():
    """A driver that cannot resolve a step closes the flow (``drive``'s contract): a
    flow closed while holding the lease ends at once, raising nothing of its own (it
    cannot call the backend any more; the lease then expires)."""
    answered = iter([True])

    def resolve(step: Call) -> Any:
        if step.name != "acquire_lease":
            raise KeyboardInterrupt
        return lambda: next(answered)

    with pytest.raises(KeyboardInterrupt):
        drive(open_writer(), resolve)


def test_renew_lease_raises_once_taken_over_and_release_swallows_failures():
    play(event_flows.renew_lease(SID, LEASE, 30_000), RENEW)
    with pytest.raises(SessionBusyError, match="took its lease over"):
        play(
            event_flows.renew_lease(SID, LEASE, 30_000),
            call(EventBackend.renew_lease, SID, LEASE, 30_000, returns=False),
        )
    play(
        event_flows.release_lease(SID, OWNER),
        call(EventBackend.release_lease, SID, OWNER, raises=down()),
    )


class FakeDrain(OpenWriters):
    def schedule(self, writer: object, due: float) -> None:
        pass


def writer_buffer(renews: bool = False) -> tuple[WriterBuffer, WriterContext]:
    buffer = WriterBuffer(SID, 0, 0, lease=LEASE, lease_ms=30_000, renews=renews)
    return buffer, WriterContext(None, PendingSessions(), Lifecycle(), FakeDrain())


def appended(*batch: int, **reply: Any) -> Step:
    return call(EventBackend.append, SID, seqs(*batch), None, ttl_ms=None, lease=LEASE, **reply)


def test_the_drain_renews_a_due_lease_then_appends_one_batch_fenced_by_the_token():
    buffer, context = writer_buffer(renews=True)
    buffer.make("note", None)
    buffer.make("note", None)
    play(buffer.write(context, None), appended(0, 1, returns=2))  # the lease is not due
    assert buffer.durable_seq == 2
    buffer.renewed_at -= 60  # as if the lease had been held for a minute
    buffer.make("note", None)
    play(buffer.write(context, None), RENEW, appended(2, returns=3))
    assert buffer.durable_seq == 3 and not buffer.renewal_due(time.monotonic())


def test_a_flush_appends_batches_until_its_target(monkeypatch):
    monkeypatch.setattr("sessionstore.writer_buffer.BATCH_MAX", 2)
    buffer, context = writer_buffer()
    for _ in range(5):
        buffer.make("note", None)
    target = buffer.flush_target()
    play(
        buffer.write(context, target),
        appended(0, 1, returns=2),
        appended(2, 3, returns=4),
        appended(4, returns=5),
    )
    assert buffer.durable_seq == 5 and buffer.pending == []


def test_a_new_session_s_writer_materialises_it_with_its_first_batch():
    pending = PendingSessions()
    context = WriterContext(None, pending, Lifecycle(), FakeDrain())
    token = Matches(lambda owner: isinstance(owner, str) and len(owner) == 32, "a new token")
    buffer = play(
        open_buffer(context, header(), 0.2, 60_000, 30_000, True),
        call(EventBackend.acquire_lease, SID, token, 30_000, returns=3),
        call(EventBackend.lease_busy, SID, token, returns=False),
        call(EventBackend.read, SID, 0, repair=True, raises=SessionNotFoundError(SID)),
        call(EventBackend.exists, SID, returns=False),
    )
    assert buffer.lease.epoch == 3
    assert (buffer.next_seq, buffer.last_time, buffer.renews) == (0, EARLIEST_TIME, True)
    assert pending.lookup(SID) == (header(), 60_000)
    buffer.make("note", None)
    play(
        buffer.write(context, None),
        call(EventBackend.append, SID, seqs(0), header(), ttl_ms=60_000, lease=buffer.lease),
    )
    assert pending.lookup(SID) == (None, None)


def test_closing_a_writer_whose_flush_fails_still_gives_its_lease_up():
    token = Matches(lambda owner: isinstance(owner, str) and len(owner) == 32, "its token")
    fence = Matches(lambda lease: lease.owner == token and lease.epoch == 1, "its lease")
    script = Script(
        call(EventBackend.acquire_lease, SID, token, 30_000, returns=1),
        *loading([event(0, time=5)], owner=token),
    )
    context = WriterContext(Backend(script), PendingSessions(), Lifecycle(), FakeDrain())
    writer = SessionWriter(context, header(), window=0.2, ttl_ms=None, lease_ms=30_000)
    script.check_done()
    assert writer.emit("note").seq == 1
    lost = down()
    script.steps += [
        call(EventBackend.append, SID, seqs(1), None, ttl_ms=None, lease=fence, raises=lost),
        call(EventBackend.release_lease, SID, token),
    ]
    with pytest.raises(StoreUnavailableError):
        writer.close()
    script.check_done()


def test_a_batch_of_unknown_outcome_is_sent_again_exactly_and_its_replay_accepted():
    buffer, context = writer_buffer()
    buffer.make("note", None)
    buffer.make("note", None)
    sent: list[EventBatch] = []
    first = Matches(lambda batch: sent.append(batch) is None and batch == seqs(0, 1), "[0, 1]")
    lost = StoreUnavailableError("reply lost")
    with pytest.raises(StoreUnavailableError):
        play(
            buffer.write(context, None),
            call(EventBackend.append, SID, first, None, ttl_ms=None, lease=LEASE, raises=lost),
        )
    assert buffer.paused and buffer.unsettled == 2 and buffer.error is lost
    play(buffer.write(context, None))  # paused: the background drain waits for an emit
    buffer.make("note", None)  # resumes; the unsettled batch goes first, exactly as sent
    again = Matches(lambda batch: batch == sent[0], "the batch sent before")
    play(
        buffer.write(context, buffer.flush_target()),
        # Applied before: the store answers the replay with its next seq.
        call(EventBackend.append, SID, again, None, ttl_ms=None, lease=LEASE, returns=2),
        appended(2, returns=3),
    )
    assert buffer.durable_seq == 3 and buffer.error is None and buffer.unsettled == 0


def test_a_refused_seq_is_noted_and_the_batch_kept():
    buffer, context = writer_buffer()
    buffer.make("note", None)
    conflict = SeqConflictError(SID, 1, 0)
    with pytest.raises(SeqConflictError):
        play(buffer.write(context, buffer.flush_target()), appended(0, raises=conflict))
    assert buffer.error is conflict and buffer.paused and buffer.durable_seq == 0
    assert not buffer.fenced


@pytest.mark.parametrize("where", ["renewal", "append"])
def test_a_writer_whose_lease_was_taken_over_writes_nothing_more(where):
    buffer, context = writer_buffer(renews=True)
    buffer.make("note", None)
    if where == "renewal":
        buffer.renewed_at -= 60
        steps = [call(EventBackend.renew_lease, SID, LEASE, 30_000, returns=False)]
    else:
        steps = [appended(0, raises=SessionBusyError(SID, "another writer took its lease over"))]
    with pytest.raises(SessionBusyError):
        play(buffer.write(context, None), *steps)
    assert buffer.fenced and buffer.next_due() is None
    with pytest.raises(SessionBusyError):  # at once, without I/O
        play(buffer.write(context, buffer.flush_target()))
    play(buffer.release(), RELEASE)
    play(buffer.release())  # once only


# --- fork -----------------------------------------------------------------------------


def child_header(fork_seq: int) -> Matches:
    return Matches(
        lambda h: (h.id, h.parent_id, h.fork_seq, h.cwd) == ("child", SID, fork_seq, "/w"),
        f"header of child forked at {fork_seq}",
    )


def test_fork_copies_the_parent_s_events_in_one_append():
    events = [event(0), event(1)]
    child = play(
        event_flows.fork(PendingSessions(), Lifecycle(), SID, "child", None, 5_000),
        call(EventBackend.read, SID, 0, limit=None, returns=(header(cwd="/w"), events)),
        call(EventBackend.exists, "child", returns=False),
        call(EventBackend.append, "child", seqs(0, 1), child_header(2), ttl_ms=5_000, returns=2),
    )
    assert child == child_header(2)


def test_a_fork_of_no_events_is_created_pending():
    pending = PendingSessions()
    child = play(
        event_flows.fork(pending, Lifecycle(), SID, "child", 0, None),
        call(EventBackend.read, SID, 0, limit=0, returns=(header(cwd="/w"), [])),
        call(EventBackend.exists, "child", returns=False),
    )
    assert pending.lookup("child") == (child, None) and child == child_header(0)
    with pytest.raises(SessionExistsError):  # pending: refused before asking the backend
        play(
            event_flows.fork(pending, Lifecycle(), SID, "child", 0, None),
            call(EventBackend.read, SID, 0, limit=0, returns=(header(cwd="/w"), [])),
        )


def test_a_fork_past_the_parent_s_end_or_onto_a_stored_child_writes_nothing():
    with pytest.raises(InvalidArgumentError, match="has only 1 committed events"):
        play(
            event_flows.fork(PendingSessions(), Lifecycle(), SID, "child", 3, None),
            call(EventBackend.read, SID, 0, limit=3, returns=(header(), [event(0)])),
        )
    with pytest.raises(SessionExistsError):
        play(
            event_flows.fork(PendingSessions(), Lifecycle(), SID, "child", 1, None),
            call(EventBackend.read, SID, 0, limit=1, returns=(header(), [event(0)])),
            call(EventBackend.exists, "child", returns=True),
        )


# --- reads and listings -------------------------------------------------------------


def test_read_from_passes_its_range_and_listings_come_sorted():
    assert play(
        event_flows.read_from(Lifecycle(), SID, 3, 2),
        call(EventBackend.read, SID, 3, limit=2, returns=(header(), [event(3), event(4)])),
    ) == [event(3), event(4)]
    late, early = header("b"), SessionHeader(id="a", created_at=0)
    assert play(
        event_flows.list_sessions(Lifecycle()), call(EventBackend.list, returns=[late, early])
    ) == [early, late]
    infos = [SessionInfo(late, 0, None, None, False), SessionInfo(early, 0, None, None, False)]
    found = play(event_flows.list_info(Lifecycle()), call(EventBackend.list_info, returns=infos))
    assert [info.header for info in found] == [early, late]


def test_info_retention_size_and_prune_are_one_call_each():
    described = SessionInfo(header(), 3, 10, None, False)
    assert (
        play(event_flows.info(Lifecycle(), SID), call(EventBackend.info, SID, returns=described))
        is described
    )
    retention = call(EventBackend.set_retention, SID, 2000, returns=99)
    assert play(event_flows.set_retention(Lifecycle(), SID, 2), retention) == 99
    size = call(EventBackend.stored_bytes, SID, returns=12)
    assert play(event_flows.stored_bytes(Lifecycle(), SID), size) == 12
    now = Matches(lambda ms: abs(ms - time.time() * 1000) < 60_000, "now")
    assert play(event_flows.prune(Lifecycle()), call(EventBackend.prune, now, returns=4)) == 4
