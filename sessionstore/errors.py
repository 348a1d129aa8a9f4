"""The one exception hierarchy of sessionstore.

Every error the library raises is a :class:`SessionStoreError`; driver errors
(redis-py, ``OSError``, ``sqlite3``) are wrapped at the backend boundary with
the original chained as ``__cause__``::

    SessionStoreError
    ├── InvalidArgumentError (also ValueError)   bad argument; nothing was written
    │   ├── NotSerializableError                 a value msgpack cannot carry (names key, type)
    │   ├── NotJSONSerializableError             event data that would not survive JSON
    │   └── HarnessFieldError                    a harness event field repair reads is malformed
    ├── SessionDisposedError                     a disposed session handle was used
    ├── StoreClosedError                         a closed store was used
    ├── StoreUnavailableError                    server down or unreachable within the timeout;
    │   │                                        the call may or may not have been applied
    │   └── NotReplicatedError (also DurabilityError)  applied on the primary, too few
    │                                            replicas confirmed it (replicas:N)
    ├── AccessDeniedError                        the server refused the credentials or a key
    ├── ConcurrentModificationError              update() gave up after its retries
    ├── DurabilityError                          the server cannot give the durability asked for
    ├── SessionNotFoundError (also KeyError)     no such event-log session
    ├── SessionExistsError                       create() of an id that already exists
    ├── SessionBusyError                         a live writer holds the session's lease
    ├── SeqConflictError                         append did not name the next seq
    ├── CorruptLogError                          a stored log is damaged before its end
    └── UnsupportedVersionError                  a stored header has an unknown format version
"""

from __future__ import annotations

import contextlib

#: How many characters of a quoted id or type an error message keeps at each end.
_KEPT = 60


def _q(value: object) -> str:
    """``repr(value)`` with its middle elided when long: messages stay short."""
    text = f"<{type(value).__name__}>"
    if value is None or isinstance(value, str | int | float):
        with contextlib.suppress(ValueError):  # an int too long to print
            text = repr(value)
    return text if len(text) <= 2 * _KEPT + 3 else f"{text[:_KEPT]}...{text[-_KEPT:]}"


class SessionStoreError(Exception):
    """Root of every error raised by sessionstore."""


class InvalidArgumentError(SessionStoreError, ValueError):
    """An argument was rejected before anything was written."""


class NotSerializableError(InvalidArgumentError):
    """A session value contains something msgpack cannot round-trip."""

    def __init__(self, key: str, type_name: str, path: str = "$") -> None:
        self.key = key
        self.type_name = type_name
        self.path = path
        super().__init__(f"value for {key} is not msgpack-serialisable: {type_name} at {path}")


class NotJSONSerializableError(InvalidArgumentError):
    """Event ``data`` would not survive a JSON round trip unchanged."""

    def __init__(self, event_type: str, seq: int, path: str, reason: str) -> None:
        self.event_type = event_type
        self.seq = seq
        self.path = path
        self.reason = reason
        super().__init__(
            f"event {_q(event_type)} (seq {seq}) is not lossless JSON at {path}: {reason}"
        )


class HarnessFieldError(InvalidArgumentError):
    """A field of a harness event that crash repair reads is missing or malformed (see
    :mod:`sessionstore.harness`); nothing of the batch was written."""

    def __init__(self, event_type: str, seq: int, path: str, reason: str) -> None:
        self.event_type = event_type
        self.seq = seq
        self.path = path
        self.reason = reason
        super().__init__(f"event {_q(event_type)} (seq {seq}) is malformed at {path}: {reason}")


class SessionDisposedError(SessionStoreError):
    """The session handle was disposed; its stored data is untouched."""


class StoreClosedError(SessionStoreError):
    """The store was closed."""


class StoreUnavailableError(SessionStoreError):
    """The backing server is down or unreachable (raised within the configured timeout)."""


class AccessDeniedError(SessionStoreError):
    """The server refused access (authentication or ACL); the data may well exist."""


