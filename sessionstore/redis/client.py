"""Connection options, the redis-py clients, and the one place Redis errors are mapped.

Opening does no I/O: redis-py connects on first use. Every call has a bounded
duration: ``timeout`` seconds to connect and to wait for a reply, and two retries with
a short back-off on a connection error or timeout, after which the call raises
:class:`StoreUnavailableError`. The pool reconnects by itself on a later call once the
server is back, and is reset in a forked child.

Connections come from a pool of at most ``?max_connections=N`` (default
:data:`DEFAULT_MAX_CONNECTIONS`) per server: a call that finds every connection busy
waits for one, up to ``timeout``, and only then raises :class:`StoreUnavailableError`
(redis-py's plain pools refuse the call at once instead). On a Redis Cluster the sync
client has such a pool per node; the async cluster client cannot wait for one, so
:class:`AsyncClient` lets at most N calls of the store run at once.

A URL may name any node of a Redis Cluster. ``?cluster=auto`` (the default) asks the
server at first use (``INFO cluster``) and then talks to the whole cluster with
``redis.cluster.RedisCluster`` (or its ``redis.asyncio`` twin), built from the same URL
and options; ``?cluster=yes`` / ``?cluster=no`` skip the question.

A ``redis+sentinel://`` (``rediss+sentinel://`` for TLS) URL names Redis Sentinels and a
service: ``redis+sentinel://[user:pass@]host:26379[,host2:26379...]/SERVICE[/DB]``. The
client asks the sentinels for the service's primary (``redis.sentinel``) and follows a
failover by itself: a connection to a demoted or dead primary is dropped, and the next
attempt asks the sentinels again. The user info authenticates to the data nodes (as in
redis-py, whose ``Sentinel`` sends no credentials to the sentinels unless told);
``?sentinel_username=`` / ``?sentinel_password=`` authenticate to the sentinels. The
same blocking pool (``?max_connections=``, waits up to ``timeout``) serves the primary.
Such a URL is never a cluster: no detection is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import unquote

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.connection import URL_QUERY_ARGUMENT_PARSERS, parse_url
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
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .. import forksafe
from ..drive import Pause, Steps, adrive, drive
from ..errors import (
    AccessDeniedError,
    InvalidArgumentError,
    SessionStoreError,
    StoreUnavailableError,
)
from ..urls import invalid_url, mask_url, reject_unknown_params
from .durability import Durability, parse_durability
from .retry import BACKOFF, RETRIES, DriverBackoff, retry_delay

DEFAULT_TIMEOUT = 5.0
#: Connections per server (per node of a cluster) unless ``?max_connections=`` says.
DEFAULT_MAX_CONNECTIONS = 50
#: Query parameters of the URL that sessionstore reads itself; redis-py never sees them.
OWN_PARAMS = ("durability", "cluster", "max_connections", "cache")
#: Query parameters handed to redis-py: those its ``parse_url`` converts (less the ones
#: sessionstore sets itself: ``timeout`` is the store's, ``max_connections`` is ours),
#: plus the connection options it takes as text (credentials, names, TLS files).
REDIS_PY_PARAMS = tuple(
    sorted(
        (set(URL_QUERY_ARGUMENT_PARSERS) - {"timeout", "max_connections"})
        | {"password", "username", "client_name", "lib_name", "lib_version"}
        | {"encoding", "encoding_errors"}
        | {"ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path"}
        | {"ssl_ca_data", "ssl_password", "ssl_ciphers"}
    )
)
#: Values of ``?cluster=``: ask the server, or force a Redis Cluster client or a plain one.
CLUSTER_MODES = ("auto", "yes", "no")
#: URL schemes of a service behind Redis Sentinel (plain and TLS).
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
#: The port of a sentinel named without one.
SENTINEL_PORT = 26379
#: Query parameters of a Sentinel URL that authenticate to the sentinels.
SENTINEL_PARAMS = ("sentinel_username", "sentinel_password")
#: Values of ``?cache=``.
CACHE_VALUES = {"yes": True, "no": False}


@dataclass(frozen=True)
class RedisOptions:
    """What :func:`parse_options` makes of ``open_redis``'s arguments."""

    #: The URL handed to redis-py (sessionstore's own query parameters removed).
    url: str
    #: The URL to show: passwords masked.
    display_url: str
    timeout: float
    durability: Durability
    #: One of :data:`CLUSTER_MODES`.
    cluster: str = "auto"
    #: Connections per server (per node of a cluster); see the module doc.
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    #: The service behind Redis Sentinel a ``redis+sentinel://`` URL names; else None.
    sentinel: SentinelTarget | None = None
    #: Client-side caching of value reads (``?cache=yes``; see :mod:`.tracking`).
    cache: bool = False


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``redis+sentinel://`` URL names (see the module doc)."""

    #: (host, port) of each sentinel, in the URL's order.
    sentinels: tuple[tuple[str, int], ...]
    service: str
    #: redis-py keyword arguments of the data nodes (db, credentials, TLS, options).
    node_kwargs: dict[str, Any] = field(default_factory=dict, repr=False)
    #: redis-py keyword arguments of the sentinels (credentials, TLS).
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict, repr=False)


