"""SessionStoreSessionService: a process SIGKILLed between a committed event (or a
committed create) and its app and user deltas loses and doubles none of them. The next
reader of the session applies what is missing, once; the app and user state end as
ADK's InMemorySessionService holds them after the same events.

The child process is forked and kills itself inside the store's ``update`` of the n-th
app or user delta once armed (the hook is this test's, wrapped around the service's
value handles; nothing of it is in the library).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("google.adk")

from conftest import url_for  # noqa: E402
from google.adk.sessions import BaseSessionService, InMemorySessionService  # noqa: E402

import sessionstore  # noqa: E402
from sessionstore.integrations.adk import (  # noqa: E402
    APP_STATE,
    USER_STATE,
    SessionStoreSessionService,
)

from .test_adk import APP, USER, namespace, text_event  # noqa: E402

INITIAL = {"app:count": 0, "user:count": 0, "own": 0, "app:first": "a", "user:first": "u"}
#: The events appended to session "s" before the crash, the last one dying in its deltas.
BEFORE = [
    text_event(f"e{i}", 10.0 + i, own=i, **{"app:count": i, "user:count": i}) for i in (1, 2, 3)
]


async def after_the_crash(service: BaseSessionService, committed: int) -> list[Any]:
    """What a later process does: read "s", append what was not committed, go on in "s"
    and in a new session "t" that changes the same keys; what the state looked like."""
    found = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert found is not None
    seen = [dict(found.state)]
    for event in BEFORE[committed:]:
        await service.append_event(found, event.model_copy(deep=True))
    seen.append(dict(found.state))
    await service.append_event(found, text_event("e4", 20.0, **{"app:count": 4, "user:count": 4}))
    other = await service.create_session(app_name=APP, user_id=USER, session_id="t")
    await service.append_event(other, text_event("e5", 30.0, **{"app:count": 5, "user:late": 5}))
    for sid in ("s", "t", "s"):
        again = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
        assert again is not None
        seen.append(dict(again.state))
    seen.append(await service.get_user_state(app_name=APP, user_id=USER))
    listed = await service.list_sessions(app_name=APP)
    seen.append([(s.id, s.state) for s in listed.sessions])
    return seen


async def in_memory(committed: int, service: Any = None) -> list[Any]:
    """:func:`after_the_crash` on ADK's own service, where nothing crashed."""
    service = service or InMemorySessionService()
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id="s", state=INITIAL
    )
    for event in BEFORE[:committed]:
        await service.append_event(session, event.model_copy(deep=True))
    return await after_the_crash(service, committed)


class Stopping:
    """A value handle whose ``update`` awaits ``stop()`` at the ``left``-th call first."""

    def __init__(self, handle: Any, left: list[int], stop: Callable[[], Awaitable[None]]) -> None:
        self._handle, self._left, self._stop = handle, left, stop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    async def update(self, fn: Any, when: Any) -> Any:
        self._left[0] -= 1
        if self._left[0] == 0:
            await self._stop()
        return await self._handle.update(fn, when)


def stopping(service: SessionStoreSessionService, stop: Callable[[], Awaitable[None]]) -> list[int]:
    """Make ``service`` await ``stop()`` in its n-th update of app or user state from
    now on, n the number set in the list returned (none until set)."""
    left = [10**9]
    handle = service._handle
    service._handle = lambda *key: Stopping(handle(*key), left, stop)  # type: ignore[method-assign]
    return left


async def kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def dying(url: str, ns: str, at_create: bool, kill_at: int) -> None:
    """Create "s" and append :data:`BEFORE` to it, dying at the ``kill_at``-th update
    of the create (``at_create``) or of the last event."""

    async def run() -> None:
        service = SessionStoreSessionService(url, namespace=ns)
        left = stopping(service, kill)
        if at_create:
            left[0] = kill_at
        session = await service.create_session(
            app_name=APP, user_id=USER, session_id="s", state=INITIAL
        )
        for event in BEFORE[:-1]:
            await service.append_event(session, event.model_copy(deep=True))
        left[0] = kill_at
        await service.append_event(session, BEFORE[-1].model_copy(deep=True))

    asyncio.run(run())
    os._exit(3)  # not killed: the test fails on this exit code


