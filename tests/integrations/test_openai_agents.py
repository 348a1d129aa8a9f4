"""SessionStoreSession (sessionstore.integrations.openai_agents) against the OpenAI Agents
SDK's ``Session`` protocol, on every backend, and the SDK's own ``SQLiteSession`` as a
control for every behaviour the protocol states.

Every session of a test runs on one event loop (``support.async_bridge.Bridge``) and is
driven through a synchronous view, as the conformance suites drive the async API.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import math
import multiprocessing
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, Usage  # noqa: E402
from agents.extensions.memory.redis_session import RedisSession  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.memory import Session, SessionSettings, SQLiteSession  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from conftest import BACKENDS, url_for  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402
from redis.asyncio.cluster import RedisCluster  # noqa: E402
from support.async_bridge import Bridge, SyncView  # noqa: E402
from test_examples import run as run_example  # noqa: E402

import sessionstore  # noqa: E402
from sessionstore import InvalidArgumentError, NotJSONSerializableError, SessionEvent, aio  # noqa: E402
from sessionstore.integrations.openai_agents import (  # noqa: E402
    NotJSONSerializableItemError,
    SessionStoreSession,
)

#: The SDK's own SQLite session, as the control for the protocol's behaviours.
CONTROL = "sdk-sqlite"
KINDS = [*BACKENDS, CONTROL]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agents_session.py"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(items: list[Any]) -> list[str]:
    """The text of each item, in order (user messages and assistant messages alike)."""
    texts = []
    for item in items:
        content = item["content"]
        texts.append(content if isinstance(content, str) else content[0]["text"])
    return texts


class Opened:
    """The sessions (and stores) one test opens, all on one event loop; closed at the end.

    ``memory`` has one store per namespace, shared by every session the test opens in it;
    the other backends open their stores on the test's URL. The control opens the SDK's
    ``SQLiteSession`` on one database file, one table pair per namespace.
    """

    def __init__(self, kind: str, url: str | None, namespace: str, tmp_path: Path) -> None:
        self.kind = kind
        self.url = url
        self.namespace = namespace
        self.tmp_path = tmp_path
        self.bridge = Bridge()
        self._stores: dict[str, aio.AsyncStore] = {}
        self._sessions: list[Any] = []

    @property
    def ours(self) -> bool:
        return self.kind != CONTROL

    def store(self, namespace: str | None = None) -> aio.AsyncStore:
        ns = namespace or self.namespace
        if ns not in self._stores:
            self._stores[ns] = aio.connect(self.url, ns)
        return self._stores[ns]

    def open_async(self, session_id: str, namespace: str | None = None, **options: Any) -> Any:
        if self.ours:
            session: Any = SessionStoreSession(session_id, self.store(namespace), **options)
        else:
            table = (namespace or self.namespace).replace("-", "_")
            session = SQLiteSession(
                session_id,
                self.tmp_path / "sdk.db",
                sessions_table=f"sessions_{table}",
                messages_table=f"messages_{table}",
                **options,
            )
        self._sessions.append(session)
        return session

    def open(self, session_id: str, namespace: str | None = None, **options: Any) -> Any:
        """A synchronous view of a new session object on ``session_id``."""
        return SyncView(self.open_async(session_id, namespace, **options), self.bridge)

    def run(self, coroutine_fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self.bridge.run(coroutine_fn, *args, **kwargs)

    def gather(self, *calls: Any) -> list[Any]:
        """Run the coroutines ``calls`` (zero-argument callables) concurrently."""

        async def together() -> list[Any]:
            return list(await asyncio.gather(*(call() for call in calls)))

        return self.run(together)

    def events(self, session_id: str) -> list[SessionEvent]:
        return self.run(self.store().events.read_from, session_id, 0)

    def close(self) -> None:
        try:
            for session in self._sessions:
                if isinstance(session, SQLiteSession):
                    session.close()
            for store in self._stores.values():
                self.run(store.close)
        finally:
            self.bridge.stop()


def opening(kind: str, request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator:
    url = None if kind == CONTROL else url_for(kind, request, tmp_path)
    sessions = Opened(kind, url, namespace, tmp_path)
    yield sessions
    sessions.close()


@pytest.fixture(params=KINDS)
def opened(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator:
    """Sessions of ours on every backend, and of the control."""
    yield from opening(request.param, request, tmp_path, namespace)


@pytest.fixture(params=BACKENDS)
def ours(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator:
    """Sessions of ours on every backend (the control is left out)."""
    yield from opening(request.param, request, tmp_path, namespace)


# --- the SDK's Session protocol (ours on every backend, and the control) ----------------


def test_a_session_implements_the_sdk_protocol(opened):
    session = opened.open_async("conv")
    assert isinstance(session, Session)
    assert session.session_id == "conv"
    assert isinstance(session.session_settings, SessionSettings)


def test_a_new_session_has_no_items_and_nothing_to_pop(opened):
    s = opened.open("conv")
    assert s.get_items() == []
    assert s.get_items(limit=3) == []
    assert s.pop_item() is None
    assert s.get_items() == []


def test_added_items_come_back_oldest_first(opened):
    s = opened.open("conv")
    s.add_items([user("one"), user("two")])
    s.add_items([user("three")])
    assert s.get_items() == [user("one"), user("two"), user("three")]
    assert opened.open("conv").get_items() == [user("one"), user("two"), user("three")]


def test_an_empty_add_writes_nothing(opened):
    s = opened.open("conv")
    s.add_items([])
    assert s.get_items() == []
    if opened.ours:
        assert opened.run(opened.store().events.list) == []
    s.add_items([user("one")])
    s.add_items([])
    assert s.get_items() == [user("one")]


def test_limit_gives_the_newest_items_in_order(opened):
    s = opened.open("conv")
    s.add_items([user(str(n)) for n in range(5)])
    assert said(s.get_items(limit=2)) == ["3", "4"]
    assert said(s.get_items(limit=1)) == ["4"]
    assert said(s.get_items(limit=5)) == ["0", "1", "2", "3", "4"]
    assert said(s.get_items(limit=50)) == ["0", "1", "2", "3", "4"]
    assert s.get_items(limit=0) == []


def test_the_settings_limit_is_the_default_and_an_explicit_limit_wins(opened):
    s = opened.open("conv", session_settings=SessionSettings(limit=2))
    s.add_items([user(str(n)) for n in range(4)])
    assert said(s.get_items()) == ["2", "3"]
    assert said(s.get_items(limit=3)) == ["1", "2", "3"]
    assert said(opened.open("conv", session_settings={"limit": 1}).get_items()) == ["3"]


def test_pop_removes_and_returns_the_newest_item(opened):
    s = opened.open("conv")
    s.add_items([user("one"), user("two"), user("three")])
    assert s.pop_item() == user("three")
    assert said(s.get_items()) == ["one", "two"]
    assert said(opened.open("conv").get_items()) == ["one", "two"]
    assert said(opened.open("conv").get_items(limit=1)) == ["two"]
    assert s.pop_item() == user("two")
    assert s.pop_item() == user("one")
    assert s.pop_item() is None
    s.add_items([user("four")])
    assert s.get_items() == [user("four")]


def test_an_item_popped_by_another_session_object_is_gone(opened):
    first, second = opened.open("conv"), opened.open("conv")
    first.add_items([user("one"), user("two")])
    assert said(first.get_items()) == ["one", "two"]
    assert second.pop_item() == user("two")
    assert said(first.get_items()) == ["one"]
    assert first.pop_item() == user("one")
    assert second.pop_item() is None


def test_clear_removes_every_item_and_the_session_starts_afresh(opened):
    s = opened.open("conv")
    s.clear_session()  # nothing there yet: no error
    s.add_items([user("one"), user("two")])
    s.pop_item()
    s.clear_session()
    assert s.get_items() == []
    assert s.pop_item() is None
    assert opened.open("conv").get_items() == []
    s.add_items([user("three")])
    assert opened.open("conv").get_items() == [user("three")]


def test_sessions_of_other_ids_are_isolated(opened):
    a, b = opened.open("conv-a"), opened.open("conv-b")
    a.add_items([user("for a")])
    b.add_items([user("for b"), user("for b again")])
    assert b.pop_item() == user("for b again")
    a.clear_session()
    assert a.get_items() == []
    assert b.get_items() == [user("for b")]


def test_sessions_of_other_namespaces_are_isolated(opened):
    here = opened.open("conv")
    there = opened.open("conv", namespace=opened.namespace + "-other")
    here.add_items([user("here")])
    there.add_items([user("there")])
    assert here.pop_item() == user("here")
    assert there.get_items() == [user("there")]
    there.clear_session()
    here.add_items([user("here again")])
    assert here.get_items() == [user("here again")]
    assert there.get_items() == []


PROBLEMATIC = [
    "héllo wörld ✓ 日本語 한국어 العربية עברית",
    "emoji 🤖🧪👩‍👩‍👧‍👦 and flags 🇫🇷",
    "quotes \" ' ` and backslashes \\ \\n \\u0000",
    "control \x00 \x01 \x1f\t\r\n characters",
    "'; DROP TABLE agent_messages; --",
    '{"role": "system", "content": "not an item, a string"}',
    "\u202eright-to-left override\u202c and zero\u200bwidth",
    "",
    "x" * 100_000,
]


def test_unicode_and_problematic_strings_round_trip(opened):
    s = opened.open("conv")
    items = [user(text) for text in PROBLEMATIC]
    items.append({"role": "user", "content": [{"type": "input_text", "text": PROBLEMATIC[1]}]})
    s.add_items(items)
    assert s.get_items() == items
    assert opened.open("conv").get_items() == items
    assert s.pop_item() == items[-1]


def test_returned_items_are_copies(opened):
    s = opened.open("conv")
    s.add_items([user("one"), user("two")])
    for got in (s.get_items(), s.get_items(limit=2)):
        got[0]["content"] = "changed"
        got.append(user("appended"))
        assert s.get_items() == [user("one"), user("two")]


def test_items_read_whole_are_the_callers_and_later_reads_pop_and_limit_across_reads(opened):
    writer = opened.open("conv")
    writer.add_items([user(str(n)) for n in range(5)])
    s = opened.open("conv")
    got = s.get_items()  # s reads the whole log
    got[0]["content"] = "changed"
    got.pop()
    assert said(s.get_items()) == ["0", "1", "2", "3", "4"]
    assert said(opened.open("conv").get_items()) == ["0", "1", "2", "3", "4"]
    writer.add_items([user("5"), user("6")])
    assert said(s.get_items(limit=3)) == ["4", "5", "6"]  # items of two reads
    assert s.pop_item() == user("6")
    assert s.pop_item() == user("5")
    assert opened.open("conv").pop_item() == user("4")
    assert s.pop_item() == user("3")
    assert said(s.get_items(limit=2)) == ["1", "2"]
    assert said(s.get_items()) == ["0", "1", "2"]
    assert said(s.get_items()) == ["0", "1", "2"]
    writer.add_items([user("7")])
    assert said(s.get_items()) == ["0", "1", "2", "7"]
    assert said(opened.open("conv").get_items(limit=2)) == ["2", "7"]


def test_concurrent_adds_all_land_once(opened):
    sessions = [opened.open_async("conv") for _ in range(4)]
    sessions.append(sessions[0])  # and two coroutines on one object

    def adder(index: int) -> Any:
        async def add() -> None:
            for n in range(10):
                await sessions[index].add_items([user(f"{index}:{n}:a"), user(f"{index}:{n}:b")])

        return add

    opened.gather(*(adder(index) for index in range(len(sessions))))
    texts = said(opened.open("conv").get_items())
    assert len(texts) == 100 and len(set(texts)) == 100
    for index in range(len(sessions)):
        mine = [t for t in texts if t.startswith(f"{index}:")]
        assert mine == [f"{index}:{n}:{part}" for n in range(10) for part in "ab"]
        for n in range(10):  # each add_items is one batch: its items stay together
            at = texts.index(f"{index}:{n}:a")
            assert texts[at + 1] == f"{index}:{n}:b"


def test_a_session_has_its_real_creation_time_when_stores_race_to_create_it(ours):
    if ours.kind == "memory":
        pytest.skip("a memory:// store is its one connect: no other store shares it")
    before = datetime.now().timestamp() * 1000
    sessions = [
        SessionStoreSession("raced", aio.connect(ours.url, ours.namespace)) for _ in range(3)
    ]

    def adder(session: SessionStoreSession, index: int) -> Any:
        async def add() -> None:
            for n in range(3):
                await session.add_items([user(f"{index}:{n}")])
            await session.store.close()

        return add

    ours.gather(*(adder(session, index) for index, session in enumerate(sessions)))
    assert sorted(said(ours.open("raced").get_items())) == sorted(
        f"{index}:{n}" for index in range(3) for n in range(3)
    )
    info = ours.run(ours.store().events.info, "raced")
    assert before - 1000 <= info.header.created_at <= datetime.now().timestamp() * 1000


class StandInModel(Model):
    """A model that records the input of each call and answers ``reply <n>``."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:  # noqa: ANN001
        self.inputs.append(copy.deepcopy(input))
        text = ResponseOutputText(
            type="output_text", text=f"reply {len(self.inputs)}", annotations=[]
        )
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[text],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run without streaming")