def parse_sentinel_url(url: str, shown: str) -> SentinelTarget:
    """The :class:`SentinelTarget` of ``url`` (sessionstore's own parameters removed).

    Raises :class:`InvalidArgumentError` for a URL without a sentinel or a service, a
    bad port or database, or a parameter redis-py rejects.
    """
    scheme, _, rest = url.partition("://")
    tls = scheme.lower() == "rediss+sentinel"
    rest, _, query = rest.partition("#")[0].partition("?")
    authority, _, path = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    sentinels = tuple(_sentinel_address(item, shown) for item in hosts.split(","))
    service, _, db = path.partition("/")
    service, db = unquote(service), db.strip("/")
    if not service:
        raise InvalidArgumentError(
            f"{shown!r} names no service: write redis+sentinel://host:26379/SERVICE[/DB]"
        )
    if db and not (db.isascii() and db.isdigit()):
        raise InvalidArgumentError(f"the database of {shown!r} must be a number, not {db!r:.20}")
    items = [item for item in query.split("&") if item]
    own = {
        name: unquote(value)
        for name, _, value in (item.partition("=") for item in items)
        if name in SENTINEL_PARAMS
    }
    kept = "&".join(item for item in items if item.partition("=")[0] not in SENTINEL_PARAMS)
    # redis-py reads the credentials and every option as for a redis:// URL.
    stand_in = f"{'rediss' if tls else 'redis'}://{userinfo}{at}localhost/{db or 0}"
    try:
        node = parse_url(stand_in + ("?" + kept if kept else ""))
    except ValueError as exc:
        raise invalid_url(url, exc)  # noqa: B904 - it chains what is safe to show
    for name in ("host", "port", "connection_class"):
        node.pop(name, None)
    tls_kwargs = {name: value for name, value in node.items() if name.startswith("ssl_")}
    if tls:
        node["ssl"] = True
        tls_kwargs["ssl"] = True
    sentinel = dict(tls_kwargs) if tls else {}
    if "sentinel_username" in own:
        sentinel["username"] = own["sentinel_username"]
    if "sentinel_password" in own:
        sentinel["password"] = own["sentinel_password"]
    return SentinelTarget(sentinels, service, node, sentinel)


def _sentinel_address(item: str, shown: str) -> tuple[str, int]:
    host, port = item, ""
    if item.startswith("["):
        host, _, after = item[1:].partition("]")
        port = after.removeprefix(":")
    elif ":" in item:
        host, _, port = item.rpartition(":")
    if not host or (port and not (port.isascii() and port.isdigit())):
        raise InvalidArgumentError(
            f"{shown!r} names a sentinel {item!r:.60} that is not host[:port]"
        )
    return unquote(host), int(port) if port else SENTINEL_PORT


def display(url: str) -> str:
    """``url`` with every password masked: in the user-info part and in ``?password=``."""
    return mask_url(url)


