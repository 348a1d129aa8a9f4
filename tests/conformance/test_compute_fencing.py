"""The fenced compute of get_or_compute, on every backend and both APIs: the result is
written by ``put_computed``, checked atomically against the computer's lease; a renewal
never takes back a lease that lapsed; and in the async API a plain ``fn`` runs off the
event loop, so its lease is renewed while it runs."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from support.async_bridge import Stores, SyncView

import sessionstore
from sessionstore.contracts import Stored

T0 = 1_718_000_000_000
KEY = ("BTCUSDT", "llm-momentum", "binance", "1h")


class Values:
    """The value backend under a session handle of either API, called synchronously."""

    def __init__(self, session: Any) -> None:
        self._view = session if isinstance(session, SyncView) else None
        target = session._target if self._view is not None else session
        self._backend = target._backend
        self.key = target._state.key
        self.encode = target._state.encode

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._backend, name)
        if self._view is None:
            return method
        return lambda *args, **kwargs: self._view._bridge.run(method, *args, **kwargs)


@pytest.fixture
def values(store: Any) -> Values:
    return Values(store.session(*KEY, history=True))


def put_computed(values: Values, value: Any, token: str, when: int = T0, **options: Any) -> Any:
    return values.put_computed(values.key, values.encode(value), when, None, token, **options)


def lapse(values: Values, token: str) -> None:
    """``token`` takes the lease of the version at T0 for 50 ms and lets it lapse."""
    assert values.acquire_compute_lease(values.key, T0, token, 50) is True
    time.sleep(0.12)


# --- put_computed, on the backend -----------------------------------------------------------


def test_put_computed_by_the_holder_writes_at_exactly_when_and_releases_the_lease(values, store):
    values.put_version(values.key, values.encode("later"), T0 + 10, None)
    assert values.acquire_compute_lease(values.key, T0, "a", 30_000) is True
    assert put_computed(values, {"by": "a"}, "a") is True
    session = store.session(*KEY, history=True)
    assert session.get_data(T0) == {"by": "a"} and session.get_data(T0 + 10) == "later"
    assert values.acquire_compute_lease(values.key, T0, "b", 30_000) is True


def test_put_computed_returns_the_version_stored_at_when_and_writes_nothing(values, store):
    values.put_version(values.key, values.encode({"by": "b"}), T0, None)
    assert values.acquire_compute_lease(values.key, T0, "a", 30_000) is True
    assert put_computed(values, {"by": "a"}, "a") == Stored(values.encode({"by": "b"}), T0)
    assert store.session(*KEY, history=True).get_data(T0) == {"by": "b"}
    values.put_version(values.key, None, T0 + 1, None)
    assert put_computed(values, "x", "a", T0 + 1) == Stored(None, T0 + 1)  # a clear counts


def test_put_computed_writes_nothing_while_another_token_holds_the_lease(values, store):
    assert values.acquire_compute_lease(values.key, T0, "b", 30_000) is True
    assert put_computed(values, {"by": "a"}, "a") is False
    assert values.read_as_of(values.key, T0) is None
    assert values.acquire_compute_lease(values.key, T0, "a", 30_000) is False  # still b's


def test_put_computed_with_no_live_lease_writes(values, store):
    lapse(values, "a")
    assert put_computed(values, "late but alone", "a", ttl_ms=60_000) is True
    assert put_computed(values, "nobody's", "c", T0 + 1) is True
    session = store.session(*KEY, history=True)
    assert session.get_data(T0) == "late but alone" and session.get_data(T0 + 1) == "nobody's"


def test_a_lapsed_holder_never_replaces_the_version_another_stored(values, store):
    lapse(values, "a")
    assert values.acquire_compute_lease(values.key, T0, "b", 30_000) is True
    assert put_computed(values, {"by": "a"}, "a") is False  # b is computing
    assert put_computed(values, {"by": "b"}, "b") is True
    assert put_computed(values, {"by": "a"}, "a") == Stored(values.encode({"by": "b"}), T0)
    assert store.session(*KEY, history=True).get_data(T0) == {"by": "b"}


# --- renewals ---------------------------------------------------------------------------------


def test_a_renewal_extends_only_a_live_lease_of_its_own(values):
    assert values.renew_compute_lease(values.key, T0, "a", 30_000) is False  # none
    assert values.acquire_compute_lease(values.key, T0, "a", 30_000) is True
    assert values.renew_compute_lease(values.key, T0, "a", 30_000) is True
    assert values.renew_compute_lease(values.key, T0, "b", 30_000) is False
    values.release_compute_lease(values.key, T0, "a")
    assert values.renew_compute_lease(values.key, T0, "a", 30_000) is False


def test_a_renewal_of_a_lapsed_lease_returns_false_and_does_not_take_it_back(values):
    lapse(values, "a")
    assert values.renew_compute_lease(values.key, T0, "a", 30_000) is False
    assert values.acquire_compute_lease(values.key, T0, "b", 30_000) is True
    assert values.renew_compute_lease(values.key, T0, "a", 30_000) is False
    assert values.renew_compute_lease(values.key, T0, "b", 30_000) is True


def test_a_renewal_keeps_the_lease_past_its_first_term(values):
    assert values.acquire_compute_lease(values.key, T0, "a", 400) is True
    for _ in range(3):
        time.sleep(0.15)
        assert values.renew_compute_lease(values.key, T0, "a", 400) is True
    assert values.acquire_compute_lease(values.key, T0, "b", 400) is False


# --- the async API: a plain fn runs off the event loop ---------------------------------------


#: The lease of the async test: renewed every third of it, so a loaded machine may be late
#: with a renewal by almost 0.6 s before the lease lapses.
LEASE = 0.9


def test_an_async_plain_fn_longer_than_its_lease_is_computed_once(
    store_url, namespace, shared, backend
):
    """An async caller's plain ``fn`` sleeps (blocking) three leases long while a caller
    of another store asks for the same version: the first caller's lease is renewed all
    along, so the second waits for its result and both return it. (What runs off the
    event loop is the async runner's, the same for every backend: shown on files, SQLite
    and one Redis.)"""
    if backend not in ("file", "sqlite", "redis"):
        pytest.skip("the runner is shown on files, SQLite and one Redis")
    stores = Stores("async")
    try:
        computer = stores.open(store_url, namespace).session(*KEY, history=True)
        other = sessionstore.connect(store_url, namespace)
        calls: list[str] = []
        started = threading.Event()

        def slow() -> dict[str, str]:
            calls.append("a")
            started.set()
            time.sleep(3 * LEASE)
            return {"by": "a"}

        def fast() -> dict[str, str]:
            calls.append("b")
            return {"by": "b"}

        results: list[Any] = []
        thread = threading.Thread(
            target=lambda: results.append(computer.get_or_compute(T0, slow, lease=LEASE))
        )
        thread.start()
        assert started.wait(30)
        time.sleep(2 * LEASE)  # without renewals the lease has lapsed
        results.append(other.session(*KEY, history=True).get_or_compute(T0, fast, lease=LEASE))
        thread.join(30)
        other.close()
        assert calls == ["a"]
        assert results == [{"by": "a"}, {"by": "a"}]
        assert computer.get_data(T0) == {"by": "a"}
    finally:
        stores.close()