def test_the_runner_gives_the_second_turn_the_first_turns_conversation(opened):
    model = StandInModel()
    agent = Agent(name="assistant", instructions="Answer briefly.", model=model)
    config = RunConfig(tracing_disabled=True)
    session = opened.open_async("conv")
    first = opened.run(Runner.run, agent, "My name is Ada.", session=session, run_config=config)
    assert first.final_output == "reply 1"
    # Another session object on the same id: what the first turn stored is what counts.
    again = opened.open_async("conv")
    second = opened.run(Runner.run, agent, "What is my name?", session=again, run_config=config)
    assert second.final_output == "reply 2"
    assert said(model.inputs[1]) == ["My name is Ada.", "reply 1", "What is my name?"]
    stored = opened.run(again.get_items)
    assert said(stored) == ["My name is Ada.", "reply 1", "What is my name?", "reply 2"]
    assert [item.get("role") for item in stored] == ["user", "assistant", "user", "assistant"]


# --- SessionStoreSession alone ------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "path"),
    [
        ({1, 2}, "$.tags"),
        ((1, 2), "$.tags"),
        (math.nan, "$.tags"),
        (b"bytes", "$.tags"),
        (datetime(2024, 1, 1), "$.tags"),
        ({1: "int key"}, "$.tags"),
        ([object()], "$.tags[0]"),
    ],
)
def test_an_item_that_is_not_lossless_json_is_named_and_nothing_is_written(ours, bad, path):
    s = ours.open("conv")
    s.add_items([user("kept")])
    with pytest.raises(NotJSONSerializableError) as raised:
        s.add_items([user("a"), user("b"), {"role": "user", "content": "c", "tags": bad}])
    error = raised.value
    assert isinstance(error, NotJSONSerializableItemError) and isinstance(error, ValueError)
    assert error.index == 2 and error.path == path
    assert "item 2 of add_items" in str(error) and path in str(error)
    assert s.get_items() == [user("kept")]
    assert len(ours.events("conv")) == 1