def _max_connections(raw: str | None, shown: str) -> int:
    if raw is None:
        return DEFAULT_MAX_CONNECTIONS
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise InvalidArgumentError(
            f"?max_connections= must be a whole number >= 1, not {raw!r:.40} in {shown!r}"
        )
    return int(raw)


def parse_options(url: str, timeout: float | None, durability: str | None) -> RedisOptions:
    """Validate the options; ``durability`` may come from the argument or ``?durability=``,
    the cluster mode from ``?cluster=`` (default ``auto``).

    Raises :class:`InvalidArgumentError` for a bad timeout, an unknown durability or
    cluster mode, or a durability given both ways with different values.
    """
    shown = display(url)
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidArgumentError(f"timeout must be a positive number of seconds, not {timeout!r}")
    clean, own = split_own_params(url)
    sentinel = url.partition("://")[0].lower() in SENTINEL_SCHEMES
    extra = SENTINEL_PARAMS if sentinel else ()
    reject_unknown_params(query_names(clean), (*OWN_PARAMS, *REDIS_PY_PARAMS, *extra), shown)
    from_url = own.get("durability")
    if durability is not None and from_url is not None and durability != from_url:
        raise InvalidArgumentError(
            f"durability={durability!r} contradicts ?durability={from_url} in {shown!r}"
        )
    chosen = durability if durability is not None else from_url
    cluster = own.get("cluster", "auto")
    if cluster not in CLUSTER_MODES:
        raise InvalidArgumentError(
            f"?cluster= must be one of {', '.join(CLUSTER_MODES)}, not {cluster!r:.40} in {shown!r}"
        )
    cache = own.get("cache", "no")
    if cache not in CACHE_VALUES:
        raise InvalidArgumentError(f"?cache= must be yes or no, not {cache!r:.40} in {shown!r}")
    target = None
    if sentinel:
        if cluster == "yes":
            raise InvalidArgumentError(
                f"{shown!r} names a service behind Redis Sentinel, never a Redis Cluster: "
                "leave ?cluster= out"
            )
        cluster = "no"
        target = parse_sentinel_url(clean, shown)
    options = RedisOptions(
        clean,
        shown,
        float(timeout),
        parse_durability(chosen),
        cluster,
        _max_connections(own.get("max_connections"), shown),
        target,
        CACHE_VALUES[cache],
    )
    if cluster == "yes":
        check_cluster_url(options)
    return options


def check_cluster_url(options: RedisOptions) -> None:
    """Raise :class:`InvalidArgumentError` when the URL cannot address a Redis Cluster
    (a unix socket, a database other than 0)."""
    try:
        parsed = parse_url(options.url)
    except ValueError as exc:
        raise invalid_url(options.url, exc)  # noqa: B904 - it chains what is safe to show
    if "path" in parsed:
        raise InvalidArgumentError(
            f"a Redis Cluster is reached by a redis:// or rediss:// URL (host and port), "
            f"not {options.display_url!r}: its nodes address each other by TCP"
        )
    if parsed.get("db", 0) != 0:
        raise InvalidArgumentError(
            f"{options.display_url!r} names database {parsed['db']}, but a Redis Cluster "
            "has only database 0"
        )


def split_own_params(url: str) -> tuple[str, dict[str, str]]:
    """(``url`` without sessionstore's query parameters, those parameters).

    The other parameters are kept byte for byte, for redis-py to read.
    """
    head, sep, query = url.partition("?")
    if not sep:
        return url, {}
    query, hash_sep, fragment = query.partition("#")
    kept: list[str] = []
    own: dict[str, str] = {}
    for item in query.split("&"):
        name, _, value = item.partition("=")
        if name in OWN_PARAMS:
            if name in own:
                raise InvalidArgumentError(f"?{name}= is given twice in {display(url)!r}")
            own[name] = value
        elif item:
            kept.append(item)
    rest = "&".join(kept)
    return head + ("?" + rest if rest else "") + hash_sep + fragment, own


def query_names(url: str) -> list[str]:
    """The names of ``url``'s query parameters, in order."""
    _, sep, query = url.partition("?")
    query = query.partition("#")[0]
    return [item.partition("=")[0] for item in query.split("&") if item] if sep else []


