"""ValueStoreContract: every value backend, through the sync and the async API."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from sessionstore import (
    ComputeTimeoutError,
    InvalidArgumentError,
    NotSerializableError,
    SessionDisposedError,
    SessionStoreError,
    StoreClosedError,
    value_flows,
)

T0 = 1_718_000_000_000
KEY = ("BTCUSDT", "llm-momentum", "binance", "1h")


def open_session(store, *parts: str, **options):
    return store.session(*(parts or KEY), **options)


# --- reads and look-ahead -------------------------------------------------------------


def test_get_returns_none_when_nothing_is_stored(store):
    assert open_session(store).get_data(T0) is None


def test_get_sees_a_value_written_for_the_same_or_an_earlier_time(store):
    s = open_session(store)
    s.set_data({"lastLlmSignal": "buy", "confirmedAt": T0}, T0)
    assert s.get_data(T0) == {"lastLlmSignal": "buy", "confirmedAt": T0}
    assert s.get_data(T0 + 3_600_000) == {"lastLlmSignal": "buy", "confirmedAt": T0}


def test_get_never_sees_a_value_written_for_a_later_time(store):
    s = open_session(store)
    s.set_data("future", T0 + 1)
    assert s.get_data(T0) is None


def test_a_later_write_replaces_the_record(store):
    s = open_session(store)
    s.set_data("first", T0)
    s.set_data("second", T0 + 10)
    assert s.get_data(T0 + 10) == "second"
    assert s.get_data(T0 + 5) is None


def test_an_earlier_write_replaces_what_a_previous_run_left(store):
    s = open_session(store)
    s.set_data("live run", T0 + 1_000)
    s.set_data("restarted backtest", T0)
    assert s.get_data(T0) == "restarted backtest"
    assert s.get_data(T0 + 1_000) == "restarted backtest"


def test_set_none_clears_the_value(store):
    s = open_session(store)
    s.set_data("x", T0)
    s.set_data(None, T0 + 1)
    assert s.get_data(T0 + 1) is None
    assert s.get_data(T0 + 100) is None


# --- when ------------------------------------------------------------------------------


def test_when_accepts_aware_datetimes_in_any_zone(store):
    s = open_session(store)
    aware = datetime(2024, 6, 10, 6, 13, 20, tzinfo=timezone(timedelta(hours=2)))
    s.set_data("v", aware)
    ms = int(aware.timestamp() * 1000)
    assert s.get_data(ms) == "v"
    assert s.get_data(ms - 1) is None


def test_when_takes_naive_datetimes_as_utc(store):
    s = open_session(store)
    s.set_data("v", datetime(2024, 6, 10, 4, 13, 20))
    ms = int(datetime(2024, 6, 10, 4, 13, 20, tzinfo=UTC).timestamp() * 1000)
    assert s.get_data(ms) == "v"
    assert s.get_data(ms - 1) is None


def test_when_keeps_milliseconds_of_a_datetime(store):
    s = open_session(store)
    s.set_data("v", datetime(2024, 1, 1, 0, 0, 0, 123_456, tzinfo=UTC))
    ms = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000) + 123
    assert s.get_data(ms) == "v"
    assert s.get_data(ms - 1) is None


@pytest.mark.parametrize("bad", [True, False, "1718000000000", math.nan, 1.5, None, [T0], 2**80])
def test_a_bad_when_raises_and_writes_nothing(store, bad):
    s = open_session(store)
    s.set_data("kept", T0)
    with pytest.raises(InvalidArgumentError) as caught:
        s.set_data("replacement", bad)
    assert "when" in str(caught.value)
    with pytest.raises(InvalidArgumentError):
        s.get_data(bad)
    with pytest.raises(InvalidArgumentError):
        s.update(lambda v: "replacement", bad)
    assert s.get_data(T0) == "kept"


def test_invalid_argument_error_is_a_value_error_and_a_session_store_error():
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentError, SessionStoreError)


# --- values ----------------------------------------------------------------------------

ROUND_TRIPS = [
    0,
    -(2**63),
    2**64 - 1,
    3.25,
    "unicode ✓ 日本",
    b"\x00\xffbytes",
    [1, [2, [3, {"deep": None}]]],
    {"lastLlmSignal": "buy", "confirmedAt": T0, "scores": [0.1, 0.2], "ok": True},
    {1: "int keys", 2: {"nested": []}},
    "",
    {},
    [],
    False,
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=repr)
def test_values_round_trip_equal(store, value):
    s = open_session(store)
    s.set_data(value, T0)
    got = s.get_data(T0)
    assert got == value
    assert type(got) is type(value)


def test_tuples_come_back_as_lists(store):
    s = open_session(store)
    s.set_data({"pair": (1, 2)}, T0)
    assert s.get_data(T0) == {"pair": [1, 2]}


class Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        ({"tags": {1, 2}}, "set"),
        ([Opaque()], "Opaque"),
        ({"n": 2**70}, "64-bit"),
        ({(1, 2): "tuple key"}, "tuple"),
    ],
)
def test_an_unserialisable_value_raises_naming_key_and_type_and_keeps_the_record(
    store, value, type_name
):
    s = open_session(store)
    s.set_data({"kept": True}, T0)
    with pytest.raises(NotSerializableError) as caught:
        s.set_data(value, T0 + 1)
    message = str(caught.value)
    assert "BTCUSDT" in message and "llm-momentum" in message
    assert type_name in message
    assert isinstance(caught.value, InvalidArgumentError)
    assert s.get_data(T0 + 1) == {"kept": True}


# --- keys ------------------------------------------------------------------------------


def test_every_key_part_and_the_mode_isolate_records(store):
    variants = [
        ("BTCUSDT", "llm-momentum", "binance", "1h"),
        ("ETHUSDT", "llm-momentum", "binance", "1h"),
        ("BTCUSDT", "other", "binance", "1h"),
        ("BTCUSDT", "llm-momentum", "bybit", "1h"),
        ("BTCUSDT", "llm-momentum", "binance", "4h"),
    ]
    for index, parts in enumerate(variants):
        open_session(store, *parts).set_data(index, T0)
        open_session(store, *parts, mode="live").set_data(f"live {index}", T0)
    for index, parts in enumerate(variants):
        assert open_session(store, *parts).get_data(T0) == index
        assert open_session(store, *parts, mode="live").get_data(T0) == f"live {index}"


def test_namespaces_isolate_records(open_store, namespace, shared):
    a, b = open_store(f"{namespace}-a"), open_store(f"{namespace}-b")
    open_session(a).set_data("a", T0)
    assert open_session(b).get_data(T0) is None
    open_session(b).set_data("b", T0)
    assert open_session(a).get_data(T0) == "a"


HOSTILE = [
    "../../etc",
    "a:b",
    "{x}",
    "日本語",
    "",
    ".",
    "..",
    "a/b",
    "*",
    "a b\n",
    "%3A",
    "x" * 300,
]


def test_hostile_key_parts_neither_collide_nor_escape(store):
    handles = {}
    for index, part in enumerate(HOSTILE):
        handles[(part, "s")] = open_session(store, part, "s", "e", "f")
        handles[("s", part)] = open_session(store, "s", part, "e", "f")
        handles[(part, "s")].set_data(f"first {index}", T0)
        handles[("s", part)].set_data(f"second {index}", T0)
    for index, part in enumerate(HOSTILE):
        assert handles[(part, "s")].get_data(T0) == f"first {index}"
        assert handles[("s", part)].get_data(T0) == f"second {index}"


def test_separators_inside_parts_do_not_merge_keys(store):
    open_session(store, "a:b", "c", "e", "f").set_data("left", T0)
    open_session(store, "a", "b:c", "e", "f").set_data("right", T0)
    assert open_session(store, "a:b", "c", "e", "f").get_data(T0) == "left"
    assert open_session(store, "a", "b:c", "e", "f").get_data(T0) == "right"


@pytest.mark.parametrize("bad", [None, 1, b"bytes", "\ud800"])
def test_a_bad_key_part_raises_invalid_argument(store, bad):
    with pytest.raises(InvalidArgumentError):
        store.session(bad, "s", "e", "f")


def test_an_unknown_mode_is_refused(store):
    with pytest.raises(InvalidArgumentError):
        store.session("BTCUSDT", "s", "e", "f", mode="paper")


# --- handle lifecycle ------------------------------------------------------------------


def test_wait_for_init_is_idempotent_and_optional(store):
    s = open_session(store)
    s.wait_for_init(initial=True)
    s.wait_for_init(initial=True)
    s.wait_for_init(initial=False)
    s.set_data(1, T0)
    fresh = open_session(store)
    assert fresh.get_data(T0) == 1


def test_dispose_refuses_further_use_and_keeps_the_data(store):
    s = open_session(store)
    s.set_data("kept", T0)
    s.dispose()
    for call in (
        lambda: s.get_data(T0),
        lambda: s.set_data(1, T0),
        lambda: s.update(lambda v: v, T0),
        lambda: s.wait_for_init(),
    ):
        with pytest.raises(SessionDisposedError):
            call()
    assert open_session(store).get_data(T0) == "kept"


def test_a_closed_store_refuses_use(open_store):
    store = open_store()
    s = open_session(store)
    store.close()
    store.close()
    with pytest.raises(StoreClosedError):
        s.get_data(T0)
    with pytest.raises(StoreClosedError):
        store.session(*KEY)


def test_closing_a_store_while_threads_are_mid_call_lets_each_call_end_or_refuse(
    open_store, shared
):
    """Every call either ends as it would have (its write stored) or raises
    StoreClosedError; none crashes the process or fails otherwise."""
    store = open_store()
    s = open_session(store)
    done: list[int] = []
    failed: list[BaseException] = []
    started = threading.Barrier(9)

    def work():
        started.wait()
        while True:
            try:
                done.append(s.update(lambda v: (v or 0) + 1, T0))
            except StoreClosedError:
                return
            except BaseException as exc:  # noqa: BLE001 - any other outcome is the failure
                failed.append(exc)
                return

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    started.wait()
    while len(done) < 40 and not failed:
        time.sleep(0.005)
    store.close()
    for thread in threads:
        thread.join(30)
    assert not failed, failed[:3]
    assert open_session(open_store()).get_data(T0) == len(done) == max(done)


def test_two_stores_on_one_url_share_values(open_store, shared):
    writer, reader = open_store(), open_store()
    open_session(writer).set_data({"signal": "sell"}, T0)
    assert open_session(reader).get_data(T0) == {"signal": "sell"}
    open_session(reader).set_data(None, T0)
    assert open_session(writer).get_data(T0) is None


# --- update ----------------------------------------------------------------------------


def test_update_applies_fn_to_the_visible_value_and_returns_what_was_stored(store):
    s = open_session(store)
    assert s.update(lambda v: (v or 0) + 1, T0) == 1
    assert s.update(lambda v: (v or 0) + 1, T0) == 2
    assert s.get_data(T0) == 2


def test_update_does_not_see_the_future(store):
    s = open_session(store)
    s.set_data(100, T0 + 10)
    seen = []
    assert s.update(lambda v: seen.append(v) or 1, T0) == 1
    assert seen[-1] is None
    assert s.get_data(T0) == 1


def test_sequential_updates_through_one_handle_call_fn_once_each(store):
    s = open_session(store)
    seen = []
    for _ in range(5):
        s.update(lambda v: seen.append(v) or (v or 0) + 1, T0)
    assert seen == [None, 1, 2, 3, 4]


def test_an_update_after_writes_through_another_handle_starts_from_them(store):
    mine, other = open_session(store), open_session(store)
    mine.set_data(1, T0)
    other.set_data(5, T0)
    seen = []
    assert mine.update(lambda v: seen.append(v) or v + 1, T0) == 6
    assert seen[-1] == 5 and other.get_data(T0) == 6
    other.delete()
    assert mine.update(lambda v: (v or 0) + 10, T0) == 10


def test_an_update_never_sees_a_later_write_it_missed(store):
    mine, other = open_session(store), open_session(store)
    mine.set_data(1, T0)
    other.set_data(50, T0 + 10)
    seen = []
    assert mine.update(lambda v: seen.append(v) or 7, T0) == 7
    assert seen[-1] is None and other.get_data(T0) == 7


def test_update_returns_the_stored_form(store):
    s = open_session(store)
    assert s.update(lambda v: (1, 2), T0) == [1, 2]


def test_update_to_none_clears(store):
    s = open_session(store)
    s.set_data(5, T0)
    assert s.update(lambda v: None, T0) is None
    assert s.get_data(T0) is None


def test_update_with_an_unserialisable_result_keeps_the_record(store):
    s = open_session(store)
    s.set_data(1, T0)
    with pytest.raises(NotSerializableError):
        s.update(lambda v: {v}, T0)
    assert s.get_data(T0) == 1


@pytest.mark.parametrize("bad", [5, None, "fn"])
def test_update_with_a_fn_that_is_not_callable_is_refused_and_keeps_the_record(store, bad):
    s = open_session(store)
    s.set_data(1, T0)
    with pytest.raises(InvalidArgumentError, match="update needs a callable fn"):
        s.update(bad, T0)
    assert s.get_data(T0) == 1


def test_update_propagates_errors_raised_by_fn(store):
    s = open_session(store)
    s.set_data(1, T0)

    def boom(value):
        raise LookupError("from fn")

    with pytest.raises(LookupError):
        s.update(boom, T0)
    assert s.get_data(T0) == 1


def test_threads_sharing_one_store_lose_no_update(store):
    s = open_session(store)

    def work():
        for _ in range(50):
            s.update(lambda v: (v or 0) + 1, T0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert s.get_data(T0) == 200


# --- as-of history ---------------------------------------------------------------------


def test_history_reads_the_newest_value_at_or_before_when(store):
    s = open_session(store, history=True)
    s.set_data("a", T0)
    s.set_data("b", T0 + 10)
    s.set_data("c", T0 + 20)
    assert s.get_data(T0 - 1) is None
    assert s.get_data(T0) == "a"
    assert s.get_data(T0 + 15) == "b"
    assert s.get_data(T0 + 20) == "c"
    assert s.get_data(T0 + 99) == "c"


def test_history_write_discards_versions_at_or_after_when(store):
    s = open_session(store, history=True)
    for offset, value in [(0, "a"), (10, "b"), (20, "c")]:
        s.set_data(value, T0 + offset)
    s.set_data("b2", T0 + 10)
    assert s.get_data(T0 + 25) == "b2"
    assert s.get_data(T0 + 5) == "a"
    s.set_data("restart", T0 - 5)
    assert s.get_data(T0 + 25) == "restart"
    assert s.get_data(T0 - 6) is None


def test_history_records_a_clear_at_when(store):
    s = open_session(store, history=True)
    s.set_data("a", T0)
    s.set_data(None, T0 + 10)
    s.set_data("b", T0 + 20)
    assert s.get_data(T0 + 5) == "a"
    assert s.get_data(T0 + 10) is None
    assert s.get_data(T0 + 15) is None
    assert s.get_data(T0 + 20) == "b"


def test_history_max_versions_bounds_the_history(store):
    s = open_session(store, history=True, max_versions=2)
    for offset in range(5):
        s.set_data(offset, T0 + offset)
    assert s.get_data(T0 + 4) == 4
    assert s.get_data(T0 + 3) == 3
    assert s.get_data(T0 + 2) is None
    assert s.get_data(T0) is None


def test_history_and_plain_sessions_do_not_share_records(store):
    open_session(store, history=True).set_data("history", T0)
    assert open_session(store).get_data(T0) is None


def test_history_update_works_on_the_as_of_value(store):
    s = open_session(store, history=True)
    s.set_data(10, T0)
    s.set_data(1000, T0 + 100)
    assert s.update(lambda v: v + 1, T0 + 50) == 11
    assert s.get_data(T0 + 200) == 11
    assert s.get_data(T0 + 10) == 10


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3"])
def test_max_versions_must_be_a_positive_int(store, bad):
    with pytest.raises(InvalidArgumentError):
        store.session(*KEY, history=True, max_versions=bad)


def test_max_versions_needs_history(store):
    with pytest.raises(InvalidArgumentError):
        store.session(*KEY, max_versions=3)


# --- history shared by parallel workers: put, get_or_compute -----------------------------


def test_history_put_out_of_order_keeps_every_version(store):
    s = open_session(store, history=True)
    for offset in (12, 4, 20, 0, 8, 16, 2):
        s.put(f"v{offset}", T0 + offset)
    for offset in (0, 2, 4, 8, 12, 16, 20):
        assert s.get_data(T0 + offset) == f"v{offset}"
    assert s.get_data(T0 + 3) == "v2"
    assert s.get_data(T0 + 19) == "v16"
    assert s.get_data(T0 + 99) == "v20"
    assert s.get_data(T0 - 1) is None


def test_a_slower_worker_put_does_not_wipe_later_versions(open_store, shared):
    fast, slow = open_store(), open_store()
    a, b = open_session(fast, history=True), open_session(slow, history=True)
    for offset in (4, 8, 12):
        a.put(f"fast{offset}", T0 + offset)
    b.put("slow2", T0 + 2)
    assert b.get_data(T0 + 20) == "fast12"
    assert a.get_data(T0 + 3) == "slow2"
    assert a.get_data(T0 + 9) == "fast8"


def test_history_put_replaces_only_the_version_at_its_when(store):
    s = open_session(store, history=True)
    for offset in (0, 10, 20):
        s.put(f"v{offset}", T0 + offset)
    s.put("again", T0 + 10)
    assert [s.get_data(T0 + offset) for offset in (0, 10, 20)] == ["v0", "again", "v20"]


def test_history_put_of_none_records_a_clear_at_when(store):
    s = open_session(store, history=True)
    s.put("a", T0)
    s.put("c", T0 + 20)
    s.put(None, T0 + 10)
    assert s.get_data(T0 + 5) == "a"
    assert s.get_data(T0 + 15) is None
    assert s.get_data(T0 + 20) == "c"


def test_set_data_after_put_still_resets_from_its_when(store):
    s = open_session(store, history=True)
    for offset in (0, 10, 20):
        s.put(f"v{offset}", T0 + offset)
    s.set_data("restart", T0 + 5)
    assert s.get_data(T0) == "v0"
    assert s.get_data(T0 + 10) == "restart"
    assert s.get_data(T0 + 99) == "restart"
    s.put("after", T0 + 30)
    assert s.get_data(T0 + 29) == "restart"
    assert s.get_data(T0 + 30) == "after"


def test_history_put_over_max_versions_drops_the_oldest(store):
    s = open_session(store, history=True, max_versions=3)
    for offset in (30, 10, 40, 20):
        s.put(offset, T0 + offset)
    assert [s.get_data(T0 + offset) for offset in (10, 20, 30, 40)] == [None, 20, 30, 40]
    s.put("older than all", T0)
    assert s.get_data(T0) is None
    assert s.get_data(T0 + 20) == 20


def test_put_and_get_or_compute_need_a_history_handle(store):
    s = open_session(store)
    with pytest.raises(InvalidArgumentError, match="history"):
        s.put("x", T0)
    with pytest.raises(InvalidArgumentError, match="history"):
        s.get_or_compute(T0, lambda: "x")
    assert s.get_data(T0) is None


def test_put_refuses_a_bad_when_and_an_unserialisable_value(store):
    s = open_session(store, history=True)
    s.put("kept", T0)
    with pytest.raises(InvalidArgumentError):
        s.put("x", 1.5)
    with pytest.raises(NotSerializableError):
        s.put(Opaque(), T0)
    assert s.get_data(T0) == "kept"


def computing(api, body):
    """``fn`` for get_or_compute: ``body`` itself (sync API) or a coroutine function
    running it in a worker thread (async API, whose calls share one event loop)."""
    if api == "sync":
        return body

    async def run():
        return await asyncio.to_thread(body)

    return run


def test_get_or_compute_returns_the_stored_version_without_calling_fn(store, api):
    s = open_session(store, history=True)
    s.put({"signal": "buy"}, T0)
    calls = []
    assert s.get_or_compute(T0, computing(api, lambda: calls.append(1))) == {"signal": "buy"}
    assert calls == []


def test_get_or_compute_stores_what_fn_returns_at_exactly_when(store, api):
    s = open_session(store, history=True)
    s.put("earlier", T0)
    s.put("later", T0 + 20)
    assert s.get_or_compute(T0 + 10, computing(api, lambda: ("computed", 1))) == ["computed", 1]
    assert s.get_data(T0 + 15) == ["computed", 1]
    assert s.get_data(T0 + 5) == "earlier"
    assert s.get_data(T0 + 20) == "later"
    assert s.get_or_compute(T0 + 10, computing(api, lambda: "again")) == ["computed", 1]


def test_get_or_compute_stores_a_none_result_as_a_clear(store, api):
    s = open_session(store, history=True)
    s.put("before", T0)
    assert s.get_or_compute(T0 + 10, computing(api, lambda: None)) is None
    assert s.get_data(T0 + 10) is None
    assert s.get_or_compute(T0 + 10, computing(api, lambda: "not called")) is None


def test_get_or_compute_runs_fn_once_among_threads_and_stores(open_store, api, backend):
    stores = [open_store()] if backend == "memory" else [open_store(), open_store()]
    handles = [open_session(stores[n % len(stores)], history=True) for n in range(6)]
    calls = []
    start = threading.Barrier(len(handles))

    def model():
        calls.append(1)
        return {"answer": 42}

    results = []

    def work(handle):
        start.wait()
        results.append(handle.get_or_compute(T0, computing(api, model)))

    threads = [threading.Thread(target=work, args=(handle,)) for handle in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert results == [{"answer": 42}] * len(handles)


def test_when_fn_raises_its_caller_gets_the_error_and_a_waiter_computes(store, api):
    s = open_session(store, history=True)
    started, other_started = threading.Event(), threading.Event()
    calls = []

    def failing():
        calls.append("failing")
        started.set()
        other_started.wait(30)
        raise LookupError("model down")

    def succeeding():
        calls.append("succeeding")
        return "fine"

    raised = []

    def first():
        with pytest.raises(LookupError, match="model down") as caught:
            s.get_or_compute(T0, computing(api, failing))
        raised.append(caught.value)

    thread = threading.Thread(target=first)
    thread.start()
    assert started.wait(30)
    other_started.set()
    assert s.get_or_compute(T0, computing(api, succeeding)) == "fine"
    thread.join()
    assert len(raised) == 1
    assert calls == ["failing", "succeeding"]
    assert s.get_data(T0) == "fine"


@contextlib.contextmanager
def lease_held(s, api, value, **options):
    """Another thread's get_or_compute holds the lease of the version at T0 inside the
    block (its fn waits); on leaving, fn returns ``value`` and the thread's result is
    appended to the list the block gets."""
    holding, release = threading.Event(), threading.Event()
    calls = []

    def slow():
        calls.append(value)
        holding.set()
        release.wait(30)
        return value

    results = []
    thread = threading.Thread(
        target=lambda: results.append(s.get_or_compute(T0, computing(api, slow), **options))
    )
    thread.start()
    try:
        assert holding.wait(30)
        yield results
    finally:
        release.set()
        thread.join()
    assert calls == [value]


def test_a_waiter_gives_up_after_its_timeout(store, api):
    s = open_session(store, history=True)
    with lease_held(s, api, "late") as results:
        with pytest.raises(ComputeTimeoutError) as caught:
            s.get_or_compute(T0, computing(api, lambda: "not called"), timeout=0.2)
        assert caught.value.when == T0 and caught.value.timeout == 0.2
        assert isinstance(caught.value, SessionStoreError)
        assert s.get_data(T0) is None
    assert results == ["late"]
    assert s.get_data(T0) == "late"


def test_a_waiter_gives_up_after_the_timeout_its_store_was_connected_with(open_store, api):
    s = open_session(open_store(timeout=0.3), history=True)
    with lease_held(s, api, "late"):
        with pytest.raises(ComputeTimeoutError) as caught:
            s.get_or_compute(T0, computing(api, lambda: "not called"))
        assert caught.value.timeout == 0.3
    assert s.get_data(T0) == "late"


def test_the_lease_is_renewed_while_fn_runs_past_it(store, api, backend):
    if backend not in ("memory", "sqlite", "redis"):
        pytest.skip("the lease expiry is proven on memory, SQLite and one Redis")
    s = open_session(store, history=True)
    others = []
    # More than three leases long: without renewal the lease would have ended and this
    # caller would compute instead of giving up. (A renewal comes every third of the
    # lease; 0.2 s leaves a loaded machine room to be late with one.)
    with lease_held(s, api, "held", lease=0.6), pytest.raises(ComputeTimeoutError):
        s.get_or_compute(T0, computing(api, lambda: others.append(1)), timeout=2.0)
    assert others == []
    assert s.get_data(T0) == "held"


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, "1", True])
def test_get_or_compute_refuses_a_bad_timeout_or_lease(store, bad):
    s = open_session(store, history=True)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        s.get_or_compute(T0, lambda: 1, timeout=bad)
    with pytest.raises(InvalidArgumentError, match="lease"):
        s.get_or_compute(T0, lambda: 1, lease=bad)
    assert s.get_data(T0) is None


# --- listing and deleting ----------------------------------------------------------------


def test_list_values_reports_every_stored_key_of_the_namespace(store):
    open_session(store).set_data(1, T0)
    open_session(store, "a:b", "{x}", "e", "f", mode="live").set_data(2, T0)
    open_session(store, "ETHUSDT", "s", "e", "f", history=True).set_data(3, T0)
    open_session(store, "GONE", "s", "e", "f").set_data(None, T0)
    assert store.list_values() == [
        ("BTCUSDT", "llm-momentum", "binance", "1h", "backtest", False),
        ("ETHUSDT", "s", "e", "f", "backtest", True),
        ("a:b", "{x}", "e", "f", "live", False),
    ]


def test_list_values_is_confined_to_the_namespace(open_store, namespace, shared):
    open_session(open_store(f"{namespace}-other")).set_data(1, T0)
    assert open_store().list_values() == []


def test_delete_removes_plain_and_history_records_of_the_key(store):
    plain, history = open_session(store), open_session(store, history=True)
    plain.set_data(1, T0)
    history.set_data(1, T0)
    history.set_data(2, T0 + 1)
    assert plain.delete() is True
    assert history.delete() is False and plain.delete() is False
    assert plain.get_data(T0) is None and history.get_data(T0 + 5) is None
    assert store.list_values() == []
    plain.set_data("again", T0)
    assert plain.get_data(T0) == "again"


# --- inspection ------------------------------------------------------------------------


def test_records_give_what_is_stored_with_its_times_and_write_nothing(store):
    plain = open_session(store)
    assert plain.records().records() == []
    plain.set_data("later", T0 + 5)
    found = plain.records()
    assert (found.history, [r.when for r in found.records()]) == (False, [T0 + 5])
    assert found.plain is not None and found.plain.payload is not None
    history = open_session(store, "ETHUSDT", "s", "e", "1h", history=True)
    history.put("a", T0)
    history.put(None, T0 + 1)
    history.put("c", T0 + 2)
    # A plain handle on the same key sees the history too: records ignore the mode.
    found = open_session(store, "ETHUSDT", "s", "e", "1h").records()
    assert found.history and found.plain is None
    assert [(r.when, r.payload is None) for r in found.versions] == [
        (T0, False),
        (T0 + 1, True),
        (T0 + 2, False),
    ]
    assert sorted(ref.symbol for ref in store.list_values()) == ["BTCUSDT", "ETHUSDT"]


def test_records_read_a_history_page_by_page_in_order(store, monkeypatch):
    """A long history is read a page at a time (here 3 versions a call): every version
    once, oldest first, whatever page boundary falls between them."""
    monkeypatch.setattr(value_flows, "HISTORY_PAGE", 3)
    history = open_session(store, "PAGED", "s", "e", "1h", history=True)
    stored = [T0 + 10 * i for i in range(10)]
    for at in stored:
        history.put(None if at == T0 + 30 else at - T0, at)
    found = history.records()
    assert [r.when for r in found.versions] == stored
    assert [r.payload is None for r in found.versions] == [at == T0 + 30 for at in stored]


def test_records_of_a_disposed_handle_or_closed_store_raise(store, open_store):
    s = open_session(store)
    s.dispose()
    with pytest.raises(SessionDisposedError):
        s.records()
    other = open_store()
    handle = open_session(other)
    other.close()
    with pytest.raises(StoreClosedError):
        handle.records()


def test_check_durable_writes_nothing_and_passes_on_a_store_that_asks_nothing(store):
    store.check_durable()
    assert store.list_values() == [] and store.events.list() == []