def test_a_first_add_that_is_not_json_creates_nothing(ours):
    s = ours.open("conv")
    with pytest.raises(NotJSONSerializableItemError, match="item 0 of add_items"):
        s.add_items([object()])
    assert ours.run(ours.store().events.list) == []
    s.add_items([user("one")])
    assert s.get_items() == [user("one")]


def test_the_log_is_append_only_a_pop_is_an_event(ours):
    s = ours.open("conv")
    s.add_items([user("one"), user("two")])
    s.add_items([user("three")])
    assert s.pop_item() == user("three")
    events = ours.events("conv")
    assert [(e.seq, e.type) for e in events] == [(0, "item"), (1, "item"), (2, "item"), (3, "pop")]
    assert [e.data for e in events[:3]] == [{"item": user(t)} for t in ("one", "two", "three")]
    assert events[3].data["seq"] == 2 and set(events[3].data) == {"seq", "after"}
    # The last event of each batch carries a random id; the others none.
    assert events[0].id is None and events[1].id and events[2].id and events[3].id
    assert len({events[1].id, events[2].id, events[3].id}) == 3


def test_a_pop_that_names_no_live_item_removes_nothing(ours):
    s = ours.open("conv")
    s.add_items([user("one"), user("two")])
    assert s.pop_item() == user("two")
    stale = [
        SessionEvent(seq=3, type="pop", time=1, data={"seq": 1}),  # popped already
        SessionEvent(seq=4, type="pop", time=1, data={"seq": 3}),  # a pop, not an item
        SessionEvent(seq=5, type="pop", time=1, data={"seq": 99}),  # no such event
        SessionEvent(seq=6, type="note", time=1, data={"item": user("not an item")}),
    ]
    ours.run(ours.store().events.append, "conv", stale)
    assert s.get_items() == [user("one")]
    assert ours.open("conv").get_items() == [user("one")]


