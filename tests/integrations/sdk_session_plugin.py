"""A pytest plugin that runs the OpenAI Agents SDK's own session tests on SessionStoreSession.

Loaded by ``test_sdk_suite.py`` into a pytest run of ``tests/memory/test_session.py`` and
``tests/memory/test_session_limit.py`` taken from the SDK's source distribution (never
copied into this repository). The store is named by the environment:
``SESSIONSTORE_SDK_URL`` (any URL sessionstore takes).

* ``SQLiteSession``, as each of those modules imported it, becomes :func:`session_factory`:
  a :class:`SessionStoreSession` on the store of ``SESSIONSTORE_SDK_URL``, in a namespace
  of its own for each database the test names (sessions a test opens on one ``db_path``
  share a store, as ``SQLiteSession`` objects on one file share the database; every
  ``":memory:"`` session gets a namespace of its own, as each such ``SQLiteSession`` has a
  database of its own).
* ``SQLiteSession.close()`` is synchronous where ``SessionStoreSession.close()`` is a
  coroutine (``close`` is no part of the SDK's ``Session`` protocol): the sessions made
  here take a synchronous ``close()`` that does nothing, and the stores are closed when
  the test ends.
* ``@pytest.mark.asyncio`` tests run on an event loop of their own (``asyncio.run``), as
  pytest-asyncio runs them by default; no extra dependency is needed.
* The tests listed in :data:`NOT_APPLICABLE` are about ``SQLiteSession``'s internals and
  are skipped with the reason given there.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionstore import aio
from sessionstore.integrations.openai_agents import SessionStoreSession

#: The SDK's tests that test ``SQLiteSession`` itself rather than the ``Session`` contract,
#: by test function name, with why each does not apply to SessionStoreSession.
NOT_APPLICABLE: dict[str, str] = {
    "test_await_mutation_cancellation_hides_later_failure_without_loop_error": (
        "tests agents.memory.sqlite_session._await_mutation, a private helper of "
        "SQLiteSession's worker-thread writes"
    ),
    "test_sqlite_session_close_closes_worker_thread_connections": (
        "inspects SQLiteSession._connections, its per-worker-thread sqlite3 connections"
    ),
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": (
        "inspects SQLiteSession._connections, its per-worker-thread sqlite3 connections"
    ),
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
        "patches sqlite3.connect and inspects SQLiteSession._connections"
    ),
    "test_sqlite_session_keeps_connections_of_live_worker_threads": (
        "inspects SQLiteSession._connections, its per-worker-thread sqlite3 connections"
    ),
    "test_sqlite_session_closed_rejects_empty_add_items": (
        "expects SQLiteSession's own RuntimeError text 'SQLiteSession is closed'; "
        "use after close is no part of the Session protocol"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": (
        "writes a corrupt row into SQLiteSession's messages table through "
        "SQLiteSession._locked_connection"
    ),
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        "writes a corrupt row into SQLiteSession's messages table through "
        "SQLiteSession._locked_connection"
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
        "writes a corrupt row into SQLiteSession's messages table through "
        "SQLiteSession._locked_connection"
    ),
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (
        "writes a corrupt row into SQLiteSession's messages table through "
        "SQLiteSession._locked_connection"
    ),
    "test_sqlite_session_file_lock_is_shared_across_instances": (
        "inspects SQLiteSession._lock and SQLiteSession._file_lock_counts"
    ),
    "test_sqlite_session_failed_add_items_releases_write_lock": (
        "probes the SQLite write lock and the agent_sessions table of SQLiteSession's file"
    ),
    "test_sqlite_session_failed_clear_session_rolls_back": (
        "drops a table of SQLiteSession's file and inspects SQLiteSession._connections"
    ),
    "test_sqlite_session_failed_pop_item_releases_write_lock": (
        "drops a table of SQLiteSession's file and inspects SQLiteSession._connections"
    ),
    "test_sqlite_session_rollback_failure_evicts_connection": (
        "injects a sqlite3.Connection subclass through SQLiteSession._get_connection"
    ),
    "test_sqlite_session_close_retries_quarantined_connection": (
        "injects a sqlite3.Connection subclass and inspects SQLiteSession._quarantined_connections"
    ),
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        "pauses sqlite3.Connection.commit through SQLiteSession._get_connection"
    ),
}

#: The module attribute each SDK test module calls to make a session.
REPLACED = "SQLiteSession"

_namespaces = itertools.count()


class SuiteSession(SessionStoreSession):
    """A SessionStoreSession whose ``close()`` is synchronous like ``SQLiteSession.close()``;
    its store is shared and closed when the test ends."""

    def close(self) -> None:  # type: ignore[override]
        return None


class Stores:
    """The stores one test opened: one per ``db_path`` (a new one per ``":memory:"``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.by_path: dict[str, aio.AsyncStore] = {}
        self.opened: list[aio.AsyncStore] = []
        self.made = 0

    def store_for(self, db_path: str | Path) -> aio.AsyncStore:
        key = str(db_path)
        if key != ":memory:" and key in self.by_path:
            return self.by_path[key]
        store = aio.connect(self.url, f"sdk-{os.getpid()}-{next(_namespaces)}")
        self.opened.append(store)
        if key != ":memory:":
            self.by_path[key] = store
        return store

    def session_factory(
        self, session_id: str, db_path: str | Path = ":memory:", **options: Any
    ) -> SuiteSession:
        """``SQLiteSession(session_id, db_path=":memory:", session_settings=None)``."""
        self.made += 1
        return SuiteSession(session_id, self.store_for(db_path), **options)

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


#: The test report's property: how many sessions the test made through the factory.
MADE = "sessionstore_sessions"
#: The test's :class:`Stores`, for the runner of coroutine tests.
STORES = pytest.StashKey[Stores]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: run the coroutine test on an event loop")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name in NOT_APPLICABLE:
            reason = f"SQLiteSession-specific: {NOT_APPLICABLE[name]}"
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    test = pyfuncitem.obj
    if not inspect.iscoroutinefunction(test):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    stores = pyfuncitem.stash[STORES]

    async def run() -> None:
        # The stores are closed on the loop the test ran on, which still owns their
        # connections.
        try:
            await test(**arguments)
        finally:
            await stores.close()

    asyncio.run(run())
    return True


@pytest.fixture(autouse=True)
def sessions_on_sessionstore(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stores]:
    """``SQLiteSession`` of the test's module made a SessionStoreSession factory."""
    stores = Stores(os.environ["SESSIONSTORE_SDK_URL"])
    if hasattr(request.module, REPLACED):
        monkeypatch.setattr(request.module, REPLACED, stores.session_factory)
    request.node.stash[STORES] = stores
    yield stores
    asyncio.run(stores.close())
    request.node.user_properties.append((MADE, stores.made))
