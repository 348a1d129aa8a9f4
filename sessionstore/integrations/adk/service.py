"""The session service: ADK's ``BaseSessionService`` methods on a store's event logs and
session values (see the package docstring for the contract and
:mod:`~sessionstore.integrations.adk.layout` for what is stored)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from typing import Any

from google.adk.events import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse

from ... import aio
from ...errors import InvalidArgumentError, SeqConflictError
from ...errors import SessionNotFoundError as LogNotFoundError
from ...models import SessionEvent, SessionHeader
from ...store import Store
from .errors import AdkSessionNotFoundError, SessionAlreadyExistsError, StaleSessionError
from .layout import (
    APP,
    APP_STATE,
    CREATED,
    EVENT,
    NONE,
    SNAPSHOT_EVERY,
    USER,
    USER_STATE,
    Mark,
    Taken,
    applied,
    applying,
    carried,
    creating,
    deltas,
    forgetting,
    merged,
    scoped,
    session_id,
    split_of,
    state_of,
)

_EXCHANGE = "adk"
_FRAME = "-"
#: The logical time every state value is stored and read at.
_WHEN = 0
#: How many value handles of app and user states a service keeps.
_HANDLES_KEPT = 1024


class SessionStoreSessionService(BaseSessionService):
    """ADK's session service on a sessionstore store; see the package docstring.

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
        concurrent create in another process): none of ``state`` is applied then."""
        sid = session_id.strip() if session_id else None
        sid = sid or platform_uuid.new_uuid()
        _check(app_name, user_id, sid)
        split = scoped(state or {})
        now = platform_time.get_time()
        incarnation = secrets.token_hex(8)
        log_id = session_id_of(app_name, user_id, sid, incarnation)
        data = {
            "app": app_name,
            "user": user_id,
            "id": sid,
            "time": now,
            "state": split["session"],
            "app_state": split[APP],
            "user_state": split[USER],
            "scoped": carried(split, 0, NONE, NONE),
        }
        first = SessionEvent(seq=0, type=CREATED, time=_ms(now), data=data, id=incarnation)
        user = self._handle(USER_STATE, app_name, user_id)
        replaces = (await self._stored(user)).get("sessions", {}).get(sid)
        if replaces is not None and await self._exists(app_name, user_id, sid, replaces):
            raise SessionAlreadyExistsError(f"Session with id {sid} already exists.")
        await self._events.create(SessionHeader(id=log_id))
        await self._events.append(log_id, [first])
        try:  # the commit: the session is in its user's index (the user in the app's)
            user_state = await user.update(creating(sid, incarnation, replaces, split[USER]), _WHEN)
        except Taken:
            with contextlib.suppress(LogNotFoundError):
                await self._events.delete(log_id)
            raise SessionAlreadyExistsError(f"Session with id {sid} already exists.") from None
        app = self._handle(APP_STATE, app_name, _EXCHANGE)
        if split[APP]:
            app_state = await app.update(applying(APP, incarnation, [(0, split[APP])]), _WHEN)
        else:
            app_state = await self._stored(app)
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=merged(state_of(app_state), state_of(user_state), split["session"]),
            last_update_time=now,
        )
        _mark(session, Mark.after(incarnation, first))
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
        order, as appended: all of them, or those stamped at or after
        ``config.after_timestamp``, then the newest ``config.num_recent_events`` of
        them (as ADK's own services give them). None when it is not stored. Reads only
        the events returned and those since the last state snapshot (every event with
        ``after_timestamp``); applies first any app or user delta of the session that a
        process which died after appending its event left unapplied."""
        sid = _stripped(session_id)
        _check(app_name, user_id, sid)
        app, user = await self._read_states(app_name, user_id)
        incarnation = user.get("sessions", {}).get(sid) if user else None
        if incarnation is None:
            return None
        session, _, _ = await self._load(app_name, user_id, sid, incarnation, config, app, user)
        return session

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The sessions of the app (of ``user_id`` only, when given) with their state and
        without events, oldest update first (then by user and id), as ADK's services
        list them. Reads the app's index of users (or the user's value) and each
        listed session's metadata and last state snapshot onward, nothing else."""
        app = await self._stored(self._handle(APP_STATE, app_name, _EXCHANGE))
        users = [user_id] if user_id is not None else await self._users(app_name, app)
        found = []
        for owner in users:
            user = await self._stored(self._handle(USER_STATE, app_name, owner))
            for sid, incarnation in sorted((user or {}).get("sessions", {}).items()):
                session, app, user = await self._load(
                    app_name, owner, sid, incarnation, _NO_EVENTS, app, user
                )
                if session is not None:
                    found.append(session)
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session's events and its own state (nothing when it is not
        stored); app and user state stay, with every app and user delta of its events
        applied (an appender's that had not applied them yet too: they are never
        applied after the deletion). The log goes first: from then on the session is
        not found, and an old session object is refused."""
        sid = _stripped(session_id)
        _check(app_name, user_id, sid)
        user = self._handle(USER_STATE, app_name, user_id)
        incarnation = (await self._stored(user)).get("sessions", {}).get(sid)
        if incarnation is None:
            return
        with contextlib.suppress(LogNotFoundError):
            await self._delete_log((app_name, user_id, sid, incarnation))
        await self._forget(app_name, user_id, sid, incarnation)

    async def _delete_log(self, names: tuple[str, str, str, str]) -> None:
        """Apply the app and user deltas of the log's events that are not yet, then
        delete it while it still ends with the last of them (read again when an append
        landed meanwhile; deleted whatever it ends with after
        :data:`DELETE_ATTEMPTS` such races)."""
        log_id = session_id_of(*names)
        for _ in range(DELETE_ATTEMPTS):
            info = await self._events.info(log_id)
            if info.next_seq == 0:
                break
            read = await self._read(log_id, info.next_seq, _NO_EVENTS)
            await self._repair(names, read, *await self._read_states(*names[:2]))
            try:
                await self._events.delete(log_id, last=read.last)
                return
            except SeqConflictError:
                continue
        await self._events.delete(log_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state, raw keys (no ``user:`` prefix); ``{}`` when none."""
        return state_of(await self._stored(self._handle(USER_STATE, app_name, user_id)))

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append ``event`` to the stored session and to ``session``, as ADK's services do
        (a partial event is returned untouched; ``temp:`` keys are applied to
        ``session`` and never stored). :class:`StaleSessionError` when ``session`` is
        out of date (also when its session was deleted and created again),
        :class:`AdkSessionNotFoundError` when it is not stored; nothing is written then.
        An event equal to one ``session`` holds already (same id) is taken as delivered
        again and not stored twice, and so is a call made again with a copy of
        ``session`` taken before (a retry after a lost reply). The appended event is the
        commit point; its app and user deltas are applied right after it, each once (by
        this call, or by the next reader of the session if this process dies first)."""
        if event.partial:
            return event
        if any(e.id == event.id and e == event for e in session.events):
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        mark = await self._seen(session)
        log_id = session_id_of(session.app_name, session.user_id, session.id, mark.incarnation)
        seq = mark.next_seq
        stored: dict[str, Any] = {"event": event.model_dump(mode="json", exclude_none=True)}
        split = scoped(event.actions.state_delta or {})
        if split != scoped(stored["event"].get("actions", {}).get("state_delta") or {}):
            stored["delta"] = split  # made JSON otherwise than the event's own JSON
        stored["scoped"] = carried(split, seq, mark.app, mark.user)
        try:
            if seq % SNAPSHOT_EVERY == 0:
                before = await self._read(log_id, seq, _NO_EVENTS)
                stored["state"] = {**before.state, **split["session"]}
            # All of the record follows from the event and the object: a retry of a call
            # whose reply was lost stores the same record, an applied replay.
            record = SessionEvent(
                seq=seq, type=EVENT, time=_ms(event.timestamp), data=stored, id=event.id or None
            )
            await self._events.append(log_id, [record])
        except SeqConflictError as exc:
            raise StaleSessionError(
                session.app_name, session.user_id, session.id, seq, exc.expected
            ) from None
        except LogNotFoundError:
            raise await self._gone(session, mark.incarnation) from None
        await self._apply_deltas(session, mark.incarnation, seq, split)
        session.last_update_time = event.timestamp
        _mark(session, Mark.after(mark.incarnation, record))
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

    async def _apply_deltas(
        self, session: Session, incarnation: str, seq: int, split: dict[str, dict[str, Any]]
    ) -> None:
        """Apply the app and user deltas of the record just appended at ``seq``."""
        for scope, kind, exchange in ((APP, APP_STATE, _EXCHANGE), (USER, USER_STATE, None)):
            if split[scope]:
                handle = self._handle(kind, session.app_name, exchange or session.user_id)
                await handle.update(applying(scope, incarnation, [(seq, split[scope])]), _WHEN)

    async def _load(
        self,
        app_name: str,
        user_id: str,
        sid: str,
        incarnation: str,
        config: GetSessionConfig | None,
        app: Any,
        user: Any,
    ) -> tuple[Session | None, Any, Any]:
        """The session of ``incarnation`` as ``config`` asks for it (None when its log
        is gone), and the app and user values: the deltas of its records that ``app``
        and ``user`` (the values as read) lack are applied first."""
        log_id = session_id_of(app_name, user_id, sid, incarnation)
        try:
            info = await self._events.info(log_id)
            if info.next_seq == 0:
                return None, app, user
            read = await self._read(log_id, info.next_seq, config)
            names = (app_name, user_id, sid, incarnation)
            app, user = await self._repair(names, read, app, user)
        except LogNotFoundError:  # deleted, or expired (a store's ttl): out of the indexes
            await self._forget(app_name, user_id, sid, incarnation)
            return None, app, user
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=merged(state_of(app), state_of(user), read.state),
            events=[Event.model_validate(e.data["event"]) for e in read.returned],
            last_update_time=read.last_update_time,
        )
        _mark(session, Mark.after(incarnation, read.last))
        return session, app, user

    async def _forget(self, app_name: str, user_id: str, sid: str, incarnation: str) -> None:
        """Take a session whose log is gone out of its user's index (while the index
        still names ``incarnation``) and its incarnation out of the app and user values."""
        user = self._handle(USER_STATE, app_name, user_id)
        await user.update(forgetting(USER, incarnation, sid), _WHEN)
        app = self._handle(APP_STATE, app_name, _EXCHANGE)
        await app.update(forgetting(APP, incarnation), _WHEN)

    async def _repair(
        self, names: tuple[str, str, str, str], read: _Read, app: Any, user: Any
    ) -> tuple[Any, Any]:
        """``app`` and ``user`` with every delta of the log up to ``read.last`` applied:
        those found missing are applied (each once, whoever else applies them too).
        ``names``: the session's app, user, id and incarnation."""
        app_name, user_id, _, incarnation = names
        log_id = session_id_of(*names)
        newest = dict(zip((APP, USER), read.last.data["scoped"], strict=True))
        values = {APP: app, USER: user}
        for scope, kind, exchange in ((APP, APP_STATE, _EXCHANGE), (USER, USER_STATE, user_id)):
            done = applied(values[scope], incarnation)
            if newest[scope] <= done:
                continue
            records = read.events
            if records[0].seq > done + 1:
                records = await self._events.read_from(log_id, done + 1)
            pending = deltas((r for r in records if r.seq <= newest[scope]), scope, done)
            handle = self._handle(kind, app_name, exchange)
            values[scope] = await handle.update(applying(scope, incarnation, pending), _WHEN)
        return values[APP], values[USER]

    async def _seen(self, session: Session) -> Mark:
        """What ``session`` saw: its mark, else (an object this service did not make)
        the stored session's, when its last event is the stored last one."""
        mark = Mark.of(session._storage_update_marker)
        if mark is not None:
            return mark
        user = await self._stored(self._handle(USER_STATE, session.app_name, session.user_id))
        incarnation = (user or {}).get("sessions", {}).get(session.id)
        if incarnation is None:
            raise AdkSessionNotFoundError(f"Session {session.id} not found.")
        log_id = session_id_of(session.app_name, session.user_id, session.id, incarnation)
        try:
            info = await self._events.info(log_id)
            last = await self._events.read_from(log_id, max(0, info.next_seq - 1))
        except LogNotFoundError:
            raise AdkSessionNotFoundError(f"Session {session.id} not found.") from None
        stored_last = last[-1].data["event"]["id"] if last and last[-1].type == EVENT else None
        mine = session.events[-1].id if session.events else None
        if not last or stored_last != mine:
            raise StaleSessionError(
                session.app_name, session.user_id, session.id, None, info.next_seq
            )
        return Mark.after(incarnation, last[-1])

    async def _gone(self, session: Session, incarnation: str) -> Exception:
        """The error of an append to a log that is not stored: the session was deleted
        (not found), or deleted and created again (this object is out of date)."""
        user = await self._stored(self._handle(USER_STATE, session.app_name, session.user_id))
        now = (user or {}).get("sessions", {}).get(session.id)
        if now is None or now == incarnation:
            return AdkSessionNotFoundError(f"Session {session.id} not found.")
        return StaleSessionError(
            session.app_name,
            session.user_id,
            session.id,
            None,
            None,
            detail="it was deleted and created again since this object was read",
        )

    async def _exists(self, app_name: str, user_id: str, sid: str, incarnation: str) -> bool:
        try:
            await self._events.info(session_id_of(app_name, user_id, sid, incarnation))
        except LogNotFoundError:
            return False
        return True

    async def _read(self, log_id: str, next_seq: int, config: GetSessionConfig | None) -> _Read:
        """The session state at ``next_seq`` and the events ``config`` asks for: those
        stamped at or after ``after_timestamp`` (all read: hosts whose clocks disagree
        append out of time order), then the newest ``num_recent_events`` of them."""
        last = next_seq - 1
        snapshot = last - last % SNAPSHOT_EVERY
        recent = None if config is None else config.num_recent_events
        after = None if config is None else config.after_timestamp
        first = 1 if recent is None or after is not None else max(1, next_seq - recent)
        events = await self._events.read_from(log_id, min(first, snapshot))
        events = [e for e in events if e.seq < next_seq]  # appended meanwhile: later
        if not events or events[0].seq != min(first, snapshot):
            raise LogNotFoundError(log_id)  # deleted meanwhile
        mine = events[first - events[0].seq :] if first <= next_seq else []
        if after is not None:
            mine = [e for e in mine if e.data["event"]["timestamp"] >= after]
            if recent is not None:
                mine = mine[max(len(mine) - recent, 0) :] if recent > 0 else []
        state = dict(events[snapshot - events[0].seq].data["state"])
        for event in events[snapshot - events[0].seq + 1 :]:
            state.update(split_of(event)["session"])
        return _Read(mine, state, events)

    async def _read_states(self, app_name: str, user_id: str) -> tuple[Any, Any]:
        app = self._handle(APP_STATE, app_name, _EXCHANGE)
        user = self._handle(USER_STATE, app_name, user_id)
        found = await asyncio.gather(app.get_data(_WHEN), user.get_data(_WHEN))
        return found[0], found[1]

    async def _stored(self, handle: Any) -> dict[str, Any]:
        found = await handle.get_data(_WHEN)
        return dict(found) if found else {}

    async def _users(self, app_name: str, app: Any) -> list[str]:
        """The users of ``app_name``, sorted: each has a user state value (written by the
        commit of its first session), and the app value lists those of sessions created
        before the values were the index."""
        if isinstance(self.store, aio.AsyncStore):
            refs = await self.store.list_values()
        else:
            refs = await asyncio.to_thread(self.store.list_values)
        found = {r.exchange for r in refs if r.symbol == app_name and r.strategy == USER_STATE}
        found.update((app or {}).get("users", {}))
        return sorted(found)

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