def test_racing_poppers_each_get_a_different_item(ours):
    ours.open("conv").add_items([user(str(n)) for n in range(6)])
    poppers = [ours.open_async("conv") for _ in range(8)]
    popped = ours.gather(*(p.pop_item for p in poppers))
    got = [item for item in popped if item is not None]
    assert sorted(said(got)) == [str(n) for n in range(6)]
    assert popped.count(None) == 2
    assert ours.open("conv").get_items() == []
    pops = [e.data["seq"] for e in ours.events("conv") if e.type == "pop"]
    assert sorted(pops) == list(range(6))


def test_a_pop_racing_an_add_removes_the_newest_item_at_its_append(ours):
    s = ours.open("conv")
    s.add_items([user("one")])
    assert s.get_items() == [user("one")]  # s now knows the log up to seq 0
    ours.open("conv").add_items([user("two")])
    assert s.pop_item() == user("two")
    assert s.get_items() == [user("one")]


class Interleaved:
    """A store whose event log runs ``before`` (once) ahead of the next append it is
    asked for, then the append itself after ``delay`` seconds, shielded from its caller's
    cancellation (as a store call running in a worker thread goes on): what another
    session does between a session's read and its write."""

    def __init__(self, store: Any, before: Any = None, delay: float = 0.0) -> None:
        self._store, self._before, self._delay = store, before, delay
        self.events = self
        self.started = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store.events, name)

    async def append(self, session_id: str, events: Any) -> int:
        self.started.set()
        before, self._before = self._before, None
        if before is not None:
            await before()
        if self._delay:
            await asyncio.sleep(self._delay)
        return await asyncio.shield(self._store.events.append(session_id, events))


