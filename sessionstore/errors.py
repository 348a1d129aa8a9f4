"""The one exception hierarchy of sessionstore.

Every error the library raises is a :class:`SessionStoreError`; driver errors
(redis-py, ``OSError``, ``sqlite3``) are wrapped at the backend boundary with
the original chained as ``__cause__``::

    SessionStoreError
    ├── InvalidArgumentError (also ValueError)   bad argument; nothing was written
    │   ├── NotSerializableError                 a value msgpack cannot carry (names key, type)
    │   ├── NotJSONSerializableError             event data that would not survive JSON
    │   ├── HarnessFieldError                    a harness event field repair reads is malformed
    │   └── EventTimeOrderError                  an event's time is before the one before it
    ├── SessionDisposedError                     a disposed session handle was used
    ├── StoreClosedError                         a closed store was used
    ├── StoreUnavailableError                    server down or unreachable within the timeout;
    │   │                                        the call may or may not have been applied
    │   └── NotReplicatedError (also DurabilityError)  applied on the primary, too few
    │                                            replicas confirmed it (replicas:N)
    ├── AccessDeniedError                        the server refused the credentials or a key
    │   ├── LibraryMissingError                  the Redis Functions library is not installed
    │   └── UnsafePathError                      a file store path is a link or not a file/folder
    ├── ConcurrentModificationError              update() or load() gave up after its retries
    ├── ComputeTimeoutError                      get_or_compute waited longer than its timeout
    ├── DurabilityError                          the server cannot give the durability asked for
    ├── SessionNotFoundError (also KeyError)     no such event-log session
    ├── SessionExistsError                       create() of an id that already exists
    ├── SessionBusyError                         a live writer holds the session's lease
    ├── SeqConflictError                         append did not name the next seq
    ├── CorruptDataError                         stored data is damaged (names the key or file)
    │   └── CorruptLogError                      a stored log is damaged before its end
    ├── UnsupportedVersionError                  a stored header has an unknown format version
    ├── ForeignDataError (sessionstore.cli.demo) the demo's namespace holds data not its own
    └── SchedulerError (sessionstore.cli.demo)   the Dask scheduler cannot run the demo

Constructing a :class:`~sessionstore.SessionEvent` or :class:`~sessionstore.SessionHeader`
directly validates it with pydantic, which raises pydantic's ``ValidationError`` (a
``ValueError``): the one exception that is not a :class:`SessionStoreError`. Everything
the library's own calls check raises :class:`InvalidArgumentError` instead.
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


class EventTimeOrderError(InvalidArgumentError):
    """A writer's ``emit`` was given a logical ``time`` earlier than the time of the event
    before it in its log: a writer's clock never goes backwards. Nothing was queued. (A
    plain ``append`` stores whatever time each event carries.)"""

    def __init__(self, session_id: str, seq: int, time: int, previous: int) -> None:
        self.session_id = session_id
        self.seq = seq
        self.time = time
        self.previous = previous
        super().__init__(
            f"session {_q(session_id)}: event seq {seq} has time {time}, before the time"
            f" {previous} of the event before it (a writer's times must not go backwards)"
        )


class SessionDisposedError(SessionStoreError):
    """The session handle was disposed; its stored data is untouched."""


class StoreClosedError(SessionStoreError):
    """The store was closed."""


class StoreUnavailableError(SessionStoreError):
    """The backing server is down or unreachable (raised within the configured timeout)."""


class StoreNotFoundError(SessionStoreError):
    """What only reads a store (a copy's or an export's source, a listing) was pointed at
    a file or SQLite store whose path does not exist; nothing was created."""


class AccessDeniedError(SessionStoreError):
    """The server refused access (authentication or ACL); the data may well exist."""


class LibraryMissingError(AccessDeniedError):
    """The Redis server lacks the library's Redis Functions library ``library`` (missing,
    or another version of it installed) and this user may not load it: the message names
    the command that installs it (``sessionstore doctor --fix --url <admin url>``, run by
    a user allowed ``FUNCTION LOAD``). The call's script did not run."""

    def __init__(self, message: str, library: str) -> None:
        self.library = library
        super().__init__(message)


class UnsafePathError(AccessDeniedError):
    """A path inside a file store is a symbolic link (which the store never makes, so
    never follows), or not the regular file or folder it must be; ``path`` names it.
    Nothing was read or written through it."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        super().__init__(f"file store refuses {path!r:.300}: it is {what}")


class ConcurrentModificationError(SessionStoreError):
    """``update()`` lost 1000 races in a row (another writer's swap won each time), or
    ``load()`` found its repair overtaken by a concurrent append 50 times in a row; nothing
    of the failed attempt was written."""


class ComputeTimeoutError(SessionStoreError):
    """``get_or_compute`` waited ``timeout`` seconds for another caller to compute the
    version of ``key`` at ``when`` and gave up; nothing was written."""

    def __init__(self, key: str, when: int, timeout: float) -> None:
        self.key = key
        self.when = when
        self.timeout = timeout
        super().__init__(
            f"get_or_compute of {key} at {when}: another caller was still computing it"
            f" after {timeout:g} s"
        )


class DurabilityError(SessionStoreError):
    """The server cannot give the durability the store was asked to give: not configured
    for it (raised before anything was written), or, as :class:`NotReplicatedError`, too
    few replicas confirmed a write that the primary applied.

    ``hint`` is the one remedy that fits when only one does (a user who may not run
    ``CONFIG GET`` on a durable server: ``?durability=aof``), else None."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.hint = hint
        super().__init__(message)


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
    stay allowed); a writer whose lease it took over writes nothing more (its appends
    are fenced)."""

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


class CorruptDataError(SessionStoreError):
    """Stored data is damaged, or of a shape sessionstore never writes (a key of another
    type, a malformed field, a value that is not msgpack); ``where`` names the key, file
    or row. Nothing was rewritten."""

    def __init__(self, where: str, detail: str) -> None:
        self.where = where
        self.detail = detail
        super().__init__(f"{_q(where)} is damaged: {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled (a worker process's error) by its fields, not by its message.
        return type(self), (self.where, self.detail)


class CorruptLogError(CorruptDataError):
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
        self.where = session_id
        SessionStoreError.__init__(self, f"session {_q(session_id)} is corrupt{at}: {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        return _corrupt_log, (self.session_id, self.detail, self.seq, self.line)


def _corrupt_log(
    session_id: str, detail: str, seq: int | None, line: int | None
) -> CorruptLogError:
    return CorruptLogError(session_id, detail, seq=seq, line=line)


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
