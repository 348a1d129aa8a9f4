"""Model-based testing: random sequences of log and value operations against every backend
agree, after every step, with a plain in-memory model."""

from __future__ import annotations

import pytest
from conftest import BACKENDS, url_for
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import sessionstore
from sessionstore import (
    SeqConflictError,
    SessionEvent,
    SessionExistsError,
    SessionHeader,
    SessionNotFoundError,
)
from sessionstore.eventlog import closers

from .conftest import iterations

IDS = st.sampled_from(["a", "b:c", "日本"])
TYPES = st.sampled_from(["note", "turn/start", "turn/end", "step/start"])
DATA = st.dictionaries(
    st.sampled_from(["k", "turn", "x y"]), st.integers(0, 3) | st.text(max_size=3), max_size=2
)
KEYS = st.sampled_from(
    [("BTC", "s", "e", "1h"), ("ETH", "s", "e", "1h"), ("BTC", "s:x", "e", "1h")]
)
WHENS = st.integers(0, 20)


class StoreMachine(RuleBasedStateMachine):
    url: str = "memory://"
    counter = 0

    @initialize()
    def open(self) -> None:
        StoreMachine.counter += 1
        self.store = sessionstore.connect(self.url, namespace=f"model-{id(self)}-{self.counter}")
        self.logs: dict[str, list[SessionEvent]] = {}
        self.created: set[str] = set()
        self.values: dict[tuple[str, ...], tuple[int, object]] = {}

    def teardown(self) -> None:
        self.store.close()

    # --- event logs ---
    @rule(session_id=IDS)
    def create(self, session_id: str) -> None:
        try:
            self.store.events.create(SessionHeader(id=session_id, created_at=1))
        except SessionExistsError:
            assert session_id in self.logs or session_id in self.created
        else:
            assert session_id not in self.logs and session_id not in self.created
            self.created.add(session_id)

    @rule(session_id=IDS, offset=st.integers(-2, 2), size=st.integers(1, 3), type=TYPES, data=DATA)
    def append(self, session_id: str, offset: int, size: int, type: str, data: dict) -> None:
        if type == "step/start":
            data = {**data, "step": 1}  # repair reads it: append requires it
        stored = self.logs.get(session_id, [])
        first = max(0, len(stored) + offset)
        batch = [
            SessionEvent(seq=first + i, type=type, time=first + i, data=data) for i in range(size)
        ]
        known = session_id in self.logs or session_id in self.created
        replay = first + size <= len(stored) and stored[first : first + size] == batch
        try:
            self.store.events.append(session_id, batch)
        except SessionNotFoundError:
            assert not known
        except SeqConflictError as conflict:
            assert known and not replay and first != len(stored)
            assert conflict.expected == len(stored)
        else:
            assert known and (first == len(stored) or replay)
            if first == len(stored):
                self.logs[session_id] = stored + batch
                self.created.discard(session_id)

    @rule(session_id=IDS)
    def load(self, session_id: str) -> None:
        try:
            loaded = self.store.events.load(session_id)
        except SessionNotFoundError:
            assert session_id not in self.logs
            return
        expected = self.logs[session_id] + closers(self.logs[session_id])
        assert loaded.events == expected
        self.logs[session_id] = expected

    @rule(session_id=IDS, seq=st.integers(0, 6))
    def read_from(self, session_id: str, seq: int) -> None:
        try:
            events = self.store.events.read_from(session_id, seq)
        except SessionNotFoundError:
            assert session_id not in self.logs
            return
        assert events == self.logs[session_id][seq:]

    @rule(session_id=IDS)
    def delete(self, session_id: str) -> None:
        try:
            self.store.events.delete(session_id)
        except SessionNotFoundError:
            assert session_id not in self.logs and session_id not in self.created
        else:
            self.logs.pop(session_id, None)
            self.created.discard(session_id)

    @invariant()
    def listed_sessions_match(self) -> None:
        if hasattr(self, "store"):
            assert sorted(h.id for h in self.store.events.list()) == sorted(self.logs)

    # --- values ---
    @rule(
        key=KEYS,
        when=WHENS,
        value=st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=4),
    )
    def set_data(self, key: tuple[str, ...], when: int, value: object) -> None:
        self.store.session(*key).set_data(value, when)
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = (when, value)

    @rule(key=KEYS, when=WHENS)
    def get_data(self, key: tuple[str, ...], when: int) -> None:
        stored = self.values.get(key)
        expected = stored[1] if stored and stored[0] <= when else None
        assert self.store.session(*key).get_data(when) == expected


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_backend_agrees_with_the_model(backend_name, request, tmp_path):

    class Machine(StoreMachine):
        pass

    Machine.url = url_for(backend_name, request, tmp_path)
    run = Machine.TestCase
    run.settings = settings(
        max_examples=iterations(normal=30, ci=20, soak=500),
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    run().runTest()