def test_a_pop_whose_log_was_cleared_and_written_again_before_it_landed_pops_again(ours):
    popper, other = ours.open_async("conv"), ours.open_async("conv")
    ours.run(popper.add_items, [user("old one"), user("old two"), user("old three")])
    assert said(ours.run(popper.get_items)) == ["old one", "old two", "old three"]

    async def rewrite() -> None:  # the log is back at the length the popper read
        await other.clear_session()
        await other.add_items([user("new one"), user("new two"), user("new three")])

    popper.store = Interleaved(popper.store, rewrite)
    assert ours.run(popper.pop_item) == user("new three")
    assert said(ours.run(other.get_items)) == ["new one", "new two"]
    assert said(ours.run(popper.get_items)) == ["new one", "new two"]


def test_a_cancelled_write_has_landed_when_the_cancellation_reaches_its_caller(ours):
    session = ours.open_async("conv")
    ours.run(session.add_items, [user("zero")])
    slow = session.store = Interleaved(session.store, delay=0.2)

    async def cancelled_add() -> list[Any]:
        adding = asyncio.ensure_future(session.add_items([user("one"), user("two")]))
        await slow.started.wait()
        adding.cancel()
        with pytest.raises(asyncio.CancelledError):
            await adding
        return await session.get_items()

    assert said(ours.run(cancelled_add)) == ["zero", "one", "two"]