#: The shortest resend window (ms), whatever the timeout.
MIN_RESEND_WINDOW_MS = 10_000


def resend_window_ms(timeout: float) -> int:
    """How long (ms) the server remembers a value write's token (see
    :mod:`sessionstore.keys`): twice the longest time one call may keep sending the same
    command (``RETRIES`` + 1 attempts, each a connect and a reply of up to ``timeout``
    and the longest back-off), and at least :data:`MIN_RESEND_WINDOW_MS`."""
    attempt = 2 * timeout + BACKOFF.cap
    return max(MIN_RESEND_WINDOW_MS, math.ceil(2 * (RETRIES + 1) * attempt * 1000))


def _client_kwargs(options: RedisOptions) -> dict[str, Any]:
    return {
        "socket_connect_timeout": options.timeout,
        "socket_timeout": options.timeout,
        "decode_responses": False,
    }


def _pool_kwargs(options: RedisOptions) -> dict[str, Any]:
    """A blocking pool's size and how long a call waits in it for a connection."""
    return {"max_connections": options.max_connections, "timeout": options.timeout}


class ClusterNodePool(redis.BlockingConnectionPool):
    """The blocking pool of one cluster node, which takes a connection back only from
    the thread that holds it.

    redis-py's ``RedisCluster._execute_command`` keeps the connection of an attempt
    that met ``ASK`` or ``MOVED`` after releasing it; when the next attempt fails before
    it takes a connection (:func:`driver_defect`, a slot not covered, no connection
    free), its ``finally`` releases that connection a second time. A
    ``BlockingConnectionPool`` then holds it twice (or once more while another thread
    uses it), two threads share one connection and each reads the other's replies.
    Here a release by a thread other than the holder, or of a connection already
    back, is ignored.
    """

    def reset(self) -> None:
        super().reset()
        #: Each connection handed out, and the thread it was handed to.
        self._holders: dict[Any, int] = {}
        self._holders_lock = threading.Lock()
        self._getting = threading.local()

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        # A connection that fails to connect is released inside; let that through.
        self._getting.active = True
        try:
            connection = super().get_connection(*args, **kwargs)
        finally:
            self._getting.active = False
        with self._holders_lock:
            self._holders[connection] = threading.get_ident()
        return connection

    def release(self, connection: Any) -> None:
        with self._holders_lock:
            holder = self._holders.get(connection)
            if holder is None and not getattr(self._getting, "active", False):
                return  # already back in the pool
            if holder is not None and holder != threading.get_ident():
                return  # released before, and handed out again since
            self._holders.pop(connection, None)
        super().release(connection)


class SentinelBlockingPool(redis.sentinel.SentinelConnectionPool, redis.BlockingConnectionPool):
    """redis-py's Sentinel pool with the waiting of a ``BlockingConnectionPool``."""


class AsyncSentinelBlockingPool(
    redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool
):
    """:class:`SentinelBlockingPool` for ``redis.asyncio``."""


def _sentinel_socket_kwargs(options: RedisOptions, target: SentinelTarget) -> dict[str, Any]:
    return {**_client_kwargs(options), **target.sentinel_kwargs}


@dataclass(frozen=True)
class Flavour:
    """redis-py's classes for one kind of I/O, blocking or asyncio: the clients are built
    alike from them."""

    redis: Any
    pool: Any
    sentinel: Any
    sentinel_pool: Any
    retry: Any


BLOCKING = Flavour(
    redis.Redis, redis.BlockingConnectionPool, redis.sentinel.Sentinel, SentinelBlockingPool, Retry
)
ASYNCIO = Flavour(
    redis.asyncio.Redis,
    redis.asyncio.BlockingConnectionPool,
    redis.asyncio.sentinel.Sentinel,
    AsyncSentinelBlockingPool,
    redis.asyncio.retry.Retry,
)


def _retry(flavour: Flavour) -> Any:
    """redis-py's ``Retry`` of ``flavour`` on the schedule of :mod:`.retry`."""
    return flavour.retry(DriverBackoff(), RETRIES)