@pytest.fixture(params=["file", "sqlite", "redis"])
def shared(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return url_for(request.param, request, tmp_path)


@pytest.mark.parametrize(
    ("at_create", "kill_at", "committed", "unapplied"),
    [
        # create: the commit (user index and user keys), then app keys
        (True, 2, 0, {"app": {"count": 0, "first": "a"}}),
        # the last event: its app delta, then its user delta
        (False, 1, 3, {"app": {"count": 3}, "user": {"count": 3}}),
        (False, 2, 3, {"user": {"count": 3}}),
    ],
    ids=["in-create", "before-app-delta", "between-app-and-user-delta"],
)
def test_a_process_killed_before_its_deltas_loses_and_doubles_none(
    shared: str, at_create: bool, kill_at: int, committed: int, unapplied: dict[str, Any]
) -> None:
    ns = namespace()
    child = multiprocessing.get_context("fork").Process(
        target=dying, args=(shared, ns, at_create, kill_at)
    )
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    with sessionstore.connect(shared, ns) as store:
        for scope, kind, exchange in (("app", APP_STATE, "adk"), ("user", USER_STATE, USER)):
            stored = (store.session(APP, kind, exchange, "-").get_data(0) or {}).get("state", {})
            for key, value in unapplied.get(scope, {}).items():  # the crash left it out
                assert stored.get(key) != value, (scope, key)

    async def later() -> list[Any]:
        async with SessionStoreSessionService(shared, namespace=ns) as service:
            return await after_the_crash(service, committed)

    assert asyncio.run(later()) == asyncio.run(in_memory(committed))


def test_an_appender_applying_its_deltas_after_a_reader_did_doubles_none(shared: str) -> None:
    """The appender of e3 stops before its deltas; another service reads the session
    (applying them), appends e4 over the same keys; then the appender applies its own:
    nothing changes (applied once, never after a newer delta)."""
    ns = namespace()

    async def run() -> list[Any]:
        reached, go = asyncio.Event(), asyncio.Event()

        async def pause() -> None:
            reached.set()
            await go.wait()

        async with (
            SessionStoreSessionService(shared, namespace=ns) as one,
            SessionStoreSessionService(shared, namespace=ns) as two,
        ):
            left = stopping(one, pause)
            session = await one.create_session(
                app_name=APP, user_id=USER, session_id="s", state=INITIAL
            )
            for event in BEFORE[:-1]:
                await one.append_event(session, event.model_copy(deep=True))
            left[0] = 1
            late = asyncio.create_task(one.append_event(session, BEFORE[-1].model_copy(deep=True)))
            await reached.wait()
            seen = await after_the_crash(two, len(BEFORE))
            go.set()
            await late
            seen.append(await two.get_user_state(app_name=APP, user_id=USER))
            found = await two.get_session(app_name=APP, user_id=USER, session_id="t")
            seen.append(found.state if found else None)
            return seen

    async def expected() -> list[Any]:
        service = InMemorySessionService()
        seen = await in_memory(len(BEFORE), service)
        seen.append(await service.get_user_state(app_name=APP, user_id=USER))
        found = await service.get_session(app_name=APP, user_id=USER, session_id="t")
        seen.append(found.state if found else None)
        return seen

    assert asyncio.run(run()) == asyncio.run(expected())


async def paused_appender(
    url: str,
    event: Any,
    meanwhile: Callable[[BaseSessionService], Awaitable[None]],
    then: Callable[[BaseSessionService], Awaitable[list[Any]]],
) -> list[Any]:
    """Two services on one namespace: one creates "x", the other "y"; the first appends
    ``event`` to "x" and stops before its deltas while the other runs ``meanwhile``;
    then the first goes on, and the other's ``then`` says what is stored."""
    reached, go = asyncio.Event(), asyncio.Event()

    async def pause() -> None:
        reached.set()
        await go.wait()

    ns = namespace()
    async with (
        SessionStoreSessionService(url, namespace=ns) as one,
        SessionStoreSessionService(url, namespace=ns) as two,
    ):
        x = await one.create_session(app_name=APP, user_id=USER, session_id="x")
        await two.create_session(app_name=APP, user_id=USER, session_id="y")
        stopping(one, pause)[0] = 1
        late = asyncio.create_task(one.append_event(x, event))
        await reached.wait()
        await meanwhile(two)
        go.set()
        await late
        return await then(two)


def in_memory_after(
    event: Any,
    meanwhile: Callable[[BaseSessionService], Awaitable[None]],
    then: Callable[[BaseSessionService], Awaitable[list[Any]]],
) -> list[Any]:
    """:func:`paused_appender`'s operations on ADK's InMemorySessionService, in order."""

    async def run() -> list[Any]:
        service = InMemorySessionService()
        x = await service.create_session(app_name=APP, user_id=USER, session_id="x")
        await service.create_session(app_name=APP, user_id=USER, session_id="y")
        await service.append_event(x, event)
        await meanwhile(service)
        return await then(service)

    return asyncio.run(run())


async def user_and_y_state(service: BaseSessionService) -> list[Any]:
    y = await service.get_session(app_name=APP, user_id=USER, session_id="y")
    return [await service.get_user_state(app_name=APP, user_id=USER), y.state if y else None]


async def delete_x(service: BaseSessionService) -> None:
    await service.delete_session(app_name=APP, user_id=USER, session_id="x")


def test_an_appender_applying_its_deltas_after_its_session_was_deleted_changes_nothing(
    shared: str,
) -> None:
    """The appender of an event on "x" stops before its deltas; another service reads
    "x" (applying them), writes newer values of the same keys through "y" and deletes
    "x"; then the appender applies its own: they are not applied again over the newer
    ones (the deletion dropped the record of what "x" had applied)."""

    def old() -> Any:
        return text_event("old", 1e9, **{"user:k": "old", "app:k": "old"})

    async def newer_then_deleted(service: BaseSessionService) -> None:
        await service.get_session(app_name=APP, user_id=USER, session_id="x")
        y = await service.get_session(app_name=APP, user_id=USER, session_id="y")
        assert y is not None
        await service.append_event(y, text_event("new", 2e9, **{"user:k": "new", "app:k": "new"}))
        await delete_x(service)

    found = asyncio.run(paused_appender(shared, old(), newer_then_deleted, user_and_y_state))
    assert found == in_memory_after(old(), newer_then_deleted, user_and_y_state)


def test_deleting_a_session_applies_the_deltas_its_appender_has_not_yet(shared: str) -> None:
    """The appender of an event stops before its deltas; the session is deleted: the
    deletion applies them (ADK keeps app and user state when a session goes), and the
    appender's own apply, after it, changes nothing."""

    def event() -> Any:
        return text_event("e", 1e9, **{"user:only": "set", "app:only": "set"})

    found = asyncio.run(paused_appender(shared, event(), delete_x, user_and_y_state))
    assert found == in_memory_after(event(), delete_x, user_and_y_state)