def test_pops_cancelled_before_they_write_remove_nothing(ours):
    session = ours.open_async("conv")
    ours.run(session.add_items, [user(str(n)) for n in range(20)])

    async def pops() -> list[Any]:
        popping = [asyncio.ensure_future(session.pop_item()) for _ in range(10)]
        await asyncio.sleep(0)  # the first holds the lock, the others wait for it
        for task in popping[1:]:
            task.cancel()
        return await asyncio.gather(*popping, return_exceptions=True)

    done = ours.run(pops)
    assert done[0] == user("19")
    assert all(isinstance(result, asyncio.CancelledError) for result in done[1:])
    assert said(ours.run(session.get_items)) == [str(n) for n in range(19)]


def test_a_log_deleted_and_written_again_is_read_afresh(ours):
    reader, writer = ours.open("conv"), ours.open("conv")
    writer.add_items([user("old one"), user("old two")])
    assert said(reader.get_items()) == ["old one", "old two"]
    writer.clear_session()
    writer.add_items([user("new one"), user("new two")])
    writer.add_items([user("new three")])
    assert said(reader.get_items()) == ["new one", "new two", "new three"]
    writer.clear_session()
    writer.add_items([user("short")])
    assert said(reader.get_items()) == ["short"]
    writer.clear_session()
    assert reader.get_items() == []


def test_an_async_store_is_required(ours, tmp_path):
    with (
        sessionstore.connect(tmp_path / "sync") as store,
        pytest.raises(InvalidArgumentError, match="sessionstore.aio"),
    ):
        SessionStoreSession("conv", store)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        SessionStoreSession("", ours.store())


def test_from_url_owns_its_store_and_a_given_store_stays_open(ours):
    if ours.kind == "memory":
        pytest.skip("memory:// is private to one connect()")
    ours.open("conv").add_items([user("one")])

    async def through_from_url() -> list[Any]:
        async with SessionStoreSession.from_url("conv", ours.url, namespace=ours.namespace) as s:
            await s.add_items([user("two")])
            found = await s.get_items()
        with pytest.raises(sessionstore.StoreClosedError):
            await s.get_items()
        return found

    assert said(ours.run(through_from_url)) == ["one", "two"]
    given = ours.open_async("conv")
    ours.run(given.close)
    assert said(ours.run(given.get_items)) == ["one", "two"]


# --- any thread, any event loop ----------------------------------------------------------


