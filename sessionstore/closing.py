"""Closing a store closes the writers still open first (the sync and async stores
alike): what that decides once they are closed, and what it reports."""

from __future__ import annotations

import logging

from .errors import SeqConflictError, SessionBusyError

log = logging.getLogger("sessionstore")


def raise_unclosed(failed: list[tuple[str, BaseException]]) -> None:
    """What closing a store does once everything is closed, when the close of writers it
    closed raised (``failed``: each one's session id and error). A writer refused for
    good (:class:`SessionBusyError`: its lease was taken over; :class:`SeqConflictError`:
    another append took its seq) could never write its events, and its own ``flush``
    and ``close`` say so: it is only logged (a warning on the ``sessionstore`` logger).
    Any other error (the store unreachable, say) is raised, the first one, with a note
    naming every session whose writer's close raised one."""
    unwritten = []
    for session_id, error in failed:
        if isinstance(error, SessionBusyError | SeqConflictError):
            # A fenced writer's error says what of its queue may be stored.
            outcome = "" if isinstance(error, SessionBusyError) else ": it is not stored"
            log.warning(
                "sessionstore: closing the store closed the writer of session %r, which"
                " could not write what it had queued (%s)%s",
                session_id,
                error,
                outcome,
            )
        else:
            unwritten.append((session_id, error))
    if not unwritten:
        return
    names = ", ".join(repr(session_id) for session_id, _ in unwritten)
    error = unwritten[0][1]
    error.add_note(
        f"closing the store closed the open writers; the close of those of sessions {names}"
        " raised: what they had not written is not stored"
    )
    raise error