def sentinel_client(options: RedisOptions, flavour: Flavour) -> tuple[Any, Any]:
    """(the client of the service's primary, the ``Sentinel`` it asks); no I/O."""
    target = options.sentinel
    assert target is not None
    manager = flavour.sentinel(
        list(target.sentinels), sentinel_kwargs=_sentinel_socket_kwargs(options, target)
    )
    client = manager.master_for(
        target.service,
        connection_pool_class=flavour.sentinel_pool,
        retry=_retry(flavour),
        **target.node_kwargs,
        **_client_kwargs(options),
        **_pool_kwargs(options),
    )
    return _raw_stream_replies(client), manager


def plain_client(options: RedisOptions, flavour: Flavour) -> Any:
    """A plain redis-py client for ``options`` on a blocking pool (see the module doc and
    :func:`_raw_stream_replies`); no I/O."""
    try:
        pool = flavour.pool.from_url(
            options.url, retry=_retry(flavour), **_client_kwargs(options), **_pool_kwargs(options)
        )
    except ValueError as exc:
        raise invalid_url(options.url, exc)  # noqa: B904 - it chains what is safe to show
    return _raw_stream_replies(flavour.redis.from_pool(pool))


_Client = TypeVar("_Client", redis.Redis, redis.asyncio.Redis)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


def _raw_stream_replies(client: _Client) -> _Client:
    """XRANGE replies stay as the server sent them, ``[id, [name, value, ...]]`` per entry:
    the event-log reader decodes the flat field list itself, in one pass. (Cluster clients
    parse at each node, and so still turn the fields into dicts; the reader takes both.)
    """
    client.set_response_callback("XRANGE", _raw_reply)
    return client


_DRIVER_DIR = os.path.dirname(redis.__file__) + os.sep
#: Attempts of one call that meets :func:`driver_defect` (see :class:`ClusterClient`).
DEFECT_ATTEMPTS = 6


def driver_defect(exc: BaseException) -> bool:
    """``exc`` is the ``AttributeError`` redis-py's cluster client raises when a slot
    being migrated answers ``ASK`` with a node it does not know yet (a primary just added
    by ``redis-cli --cluster add-node``): it looks the node up, finds None and uses it.
    The command was not applied (``ASK`` means the node that answered did not run it)."""
    if not isinstance(exc, AttributeError) or getattr(exc, "obj", object()) is not None:
        return False
    trace = exc.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    return trace is not None and trace.tb_frame.f_code.co_filename.startswith(_DRIVER_DIR)


class ClusterClient(redis.cluster.RedisCluster):
    """``RedisCluster`` that survives :func:`driver_defect`: the slot map is refreshed and
    the command sent again, with a back-off, until the node is known (the first slot
    moved to it makes it part of the map); after :data:`DEFECT_ATTEMPTS` a
    ``ClusterError`` (the boundary makes it :class:`StoreUnavailableError`)."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(super().execute_command, *args, **kwargs)
        return drive(_past_defects(call, self.nodes_manager.initialize, args))


class AsyncClusterClient(redis.asyncio.cluster.RedisCluster):
    """:class:`ClusterClient` for ``redis.asyncio``."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(super().execute_command, *args, **kwargs)
        return await adrive(_past_defects(call, self.nodes_manager.initialize, args))


def _past_defects(call: Callable[[], Any], refresh: Callable[[], Any], args: Any) -> Steps[Any]:
    """``call``, sent again after a slot-map ``refresh`` while it meets
    :func:`driver_defect` (see :class:`ClusterClient`)."""
    for attempt in range(DEFECT_ATTEMPTS):
        try:
            return (yield call)
        except AttributeError as exc:
            if not driver_defect(exc):
                raise
            if attempt == DEFECT_ATTEMPTS - 1:
                raise ClusterError(_defect_text(args)) from exc
        yield Pause(retry_delay(attempt + 1))
        # A failed refresh is left to the next attempt to report.
        with contextlib.suppress(RedisError, RedisClusterException):
            yield refresh
    raise AssertionError("unreachable")