def run_in_threads(count: int, target: Any) -> list[BaseException]:
    """Run ``target(index)`` in ``count`` threads at once; the errors they raised. A
    thread still running after a minute (a hang) counts as an error."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(index: int) -> None:
        start.wait()
        try:
            target(index)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        if thread.is_alive():
            errors.append(TimeoutError(f"{thread.name} still runs: it hangs"))
    return errors


def test_ten_threads_each_on_its_own_loop_share_one_session(ours):
    """One session object, ten threads each running its own event loop (asyncio.run):
    every add lands once, in its batch, and the pops never hand out an item twice."""
    session = ours.open_async("conv")

    def adder(index: int) -> None:
        async def add() -> None:
            for n in range(5):
                await session.add_items([user(f"{index}:{n}:a"), user(f"{index}:{n}:b")])
            await session.get_items()

        asyncio.run(add())

    assert run_in_threads(10, adder) == []
    texts = said(ours.open("conv").get_items())
    assert sorted(texts) == sorted(
        f"{i}:{n}:{p}" for i in range(10) for n in range(5) for p in "ab"
    )
    for index in range(10):
        mine = [t for t in texts if t.startswith(f"{index}:")]
        assert mine == [f"{index}:{n}:{part}" for n in range(5) for part in "ab"]
        for n in range(5):
            at = texts.index(f"{index}:{n}:a")
            assert texts[at + 1] == f"{index}:{n}:b"

    popped: list[Any] = []

    def popper(index: int) -> None:
        async def pop() -> None:
            for _ in range(6):
                popped.append(await session.pop_item())

        asyncio.run(pop())

    assert run_in_threads(10, popper) == []
    got = said([item for item in popped if item is not None])
    assert len(got) == 60 and len(set(got)) == 60
    assert len(ours.open("conv").get_items()) == 40


def test_one_session_serves_one_loop_after_another(ours):
    """asyncio.run twice, Runner.run_sync twice, asyncio.run again: one session object."""
    session = ours.open_async("conv")
    asyncio.run(session.add_items([user("first loop")]))
    asyncio.run(session.add_items([user("second loop")]))
    model = StandInModel()
    agent = Agent(name="assistant", instructions="Answer briefly.", model=model)
    config = RunConfig(tracing_disabled=True)
    first = Runner.run_sync(agent, "My name is Ada.", session=session, run_config=config)
    second = Runner.run_sync(agent, "What is my name?", session=session, run_config=config)
    assert (first.final_output, second.final_output) == ("reply 1", "reply 2")
    assert said(model.inputs[1]) == [
        "first loop",
        "second loop",
        "My name is Ada.",
        "reply 1",
        "What is my name?",
    ]
    stored = asyncio.run(session.get_items())
    assert said(stored)[-2:] == ["What is my name?", "reply 2"]
    assert said(ours.open("conv").get_items()) == said(stored)


# --- processes, Redis Cluster, the example, the import ------------------------------------


def add_by_url(url: str, namespace: str, worker: int, count: int) -> int:
    async def add() -> int:
        async with SessionStoreSession.from_url("shared", url, namespace=namespace) as s:
            for n in range(count):
                await s.add_items([user(f"{worker}:{n}:a"), user(f"{worker}:{n}:b")])
        return count

    return asyncio.run(add())


@pytest.mark.slow
def test_four_processes_adding_to_one_redis_session_lose_nothing(redis_server, namespace):
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = list(
            pool.map(add_by_url, [redis_server.url] * 4, [namespace] * 4, range(4), [40] * 4)
        )
    assert done == [40] * 4

    async def read() -> list[Any]:
        async with SessionStoreSession.from_url(
            "shared", redis_server.url, namespace=namespace
        ) as s:
            return await s.get_items()

    texts = said(asyncio.run(read()))
    assert len(texts) == 320 and len(set(texts)) == 320
    for worker in range(4):
        assert [t for t in texts if t.startswith(f"{worker}:")] == [
            f"{worker}:{n}:{part}" for n in range(40) for part in "ab"
        ]


def test_on_redis_cluster_redis_session_fails_and_ours_works(redis_cluster, namespace):
    ids = ["conv-a", "conv-b", "conv-c", "conv-d"]

    async def go() -> None:
        for session_id in ids:  # a plain client: its keys of one session span slots
            peer = RedisSession.from_url(session_id, url=redis_cluster.url)
            try:
                with pytest.raises(Exception, match="same slot"):
                    await peer.add_items([user("hi")])
            finally:
                await peer.close()
        client = RedisCluster.from_url(redis_cluster.url)
        try:
            with pytest.raises(TypeError, match="RedisCluster"):
                await RedisSession(ids[0], redis_client=client).add_items([user("hi")])
        finally:
            await client.aclose()
        for session_id in ids:
            async with SessionStoreSession.from_url(
                session_id, redis_cluster.url, namespace=namespace
            ) as ours:
                await ours.add_items([user("hi"), user(session_id)])
                assert await ours.pop_item() == user(session_id)
                assert await ours.get_items() == [user("hi")]

    asyncio.run(go())


def test_the_example_runs_offline_on_the_embedded_default(tmp_path):
    out = run_example("openai_agents_session.py", tmp_path)
    assert "turn 2 model input: 3 items" in out
    assert "popped: You said: What is my name?" in out and "items left: 3" in out
    assert (tmp_path / ".sessionstore").is_dir()


def test_the_example_runs_on_a_url(redis_server, tmp_path, capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("openai_agents_session", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.chdir(tmp_path)
    asyncio.run(example.main(redis_server.url))
    out = capsys.readouterr().out
    assert "turn 2 model input: 3 items" in out and f"store: {redis_server.url}" in out
    assert not (tmp_path / ".sessionstore").exists()


def test_importing_sessionstore_does_not_import_the_sdk():
    code = (
        "import sys, sessionstore, sessionstore.aio, sessionstore.integrations\n"
        "assert 'agents' not in sys.modules, 'agents imported'\n"
        "assert 'sessionstore.integrations.openai_agents' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
