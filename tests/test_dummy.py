"""The dummy store: accepts everything, stores nothing, every read is empty."""

from __future__ import annotations

import pytest

import sessionstore
from sessionstore import InvalidArgumentError, SessionEvent, SessionHeader, SessionNotFoundError

T0 = 1_718_000_000_000


@pytest.fixture
def store():
    with sessionstore.connect("dummy://") as store:
        yield store


def test_values_are_accepted_and_never_read_back(store):
    s = store.session("BTCUSDT", "s", "e", "f")
    s.set_data({"x": 1}, T0)
    assert s.get_data(T0) is None
    assert s.update(lambda v: (v or 0) + 1, T0) == 1
    assert s.get_data(T0) is None


def test_history_sessions_read_nothing(store):
    s = store.session("BTCUSDT", "s", "e", "f", history=True)
    s.set_data(1, T0)
    assert s.get_data(T0 + 1) is None


def test_arguments_are_still_checked(store):
    s = store.session("BTCUSDT", "s", "e", "f")
    with pytest.raises(InvalidArgumentError):
        s.set_data(1, "yesterday")
    with pytest.raises(InvalidArgumentError):
        s.set_data({1, 2}, T0)


def test_appends_are_accepted_and_load_finds_nothing(store):
    store.events.create(SessionHeader(id="s"))
    assert store.events.append("s", [SessionEvent(seq=0, type="x", time=T0)]) == 1
    assert store.events.append("never-created", [SessionEvent(seq=5, type="x", time=T0)]) == 6
    with pytest.raises(SessionNotFoundError):
        store.events.load("s")
    assert store.events.list() == []
