"""Google ADK sessions on sessionstore event logs and session values.

    from sessionstore.integrations.adk import SessionStoreSessionService

    service = SessionStoreSessionService("redis://localhost:6379/0", namespace="agents")
    runner = Runner(agent=agent, app_name="shop", session_service=service)

:class:`SessionStoreSessionService` is a ``google.adk.sessions.BaseSessionService`` on a
sessionstore store (a :mod:`sessionstore.aio` one, or a sync one whose calls run in a
worker thread), so any URL sessionstore takes works: memory, files, SQLite, Redis, Redis
Cluster and Sentinel. It uses the store's public API only. Written for google-adk 2.13.

Layout. An ADK session is one event log, :func:`session_id` of (app, user, session)
(all its keys in one hash slot on Redis Cluster):

* seq 0, ``adk/session``: ``data = {"app", "user", "id", "time", "state"}``: the
  creation time (ADK's float seconds, as given) and the session-scoped initial state;
* seq ``k >= 1``, ``adk/event``: ``data = {"event": ...}``, one ``append_event``: the ADK
  ``Event`` as ``model_dump(mode="json", exclude_none=True)`` (what ADK's own database
  service stores), ``temp:`` keys already trimmed from its state delta. Every
  :data:`SNAPSHOT_EVERY`-th seq also carries ``"state"``: the session-scoped state after
  that event, so that a read folds at most that many events to find the state.

App state is the session value (app, ``adk-app-state``, ``adk``, ``-``) and user state
(app, ``adk-user-state``, user, ``-``), each a dict of raw (un-prefixed) keys stored at
logical time 0, changed only by the store's atomic ``update`` (a merge of the delta): two
processes updating one user's state from different sessions lose nothing.

State scopes are kept as ADK's own services keep them: ``app:`` and ``user:`` keys go
to the app and user values (returned merged, prefixed, into every session's state),
``temp:`` keys are never stored (they stay in the session object given to
``append_event``), the rest is the session's own. ``delete_session`` deletes the log,
never app or user state.

Concurrency. A session object carries the seq its service last saw
(ADK's ``Session._storage_update_marker``, a private attribute that ADK's database
service uses for the same purpose). ``append_event`` appends at exactly that seq, so the
store refuses a session object that is out of date (another process, or another object
of this one, appended since) and :class:`StaleSessionError` (ADK's
``StaleSessionError``) is raised: nothing is written, nothing merged, and the
comparison is between seqs, never float timestamps. A session object without that
marker (rebuilt from JSON, made by another service) is taken as current when its last
event is the stored last one. An event equal to one the object holds (same id) is taken
as delivered again and not stored twice, as ADK's in-memory service does. The appended
event is the commit point; its app and user deltas are applied right after it, each
atomically.

Reads cost what they return: ``get_session`` reads the log's metadata (``info``) and then
only the events from the last state snapshot or from the first event asked for
(``num_recent_events``; ``after_timestamp`` reads back in growing steps until an event
before that time is found), whichever comes first. ``after_timestamp`` keeps what ADK's
in-memory service keeps: the newest events up to (not including) the newest one
stamped before that time.

Not covered (see the README): a process that dies between an event's append and its app
or user delta leaves that delta unapplied; a session deleted and created again with as
many events as an old session object saw accepts that object's append;
``list_sessions`` lists every log of the namespace and reads each listed session's state
(its last snapshot onward).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

from google.adk import errors as adk_errors
from google.adk.errors import already_exists_error, session_not_found_error
from google.adk.events import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import BaseSessionService, Session, State
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from pydantic_core import to_jsonable_python

from .. import aio
from ..errors import (
    InvalidArgumentError,
    SeqConflictError,
    SessionExistsError,
    SessionStoreError,
)
from ..errors import SessionNotFoundError as LogNotFoundError
from ..models import SessionEvent, SessionHeader
from ..store import Store

#: The event log of an ADK session is ``PREFIX + app/user/session``, each part quoted.
PREFIX = "adk:"
#: Event types of a session's log.
CREATED = "adk/session"
EVENT = "adk/event"
#: Every event whose seq is a multiple of this carries the session state after it.
SNAPSHOT_EVERY = 64
#: The value keys of app and user state (the app name is the symbol).
APP_STATE = "adk-app-state"
USER_STATE = "adk-user-state"
_EXCHANGE = "adk"
_FRAME = "-"
#: The logical time every state value is stored and read at.
_WHEN = 0
#: How many value handles of app and user states a service keeps.
_HANDLES_KEPT = 1024
#: How many events ``after_timestamp`` reads first, from the end (then four times more).
_FIRST_STEP = 32


class StaleSessionError(adk_errors.StaleSessionError, SessionStoreError):
    """``append_event`` was given a session object that is out of date: events were
    appended to the stored session since this object was read (by another process or
    another object). Nothing was written. ADK's ``StaleSessionError`` (a ``ValueError``):
    read the session again with ``get_session`` and go on from there."""

    def __init__(
        self, app_name: str, user_id: str, session_id: str, seen: int | None, stored: int
    ) -> None:
        self.app_name, self.user_id, self.session_id = app_name, user_id, session_id
        #: The events the session object saw and those stored (None: not known).
        self.seen = None if seen is None else seen - 1
        self.stored = stored - 1
        saw = "" if seen is None else f", this session object saw {seen - 1}"
        super().__init__(
            f"session {session_id!r} (app {app_name!r}, user {user_id!r}) has "
            f"{stored - 1} stored events{saw}: the session object is out of date; read it "
            "again with get_session. Nothing was written"
        )


class AdkSessionNotFoundError(session_not_found_error.SessionNotFoundError, SessionStoreError):
    """``append_event`` to a session that is not stored (deleted, or never created).
    ADK's ``SessionNotFoundError`` (a ``ValueError``)."""


