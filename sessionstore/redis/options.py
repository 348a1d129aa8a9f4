"""The URL of a Redis store and what it sets: :func:`parse_options` reads it into
:class:`RedisOptions` (no I/O), without ever showing a password (:func:`display`).

Query parameters sessionstore reads itself (``OWN_PARAMS``: ``durability``, ``cluster``,
``max_connections``, ``cache``) never reach redis-py; the connection options redis-py
takes (``REDIS_PY_PARAMS``) do; any other is refused with a suggestion (its name shown,
never its value).

Every value is checked before use (:func:`check_redis_params`): seconds
(``socket_timeout``, ``socket_connect_timeout``) are finite and in (0, ``MAX_TIMEOUT``],
``health_check_interval`` is whole seconds in [0, ``MAX_TIMEOUT``], ``db`` (``?db=``, or
the path of ``redis://host:port/<db>`` and ``redis+sentinel://host/SERVICE/<db>``) a
whole number below 2**31 (a path that names no number is refused too: redis-py would
read it as database 0), ``socket_read_size`` a whole number of bytes in [1, 2**26],
``protocol`` 2 or 3, a flag (``socket_keepalive``, ``retry_on_timeout``, ``ssl_check_hostname``,
``legacy_responses``) yes/no, true/false, y/n, t/f or 1/0; ``?max_connections=`` is a whole
number in [1, ``MAX_CONNECTIONS``]; ``?retry_on_error=`` is refused (the store chooses
what it retries); and a port, where a URL names one, is 1-65535 (port 0 is refused rather
than read as "the default").

A ``redis+sentinel://`` (``rediss+sentinel://`` for TLS) URL names Redis Sentinels and a
service: ``redis+sentinel://[user:pass@]host:26379[,host2:26379...]/SERVICE[/DB]``. The
user info authenticates to the data nodes (as in redis-py, whose ``Sentinel`` sends no
credentials to the sentinels unless told); ``?sentinel_username=`` /
``?sentinel_password=`` authenticate to the sentinels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from redis.connection import URL_QUERY_ARGUMENT_PARSERS, parse_url

from ..arguments import MAX_TIMEOUT, check_timeout
from ..errors import InvalidArgumentError
from ..urls import invalid_url, mask_url, reject_unknown_params
from .durability import Durability, DurabilityChoice, parse_durability
from .retry import BACKOFF, RETRIES

DEFAULT_TIMEOUT = 5.0
#: Connections per server (per node of a cluster) unless ``?max_connections=`` says.
DEFAULT_MAX_CONNECTIONS = 50
#: The most ``?max_connections=`` accepts: redis-py's pool allocates a slot per connection
#: up front, so opening a store costs time in proportion to it.
MAX_CONNECTIONS = 10_000
#: Parameters in seconds: finite, in (0, MAX_TIMEOUT].
_SECONDS_PARAMS = ("socket_timeout", "socket_connect_timeout")
#: The highest database number a URL may name (``?db=`` or its path).
MAX_DB = 2**31 - 1
#: Whole-number parameters and their (lowest, highest) accepted values.
_WHOLE_PARAMS = {
    "db": (0, MAX_DB),
    "health_check_interval": (0, int(MAX_TIMEOUT)),
    "socket_read_size": (1, 2**26),
    "protocol": (2, 3),
}
#: Flag parameters and the words they accept (compared case-insensitively).
_FLAG_PARAMS = ("socket_keepalive", "retry_on_timeout", "ssl_check_hostname", "legacy_responses")
_FLAG_WORDS = ("yes", "no", "true", "false", "y", "n", "t", "f", "1", "0")
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
    #: Whether the durability was given (argument or ``?durability=``), not defaulted.
    durability_named: bool = True

    def durability_choice(self) -> DurabilityChoice:
        """The store's :class:`~.durability.DurabilityChoice` (a Sentinel URL that names
        no durability settles it at first use)."""
        named = self.durability if self.durability_named else None
        return DurabilityChoice(named, self.sentinel is not None)


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
    check_path_db(db, url, shown)
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
    if not host or (port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)):
        raise InvalidArgumentError(
            f"{shown!r} names a sentinel {item!r:.60} that is not host[:port] (port 1-65535)"
        )
    return unquote(host), int(port) if port else SENTINEL_PORT


def display(url: str) -> str:
    """``url`` with every password masked: in the user-info part and in ``?password=``."""
    return mask_url(url)


def _max_connections(raw: str | None, shown: str) -> int:
    if raw is None:
        return DEFAULT_MAX_CONNECTIONS
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or not (
        1 <= int(raw) <= MAX_CONNECTIONS
    ):
        raise InvalidArgumentError(
            f"?max_connections= must be a whole number in [1, {MAX_CONNECTIONS}], "
            f"not {raw!r:.40} in {shown!r}"
        )
    return int(raw)


def check_redis_params(url: str, shown: str) -> None:
    """Raise :class:`InvalidArgumentError` for a query parameter of ``url`` (sessionstore's
    own removed) whose value redis-py would take but could not use, or a port 0 (see the
    module doc); ``shown`` is ``url`` masked. No I/O."""
    query = url.partition("?")[2].partition("#")[0]
    for name, raw in parse_qsl(query, keep_blank_values=True):
        value = unquote(raw).strip()
        if name == "retry_on_error":
            raise InvalidArgumentError(
                f"?retry_on_error= cannot be set in {shown!r}: the store chooses what it retries"
            )
        if not value:
            continue  # redis-py ignores an empty value
        if name in _SECONDS_PARAMS:
            try:
                seconds = float(value)
            except ValueError:
                seconds = math.nan
            if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT):
                raise InvalidArgumentError(
                    f"?{name}= must be seconds in (0, {MAX_TIMEOUT:g}], not {value!r:.40} "
                    f"in {shown!r}"
                )
        elif name in _WHOLE_PARAMS:
            low, high = _WHOLE_PARAMS[name]
            if not _whole_in(value, low, high):
                raise InvalidArgumentError(
                    f"?{name}= must be a whole number in [{low}, {high}], not {value!r:.40} "
                    f"in {shown!r}"
                )
        elif name in _FLAG_PARAMS and value.lower() not in _FLAG_WORDS:
            raise InvalidArgumentError(
                f"?{name}= must be yes or no (or true/false, 1/0), not {value!r:.40} in {shown!r}"
            )
    if url.partition("://")[0].lower() in ("redis", "rediss"):
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return  # redis-py refuses it, with a message that hides the password
        if port == 0:
            raise InvalidArgumentError(f"{shown!r} names port 0: a port is 1-65535")
        # redis-py reads the path as the database, slashes removed, when ?db= is absent.
        check_path_db(unquote(parts.path).replace("/", ""), url, shown)


def _whole_in(value: str, low: int, high: int) -> bool:
    """Whether ``value`` is ASCII digits naming a number in [low, high] (leading zeros
    allowed; a string of any length is judged without converting it whole)."""
    if not (value.isascii() and value.isdigit()):
        return False
    digits = value.lstrip("0") or "0"
    return len(digits) <= len(str(high)) and low <= int(digits) <= high


def check_path_db(db: str, url: str, shown: str) -> None:
    """Raise :class:`InvalidArgumentError` unless ``db``, the database the path of
    ``url`` names (``redis://host/<db>``, ``redis+sentinel://host/SERVICE/<db>``; empty
    when it names none), is a whole number in the range ``?db=`` accepts. The message
    quotes it only when ``shown`` (``url`` masked) shows it too: a password with a raw
    ``/`` reads as a path."""
    low, high = _WHOLE_PARAMS["db"]
    if not db or _whole_in(db, low, high):
        return
    if db in unquote(shown):
        raise InvalidArgumentError(
            f"the database in the path must be a whole number in [{low}, {high}], not "
            f"{db!r:.40} in {shown!r}"
        )
    raise InvalidArgumentError(
        f"the database in the path must be a whole number in [{low}, {high}] in {shown!r} "
        "(percent-encode @ : / ? # [ ] % and spaces in the user info)"
    )


def parse_options(url: str, timeout: float | None, durability: str | None) -> RedisOptions:
    """Validate the options; ``durability`` may come from the argument or ``?durability=``,
    the cluster mode from ``?cluster=`` (default ``auto``).

    Raises :class:`InvalidArgumentError` for a bad timeout (see
    :func:`~sessionstore.arguments.check_timeout`), an unknown durability or cluster mode,
    a durability given both ways with different values, or a parameter value
    :func:`check_redis_params` refuses.
    """
    shown = display(url)
    timeout = check_timeout("timeout", DEFAULT_TIMEOUT if timeout is None else timeout)
    clean, own = split_own_params(url)
    sentinel = url.partition("://")[0].lower() in SENTINEL_SCHEMES
    extra = SENTINEL_PARAMS if sentinel else ()
    names = query_names(clean)
    reject_unknown_params(names, (*OWN_PARAMS, *REDIS_PY_PARAMS, *extra), shown)
    check_tls_params(url, names, shown)
    check_redis_params(clean, shown)
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
        chosen is not None,
    )
    if cluster == "yes":
        check_cluster_url(options)
    return options


#: URL schemes whose connections use TLS, where the ``ssl_*`` parameters mean something.
TLS_SCHEMES = ("rediss", "rediss+sentinel")


def check_tls_params(url: str, names: Iterable[str], shown: str) -> None:
    """Refuse ``ssl_*`` parameters on a URL without TLS (``redis://``, ``unix://``,
    ``redis+sentinel://``): redis-py would fail every call on them. The
    :class:`InvalidArgumentError` names the parameter and the scheme to use."""
    scheme = url.partition("://")[0].lower()
    if scheme in TLS_SCHEMES:
        return
    for name in names:
        if name.startswith("ssl_"):
            raise InvalidArgumentError(
                f"?{name}= is a TLS parameter, and {scheme}:// connects without TLS: use"
                f" a rediss:// URL (rediss+sentinel:// behind Sentinel) in {shown!r}"
            )


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
    """How long (ms) the server remembers a value write's slot record (the ``seq`` hash
    of :mod:`sessionstore.keys`), so that a resend of the write is recognised: twice the
    longest time one call may keep sending the same command (``RETRIES`` + 1 attempts,
    each a connect and a reply of up to ``timeout`` and the longest back-off), and at
    least :data:`MIN_RESEND_WINDOW_MS`."""
    attempt = 2 * timeout + BACKOFF.cap
    return max(MIN_RESEND_WINDOW_MS, math.ceil(2 * (RETRIES + 1) * attempt * 1000))
