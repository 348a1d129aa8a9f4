"""The errors of the ADK session service: ADK's own error types, and
:class:`~sessionstore.errors.SessionStoreError` too."""

from __future__ import annotations

from google.adk import errors as adk_errors
from google.adk.errors import already_exists_error, session_not_found_error

from ...errors import SessionStoreError


class StaleSessionError(adk_errors.StaleSessionError, SessionStoreError):
    """``append_event`` was given a session object that is out of date: events were
    appended to the stored session since this object was read (by another process or
    another object), or the session was deleted and created again. Nothing was
    written. ADK's ``StaleSessionError`` (a ``ValueError``): read the session again with
    ``get_session`` and go on from there."""

    def __init__(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        seen: int | None,
        stored: int | None,
        *,
        detail: str | None = None,
    ) -> None:
        self.app_name, self.user_id, self.session_id = app_name, user_id, session_id
        #: The events the session object saw and those stored (None: not known).
        self.seen = None if seen is None else seen - 1
        self.stored = None if stored is None else stored - 1
        if detail is None:
            saw = "" if seen is None else f", this session object saw {seen - 1}"
            detail = f"it has {self.stored} stored events{saw}"
        super().__init__(
            f"session {session_id!r} (app {app_name!r}, user {user_id!r}): {detail}; the "
            "session object is out of date: read it again with get_session. Nothing was "
            "written"
        )


class AdkSessionNotFoundError(session_not_found_error.SessionNotFoundError, SessionStoreError):
    """``append_event`` to a session that is not stored (deleted, or never created).
    ADK's ``SessionNotFoundError`` (a ``ValueError``)."""


class SessionAlreadyExistsError(already_exists_error.AlreadyExistsError, SessionStoreError):
    """``create_session`` with the id of a stored session. ADK's ``AlreadyExistsError``."""