class SessionAlreadyExistsError(already_exists_error.AlreadyExistsError, SessionStoreError):
    """``create_session`` with the id of a stored session. ADK's ``AlreadyExistsError``."""


def session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The event log of an ADK session: its three parts quoted (no ``/`` inside)."""
    return PREFIX + "/".join(quote(part, safe="") for part in (app_name, user_id, session_id))


_log_id = session_id


def _prefix(app_name: str, user_id: str | None) -> str:
    parts = [app_name] if user_id is None else [app_name, user_id]
    return PREFIX + "".join(quote(part, safe="") + "/" for part in parts)


class SessionStoreSessionService(BaseSessionService):
    """ADK's session service on a sessionstore store; see the module docstring.

    ``SessionStoreSessionService(url, namespace=..., **connect_options)`` opens a store of
    its own (:func:`sessionstore.aio.connect`, no I/O until first use; ``timeout``,
    ``durability``, ``ttl`` go there), closed by :meth:`close` or ``async with``.
    ``SessionStoreSessionService(store)`` works on a store given, which stays open: a
    :class:`sessionstore.aio.AsyncStore`, or a :class:`sessionstore.Store` whose calls
    then run in a worker thread (so a ``memory://`` store can be shared with sync code).
    """

    def __init__(
        self,
        url_or_store: str | os.PathLike[str] | aio.AsyncStore | Store | None = None,
        *,
        namespace: str | None = None,
        **connect_options: Any,
    ) -> None:
        self.store: aio.AsyncStore | Store
        if isinstance(url_or_store, (aio.AsyncStore, Store)):
            if namespace is not None or connect_options:
                raise InvalidArgumentError(
                    "SessionStoreSessionService takes namespace and connect options with a "
                    "URL, not with a store (the store has its own)"
                )
            self.store, self._owns = url_or_store, False
        elif url_or_store is None or isinstance(url_or_store, (str, os.PathLike)):
            ns = aio.DEFAULT_NAMESPACE if namespace is None else namespace
            self.store, self._owns = aio.connect(url_or_store, ns, **connect_options), True
        else:
            raise InvalidArgumentError(
                "SessionStoreSessionService takes a URL or a sessionstore store "
                f"(sessionstore.connect or sessionstore.aio.connect), not "
                f"{type(url_or_store).__name__}"
            )
        #: The store's event log, its calls awaited (a sync store's run in a worker thread).
        events = self.store.events
        self._events: Any = events if isinstance(events, aio.AsyncEventLog) else _Threaded(events)
        #: Value handles of app and user states, the least recently used first.
        self._handles: dict[tuple[str, str, str], Any] = {}

    # --- BaseSessionService -------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Store a new session with ``state`` (its ``app:`` and ``user:`` keys go to the
        app and user state, ``temp:`` keys nowhere); ``session_id`` is a new uuid when
        None. :class:`SessionAlreadyExistsError` when the id is taken (also by a
        concurrent create in another process): nothing is written then."""
        sid = session_id.strip() if session_id else None
        sid = sid or platform_uuid.new_uuid()
        scoped = _scoped(state or {})
        now = platform_time.get_time()
        log_id = _log(app_name, user_id, sid)
        created = {"app": app_name, "user": user_id, "id": sid, "time": now}
        first = SessionEvent(
            seq=0,
            type=CREATED,
            time=_ms(now),
            data={**created, "state": scoped["session"]},
            id=secrets.token_hex(8),
        )
        with contextlib.suppress(SessionExistsError):
            await self._events.create(SessionHeader(id=log_id, created_at=0))
        try:
            await self._events.append(log_id, [first])
        except SeqConflictError:
            raise SessionAlreadyExistsError(f"Session with id {sid} already exists.") from None
        app_state, user_state = await self._apply(app_name, user_id, scoped, read=True)
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merged(app_state, user_state, scoped["session"]),
            last_update_time=now,
        )
        _mark(session, 1)
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its state (app, user and its own, merged) and its events in
        order, as appended: all of them, or the newest ``config.num_recent_events``,
        or those from the newest run at or after ``config.after_timestamp``. None when
        it is not stored. Reads only the events returned and those since the last state
        snapshot."""
        session_id = _stripped(session_id)
        log_id = _log(app_name, user_id, session_id)
        try:
            info = await self._events.info(log_id)
            if info.next_seq == 0:
                return None
            read = await self._read(log_id, info.next_seq, config)
        except LogNotFoundError:
            return None
        app_state, user_state = await self._states(app_name, user_id)
        events = [Event.model_validate(e.data["event"]) for e in read.returned]
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(app_state, user_state, read.state),
            events=events,
            last_update_time=read.last_update_time,
        )
        _mark(session, read.next_seq)
        return session

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The sessions of the app (of ``user_id`` only, when given) with their state and
        without events, oldest update first (then by user and id), as ADK's services
        list them."""
        prefix = _prefix(app_name, user_id)
        found = []
        app_state = await self._value(APP_STATE, app_name, _EXCHANGE)
        user_states: dict[str, dict[str, Any]] = {}
        for header in await self._events.list():
            if not header.id.startswith(prefix):
                continue
            try:
                info = await self._events.info(header.id)
                if info.next_seq == 0:
                    continue
                read = await self._read(header.id, info.next_seq, _NO_EVENTS)
            except LogNotFoundError:
                continue  # deleted meanwhile
            _, owner, sid = _parts(header.id)
            if owner not in user_states:
                user_states[owner] = await self._value(USER_STATE, app_name, owner)
            session = Session(
                id=sid,
                app_name=app_name,
                user_id=owner,
                state=_merged(app_state, user_states[owner], read.state),
                last_update_time=read.last_update_time,
            )
            _mark(session, read.next_seq)
            found.append(session)
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session's events and its own state (nothing when it is not
        stored); app and user state stay."""
        with contextlib.suppress(LogNotFoundError):
            await self._events.delete(_log(app_name, user_id, _stripped(session_id)))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state, raw keys (no ``user:`` prefix); ``{}`` when none."""
        return await self._value(USER_STATE, app_name, user_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append ``event`` to the stored session and to ``session``, as ADK's services do
        (a partial event is returned untouched; ``temp:`` keys are applied to
        ``session`` and never stored). :class:`StaleSessionError` when ``session`` is
        out of date, :class:`AdkSessionNotFoundError` when it is not stored; nothing is
        written then. An event equal to one ``session`` holds already (same id) is
        taken as delivered again and not stored twice."""
        if event.partial:
            return event
        if any(e.id == event.id and e == event for e in session.events):
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        log_id = _log(session.app_name, session.user_id, session.id)
        seq = await self._seen(log_id, session)
        stored: dict[str, Any] = {"event": event.model_dump(mode="json", exclude_none=True)}
        scoped = _scoped(stored["event"].get("actions", {}).get("state_delta") or {})
        try:
            if seq % SNAPSHOT_EVERY == 0:
                before = await self._read(log_id, seq, _NO_EVENTS)
                stored["state"] = {**before.state, **scoped["session"]}
            record = SessionEvent(
                seq=seq,
                type=EVENT,
                time=_ms(event.timestamp),
                data=stored,
                id=secrets.token_hex(8),
            )
            await self._events.append(log_id, [record])
        except SeqConflictError as exc:
            raise StaleSessionError(
                session.app_name, session.user_id, session.id, seq, exc.expected
            ) from None
        except LogNotFoundError:
            raise AdkSessionNotFoundError(f"Session {session.id} not found.") from None
        await self._apply(session.app_name, session.user_id, scoped, read=False)
        session.last_update_time = event.timestamp
        _mark(session, seq + 1)
        return self._commit_event_to_session(session, event)

    # --- lifecycle ------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the store if this service opened it; a store given stays open."""
        if self._owns and isinstance(self.store, aio.AsyncStore):
            await self.store.close()

    async def __aenter__(self) -> SessionStoreSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"SessionStoreSessionService({self.store!r})"

    # --- internals ------------------------------------------------------------------------

    async def _seen(self, log_id: str, session: Session) -> int:
        """The next seq as ``session`` saw it: its mark, else (an object this service
        did not make) the stored next seq when its last event is the stored last one."""
        marker = session._storage_update_marker
        if marker is not None and marker.startswith(_MARK):
            return int(marker[len(_MARK) :])
        try:
            info = await self._events.info(log_id)
            last = await self._events.read_from(log_id, max(0, info.next_seq - 1))
        except LogNotFoundError:
            raise AdkSessionNotFoundError(f"Session {session.id} not found.") from None
        stored_last = last[-1].data["event"]["id"] if last and last[-1].type == EVENT else None
        mine = session.events[-1].id if session.events else None
        if stored_last != mine:
            raise StaleSessionError(
                session.app_name, session.user_id, session.id, None, info.next_seq
            )
        return info.next_seq

    async def _read(self, log_id: str, next_seq: int, config: GetSessionConfig | None) -> _Read:
        """The session state at ``next_seq`` and the events ``config`` asks for."""
        last = next_seq - 1
        snapshot = last - last % SNAPSHOT_EVERY
        recent = None if config is None else config.num_recent_events
        after = None if config is None else config.after_timestamp
        first = 1 if recent is None else max(1, next_seq - recent)
        if recent is None and after is not None:
            first = max(1, next_seq - _FIRST_STEP)
        step = _FIRST_STEP
        while True:
            events = await self._events.read_from(log_id, min(first, snapshot))
            events = [e for e in events if e.seq < next_seq]  # appended meanwhile: later
            if not events or events[0].seq != min(first, snapshot):
                raise LogNotFoundError(log_id)  # deleted and written anew meanwhile
            mine = events[first - events[0].seq :] if first <= next_seq else []
            if recent is not None or after is None or first == 1:
                break
            if mine and mine[0].data["event"]["timestamp"] < after:
                break
            step *= 4
            first = max(1, next_seq - step)
        if after is not None:
            times = [e.data["event"]["timestamp"] for e in mine]
            cut = len(times)
            while cut > 0 and times[cut - 1] >= after:
                cut -= 1
            if cut > 0:
                mine = mine[cut:]
        state = dict(events[snapshot - events[0].seq].data["state"])
        for event in events[snapshot - events[0].seq + 1 :]:
            delta = event.data["event"].get("actions", {}).get("state_delta") or {}
            state.update(_scoped(delta)["session"])
        end = events[-1]
        updated = end.data["time"] if end.type == CREATED else end.data["event"]["timestamp"]
        return _Read(mine, state, updated, next_seq)

    async def _states(self, app_name: str, user_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        return (
            await self._value(APP_STATE, app_name, _EXCHANGE),
            await self._value(USER_STATE, app_name, user_id),
        )

    async def _value(self, kind: str, app_name: str, exchange: str) -> dict[str, Any]:
        found = await self._handle(kind, app_name, exchange).get_data(_WHEN)
        return dict(found) if found else {}

    def _handle(self, kind: str, app_name: str, exchange: str) -> Any:
        """The value handle of an app's or a user's state; the last ones used are kept,
        so that an ``update`` starts from the record its handle saw last."""
        key = (kind, app_name, exchange)
        handle = self._handles.pop(key, None)
        if handle is None:
            made = self.store.session(app_name, kind, exchange, _FRAME)
            handle = made if isinstance(self.store, aio.AsyncStore) else _Threaded(made)
        self._handles[key] = handle
        if len(self._handles) > _HANDLES_KEPT:
            del self._handles[next(iter(self._handles))]
        return handle

    async def _apply(
        self, app_name: str, user_id: str, scoped: dict[str, dict[str, Any]], *, read: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Merge the app and user deltas into their values, each atomically; the states
        as stored after when ``read`` (else nothing is read where there is no delta, and
        empty states are returned)."""
        states = []
        for kind, exchange, delta in (
            (APP_STATE, _EXCHANGE, scoped["app"]),
            (USER_STATE, user_id, scoped["user"]),
        ):
            handle = self._handle(kind, app_name, exchange)
            merged = None
            if delta:
                merged = await handle.update(_merging(delta), _WHEN)
            elif read:
                merged = await handle.get_data(_WHEN)
            states.append(dict(merged) if merged else {})
        return states[0], states[1]


#: A session object made by this service carries ``_MARK + next seq`` as its marker.
_MARK = "sessionstore:"
_NO_EVENTS = GetSessionConfig(num_recent_events=0)


class _Threaded:
    """The methods of a sync store's event log or value handle, awaited: each call runs
    in a worker thread."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return call


class _Read:
    """What a read of a session found: the events asked for (as stored), the session
    state and the last update time at ``next_seq``."""

    __slots__ = ("returned", "state", "last_update_time", "next_seq")

    def __init__(
        self, returned: list[SessionEvent], state: dict[str, Any], updated: float, next_seq: int
    ) -> None:
        self.returned = returned
        self.state = state
        self.last_update_time = updated
        self.next_seq = next_seq


def _log(app_name: str, user_id: str, session_id: str) -> str:
    for name, part in (("app_name", app_name), ("user_id", user_id), ("session_id", session_id)):
        if not isinstance(part, str) or not part:
            raise InvalidArgumentError(f"{name} must be a non-empty string, not {part!r}")
    return _log_id(app_name, user_id, session_id)


def _stripped(session_id: str) -> str:
    """A session id as ADK's in-memory service takes it: without surrounding spaces."""
    return session_id.strip() if isinstance(session_id, str) else session_id


def _parts(log_id: str) -> list[str]:
    """(app, user, session) of a log id made by :func:`session_id`."""
    return [unquote(part) for part in log_id[len(PREFIX) :].split("/")]


def _mark(session: Session, next_seq: int) -> None:
    # ADK's private revision marker: its database service keeps its own there too, and
    # pydantic lets no other attribute be set on a Session (extra="forbid").
    session._storage_update_marker = f"{_MARK}{next_seq}"


def _scoped(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``state`` split as ADK splits it: raw app and user keys, the session's own keys;
    ``temp:`` keys dropped; values made JSON as ADK's database service makes them."""
    scoped: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "session": {}}
    for key, value in to_jsonable_python(state).items():
        if key.startswith(State.APP_PREFIX):
            scoped["app"][key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            scoped["user"][key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            scoped["session"][key] = value
    return scoped


def _merged(app: dict[str, Any], user: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    merged = dict(own)
    merged.update({State.APP_PREFIX + key: value for key, value in app.items()})
    merged.update({State.USER_PREFIX + key: value for key, value in user.items()})
    return merged


def _merging(delta: dict[str, Any]) -> Callable[[Any], dict[str, Any]]:
    """What ``update`` applies to a state value: ``delta`` merged in."""

    def merge(stored: Any) -> dict[str, Any]:
        return {**(stored or {}), **delta}

    return merge


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


__all__ = [
    "PREFIX",
    "AdkSessionNotFoundError",
    "SessionAlreadyExistsError",
    "SessionStoreSessionService",
    "StaleSessionError",
    "session_id",
]