class ConcurrentModificationError(SessionStoreError):
    """``update()`` lost the race on every retry."""


class DurabilityError(SessionStoreError):
    """The server cannot give the durability the store was asked to give: not configured
    for it (raised before anything was written), or, as :class:`NotReplicatedError`, too
    few replicas confirmed a write that the primary applied."""


class NotReplicatedError(StoreUnavailableError, DurabilityError):
    """A write of ``durability="replicas:N"`` was applied on the primary, but fewer than N
    replicas confirmed it in time (or the primary stopped being one while it waited): it
    may or may not survive a failover, as any :class:`StoreUnavailableError` may or may
    not have been applied. Sending the same call again is safe (values are written once,
    a batch already stored is an applied replay) and waits for the replicas again. Also a
    :class:`DurabilityError`: the durability asked for was not given."""


class SessionNotFoundError(SessionStoreError, KeyError):
    """No event-log session with this id exists (or it was created but never appended to)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {_q(session_id)} not found")

    def __str__(self) -> str:
        return str(self.args[0])


class SessionExistsError(SessionStoreError):
    """A session with this id already exists; ``fields`` names the header fields in
    which the stored header differs from the one given (empty when not compared)."""

    def __init__(self, session_id: str, fields: tuple[str, ...] = ()) -> None:
        self.session_id = session_id
        self.fields = tuple(fields)
        message = f"session {_q(session_id)} already exists"
        if self.fields:
            message += f" with another header (it differs in {', '.join(self.fields)})"
        super().__init__(message)


class SessionBusyError(SessionStoreError):
    """A live writer, in this process or another, holds the session's lease: ``load``
    and a second ``writer`` wait until it is closed or dies (``inspect`` and ``append``
    stay allowed)."""

    def __init__(self, session_id: str, detail: str = "") -> None:
        self.session_id = session_id
        message = f"session {_q(session_id)} is busy: a live writer holds its lease"
        super().__init__(f"{message} ({detail})" if detail else message)


class SeqConflictError(SessionStoreError):
    """An append did not continue the log at the stored next seq; nothing was written."""

    def __init__(self, session_id: str, expected: int, got: int, detail: str = "") -> None:
        self.session_id = session_id
        self.expected = expected
        self.got = got
        message = f"session {_q(session_id)}: expected seq {expected}, got {got}"
        super().__init__(f"{message} ({detail})" if detail else message)


class CorruptLogError(SessionStoreError):
    """A stored log is damaged before its end; nothing was rewritten."""

    def __init__(
        self, session_id: str, detail: str, *, seq: int | None = None, line: int | None = None
    ) -> None:
        self.session_id = session_id
        self.seq = seq
        self.line = line
        self.detail = detail
        where = []
        if line is not None:
            where.append(f"line {line}")
        if seq is not None:
            where.append(f"seq {seq}")
        at = f" at {', '.join(where)}" if where else ""
        super().__init__(f"session {_q(session_id)} is corrupt{at}: {detail}")


class UnsupportedVersionError(SessionStoreError):
    """A stored header carries a format version this library does not read. ``where``
    names the log (its file path or Redis key) when known; the message says whether the
    stored version is newer (upgrade sessionstore) or older (migrate the log)."""

    def __init__(
        self, session_id: str, found: object, supported: int, where: str | None = None
    ) -> None:
        self.session_id = session_id
        self.found = found
        self.supported = supported
        self.where = where
        at = f" ({where})" if where else ""
        if isinstance(found, int) and not isinstance(found, bool) and found > supported:
            advice = "it is newer: upgrade sessionstore to read it"
        elif isinstance(found, int) and not isinstance(found, bool):
            advice = "it is older: migrate the log to read it"
        else:
            advice = "it is not a version sessionstore knows"
        super().__init__(
            f"session {_q(session_id)}{at} has format version {_q(found)}; "
            f"this sessionstore reads version {supported}: {advice}"
        )