def _defect_text(args: tuple[Any, ...]) -> str:
    name = args[0].decode() if args and isinstance(args[0], bytes) else str(args[:1])
    return (
        f"{name} was redirected (ASK) to a node the cluster client did not know yet, "
        f"{DEFECT_ATTEMPTS} times: a slot is migrating to a new primary"
    )


def is_cluster(client: Any) -> bool:
    """True for a ``RedisCluster`` client (sync or async)."""
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


def _cluster_enabled(info: Any) -> bool:
    return str(info.get("cluster_enabled", 0)) == "1"


def _cluster_refusal(exc: ResponseError) -> bool:
    """A cluster node refused what a plain server allows (``SELECT`` of a database
    other than 0, sent by redis-py when it connects)."""
    return "not allowed in cluster mode" in str(exc)


def _refused(exc: ResponseError) -> bool:
    """The command is not allowed for this user, or renamed away (managed services)."""
    return isinstance(exc, NoPermissionError) or "unknown command" in str(exc).lower()


def _detect(plain: Any, guard: ErrorBoundary) -> Steps[bool]:
    """Whether the server behind ``plain`` is a Redis Cluster node: ``INFO cluster``, else
    ``CLUSTER INFO``; a server that refuses both is taken as a plain one."""
    with guard("INFO cluster"):
        try:
            return _cluster_enabled((yield functools.partial(plain.info, "cluster")))
        except ResponseError as exc:
            if _cluster_refusal(exc):
                return True
            if not _refused(exc):
                raise
        try:
            yield functools.partial(plain.execute_command, "CLUSTER INFO")
        except ResponseError as exc:
            if "cluster support disabled" in str(exc) or _refused(exc):
                return False
            raise
        return True


class Topology:
    """Whether the URL names a Redis Cluster: fixed by ``?cluster=yes|no``, else learnt
    at the first call of either client (sync or async) and shared by both."""

    def __init__(self, mode: str) -> None:
        self.cluster: bool | None = {"yes": True, "no": False}.get(mode)


class FirstUse:
    """Bookkeeping of the first-use detection, so that calls queued behind a detection
    that failed fail with it at once instead of each waiting through its own."""

    def __init__(self) -> None:
        self.attempts = 0
        self.error: SessionStoreError | None = None

    def check(self, seen: int) -> None:
        """Raise the error of a detection that ended while the caller waited."""
        if self.attempts != seen and self.error is not None:
            raise self.error
        self.attempts += 1

    def failed(self, error: SessionStoreError) -> None:
        self.error = error

    def run(self, seen: int, choose: Any) -> Any:
        self.check(seen)
        try:
            return choose()
        except SessionStoreError as exc:
            self.failed(exc)
            raise


