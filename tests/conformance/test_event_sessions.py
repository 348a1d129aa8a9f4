"""EventLogContract, live sessions: the write-behind writer, repair as the harness
defines it, session metadata, leases and inspect, forks -- every backend, sync and async."""

from __future__ import annotations

import time

import pytest
from support import artifacts
from support.async_bridge import SyncView

from sessionstore import (
    InvalidArgumentError,
    NotJSONSerializableError,
    SessionBusyError,
    SessionExistsError,
    SessionHeader,
    SessionInfo,
    SessionNotFoundError,
    SessionStoreError,
    UnsupportedVersionError,
)
from sessionstore.harness import CLOSER_MESSAGES, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN
from sessionstore.leases import Lease

from .test_events import T, ev, header, seqs, started, turn_events


def reader(store, open_store, backend):
    """Another store on the same data (the same one for memory://)."""
    return store if backend == "memory" else open_store()


def wait_until(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def stored_count(store, session_id: str) -> int:
    try:
        return len(store.events.read_from(session_id, 0))
    except SessionNotFoundError:
        return 0


# --- the writer: snapshots ---------------------------------------------------------------


def test_emit_snapshots_data_so_later_changes_store_nothing(store):
    w = store.events.writer(header("w"))
    data = {"args": {"tags": ["a"]}}
    event = w.emit("note", data)
    data["args"]["tags"].append("changed")
    data["new"] = 1
    event.data["args"]["tags"].append("also changed")
    w.close()
    [stored] = store.events.read_from("w", 0)
    assert stored.data == {"args": {"tags": ["a"]}}
    assert event.seq == 0 and event.type == "note"


def test_a_bad_emit_raises_at_once_naming_type_seq_and_path_and_queues_nothing(store):
    w = store.events.writer(header("w"))
    w.emit("note", {"n": 0})
    with pytest.raises(NotJSONSerializableError) as caught:
        w.emit("tool/call", {"call_id": "c", "args": {"tags": {1, 2}}})
    assert (caught.value.event_type, caught.value.seq, caught.value.path) == (
        "tool/call",
        1,
        "$.args.tags",
    )
    assert w.emit("note", {"n": 1}).seq == 1
    w.close()
    assert [e.data for e in store.events.read_from("w", 0)] == [{"n": 0}, {"n": 1}]


# --- the writer: failure and retry -------------------------------------------------------


def paused(w) -> bool:
    """Whether ``w``'s background append failed and its background writing paused."""
    return w._buffer.paused


def _break_then_mend(store, w, h):
    """Make the writer's next append fail (its session is deleted under it), return a
    function that makes appends work again (the session is restored as it was)."""
    first = w.emit("note", {"n": 0})
    w.flush()
    store.events.delete(h.id)

    def mend() -> None:
        store.events.create(h)
        store.events.append(h.id, [first])

    return mend


def test_a_failed_background_append_is_retried_by_the_next_emit_in_order(store):
    h = header("w")
    w = store.events.writer(h, window=0.01)
    mend = _break_then_mend(store, w, h)
    w.emit("note", {"n": 1})
    assert wait_until(lambda: paused(w))  # the background append fails, and writing pauses
    mend()
    w.emit("note", {"n": 2})
    assert wait_until(lambda: stored_count(store, "w") == 3)
    assert [e.data["n"] for e in store.events.read_from("w", 0)] == [0, 1, 2]
    w.flush()  # the error was cleared when its batch was written: never raised
    w.close()


def test_a_failed_background_append_pauses_background_writing(store):
    h = header("w")
    w = store.events.writer(h, window=0.01)
    mend = _break_then_mend(store, w, h)
    w.emit("note", {"n": 1})
    assert wait_until(lambda: paused(w))
    mend()
    w._serve()  # as the drain does whenever the writer is due (a lease renewal, say)
    assert paused(w) and stored_count(store, "w") == 1  # no retry without new work
    w.close()
    assert stored_count(store, "w") == 2


def test_flush_retries_a_failed_batch_before_raising(store):
    h = header("w")
    w = store.events.writer(h, window=0.01)
    mend = _break_then_mend(store, w, h)
    w.emit("note", {"n": 1})
    assert wait_until(lambda: paused(w))
    with pytest.raises(SessionNotFoundError):
        w.flush()
    mend()
    w.flush()
    assert [e.data["n"] for e in store.events.read_from("w", 0)] == [0, 1]
    w.close()


def test_close_retries_a_failed_batch_before_raising(store):
    h = header("w")
    w = store.events.writer(h, window=0.01)
    mend = _break_then_mend(store, w, h)
    w.emit("note", {"n": 1})
    assert wait_until(lambda: paused(w))
    mend()
    w.close()
    assert [e.data["n"] for e in store.events.read_from("w", 0)] == [0, 1]


# --- the writer: its header --------------------------------------------------------------


def test_writer_of_a_stored_session_with_another_header_names_the_fields(store):
    h = started(store, "s-1", 2)
    other = SessionHeader(id="s-1", created_at=h.created_at, cwd="/elsewhere", fork_seq=3)
    with pytest.raises(SessionExistsError) as caught:
        store.events.writer(other)
    assert caught.value.fields == ("cwd", "fork_seq")
    assert "cwd" in str(caught.value) and "fork_seq" in str(caught.value)
    w = store.events.writer(h)  # the refused writer left no lease behind
    assert w.emit("note").seq == 2
    w.close()


# --- repair as the harness defines it -----------------------------------------------------


def test_a_call_of_a_step_that_ended_gets_no_closer(store):
    store.events.create(header())
    store.events.append(
        "s-1",
        turn_events(
            ("turn/start", {"turn": 1}),
            ("step/start", {"turn": 1, "step": 1}),
            ("assistant/message", {"turn": 1, "step": 1, "tool_calls": [{"id": "c-1"}]}),
            ("tool/call", {"turn": 1, "step": 1, "call_id": "c-1"}),
            ("step/end", {"turn": 1, "step": 1}),
        ),
    )
    closers = store.events.load("s-1").events[5:]
    assert [(e.type, e.data) for e in closers] == [
        ("turn/end", {"turn": 1, "reason": {"kind": "interrupted"}})
    ]


def test_only_the_open_steps_calls_get_closers(store):
    store.events.create(header())
    store.events.append(
        "s-1",
        turn_events(
            ("turn/start", {"turn": 1}),
            ("step/start", {"turn": 1, "step": 1}),
            ("assistant/message", {"turn": 1, "step": 1, "tool_calls": [{"id": "old"}]}),
            ("step/end", {"turn": 1, "step": 1}),
            ("step/start", {"turn": 1, "step": 2}),
            ("assistant/message", {"turn": 1, "step": 2, "tool_calls": [{"id": "new"}]}),
        ),
    )
    closers = store.events.load("s-1").events[6:]
    assert [e.type for e in closers] == ["tool/result", "step/end", "turn/end"]
    assert closers[0].data["call_id"] == "new" and closers[0].data["step"] == 2


def test_closers_tell_the_model_what_it_may_repeat(store):
    store.events.create(header())
    store.events.append(
        "s-1",
        turn_events(
            ("turn/start", {"turn": 1}),
            ("step/start", {"turn": 1, "step": 1}),
            (
                "assistant/message",
                {"turn": 1, "step": 1, "tool_calls": [{"id": "ran"}, {"id": "never"}]},
            ),
            ("tool/call", {"turn": 1, "step": 1, "call_id": "ran"}),
        ),
    )
    results = {e.data["call_id"]: e.data for e in store.events.load("s-1").events[4:6]}
    unknown, fresh = results["ran"], results["never"]
    assert unknown["error"]["code"] == TOOL_OUTCOME_UNKNOWN
    assert (
        unknown["content"] == unknown["error"]["message"] == CLOSER_MESSAGES[TOOL_OUTCOME_UNKNOWN]
    )
    for phrase in ("may or may not", "read-only or idempotent", "check", "ask the user"):
        assert phrase in unknown["content"]
    assert fresh["error"]["code"] == TOOL_NOT_STARTED
    assert fresh["content"] == CLOSER_MESSAGES[TOOL_NOT_STARTED]
    assert "never ran" in fresh["content"] and "safely be made again" in fresh["content"]


# --- session metadata --------------------------------------------------------------------


def test_info_gives_the_metadata_of_a_session(store):
    h = started(store, "s-1", 3)
    info = store.events.info("s-1")
    assert isinstance(info, SessionInfo)
    assert info == SessionInfo(h, 3, T + 2, None, False)


def test_last_time_is_the_time_of_the_last_committed_event_after_every_append(store):
    started(store, "s-1", 2)
    # Later seqs may carry earlier times: the last event counts, not the latest time.
    store.events.append("s-1", [ev(2, time=T - 100), ev(3, time=T - 50)])
    assert store.events.info("s-1").last_time == T - 47
    store.events.append("s-1", [ev(0), ev(1)])  # an applied replay writes nothing
    store.events.append("s-1", [ev(4, time=T + 1000)])
    info = store.events.info("s-1")
    assert (info.next_seq, info.last_time) == (5, T + 1004)
    assert [(i.next_seq, i.last_time) for i in store.events.list_info()] == [(5, T + 1004)]


def test_info_of_an_unknown_or_unmaterialised_session_raises_not_found(store):
    store.events.create(header("lazy"))
    for session_id in ("lazy", "nope"):
        with pytest.raises(SessionNotFoundError):
            store.events.info(session_id)


def test_info_gives_the_expiry_of_a_session_with_a_ttl(open_store):
    store = open_store(ttl=60)
    before = time.time() * 1000
    started(store, "s-1", 1)
    expires_at = store.events.info("s-1").expires_at
    assert expires_at is not None
    assert before + 59_000 <= expires_at <= time.time() * 1000 + 61_000


def test_info_leaves_a_torn_tail_out(store, backend, store_url, namespace):
    if backend == "memory":
        pytest.skip("memory:// keeps nothing that can tear")
    h = started(store, "s-1", 3)
    artifacts.tear_tail(backend, store_url, namespace, "s-1", store.events.locate(h), 3)
    info = store.events.info("s-1")
    assert (info.next_seq, info.last_time) == (3, T + 2)


def test_list_info_follows_the_order_of_list(store):
    for session_id, created in [("b", 2), ("a", 2), ("c", 1)]:
        started(store, session_id, 2, created_at=created)
    store.events.create(header("never-appended"))
    infos = store.events.list_info()
    assert [i.header for i in infos] == store.events.list()
    assert [(i.header.id, i.next_seq, i.last_time) for i in infos] == [
        ("c", 2, T + 1),
        ("a", 2, T + 1),
        ("b", 2, T + 1),
    ]


def test_info_of_an_unknown_version_names_the_log_and_says_what_to_do(
    store, backend, store_url, namespace
):
    if backend == "memory":
        pytest.skip("memory:// stores no format version")
    h = started(store, "s-1", 2)
    path = store.events.locate(h)
    artifacts.set_stored_version(backend, store_url, namespace, "s-1", path, 99)
    with pytest.raises(UnsupportedVersionError) as caught:
        store.events.info("s-1")
    error = caught.value
    assert error.where and "upgrade sessionstore" in str(error) and error.where in str(error)
    if path is not None:
        assert error.where == path


# --- leases and inspect ------------------------------------------------------------------


def test_a_live_writer_makes_load_and_a_second_writer_busy(store, open_store, backend):
    h = header("w")
    w = store.events.writer(h)
    w.emit("turn/start", {"turn": 1})
    w.flush()
    other = reader(store, open_store, backend)
    with pytest.raises(SessionBusyError) as caught:
        other.events.load("w")
    assert caught.value.session_id == "w" and isinstance(caught.value, SessionStoreError)
    with pytest.raises(SessionBusyError):
        other.events.writer(h)
    assert seqs(other.events.read_from("w", 0)) == [0]  # nothing was repaired
    w.close()
    assert [e.type for e in other.events.load("w").events] == ["turn/start", "turn/end"]


def test_info_says_whether_a_live_writer_holds_the_lease(store, open_store, backend):
    w = store.events.writer(header("w"))
    w.emit("note")
    w.flush()
    other = reader(store, open_store, backend)
    assert other.events.info("w").busy is True
    assert [i.busy for i in other.events.list_info()] == [True]
    w.close()
    assert other.events.info("w").busy is False


def test_plain_append_with_the_right_seq_stays_allowed_under_a_lease(store, open_store, backend):
    w = store.events.writer(header("w"))
    w.emit("note")
    w.flush()
    other = reader(store, open_store, backend)
    assert other.events.append("w", [ev(1)]) == 2
    w.close()


def on_backend(store, method: str, *args):
    """Call the event backend of ``store`` (sync or async) directly."""
    events = store.events
    if isinstance(events, SyncView):
        return events._bridge.run(getattr(events._target._backend, method), *args)
    return getattr(events._backend, method)(*args)


def lose_lease(store, w) -> None:
    """Give ``w``'s lease up behind its back, as its expiry while ``w`` was paused would
    (a file lock never expires): the next writer takes it over."""
    on_backend(store, "release_lease", w.session_id, w._buffer.lease.owner)


def paused_past_its_lease(store, open_store, backend, h):
    """A writer ``a`` of ``h`` that wrote its first event, then lost its lease (as if
    paused past it), and a store ``other`` on the same data to take it over."""
    a = store.events.writer(h)
    a.emit("note", {"by": "a", "n": 0})
    a.flush()
    lose_lease(store, a)
    return a, reader(store, open_store, backend)


def test_a_writer_whose_lease_was_taken_over_writes_nothing_more(store, open_store, backend):
    h = header("w")
    a, other = paused_past_its_lease(store, open_store, backend, h)
    b = other.events.writer(h)
    # A's next event has the stored next seq: only its lease refuses it.
    assert a.emit("note", {"by": "a", "n": 1}).seq == 1
    with pytest.raises(SessionBusyError) as caught:
        a.flush()
    assert caught.value.session_id == "w"
    assert seqs(other.events.read_from("w", 0)) == [0]
    assert b.emit("note", {"by": "b", "n": 1}).seq == 1
    b.flush()  # the rightful holder sees no error caused by A
    with pytest.raises(SessionBusyError):
        a.close()
    assert other.events.info("w").busy is True  # A's close left B's lease alone
    b.emit("note", {"by": "b", "n": 2})
    b.close()
    assert [e.data for e in store.events.read_from("w", 0)] == [
        {"by": "a", "n": 0},
        {"by": "b", "n": 1},
        {"by": "b", "n": 2},
    ]


def test_a_writer_whose_lease_was_taken_over_stays_fenced_off_once_the_taker_released_it(
    store, open_store, backend
):
    h = header("w")
    a, other = paused_past_its_lease(store, open_store, backend, h)
    other.events.writer(h).close()  # B takes the lease over, writes nothing, releases it
    # A's next event has the stored next seq and the lease is free: only its epoch,
    # older than B's, refuses it, at every flush.
    assert a.emit("note", {"by": "a", "n": 1}).seq == 1
    for _ in range(2):
        with pytest.raises(SessionBusyError) as caught:
            a.flush()
        assert caught.value.session_id == "w"
    c = other.events.writer(h)  # A never blocks a new writer
    assert c.emit("note", {"by": "c"}).seq == 1
    c.flush()
    assert on_backend(store, "renew_lease", "w", a._buffer.lease, 10_000) is False
    assert other.events.info("w").busy is True  # A's renewal took nothing back
    with pytest.raises(SessionBusyError):
        a.close()
    c.close()
    assert [e.data for e in store.events.read_from("w", 0)] == [{"by": "a", "n": 0}, {"by": "c"}]


def test_a_lease_taken_after_another_has_a_newer_epoch_and_renews_only_itself(
    store, open_store, backend
):
    first = on_backend(store, "acquire_lease", "w", "owner-a", 10_000)
    assert first > 0
    assert on_backend(store, "acquire_lease", "w", "owner-b", 10_000) == 0  # held by A
    assert on_backend(store, "acquire_lease", "w", "owner-a", 10_000) == first  # renewed
    lease_a = Lease("owner-a", first)
    assert on_backend(store, "renew_lease", "w", lease_a, 10_000) is True
    on_backend(store, "release_lease", "w", "owner-a")
    assert on_backend(store, "renew_lease", "w", lease_a, 10_000) is False  # released
    second = on_backend(store, "acquire_lease", "w", "owner-b", 10_000)
    assert second > first
    assert on_backend(store, "renew_lease", "w", lease_a, 10_000) is False
    on_backend(store, "release_lease", "w", "owner-b")
    assert on_backend(store, "acquire_lease", "w", "owner-a", 10_000) > second


def log_footprint(backend, store_url, namespace):
    """The stored logs (a live writer's lease, which it renews, left out)."""
    return [
        item
        for item in artifacts.footprint(backend, store_url, namespace)
        if not item.startswith("log_leases:") and not item.endswith(":lease")
    ]


def test_inspect_shows_a_live_session_balanced_without_writing(
    store, open_store, backend, store_url, namespace
):
    w = store.events.writer(header("w"))
    w.emit("turn/start", {"turn": 1})
    w.emit("step/start", {"turn": 1, "step": 1})
    w.flush()
    other = reader(store, open_store, backend)
    before = log_footprint(backend, store_url, namespace)
    seen = other.events.inspect("w")
    assert [e.type for e in seen.events] == ["turn/start", "step/start", "step/end", "turn/end"]
    assert seqs(other.events.read_from("w", 0)) == [0, 1]
    assert log_footprint(backend, store_url, namespace) == before
    w.close()
    assert other.events.load("w") == seen


def test_a_closed_writer_releases_its_lease_for_the_next(store, open_store, backend):
    h = header("w")
    store.events.writer(h).close()
    other = reader(store, open_store, backend)
    w = other.events.writer(h)
    w.emit("note")
    w.close()
    assert seqs(store.events.read_from("w", 0)) == [0]


@pytest.mark.parametrize("lease", [0, -1, "10", True, None, 10**6])
def test_writer_rejects_a_bad_lease(store, lease):
    with pytest.raises(InvalidArgumentError, match="lease"):
        store.events.writer(header("w"), lease=lease)


# --- forks -------------------------------------------------------------------------------


def test_a_fork_copies_the_parents_first_events_and_then_lives_apart(store):
    started(store, "p", 0)
    store.events.append("p", [ev(0, id="e-0"), ev(1, data={"x": [1]}), ev(2), ev(3)])
    child = store.events.fork("p", "c", at_seq=2)
    assert (child.id, child.parent_id, child.fork_seq, child.cwd) == (
        "c",
        "p",
        2,
        "/home/me/project",
    )
    assert store.events.load("c").header == child
    assert store.events.read_from("c", 0) == store.events.read_from("p", 0)[:2]
    store.events.append("p", [ev(4)])
    assert store.events.append("c", [ev(2, "child")]) == 3
    assert [e.type for e in store.events.read_from("c", 0)] == ["note", "note", "child"]
    assert seqs(store.events.read_from("p", 0)) == [0, 1, 2, 3, 4]


def test_a_fork_without_at_seq_copies_every_committed_event(store, open_store, backend):
    started(store, "p", 3)
    child = store.events.fork("p", "c")
    assert child.fork_seq == 3
    assert seqs(reader(store, open_store, backend).events.read_from("c", 0)) == [0, 1, 2]
    assert "c" in [h.id for h in store.events.list()]


def test_a_fork_inside_a_turn_closes_it_as_interrupted(store):
    store.events.create(header("p"))
    store.events.append(
        "p",
        turn_events(
            ("turn/start", {"turn": 1}),
            ("step/start", {"turn": 1, "step": 1}),
            ("step/end", {"turn": 1, "step": 1}),
            ("turn/end", {"turn": 1, "reason": {"kind": "done"}}),
        ),
    )
    store.events.fork("p", "c", at_seq=2)
    types = [e.type for e in store.events.load("c").events]
    assert types == ["turn/start", "step/start", "step/end", "turn/end"]
    assert store.events.load("c").events[-1].data["reason"] == {"kind": "interrupted"}


def test_a_fork_onto_an_existing_session_or_past_the_end_is_refused(store):
    started(store, "p", 3)
    started(store, "c", 1)
    with pytest.raises(SessionExistsError):
        store.events.fork("p", "c")
    with pytest.raises(InvalidArgumentError):
        store.events.fork("p", "d", at_seq=4)
    with pytest.raises(SessionNotFoundError):
        store.events.fork("nope", "e")
    assert seqs(store.events.read_from("c", 0)) == [0]
    assert sorted(h.id for h in store.events.list()) == ["c", "p"]


# --- the size of a session ---------------------------------------------------------------


def test_stored_bytes_grows_with_the_log_and_names_a_missing_session(store, open_store, backend):
    started(store, "small", count=1)
    started(store, "big", count=1)
    store.events.append("big", [ev(i, data={"text": "x" * 2000}) for i in range(1, 40)])
    other = reader(store, open_store, backend)
    small, big = other.events.stored_bytes("small"), other.events.stored_bytes("big")
    assert 0 < small < big and big >= 39 * 2000 * (0.5 if backend in artifacts.REDIS else 1)
    store.events.create(header("created-only"))
    for missing in ("created-only", "never"):
        with pytest.raises(SessionNotFoundError):
            store.events.stored_bytes(missing)
    with pytest.raises(InvalidArgumentError):
        store.events.stored_bytes("")


def test_the_librarys_own_checks_are_never_listed(store):
    """A check's session or value (a reserved name) left behind by a crash stays out of
    every listing; everything else is listed."""
    from sessionstore.results import PROBE_PREFIX, probe_name

    probe = probe_name("test")
    assert probe.startswith(PROBE_PREFIX)
    started(store, probe, count=1)
    started(store, "kept", count=1)
    store.session(probe, "s", "e", "1h").set_data(1, T)
    store.session("KEPT", "s", "e", "1h").set_data(1, T)
    assert [h.id for h in store.events.list()] == ["kept"]
    assert [i.header.id for i in store.events.list_info()] == ["kept"]
    assert [ref.symbol for ref in store.list_values()] == ["KEPT"]
    assert seqs(store.events.load(probe).events) == [0]  # still there, by its name


@pytest.mark.parametrize("name", ["~probe-BTCUSDT", "~probe-doctor-0123456789ab-x", "~probe-"])
def test_a_users_name_that_only_begins_like_a_check_is_listed(store, name):
    """Only the names the library's checks make are reserved: a user's session or value
    whose name merely begins with the same prefix is listed as any other."""
    started(store, name, count=1)
    store.session(name, "s", "e", "1h").set_data(1, T)
    assert [h.id for h in store.events.list()] == [name]
    assert [i.header.id for i in store.events.list_info()] == [name]
    assert [ref.symbol for ref in store.list_values()] == [name]
