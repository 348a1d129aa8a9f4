"""SessionStoreSessionService (sessionstore.integrations.adk): ADK's session-service
contract as ADK's own InMemorySessionService keeps it (the control), on every backend:
events back in order and exact, scoped state, listing, deletion, a stale session object
refused, reads that cost what they return, an agent run through ADK's Runner, and two
processes appending to one session and updating one user's state at once.

ADK's session service is async only, so the tests are async, each run with
``asyncio.run`` on a service of its own.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("google.adk")

from conftest import BACKENDS, url_for  # noqa: E402
from google.adk.agents import BaseAgent  # noqa: E402
from google.adk.agents.invocation_context import InvocationContext  # noqa: E402
from google.adk.errors._stale_session_error import StaleSessionError as AdkStale  # noqa: E402
from google.adk.events import Event, EventActions  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import BaseSessionService, InMemorySessionService  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402
from support.redis_sentinel import SentinelSetup  # noqa: E402

import sessionstore  # noqa: E402
from sessionstore import InvalidArgumentError, SessionStoreError, aio  # noqa: E402
from sessionstore.integrations.adk import (  # noqa: E402
    SNAPSHOT_EVERY,
    USER_STATE,
    AdkSessionNotFoundError,
    SessionAlreadyExistsError,
    SessionStoreSessionService,
    StaleSessionError,
    session_id,
)
from sessionstore.integrations.adk.layout import APP_STATE, Mark  # noqa: E402

APP, USER = "shop", "user-1"
Body = Callable[[BaseSessionService], Awaitable[Any]]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return url_for(request.param, request, tmp_path)


def namespace() -> str:
    return f"t-adk-{uuid.uuid4().hex[:8]}"


def on(url: str, body: Body, ns: str | None = None) -> Any:
    """``body(service)`` on a service of its own on ``url``, in a fresh event loop."""

    async def run() -> Any:
        async with SessionStoreSessionService(url, namespace=ns or namespace()) as service:
            return await body(service)

    return asyncio.run(run())


def as_in_memory(url: str, body: Body) -> None:
    """``body`` returns on the service what it returns on ADK's InMemorySessionService."""
    expected = asyncio.run(body(InMemorySessionService()))
    assert on(url, body) == expected


def log_of(session: Any) -> str:
    """The event log of the incarnation ``session`` (a session object) belongs to."""
    mark = Mark.of(session._storage_update_marker)
    assert mark is not None
    return session_id(session.app_name, session.user_id, session.id, mark.incarnation)


def text_event(text: str, at: float, **delta: Any) -> Event:
    return Event(
        id=f"{text}@{at!r}",
        author="user",
        invocation_id="inv-1",
        timestamp=at,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


def rich_event(at: float) -> Event:
    """An event using most of what an event carries: a function call and its id, bytes,
    actions of every common kind, metadata, a timestamp with every digit a float has."""
    call = types.FunctionCall(id="call-1", name="lookup", args={"sku": "A-1", "n": [1, 2.5]})
    return Event(
        id="rich",
        author="shopper",
        invocation_id="inv-2",
        branch="root.shopper",
        timestamp=at,
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="é\u2028 ok"),
                types.Part(function_call=call),
                types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x00\xff\x10")),
            ],
        ),
        actions=EventActions(
            state_delta={"cart": {"A-1": 2}, "app:stock": 7, "user:tier": "gold"},
            artifact_delta={"receipt.txt": 1},
            transfer_to_agent="cashier",
            escalate=False,
        ),
        long_running_tool_ids={"call-1"},
        custom_metadata={"trace": "t-9", "score": 0.1},
        turn_complete=True,
    )


async def fill(service: BaseSessionService, sid: str, count: int, start: float = 1e9) -> Any:
    """A session ``sid`` with ``count`` text events at ``start``, ``start + 1``, ...,
    each setting its own state key ``n``; the session object."""
    session = await service.create_session(app_name=APP, user_id=USER, session_id=sid)
    for i in range(count):
        await service.append_event(session, text_event(f"m{i}", start + i, n=i))
    return session


# --- events -------------------------------------------------------------------------------