class SyncClient:
    """The redis-py client the sync backends use, chosen at first use.

    :meth:`get` returns a ``redis.Redis``, or a ``redis.cluster.RedisCluster`` when the
    server is a cluster node. Finding out costs one ``INFO cluster`` (``CLUSTER INFO``
    when INFO is refused; a server that refuses both is taken as a plain one); its errors
    are mapped by the boundary, and a failed first use is retried by the next call.
    """

    def __init__(self, options: RedisOptions, topology: Topology, guard: ErrorBoundary) -> None:
        self._options = options
        self._topology = topology
        self._guard = guard
        self._sentinel: redis.sentinel.Sentinel | None = None
        if options.sentinel is not None:
            self._plain, self._sentinel = sentinel_client(options, BLOCKING)
        else:
            self._plain = plain_client(options, BLOCKING)
        self._client: Any = None
        self._cache: Any = None
        self._lock = threading.Lock()
        forksafe.renew_locks(self, "_lock")
        self._first_use = FirstUse()

    def get(self) -> Any:
        """The client to use (see the class doc)."""
        client = self._client
        if client is not None:
            return client
        seen = self._first_use.attempts
        with self._lock:
            if self._client is None:
                self._client = self._first_use.run(seen, self._choose)
            return self._client

    def cache(self) -> Any:
        """The :class:`~.tracking.ValueCache` of ``?cache=yes``, else None. Raises
        :class:`InvalidArgumentError` on a Redis Cluster (not covered)."""
        if not self._options.cache:
            return None
        client = self.get()
        if self._cache is None:
            if is_cluster(client):
                raise InvalidArgumentError(
                    f"?cache=yes is not supported on a Redis Cluster ({self._options.display_url}):"
                    " leave it out"
                )
            from .tracking import ValueCache

            with self._lock:
                if self._cache is None:
                    self._cache = ValueCache(client.connection_pool)
        return self._cache

    def cached(self) -> Any:
        """The :class:`~.tracking.ValueCache` if one was made already (no I/O), else None."""
        return self._cache

    def forget_cached(self, name: str) -> None:
        """Drop ``name`` from the value cache, if there is one (after a write of it)."""
        cache = self._cache
        if cache is not None:
            cache.forget(name)

    def run(
        self, op: Callable[Concatenate[Any, _P], Steps[_R]], /, *args: _P.args, **kw: _P.kwargs
    ) -> _R:
        """Run the operation ``op(client, ...)`` (:mod:`sessionstore.drive`) on :meth:`get`."""
        return drive(op(self.get(), *args, **kw))

    def _choose(self) -> Any:
        if self._topology.cluster is None:
            self._topology.cluster = drive(_detect(self._plain, self._guard))
        if not self._topology.cluster:
            return self._plain
        check_cluster_url(self._options)
        with self._guard("CLUSTER SLOTS"):
            cluster = ClusterClient.from_url(
                self._options.url,
                retry=_retry(BLOCKING),
                connection_pool_class=ClusterNodePool,
                **_client_kwargs(self._options),
                **_pool_kwargs(self._options),
            )
        self._plain.close()
        return cluster

    def close(self) -> None:
        """Close the client (and its pools); a later call reconnects."""
        if self._cache is not None:
            self._cache.close()
        if self._client is not None and self._client is not self._plain:
            self._client.close()
        self._plain.close()
        if self._sentinel is not None:
            self._sentinel.close()

    @property
    def sentinel(self) -> redis.sentinel.Sentinel | None:
        """The ``Sentinel`` of a ``redis+sentinel://`` URL; else None."""
        return self._sentinel


class AsyncClient:
    """:class:`SyncClient` for ``redis.asyncio``: :meth:`get` is a coroutine and returns a
    ``redis.asyncio.Redis`` or an initialised ``redis.asyncio.cluster.RedisCluster``."""

    def __init__(self, options: RedisOptions, topology: Topology, guard: ErrorBoundary) -> None:
        self._options = options
        self._topology = topology
        self._guard = guard
        self._sentinel: redis.asyncio.sentinel.Sentinel | None = None
        if options.sentinel is not None:
            self._plain, self._sentinel = sentinel_client(options, ASYNCIO)
        else:
            self._plain = plain_client(options, ASYNCIO)
        self._client: Any = None
        self._lock: asyncio.Lock | None = None
        self._first_use = FirstUse()
        self._slots: asyncio.Semaphore | None = None

    def cache(self) -> None:
        """The async client caches nothing (see :meth:`SyncClient.cache`)."""
        return None

    async def run(
        self, op: Callable[Concatenate[Any, _P], Steps[_R]], /, *args: _P.args, **kw: _P.kwargs
    ) -> _R:
        """Run the operation ``op(client, ...)`` (:mod:`sessionstore.drive`) in :meth:`use`."""
        async with self.use() as client:
            return await adrive(op(client, *args, **kw))

    def use(self) -> _Use:
        """``async with client.use() as redis_client:`` around one call of a backend: the
        client (as :meth:`get`), and on a cluster a place among the
        ``max_connections`` calls that may run at once (see the module doc)."""
        return _Use(self)

    async def get(self) -> Any:
        """The client to use (see :class:`SyncClient`)."""
        if self._client is not None:
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        seen = self._first_use.attempts
        async with self._lock:
            if self._client is None:
                self._first_use.check(seen)
                try:
                    self._client = await self._choose()
                except SessionStoreError as exc:
                    self._first_use.failed(exc)
                    raise
        return self._client

    async def _choose(self) -> Any:
        if self._topology.cluster is None:
            self._topology.cluster = await adrive(_detect(self._plain, self._guard))
        if not self._topology.cluster:
            return self._plain
        check_cluster_url(self._options)
        cluster = AsyncClusterClient.from_url(
            self._options.url,
            retry=_retry(ASYNCIO),
            max_connections=self._options.max_connections,
            **_client_kwargs(self._options),
        )
        with self._guard("CLUSTER SLOTS"):
            await cluster.initialize()
        await self._plain.aclose()
        self._slots = asyncio.Semaphore(self._options.max_connections)
        return cluster

    async def _wait_for_slot(self) -> asyncio.Semaphore | None:
        """On a cluster, a place among the calls that may run at once (see the module
        doc): the semaphore to release after the call; None on a single server."""
        slots = self._slots
        if slots is None:
            return None
        try:
            await asyncio.wait_for(slots.acquire(), self._options.timeout)
        except TimeoutError:
            raise StoreUnavailableError(
                f"no connection to the Redis Cluster at {self._options.display_url} "
                f"became free within {self._options.timeout:g} s: "
                f"{self._options.max_connections} calls of this store were running "
                "(raise ?max_connections= or the timeout)"
            ) from None
        return slots

    async def aclose(self) -> None:
        """Close the client (and its pools)."""
        if self._client is not None and self._client is not self._plain:
            await self._client.aclose()
        await self._plain.aclose()
        if self._sentinel is not None:
            await self._sentinel.aclose()


