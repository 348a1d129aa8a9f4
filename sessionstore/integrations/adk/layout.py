"""What an ADK session looks like in the store, as pure functions (no I/O): log ids,
the records of a session's log, the marker a session object carries, ADK's state scopes
and the atomic changes of the app and user state values.

App state value (app, :data:`APP_STATE`, ``adk``, ``-``)::

    {"state": {raw key: value}, "applied": {incarnation: seq}, "users": {user: 1} (old)}

User state value (app, :data:`USER_STATE`, user, ``-``)::

    {"state": {raw key: value}, "sessions": {session id: incarnation},
     "applied": {incarnation: seq}}

Either may hold ``"gone": {incarnation: epoch ms}``: the incarnations deleted lately
(the newest :data:`GONE_KEPT`), whose deltas are never applied again (a slow appender's,
arriving after the deletion dropped their ``applied`` entry).

``sessions`` is the user's index of sessions (what ``list_sessions`` lists, and the
incarnation a session id stands for now). The app's users are those with a user state
value; ``users``, written by earlier versions at every ``create_session`` (a value that
grew with the app's users), is still read and kept, never written. ``applied``
is the seq of the newest record of that incarnation's log whose delta of this scope is
in ``state``: a delta is applied at most once, and any reader that finds a record newer
than ``applied`` with a delta applies the missing ones (:func:`applying`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote

from google.adk.sessions import State
from pydantic_core import to_jsonable_python

try:  # ADK's own conversion, where the installed ADK has one (2.15 does)
    from google.adk.sessions._session_util import make_json_safe_state as _json_safe
except ImportError:  # pragma: no cover - an older google-adk
    _json_safe = to_jsonable_python  # type: ignore[assignment]

from ...models import SessionEvent
from ...when import now_ms

#: The event log of an ADK session is ``PREFIX + app/user/session/incarnation``.
PREFIX = "adk:"
#: Event types of a session's log.
CREATED = "adk/session"
EVENT = "adk/event"
#: Every event whose seq is a multiple of this carries the session state after it.
SNAPSHOT_EVERY = 64
#: The value keys of app and user state (the app name is the symbol).
APP_STATE = "adk-app-state"
USER_STATE = "adk-user-state"
#: The scopes whose state lives outside the session's log, and their value's index.
APP, USER = "app", "user"
INDEX = {APP: "users", USER: "sessions"}
#: A record's ``scoped``: the seqs of the newest records (up to it) with an app and a
#: user delta, -1 for none.
NONE = -1
#: A session object made by this service carries ``_MARK + incarnation:next:app:user``.
_MARK = "sessionstore:"


def session_id(app_name: str, user_id: str, session_id: str, incarnation: str) -> str:
    """The event log of one incarnation of an ADK session (its parts quoted: no ``/``
    inside); a session deleted and created again gets a new incarnation, so a new log."""
    parts = (app_name, user_id, session_id, incarnation)
    return PREFIX + "/".join(quote(part, safe="") for part in parts)


def parts(log_id: str) -> list[str]:
    """(app, user, session, incarnation) of a log id made by :func:`session_id`."""
    return [unquote(part) for part in log_id[len(PREFIX) :].split("/")]


# --- the marker of a session object ---------------------------------------------------------


class Mark:
    """What a session object made by the service saw: its log's incarnation, the next
    seq, and the ``scoped`` seqs of its last record."""

    __slots__ = ("incarnation", "next_seq", "app", "user")

    def __init__(self, incarnation: str, next_seq: int, app: int, user: int) -> None:
        self.incarnation, self.next_seq, self.app, self.user = incarnation, next_seq, app, user

    def text(self) -> str:
        return f"{_MARK}{self.incarnation}:{self.next_seq}:{self.app}:{self.user}"

    @classmethod
    def of(cls, marker: str | None) -> Mark | None:
        """The mark a session object carries; None for one this service did not make."""
        if marker is None or not marker.startswith(_MARK):
            return None
        fields = marker[len(_MARK) :].split(":")
        if len(fields) != 4:
            return None
        return cls(fields[0], int(fields[1]), int(fields[2]), int(fields[3]))

    @classmethod
    def after(cls, incarnation: str, record: SessionEvent) -> Mark:
        """The mark of a session object whose last record is ``record``."""
        app, user = record.data["scoped"]
        return cls(incarnation, record.seq + 1, app, user)


# --- records --------------------------------------------------------------------------------


def scoped(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``state`` split as ADK splits it: raw app and user keys, the session's own keys;
    ``temp:`` keys dropped; values made JSON as ADK's database service makes them (bytes
    as their UTF-8 text, else standard base64; a value that cannot be made JSON as its
    string form, with a warning on ADK's logger)."""
    split: dict[str, dict[str, Any]] = {APP: {}, USER: {}, "session": {}}
    for key, value in _json_safe(state).items():
        if key.startswith(State.APP_PREFIX):
            split[APP][key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            split[USER][key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            split["session"][key] = value
    return split


def carried(split: dict[str, dict[str, Any]], seq: int, app: int, user: int) -> list[int]:
    """The ``scoped`` of the record at ``seq`` with the deltas ``split``, after a record
    whose ``scoped`` was ``[app, user]``."""
    return [seq if split[APP] else app, seq if split[USER] else user]


def split_of(record: SessionEvent) -> dict[str, dict[str, Any]]:
    """The scoped deltas a record carries: those of the initial state at creation,
    those of the event's ``state_delta`` after it (its ``delta``, when the event's JSON
    holds a value that ADK's database service makes JSON otherwise)."""
    if record.type == CREATED:
        return {APP: record.data["app_state"], USER: record.data["user_state"]}
    found = record.data.get("delta")
    if found is not None:
        return found  # type: ignore[no-any-return]
    return scoped(record.data["event"].get("actions", {}).get("state_delta") or {})


def deltas(records: Iterable[SessionEvent], scope: str, after: int) -> list[tuple[int, Any]]:
    """(seq, delta) of the records past seq ``after`` with a delta of ``scope``."""
    found = []
    for record in records:
        if record.seq > after:
            delta = split_of(record)[scope]
            if delta:
                found.append((record.seq, delta))
    return found


# --- the app and user state values -----------------------------------------------------------


def state_of(stored: Any) -> dict[str, Any]:
    return dict(stored["state"]) if stored else {}


def applied(stored: Any, incarnation: str) -> int:
    """The seq of the newest record of ``incarnation`` whose delta ``stored`` holds."""
    found: int = (stored or {}).get("applied", {}).get(incarnation, NONE)
    return found


#: How many deleted incarnations a state value remembers (see the module doc).
GONE_KEPT = 1000


def _parts_of(stored: Any, index: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
    stored = stored or {}
    return (
        dict(stored.get("state", {})),
        dict(stored.get(index, {})),
        dict(stored.get("applied", {})),
    )


def _gone(stored: Any) -> dict[str, int]:
    return dict((stored or {}).get("gone", {}))


def _value(
    state: dict[str, Any],
    index: str,
    entries: dict[str, Any],
    done: dict[str, int],
    gone: dict[str, int],
) -> dict[str, Any]:
    value = {"state": state, index: entries, "applied": done}
    if gone:
        value["gone"] = gone
    return value


def applying(
    scope: str,
    incarnation: str,
    pending: list[tuple[int, Any]],
    *,
    listed: tuple[str, str] | None = None,
) -> Callable[[Any], dict[str, Any]]:
    """What ``update`` applies to a scope's value: the deltas of ``pending`` ((seq,
    delta) of one incarnation's records, oldest first) that it does not hold yet, in
    order, each once; and ``listed`` = (name, incarnation) entered in its index."""
    index = INDEX[scope]

    def apply(stored: Any) -> dict[str, Any]:
        state, entries, done = _parts_of(stored, index)
        gone = _gone(stored)
        for seq, delta in pending:
            if incarnation not in gone and seq > done.get(incarnation, NONE):
                state.update(delta)
                done[incarnation] = seq
        if listed is not None:
            entries[listed[0]] = listed[1] if scope == USER else 1
        return _value(state, index, entries, done, gone)

    return apply


class Taken(Exception):  # noqa: N818 - a signal out of an update function, never raised out
    """Raised by :func:`creating` when the session id stands for another incarnation."""


def creating(
    session: str, incarnation: str, replaces: str | None, delta: dict[str, Any]
) -> Callable[[Any], dict[str, Any]]:
    """The commit of ``create_session`` on the user's value: ``session`` entered in its
    index as ``incarnation`` and the creation's user ``delta`` applied (seq 0). Raises
    :class:`Taken` when the index names an incarnation other than ``replaces`` (the
    one whose log the caller found deleted) for ``session``."""

    def create(stored: Any) -> dict[str, Any]:
        _, entries, _ = _parts_of(stored, INDEX[USER])
        if entries.get(session) not in (None, replaces):
            raise Taken(session)
        pending = [(0, delta)] if delta else []
        return applying(USER, incarnation, pending, listed=(session, incarnation))(stored)

    return create


def forgetting(
    scope: str, incarnation: str, session: str | None = None
) -> Callable[[Any], dict[str, Any]]:
    """What ``update`` applies to a scope's value when the incarnation is deleted: its
    ``applied`` entry dropped, the incarnation noted as gone (the newest
    :data:`GONE_KEPT`), and ``session`` taken out of the index while it still stands
    for ``incarnation``."""
    index = INDEX[scope]

    def forget(stored: Any) -> dict[str, Any]:
        state, entries, done = _parts_of(stored, index)
        gone = _gone(stored)
        done.pop(incarnation, None)
        gone[incarnation] = now_ms()
        if len(gone) > GONE_KEPT:
            gone = dict(sorted(gone.items(), key=lambda item: item[1])[-GONE_KEPT:])
        if session is not None and entries.get(session) == incarnation:
            del entries[session]
        return _value(state, index, entries, done, gone)

    return forget


def merged(app: dict[str, Any], user: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """A session's state as ADK shows it: its own keys, app and user keys prefixed."""
    found = dict(own)
    found.update({State.APP_PREFIX + key: value for key, value in app.items()})
    found.update({State.USER_PREFIX + key: value for key, value in user.items()})
    return found
