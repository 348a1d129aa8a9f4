"""The one exception hierarchy of sessionstore.

Every error the library raises is a :class:`SessionStoreError`; driver errors
(redis-py, ``OSError``, ``sqlite3``) are wrapped at the backend boundary with
the original chained as ``__cause__``::

    SessionStoreError
    ├── InvalidArgumentError (also ValueError)   bad argument; nothing was written
    │   ├── NotSerializableError                 a value msgpack cannot carry (names key, type)
    │   └── NotJSONSerializableError             event data that would not survive JSON
    ├── SessionDisposedError                     a disposed session handle was used
    ├── StoreClosedError                         a closed store was used
    ├── StoreUnavailableError                    server down or unreachable within the timeout
    ├── AccessDeniedError                        the server refused the credentials or a key
    ├── ConcurrentModificationError              update() gave up after its retries
    ├── DurabilityError                          the server cannot give the durability asked for
    ├── SessionNotFoundError (also KeyError)     no such event-log session
    ├── SessionExistsError                       create() of an id that already exists
    ├── SeqConflictError                         append did not name the next seq
    ├── CorruptLogError                          a stored log is damaged before its end
    └── UnsupportedVersionError                  a stored header has an unknown format version
"""

from __future__ import annotations


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
            f"event {event_type!r} (seq {seq}) is not lossless JSON at {path}: {reason}"
        )


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
    """The server is not configured for the durability the store was asked to give."""


class SessionNotFoundError(SessionStoreError, KeyError):
    """No event-log session with this id exists (or it was created but never appended to)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} not found")

    def __str__(self) -> str:
        return str(self.args[0])


class SessionExistsError(SessionStoreError):
    """A session with this id already exists."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} already exists")


class SeqConflictError(SessionStoreError):
    """An append did not continue the log at the stored next seq; nothing was written."""

    def __init__(self, session_id: str, expected: int, got: int, detail: str = "") -> None:
        self.session_id = session_id
        self.expected = expected
        self.got = got
        message = f"session {session_id!r}: expected seq {expected}, got {got}"
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
        super().__init__(f"session {session_id!r} is corrupt{at}: {detail}")


class UnsupportedVersionError(SessionStoreError):
    """A stored header carries a format version this library does not read."""

    def __init__(self, session_id: str, found: object, supported: int) -> None:
        self.session_id = session_id
        self.found = found
        self.supported = supported
        super().__init__(
            f"session {session_id!r} has format version {found!r}; "
            f"this sessionstore reads version {supported}"
        )
