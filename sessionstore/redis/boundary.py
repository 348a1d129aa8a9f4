"""The one place Redis errors are mapped: :class:`ErrorBoundary` turns redis-py's
errors into sessionstore's, naming the command, the key and the server (never its
password), and saying when a call may or may not have been applied.
"""

from __future__ import annotations

from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    ClusterError,
    MasterDownError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import (
    AccessDeniedError,
    CorruptDataError,
    InvalidArgumentError,
    SessionStoreError,
    StoreUnavailableError,
)
from .compat import driver_defect
from .retry import RETRIES

_DENIED_MARKS = ("NOPERM", "WRONGPASS", "NOAUTH")
_OOM_MARK = "OOM command not allowed"
#: ``FCALL`` of a function the server does not have (loaded again and called once more).
_FUNCTION_MISSING = "Function not found"
#: Replies of a server that cannot take the command right now (a replica, a primary
#: without its replicas or its disk, a server loading its data or busy in a script).
_UNAVAILABLE_MARKS = (
    "READONLY",
    "MASTERDOWN",
    "LOADING",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "BUSY",
    "NOREPLICAS",
    "MISCONF",
)
#: A command met a key of another type than the layout gives it (also inside a script).
_WRONGTYPE = "WRONGTYPE"
#: How the library's functions refuse stored data they did not write, and arguments past
#: their sizes (see lua/_seq.lua).
_CORRUPT_MARK, _INVALID_MARK = "CORRUPT ", "INVALID "
#: ``WAIT`` ended by a failover (``CLUSTER FAILOVER``, a primary turned replica): the
#: write before it was applied on a primary that may no longer be one.
_UNBLOCKED_MARK = "UNBLOCKED"
#: ``WAIT`` refused by a replica: the primary of the connection was demoted (a failover);
#: what was sent before it may have been applied while it was a primary.
_DEMOTED_MARK = "WAIT cannot be used with replica"
#: Said of every error that can follow a send of a write whose reply never came (a
#: resend meets a restarted server, a replica, a full memory...).
_UNDECIDED = "the call may or may not have been applied"
#: Errors of a cluster in motion (failover, resharding, a node down): a later call may pass.
_CLUSTER_IN_MOTION = (ClusterError, TryAgainError, SlotNotCoveredError)


def demoted(exc: BaseException) -> bool:
    """``exc`` (a reply) says the server of the connection is no longer a primary: a
    ``WAIT`` ended by the demotion, or refused by the replica it became (beyond
    ``READONLY``, which redis-py's Sentinel connection handles itself)."""
    text = str(exc)
    return text.startswith(_UNBLOCKED_MARK) or _DEMOTED_MARK in text


class _Guard:
    """One ``with boundary(...)`` block (a plain class: it sits on every call's path)."""

    __slots__ = ("boundary", "command", "key")

    def __init__(self, boundary: ErrorBoundary, command: str, key: str | None) -> None:
        self.boundary = boundary
        self.command = command
        self.key = key

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        if isinstance(exc, RedisError | RedisClusterException):
            raise self.boundary.translate(exc, self.command, self.key) from exc
        if exc is not None and driver_defect(exc):
            raise self.boundary.translate(
                ClusterError(f"{type(exc).__name__}: {exc}"), self.command, self.key
            ) from exc