class _Use:
    """What :meth:`AsyncClient.use` returns (a plain class: it sits on every call's path)."""

    __slots__ = ("_client", "_held")

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._held: asyncio.Semaphore | None = None

    async def __aenter__(self) -> Any:
        found = await self._client.get()
        self._held = await self._client._wait_for_slot()
        return found

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._held is not None:
            self._held.release()


# Keys on every primary -------------------------------------------------------------------

#: Keys asked for per SCAN call, and commands per pipeline over what a SCAN found.
SCAN_COUNT = 1000


def scan_keys(client: Any, pattern: str, count: int) -> list[Any]:
    """Every key matching ``pattern`` (``SCAN``), on each primary of a cluster; unique."""
    if not is_cluster(client):
        return list(dict.fromkeys(client.scan_iter(match=pattern, count=count)))
    found: list[Any] = []
    for node in client.get_primaries():
        found += client.get_redis_connection(node).scan_iter(match=pattern, count=count)
    return list(dict.fromkeys(found))


_DENIED_MARKS = ("NOPERM", "WRONGPASS", "NOAUTH")
_OOM_MARK = "OOM command not allowed"
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
#: ``WAIT`` ended by a failover (``CLUSTER FAILOVER``, a primary turned replica): the
#: write before it was applied on a primary that may no longer be one.
_UNBLOCKED_MARK = "UNBLOCKED"
#: Said of every error that can follow a send of a write whose reply never came (a
#: resend meets a restarted server, a replica, a full memory...).
_UNDECIDED = "the call may or may not have been applied"
#: Errors of a cluster in motion (failover, resharding, a node down): a later call may pass.
_CLUSTER_IN_MOTION = (ClusterError, TryAgainError, SlotNotCoveredError)


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
    no reachable node) :class:`StoreUnavailableError`, a script cache lost again after
    the script was loaded (``NOSCRIPT`` reaching the boundary) and a ``WAIT`` unblocked by
    a failover (``UNBLOCKED``) :class:`StoreUnavailableError`, a plain server addressed as
    a cluster (``?cluster=yes``) :class:`InvalidArgumentError`, anything else
    :class:`SessionStoreError`; the redis-py error is chained.

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
        if isinstance(exc, NoScriptError):
            return StoreUnavailableError(
                f"{where} lost its script cache again (a restart, a failover, SCRIPT FLUSH "
                f"or a slot moved to another node) while {what} was sent; {_UNDECIDED}: {text}"
            )
        if text.startswith(_UNBLOCKED_MARK):
            return StoreUnavailableError(
                f"{where} ended the wait of {what} (a failover): {_UNDECIDED} on the new "
                f"primary: {text}"
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
        return SessionStoreError(f"{where} failed {what}: {text}")