def test_events_come_back_in_order_and_exact(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        made = [text_event("hi", 1718000000.1234567), rich_event(1718000000.9876543)]
        made.append(text_event("bye", 1718000001.0000002, note="x"))
        for event in made:
            await service.append_event(session, event)
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert found is not None
        assert found.events == session.events == made
        assert [e.timestamp for e in found.events] == [e.timestamp for e in made]
        assert found.last_update_time == made[-1].timestamp == session.last_update_time
        return found.model_dump(exclude={"last_update_time"})

    as_in_memory(url, body)


def test_a_partial_event_is_returned_and_not_stored(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        partial = text_event("stream", 5.0, seen=True)
        partial.partial = True
        assert await service.append_event(session, partial) is partial
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        return found.events, found.state, session.events

    as_in_memory(url, body)


def test_an_event_delivered_again_is_stored_once(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        event = text_event("once", 5.0, n=1)
        await service.append_event(session, event)
        await service.append_event(session, event)
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        return len(found.events), len(session.events)

    assert on(url, body) == (1, 1) == asyncio.run(body(InMemorySessionService()))


def test_an_append_made_again_after_a_lost_reply_is_stored_once(url: str) -> None:
    """A retry of ``append_event`` with the session object as it was before the call
    (whose reply never came): accepted, the event stored once, its deltas applied once."""

    async def body(service: BaseSessionService) -> Any:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        before = session.model_copy(deep=True)
        event = text_event("once", 5.0, n=1, **{"user:k": 1, "app:k": 1})
        await service.append_event(session, event.model_copy(deep=True))
        await service.append_event(before, event.model_copy(deep=True))
        await service.append_event(before, text_event("then", 6.0, **{"user:k": 2}))
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        return [e.id for e in found.events], found.state, before.state

    assert on(url, body) == (
        ["once@5.0", "then@6.0"],
        {"n": 1, "user:k": 2, "app:k": 1},
        {"n": 1, "user:k": 2, "app:k": 1},
    )


@pytest.mark.parametrize(
    "config",
    [
        GetSessionConfig(num_recent_events=3),
        GetSessionConfig(num_recent_events=0),
        GetSessionConfig(num_recent_events=500),
        GetSessionConfig(after_timestamp=1e9 + 150),
        GetSessionConfig(after_timestamp=1e9 + 199.5),
        GetSessionConfig(after_timestamp=1e9 + 400),
        GetSessionConfig(after_timestamp=0),
        GetSessionConfig(num_recent_events=10, after_timestamp=1e9 + 195),
        GetSessionConfig(num_recent_events=10, after_timestamp=1e9 + 100),
    ],
    ids=lambda c: f"recent={c.num_recent_events},after={c.after_timestamp}",
)
def test_get_session_config_picks_the_events_in_memory_does(
    url: str, config: GetSessionConfig
) -> None:
    async def body(service: BaseSessionService) -> Any:
        await fill(service, "s", 200)
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s", config=config)
        return found.model_dump(exclude={"last_update_time"})

    as_in_memory(url, body)


@pytest.mark.parametrize(
    "config",
    [
        GetSessionConfig(after_timestamp=60.0),
        GetSessionConfig(after_timestamp=60.0, num_recent_events=1),
        GetSessionConfig(after_timestamp=60.0, num_recent_events=5),
        GetSessionConfig(after_timestamp=60.0, num_recent_events=0),
    ],
    ids=lambda c: f"recent={c.num_recent_events}",
)
def test_after_timestamp_keeps_every_event_stamped_since_in_any_order(
    url: str, config: GetSessionConfig
) -> None:
    """Hosts whose clocks disagree append out of time order: every event stamped at or
    after the time is kept, as ADK's own services keep them, not only the newest run."""

    async def body(service: BaseSessionService) -> Any:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        for text, at in (("a", 100.0), ("b", 50.0), ("c", 200.0), ("d", 10.0), ("e", 70.0)):
            await service.append_event(session, text_event(text, at))
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s", config=config)
        return [e.id for e in found.events]

    as_in_memory(url, body)


# --- state --------------------------------------------------------------------------------


def test_scoped_state_is_kept_as_adks_services_keep_it(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        initial = {"app:theme": "dark", "user:lang": "fr", "temp:scratch": 1, "cart": []}
        one = await service.create_session(
            app_name=APP, user_id=USER, session_id="one", state=initial
        )
        seen = [dict(one.state)]
        delta = {"app:stock": 3, "user:tier": "gold", "temp:step": 2, "cart": ["A-1"]}
        await service.append_event(one, text_event("add", 10.0, **delta))
        seen.append(dict(one.state))  # temp: stays in the object given, for this run
        two = await service.create_session(app_name=APP, user_id=USER, session_id="two")
        other = await service.create_session(app_name=APP, user_id="user-2", session_id="x")
        elsewhere = await service.create_session(app_name="other", user_id=USER, session_id="y")
        again = await service.get_session(app_name=APP, user_id=USER, session_id="one")
        seen += [two.state, other.state, elsewhere.state, again.state]
        seen.append(await service.get_user_state(app_name=APP, user_id=USER))
        seen.append(await service.get_user_state(app_name=APP, user_id="nobody"))
        return seen

    as_in_memory(url, body)


def test_state_values_not_made_for_json_are_kept_as_adks_database_service_keeps_them(
    url: str, tmp_path: Any
) -> None:
    """Bytes (UTF-8 or not), a datetime and a callable in the initial state and in an
    event's delta, in every scope: the state read back is what ADK's own database
    service gives (it makes them JSON its own way, never failing the call)."""
    import datetime

    def callable_value() -> None: ...

    def values(scope: str) -> dict[str, Any]:
        return {
            f"{scope}text": b"hi",
            f"{scope}raw": b"\xff\x00",
            f"{scope}at": datetime.datetime(2026, 1, 2, 3, 4, 5),
            f"{scope}nested": {"b": [b"\x01\xfe"]},
        }

    async def body(service: BaseSessionService) -> Any:
        initial = {**values(""), **values("app:"), **values("user:")}
        made = await service.create_session(
            app_name=APP, user_id=USER, session_id="s", state=initial
        )
        delta = {
            "k": 1,
            **{
                f"{scope}d-{key}": v
                for scope in ("", "app:", "user:")
                for key, v in values("").items()
            },
        }
        await service.append_event(made, text_event("x", 10.0, **delta))
        with_callable = await service.create_session(
            app_name=APP, user_id=USER, session_id="c", state={"f": callable_value}
        )
        await service.append_event(with_callable, text_event("y", 11.0, g=callable_value))
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        calls = await service.get_session(app_name=APP, user_id=USER, session_id="c")
        assert found is not None and calls is not None
        return found.state, {key: type(calls.state[key]) for key in ("f", "g")}

    from google.adk.sessions import DatabaseSessionService  # needs SQLAlchemy

    async def theirs() -> Any:
        service = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}")
        try:
            return await body(service)
        finally:
            await service.close()

    expected = asyncio.run(theirs())
    assert expected[1] == {"f": str, "g": str}
    assert on(url, body) == expected


def test_temp_state_is_never_stored(url: str) -> None:
    ns = namespace()

    async def body(service: BaseSessionService) -> Any:
        session = await service.create_session(
            app_name=APP, user_id=USER, session_id="s", state={"temp:a": 1}
        )
        await service.append_event(session, text_event("x", 1.0, **{"temp:b": 2, "k": 3}))
        assert session.events[0].actions.state_delta == {"k": 3}
        return log_of(session)

    log_id = on(url, body, ns)
    if url.startswith("memory:"):
        return
    with sessionstore.connect(url, ns) as store:
        stored = store.events.read_from(log_id, 0)
    assert "temp:" not in str([e.data for e in stored])


def test_the_state_is_right_across_snapshots(url: str) -> None:
    count = SNAPSHOT_EVERY * 2 + 5

    async def body(service: BaseSessionService) -> Any:
        session = await fill(service, "s", count)
        found = await service.get_session(
            app_name=APP, user_id=USER, session_id="s", config=GetSessionConfig(num_recent_events=1)
        )
        return found.state, session.state

    assert on(url, body) == ({"n": count - 1}, {"n": count - 1})


# --- list and delete ----------------------------------------------------------------------


def test_listing_gives_sessions_with_state_and_without_events(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        for user, sid in ((USER, "b"), (USER, "a"), ("user-2", "c")):
            session = await service.create_session(
                app_name=APP, user_id=user, session_id=sid, state={"user:u": user, "own": sid}
            )
            await service.append_event(session, text_event(sid, 100.0 + ord(sid), n=sid))
        await service.create_session(app_name="other", user_id=USER, session_id="z")
        listed = []
        for user in (USER, "user-2", None, "nobody"):
            found = await service.list_sessions(app_name=APP, user_id=user)
            listed.append([s.model_dump() for s in found.sessions])
        listed.append((await service.list_sessions(app_name="nothing")).sessions)
        return listed

    as_in_memory(url, body)


def test_deleting_removes_events_and_session_state_but_not_app_or_user_state(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        session = await service.create_session(
            app_name=APP, user_id=USER, session_id="s", state={"own": 1}
        )
        await service.append_event(session, text_event("x", 1.0, **{"app:a": 1, "user:u": 2}))
        await service.delete_session(app_name=APP, user_id=USER, session_id="s")
        await service.delete_session(app_name=APP, user_id=USER, session_id="never")
        gone = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        listed = await service.list_sessions(app_name=APP)
        fresh = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        return gone, listed.sessions, fresh.state, fresh.events

    as_in_memory(url, body)


def test_session_ids_are_taken_without_surrounding_spaces_as_in_memory(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        made = await service.create_session(app_name=APP, user_id=USER, session_id=" s ")
        found = await service.get_session(app_name=APP, user_id=USER, session_id=" s ")
        await service.delete_session(app_name=APP, user_id=USER, session_id="s ")
        gone = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        return made.id, found.id, gone

    assert on(url, body) == ("s", "s", None)
    assert asyncio.run(body(InMemorySessionService())) == ("s", "s", None)


def test_creating_a_stored_id_again_raises_adks_already_exists(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        await service.create_session(app_name=APP, user_id=USER, session_id="s", state={"k": 1})
        with pytest.raises(SessionAlreadyExistsError) as refused:
            await service.create_session(
                app_name=APP, user_id=USER, session_id="s", state={"user:u": 1}
            )
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        return refused.value, found.state

    error, state = on(url, body)
    assert isinstance(error, SessionStoreError)
    assert state == {"k": 1}  # nothing of the refused create was applied


def test_of_two_services_creating_one_id_at_once_one_wins(url: str) -> None:
    """Two services with stores of their own (one shared store on ``memory://``, which
    is private to its connect) create one session id at once: one gets the session, the
    other ADK's AlreadyExistsError, and only the winner's state is stored."""
    ns = namespace()

    async def body() -> None:
        if url.startswith("memory:"):
            store = aio.connect(url, ns)
            one, two = SessionStoreSessionService(store), SessionStoreSessionService(store)
        else:
            one = SessionStoreSessionService(url, namespace=ns)
            two = SessionStoreSessionService(url, namespace=ns)
        for round in range(5):
            sid = f"s{round}"
            made = await asyncio.gather(
                *(
                    service.create_session(
                        app_name=APP,
                        user_id=USER,
                        session_id=sid,
                        state={"by": who, f"user:{sid}": who},
                    )
                    for who, service in enumerate((one, two))
                ),
                return_exceptions=True,
            )
            [winner] = [m for m in made if not isinstance(m, BaseException)]
            [loser] = [m for m in made if isinstance(m, BaseException)]
            assert isinstance(loser, SessionAlreadyExistsError), loser
            found = await one.get_session(app_name=APP, user_id=USER, session_id=sid)
            assert found.state["by"] == winner.state["by"] == found.state[f"user:{sid}"]
        await one.close()
        await two.close()
        if url.startswith("memory:"):
            await store.close()

    asyncio.run(body())


def test_appending_to_a_deleted_session_raises_adks_not_found(url: str) -> None:
    async def body(service: BaseSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await service.delete_session(app_name=APP, user_id=USER, session_id="s")
        with pytest.raises(AdkSessionNotFoundError) as refused:
            await service.append_event(session, text_event("late", 1.0))
        assert isinstance(refused.value, ValueError)
        assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None

    on(url, body)


def test_an_object_of_a_session_deleted_and_created_again_is_refused(url: str) -> None:
    """The session is created again under its id and reaches the event count an old
    object saw: the old object (and one rebuilt without the service's marker) is
    refused, and the new session keeps exactly its own events."""

    async def body(service: BaseSessionService) -> None:
        await fill(service, "s", 2)
        old = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        rebuilt = old.model_copy(deep=True)
        rebuilt._storage_update_marker = None
        await service.delete_session(app_name=APP, user_id=USER, session_id="s")
        new = await fill(service, "s", 2, start=2e9)
        with pytest.raises(StaleSessionError, match="deleted and created again"):
            await service.append_event(old, text_event("late", 3e9, n="late"))
        with pytest.raises(StaleSessionError):
            await service.append_event(rebuilt, text_event("late", 3e9, n="late"))
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert found.events == new.events and [e.timestamp for e in found.events] == [2e9, 2e9 + 1]
        assert found.state == {"n": 1}
        await service.append_event(found, text_event("goes on", 4e9))

    on(url, body)


# --- stale session objects ----------------------------------------------------------------


def test_an_out_of_date_session_object_is_refused_and_nothing_is_written(url: str) -> None:
    async def body(service: BaseSessionService) -> None:
        await fill(service, "s", 2)
        one = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        two = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        await service.append_event(one, text_event("first", 10.0, n="one", **{"user:w": 1}))
        with pytest.raises(StaleSessionError) as refused:
            await service.append_event(two, text_event("second", 11.0, **{"user:w": 2, "n": 2}))
        assert isinstance(refused.value, AdkStale) and isinstance(refused.value, SessionStoreError)
        assert (refused.value.seen, refused.value.stored) == (2, 3)
        stored = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert [e.content.parts[0].text for e in stored.events] == ["m0", "m1", "first"]
        assert stored.state == {"n": "one", "user:w": 1}
        await service.append_event(stored, text_event("then", 12.0))  # read again: goes on

    on(url, body)


def test_a_session_object_is_never_refused_for_float_rounding(url: str) -> None:
    """Timestamps that no database column keeps exactly, in any order: the object
    that appended them (and one read back) goes on appending."""
    stamps = [1718000000.1 + 1e-7, 0.30000000000000004, 1718000000.123456789, 5e-324, 1e9]

    async def body(service: BaseSessionService) -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        for stamp in stamps:
            await service.append_event(session, text_event("x", stamp))
            session = await service.get_session(app_name=APP, user_id=USER, session_id="s")
            await service.append_event(session, text_event("y", stamp))
        assert len(session.events) == 2 * len(stamps)

    on(url, body)


def test_a_session_object_made_elsewhere_is_checked_by_its_last_event(url: str) -> None:
    async def body(service: BaseSessionService) -> None:
        await fill(service, "s", 3)
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        copy = found.model_copy(deep=True)
        copy._storage_update_marker = None  # as a session another service made
        await service.append_event(copy, text_event("ok", 10.0))
        stale = found.model_copy(deep=True)
        stale._storage_update_marker = None
        with pytest.raises(StaleSessionError):
            await service.append_event(stale, text_event("late", 11.0))

    on(url, body)


def test_adks_session_keeps_the_private_marker_the_stale_check_relies_on() -> None:
    """Written for google-adk 2.13: ``Session._storage_update_marker`` (the attribute
    ADK's database service keeps its revision in) exists and survives the copies ADK
    and its users make; a session rebuilt from its JSON loses it and is checked by its
    last event instead (``test_a_session_object_made_elsewhere_is_checked_by_...``)."""
    import copy

    from google.adk.sessions import Session

    assert "_storage_update_marker" in Session.__private_attributes__
    session = Session(id="s", app_name=APP, user_id=USER)
    session._storage_update_marker = "sessionstore:7"
    for copied in (copy.deepcopy(session), session.model_copy(), session.model_copy(deep=True)):
        assert copied._storage_update_marker == "sessionstore:7"


# --- read costs ---------------------------------------------------------------------------


class Counting:
    """Counts the events an event log's ``read_from`` returns."""

    def __init__(self, events: Any) -> None:
        self.events, self.read = events, 0
        self._read_from = events.read_from

    async def read_from(self, log_id: str, seq: int) -> Any:
        found = await self._read_from(log_id, seq)
        self.read += len(found)
        return found


#: (config, the most events a get_session with it may read) of a 1,000-event session.
SUFFIXES = [
    (GetSessionConfig(num_recent_events=3), 3 + SNAPSHOT_EVERY),
    (GetSessionConfig(num_recent_events=0), SNAPSHOT_EVERY),
]


def test_get_session_reads_only_the_suffix_it_returns(url: str) -> None:
    """Each config of :data:`SUFFIXES` on one 1,000-event session (filled once)."""

    async def body(service: SessionStoreSessionService) -> None:
        await fill(service, "s", 1000)
        for config, most in SUFFIXES:
            counting = Counting(service.store.events)
            service.store.events.read_from = counting.read_from  # type: ignore[method-assign]
            found = await service.get_session(
                app_name=APP, user_id=USER, session_id="s", config=config
            )
            del service.store.events.read_from
            assert found is not None and found.state == {"n": 999}
            assert counting.read <= most, config

    on(url, body)  # type: ignore[arg-type]


class Calls:
    """Notes the name of every call made through an object (an event log, a handle)."""

    def __init__(self, target: Any, made: list[str]) -> None:
        self._target, self._made = target, made

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._made.append(name)
            return await method(*args, **kwargs)

        return call


def test_an_append_is_one_store_call_and_one_more_per_scope_it_changes(url: str) -> None:
    async def body(service: SessionStoreSessionService) -> list[list[str]]:
        session = await fill(service, "s", 2)
        made: list[str] = []
        handle = service._handle
        service._events = Calls(service._events, made)
        service._handle = lambda *key: Calls(handle(*key), made)  # type: ignore[method-assign]
        seen = []
        for delta in ({}, {"own": 1}, {"user:u": 1}, {"app:a": 1, "user:u": 2, "temp:t": 3}):
            made.clear()
            await service.append_event(session, text_event(str(delta), 9.0, **delta))
            seen.append(list(made))
        return seen

    assert on(url, body) == [  # type: ignore[arg-type]
        ["append"],
        ["append"],
        ["append", "update"],
        ["append", "update", "update"],
    ]


def test_listing_reads_only_the_sessions_it_returns(url: str) -> None:
    """Among many sessions of other apps and users, a listing reads the indexes, then
    each session it returns (metadata, and its last snapshot onward), nothing else:
    never the namespace's list of logs."""

    async def body(service: SessionStoreSessionService) -> list[Any]:
        for app in ("other-1", "other-2", "other-3"):
            for i in range(8):
                await service.create_session(app_name=app, user_id=f"u{i % 3}", session_id=f"x{i}")
        for user, sid in ((USER, "a"), (USER, "b"), ("user-2", "c")):
            await fill_as(service, user, sid)
        made: list[str] = []
        handle = service._handle
        service._events = Calls(service._events, made)
        service._handle = lambda *key: Calls(handle(*key), made)  # type: ignore[method-assign]
        seen = []
        for user in (USER, None):
            made.clear()
            listed = await service.list_sessions(app_name=APP, user_id=user)
            seen.append(([s.id for s in listed.sessions], sorted(made)))
        return seen

    per_session = ["info", "read_from"]
    assert on(url, body) == [  # type: ignore[arg-type]
        (["a", "b"], sorted(["get_data"] * 2 + per_session * 2)),
        (["a", "b", "c"], sorted(["get_data"] * 3 + per_session * 3)),
    ]


def test_creating_a_session_writes_nothing_that_grows_with_the_apps_users(url: str) -> None:
    """A create writes its log and its user's value (and the app value only for
    ``app:`` keys), so creating the n-th user's session costs what the first did; the
    app's users are listed from their values, together with those an app value made by
    an earlier version lists."""

    async def body(service: SessionStoreSessionService) -> tuple[Any, list[str], list[str]]:
        for i in range(40):
            await service.create_session(app_name=APP, user_id=f"u{i:02}", session_id="s")
        app = service.store.session(APP, APP_STATE, "adk", "-")
        untouched = await app.get_data(0)
        made: list[str] = []
        handle = service._handle
        service._handle = lambda *key: Calls(handle(*key), made)  # type: ignore[method-assign]
        await service.create_session(app_name=APP, user_id="u40", session_id="s")
        service._handle = handle  # type: ignore[method-assign]
        await app.set_data({"state": {}, "users": {"legacy": 1}, "applied": {}}, 0)
        await service.create_session(app_name=APP, user_id="legacy", session_id="s")
        listed = await service.list_sessions(app_name=APP)
        return untouched, sorted(made), [s.user_id for s in listed.sessions]

    untouched, made, users = on(url, body)
    assert untouched is None
    assert made == ["get_data", "get_data", "update"]  # the user's value, then the app's
    assert sorted(users) == sorted([f"u{i:02}" for i in range(41)] + ["legacy"])


def test_a_session_whose_log_is_gone_leaves_the_indexes_at_the_next_read(url: str) -> None:
    """A log expired (a store's ttl) or deleted by a delete_session that died before
    its index update: the session is not found, not listed, and its id can be taken."""

    async def body(service: SessionStoreSessionService) -> Any:
        for sid in ("gone", "kept", "listed-gone"):
            made = await service.create_session(
                app_name=APP, user_id=USER, session_id=sid, state={"app:a": sid}
            )
            if sid != "kept":
                await service.store.events.delete(log_of(made))
        assert await service.get_session(app_name=APP, user_id=USER, session_id="gone") is None
        listed = await service.list_sessions(app_name=APP)
        index = await service.store.session(APP, USER_STATE, USER, "-").get_data(0)
        again = await service.create_session(app_name=APP, user_id=USER, session_id="gone")
        return [s.id for s in listed.sessions], sorted(index["sessions"]), again.id

    assert on(url, body) == (["kept"], ["kept"], "gone")  # type: ignore[arg-type]


async def fill_as(service: BaseSessionService, user: str, sid: str) -> None:
    session = await service.create_session(app_name=APP, user_id=user, session_id=sid)
    await service.append_event(session, text_event(sid, 100.0 + ord(sid)))


# --- construction -------------------------------------------------------------------------


def test_a_service_on_a_store_given_leaves_it_open(url: str) -> None:
    async def body() -> tuple[list[str], list[str]]:
        store = aio.connect(url, namespace())
        async with SessionStoreSessionService(store) as service:
            session = await fill(service, "s", 1)
        found = [h.id for h in await store.events.list()]
        await store.close()
        return found, [log_of(session)]

    found, made = asyncio.run(body())
    assert found == made


def test_a_service_on_a_sync_store_given_shares_it_with_sync_code(url: str) -> None:
    """A sync store (a memory one too) serves the async service from a worker thread;
    what the service wrote is what the sync store holds, and the store stays open."""
    with sessionstore.connect(url, namespace()) as store:

        async def body() -> Any:
            async with SessionStoreSessionService(store) as service:
                session = await fill(service, "s", 3)
                found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
                stale = await service.get_session(app_name=APP, user_id=USER, session_id="s")
                await service.append_event(found, text_event("x", 5.0, **{"user:k": 1}))
                with pytest.raises(StaleSessionError):
                    await service.append_event(stale, text_event("y", 6.0))
                return session.events + [found.events[-1]], log_of(session)

        made, log_id = asyncio.run(body())
        stored = store.events.read_from(log_id, 1)
        assert [Event.model_validate(e.data["event"]) for e in stored] == made
        assert store.session(APP, USER_STATE, USER, "-").get_data(0)["state"] == {"k": 1}


def test_a_service_takes_connect_options_with_a_url_only() -> None:
    store = aio.connect("memory://", "t-adk-x")
    with pytest.raises(InvalidArgumentError, match="with a URL"):
        SessionStoreSessionService(store, namespace="other")
    with pytest.raises(InvalidArgumentError, match="not int"):
        SessionStoreSessionService(42)  # type: ignore[arg-type]


def test_log_ids_of_parts_with_separators_never_collide() -> None:
    assert session_id("a/b", "c", "d", "i") != session_id("a", "b/c", "d", "i")
    assert session_id("a:b", "c", "d", "i") != session_id("a", "b:c", "d", "i")
    assert session_id("a", "b", "c/d", "i") != session_id("a", "b", "c", "d/i")


@pytest.fixture(scope="module")
def sentinel() -> Any:
    with SentinelSetup() as started:
        yield started


def test_it_works_behind_redis_sentinel(sentinel: Any) -> None:
    test_events_come_back_in_order_and_exact(sentinel.url)
    test_an_out_of_date_session_object_is_refused_and_nothing_is_written(sentinel.url)


# --- through ADK's Runner -----------------------------------------------------------------


class Counter(BaseAgent):
    """An agent without a model: each run answers with the count of its runs so far,
    kept in session, user and app state."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        runs = ctx.session.state.get("runs", 0) + 1
        yield Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            content=types.Content(role="model", parts=[types.Part(text=f"run {runs}")]),
            actions=EventActions(
                state_delta={
                    "runs": runs,
                    "user:runs": ctx.session.state.get("user:runs", 0) + 1,
                    "app:seen": True,
                    "temp:t": runs,
                }
            ),
        )


def test_an_agent_run_through_adks_runner_records_what_in_memory_does(url: str) -> None:
    async def body(service: BaseSessionService) -> Any:
        runner = Runner(agent=Counter(name="counter"), app_name=APP, session_service=service)
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        answers = []
        for text in ("one", "two", "three"):
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for event in runner.run_async(user_id=USER, session_id="s", new_message=message):
                answers.append(event.content.parts[0].text)
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        kinds = [(e.author, e.content.parts[0].text) for e in found.events]
        return answers, kinds, found.state

    as_in_memory(url, body)


# --- across processes ---------------------------------------------------------------------


ROUNDS = 8
WRITES = 15


def racing_appender(url: str, ns: str, who: int, barrier: Any, results: Any) -> None:
    """Each round: read the session, wait for the other process, append (one of the two
    is refused as stale); then append WRITES events, re-reading after each refusal,
    each setting a user key of its own on a session of its own as well. Reports the
    ids of the events acknowledged and how many appends were refused."""

    async def run() -> tuple[list[str], list[str], int]:
        won: list[str] = []
        acked: list[str] = []
        refused = 0
        async with SessionStoreSessionService(url, namespace=ns) as service:
            mine = await service.create_session(app_name=APP, user_id=USER, session_id=f"p{who}")
            for r in range(ROUNDS):
                session = await service.get_session(app_name=APP, user_id=USER, session_id="s")
                barrier.wait(60)
                event = text_event(f"round {r} by {who}", 100.0 + r)
                try:
                    await service.append_event(session, event)
                    won.append(event.id)
                except StaleSessionError:
                    refused += 1
                barrier.wait(60)
            for i in range(WRITES):
                event = text_event(f"{who}:{i}", 1000.0 + i)
                while True:
                    session = await service.get_session(
                        app_name=APP,
                        user_id=USER,
                        session_id="s",
                        config=GetSessionConfig(num_recent_events=1),
                    )
                    try:
                        await service.append_event(session, event.model_copy(deep=True))
                        break
                    except StaleSessionError:
                        refused += 1
                acked.append(event.id)
                await service.append_event(mine, text_event("u", 1.0, **{f"user:p{who}_{i}": i}))
        return won, acked, refused

    results.put((who, *asyncio.run(run())))


@pytest.fixture(params=["file", "sqlite", "redis"])
def shared(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return url_for(request.param, request, tmp_path)


@pytest.mark.slow
def test_two_processes_appending_to_one_session_store_each_event_once(shared: str) -> None:
    ns = namespace()

    async def create(service: BaseSessionService) -> None:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")

    on(shared, create, ns)
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    processes = [
        context.Process(target=racing_appender, args=(shared, ns, who, barrier, results))
        for who in (0, 1)
    ]
    for process in processes:
        process.start()
    reports = sorted(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    won = [event_id for _, wins, _, _ in reports for event_id in wins]
    acked = [event_id for _, _, acks, _ in reports for event_id in acks]
    assert len(won) == ROUNDS  # each round, one append landed and the other was refused
    assert sum(refused for *_, refused in reports) >= ROUNDS

    async def check(service: BaseSessionService) -> Any:
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        return [e.id for e in found.events], await service.get_user_state(
            app_name=APP, user_id=USER
        )

    stored, user_state = on(shared, check, ns)
    assert sorted(stored) == sorted(won + acked)  # every acknowledged event, once
    assert stored[:ROUNDS] == sorted(won, key=stored.index)
    for _, _, acks, _ in reports:  # each process's events in the order it appended them
        assert [i for i in stored if i in acks] == acks
    assert user_state == {f"p{who}_{i}": i for who in (0, 1) for i in range(WRITES)}