session_id_of = session_id
_NO_EVENTS = GetSessionConfig(num_recent_events=0)
#: How many appends racing a deletion it reads again for (see ``_delete_log``).
DELETE_ATTEMPTS = 5


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
    """What a read of a session found: the events asked for (``returned``, as stored),
    the session state after the last one, and every record read (``events``)."""

    __slots__ = ("returned", "state", "events")

    def __init__(
        self, returned: list[SessionEvent], state: dict[str, Any], events: list[SessionEvent]
    ) -> None:
        self.returned, self.state, self.events = returned, state, events

    @property
    def last(self) -> SessionEvent:
        return self.events[-1]

    @property
    def last_update_time(self) -> float:
        end = self.last
        found: float = end.data["time"] if end.type == CREATED else end.data["event"]["timestamp"]
        return found


def _check(app_name: str, user_id: str, session_id: str) -> None:
    for name, part in (("app_name", app_name), ("user_id", user_id), ("session_id", session_id)):
        if not isinstance(part, str) or not part:
            raise InvalidArgumentError(f"{name} must be a non-empty string, not {part!r}")


def _stripped(session_id: str) -> str:
    """A session id as ADK's in-memory service takes it: without surrounding spaces."""
    return session_id.strip() if isinstance(session_id, str) else session_id


def _mark(session: Session, mark: Mark) -> None:
    # ADK's private revision marker: its database service keeps its own there too, and
    # pydantic lets no other attribute be set on a Session (extra="forbid").
    session._storage_update_marker = mark.text()


def _ms(seconds: float) -> int:
    return int(seconds * 1000)
