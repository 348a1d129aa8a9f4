"""Google ADK sessions on sessionstore event logs and session values.

    from sessionstore.integrations.adk import SessionStoreSessionService

    service = SessionStoreSessionService("redis://localhost:6379/0", namespace="agents")
    runner = Runner(agent=agent, app_name="shop", session_service=service)

:class:`SessionStoreSessionService` is a ``google.adk.sessions.BaseSessionService`` on a
sessionstore store (a :mod:`sessionstore.aio` one, or a sync one whose calls run in a
worker thread), so any URL sessionstore takes works: memory, files, SQLite, Redis, Redis
Cluster and Sentinel. It uses the store's public API only. Written for google-adk 2.13.

Layout (:mod:`~sessionstore.integrations.adk.layout`). An ADK session is one event log
per incarnation, :func:`session_id` of (app, user, session, incarnation): a random
incarnation is drawn by ``create_session``, so a session deleted and created again is a
new log (all of a log's keys in one hash slot on Redis Cluster):

* seq 0, ``adk/session``: ``data = {"app", "user", "id", "time", "state", "app_state",
  "user_state", "scoped"}``: the creation time (ADK's float seconds, as given), the
  session-scoped initial state and the app and user keys of the initial state;
* seq ``k >= 1``, ``adk/event``: ``data = {"event": ..., "scoped": ...}``, one
  ``append_event``: the ADK ``Event`` as ``model_dump(mode="json", exclude_none=True)``
  (what ADK's own database service stores), ``temp:`` keys already trimmed from its
  state delta. Every :data:`SNAPSHOT_EVERY`-th seq also carries ``"state"``: the
  session-scoped state after that event, so that a read folds at most that many events.
  Where ADK's database service makes the delta's values JSON otherwise than the event's
  own JSON does (bytes, a value only its string form stands for), ``"delta"`` carries
  the delta's app, user and session keys as it makes them, which the states take.
  ``scoped`` is ``[a, u]``, the seqs of the newest records up to this one with an app
  (a user) delta, -1 for none.

App state is the session value (app, ``adk-app-state``, ``adk``, ``-``) and user state
(app, ``adk-user-state``, user, ``-``), stored at logical time 0 and changed only by the
store's atomic ``update``: two processes updating one user's state from different
sessions lose nothing. The user's value also holds the user's index of sessions
(session id: incarnation), the app's the index of its users, and both, per incarnation,
the seq of the newest record whose delta they hold.

State scopes are kept as ADK's own services keep them: ``app:`` and ``user:`` keys go
to the app and user values (returned merged, prefixed, into every session's state),
``temp:`` keys are never stored (they stay in the session object given to
``append_event``), the rest is the session's own. ``delete_session`` deletes the log,
never app or user state.

Exactly once. The appended event is the commit point of ``append_event`` and carries
its deltas; the app and user deltas are applied right after it, each by an ``update``
that applies only the records past the seq its value holds for that incarnation. A
process that dies in between leaves them to the next reader of the session:
``get_session`` and ``list_sessions`` find, in the last record they read, a newer
app or user delta than the value holds, and apply the missing ones (read from the log),
once, whoever else (the appender, another reader) applies them too. Such a late delta
is applied when it is found, after any delta another session applied meanwhile.
``create_session`` commits when the session enters its user's index, in the same update
as the initial user keys; its app keys follow (and are repaired the same way).

Concurrency. A session object carries its log's incarnation and the seq its service
last saw (ADK's ``Session._storage_update_marker``, a private attribute that ADK's
database service uses for the same purpose). ``append_event`` appends to that log at
exactly that seq, so the store refuses a session object that is out of date (another
process, or another object of this one, appended since) and :class:`StaleSessionError`
(ADK's ``StaleSessionError``) is raised: nothing is written, nothing merged, and the
comparison is between seqs, never float timestamps. An object of a session deleted
since finds its log gone: :class:`StaleSessionError` when the id was created again,
:class:`AdkSessionNotFoundError` otherwise. A session object without that marker (rebuilt
from JSON, made by another service) is taken as current when its last event is the
stored last one. An event equal to one the object holds (same id) is taken as delivered
again and not stored twice, as ADK's in-memory service does; a record follows from the
event and the object alone (its id is the event's), so a call made again with the object
as it was (a retry after a lost reply) stores the same record, which the store takes as
an applied replay: the event is stored once and its deltas applied once.

Reads cost what they return: ``get_session`` reads the app and user values, the log's
metadata (``info``) and then only the events from the last state snapshot or from the
first event asked for (``num_recent_events``), whichever comes first; with
``after_timestamp`` every event, since hosts whose clocks disagree append out of time
order: it keeps what ADK's own services keep, every event stamped at or after that time
(then the newest ``num_recent_events`` of them). ``list_sessions`` reads the
user's index of sessions (without a user, the namespace's list of values: the app's
user values are its index of users) and, for each session listed, its metadata and its
last snapshot onward (the session's own state lives in its log), never the namespace's
list of logs. ``create_session`` writes nothing that grows with the app's users.

Left to the operator: a process that dies inside ``create_session`` or
``delete_session`` may leave a log that no index names (never read; delete it with the
store's tools) and, in an app's index, a user without sessions.
"""

from __future__ import annotations

from .errors import AdkSessionNotFoundError, SessionAlreadyExistsError, StaleSessionError
from .layout import APP_STATE, PREFIX, SNAPSHOT_EVERY, USER_STATE, session_id
from .service import SessionStoreSessionService

__all__ = [
    "APP_STATE",
    "PREFIX",
    "SNAPSHOT_EVERY",
    "USER_STATE",
    "AdkSessionNotFoundError",
    "SessionAlreadyExistsError",
    "SessionStoreSessionService",
    "StaleSessionError",
    "session_id",
]