class ErrorBoundary:
    """Turns redis-py errors into sessionstore errors, naming the command and the key.

    ``with boundary("HMGET", key): ...`` wraps one call (sync or awaited): connection
    errors and timeouts become :class:`StoreUnavailableError`, refused credentials or
    ACLs :class:`AccessDeniedError`, a server out of memory :class:`StoreUnavailableError`,
    a server that cannot take the command now (a replica, ``LOADING``, ``BUSY``,
    ``NOREPLICAS``, ``MISCONF``) or a cluster that cannot serve the slot right now
    (``CLUSTERDOWN``, ``TRYAGAIN``, a slot not covered, redirections that do not settle,
    no reachable node) :class:`StoreUnavailableError`, functions or scripts lost again
    after they were loaded (``Function not found`` or ``NOSCRIPT`` reaching the boundary)
    and a ``WAIT`` unblocked by a failover (``UNBLOCKED``) or refused by a demoted primary
    :class:`StoreUnavailableError`, a plain server addressed as a cluster
    (``?cluster=yes``) :class:`InvalidArgumentError`, a key of another type than the
    layout gives it (``WRONGTYPE``: damaged data) :class:`CorruptDataError` naming the
    key, anything else :class:`SessionStoreError`; the redis-py error is chained.

    Each :class:`StoreUnavailableError` may follow a send of the same call whose reply was
    lost (redis-py resends on a dropped connection or a timeout): its message says that the
    call may or may not have been applied. A value write is never applied twice (see
    :mod:`sessionstore.keys`), so calling it again is safe.
    """

    def __init__(self, display_url: str, timeout: float) -> None:
        self.display_url = display_url
        self.timeout = timeout

    def __call__(self, command: str, key: str | None = None) -> _Guard:
        return _Guard(self, command, key)

    def translate(
        self, exc: RedisError | RedisClusterException, command: str, key: str | None
    ) -> SessionStoreError:
        """The sessionstore error for ``exc`` raised by ``command`` on ``key``."""
        text = str(exc)
        what = f"{command} on {key}" if key else command
        where = f"the Redis server at {self.display_url}"
        if isinstance(exc, AuthenticationError | AuthorizationError | NoPermissionError) or any(
            mark in text for mark in _DENIED_MARKS
        ):
            return AccessDeniedError(f"access was denied by {where} for {what}: {text}")
        if isinstance(exc, OutOfMemoryError) or _OOM_MARK in text:
            return StoreUnavailableError(
                f"{where} is out of memory (used memory > maxmemory, no eviction) and "
                f"refused {what}, writing nothing; {_UNDECIDED} by an earlier send whose "
                f"reply was lost. Free memory or raise maxmemory. ({text})"
            )
        if isinstance(exc, RedisConnectionError | RedisTimeoutError):
            return StoreUnavailableError(
                f"{where} is unavailable: {what} failed after {RETRIES} retries "
                f"(timeout {self.timeout:g} s); {_UNDECIDED}: {text}"
            )
        if isinstance(exc, NoScriptError) or _FUNCTION_MISSING in text:
            return StoreUnavailableError(
                f"{where} lost the library's functions or scripts again (FUNCTION DELETE or "
                f"FLUSH, SCRIPT FLUSH, a restart without persistence, a failover or a slot "
                f"moved to another node) while {what} was sent; {_UNDECIDED}: {text}"
            )
        if demoted(exc):
            return StoreUnavailableError(
                f"{where} ended or refused the wait of {what}: the server is no longer a "
                f"primary (a failover); {_UNDECIDED} on the new primary: {text}"
            )
        if isinstance(exc, ReadOnlyError | MasterDownError) or text.startswith(_UNAVAILABLE_MARKS):
            return StoreUnavailableError(
                f"{where} cannot serve {what} right now; {_UNDECIDED}: {text}"
            )
        if "Cluster mode is not enabled" in text or "cluster support disabled" in text:
            return InvalidArgumentError(
                f"{where} is not a Redis Cluster node, but {what} was sent to it as one "
                "(?cluster=yes in the URL): use ?cluster=auto or leave the option out"
            )
        if isinstance(exc, AskError):
            return StoreUnavailableError(
                f"{where} redirected {what} to another node ({text}) and the redirections "
                "did not settle: a Redis Cluster in motion, or a cluster node reached "
                f"with ?cluster=no; {_UNDECIDED}"
            )
        if isinstance(exc, _CLUSTER_IN_MOTION) or type(exc) is RedisClusterException:
            return StoreUnavailableError(
                f"the Redis Cluster at {self.display_url} cannot serve {what} right now "
                f"(a node down, a failover or resharding in progress); {_UNDECIDED}: "
                f"{text or type(exc).__name__}"
            )
        if text.startswith(_CORRUPT_MARK):
            detail = f"{what} at {where} refused: {text[len(_CORRUPT_MARK) :]}"
            return CorruptDataError(key or command, detail)
        if text.startswith(_INVALID_MARK):
            return InvalidArgumentError(f"{where} refused {what}: {text[len(_INVALID_MARK) :]}")
        if _WRONGTYPE in text:
            detail = f"{what} at {where} met a key of another type: {text}"
            return CorruptDataError(key or command, detail)
        return SessionStoreError(f"{where} failed {what}: {text}")
