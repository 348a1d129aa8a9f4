"""What a store's clients learn at their first call, written once for both (sync and
async) as :data:`~sessionstore.drive.Steps`.

A URL may name any node of a Redis Cluster. ``?cluster=auto`` (the default) asks the
server at first use (``INFO cluster``, else ``CLUSTER INFO``; a server that refuses both
is taken as a plain one) and then talks to the whole cluster with a ``RedisCluster``
client (``open_cluster`` of :class:`~.pools.Flavour`), built from the same URL and options;
``?cluster=yes`` / ``?cluster=no`` skip the question. A ``redis+sentinel://`` URL is
never a cluster: no detection is made; a URL that names no durability gets
``replicas:1`` when the sentinels list replicas of the service
(:class:`~.durability.DurabilityChoice`), settled at first use.
"""

from __future__ import annotations

import functools
from typing import Any

from redis.exceptions import RedisError, ResponseError

from ..drive import Steps
from ..errors import SessionStoreError
from .boundary import ErrorBoundary
from .durability import DurabilityChoice
from .options import RedisOptions, check_cluster_url
from .pools import Flavour
from .replies import refused


class Topology:
    """Whether the URL names a Redis Cluster: fixed by ``?cluster=yes|no``, else learnt
    at the first call of either client (sync or async) and shared by both."""

    def __init__(self, mode: str, durability: DurabilityChoice | None = None) -> None:
        self.cluster: bool | None = {"yes": True, "no": False}.get(mode)
        #: The store's durability (settled at first use on a Sentinel URL naming none).
        self.durability = durability if durability is not None else DurabilityChoice(None, False)


def _cluster_enabled(info: Any) -> bool:
    return str(info.get("cluster_enabled", 0)) == "1"


def _cluster_refusal(exc: ResponseError) -> bool:
    """A cluster node refused what a plain server allows (``SELECT`` of a database
    other than 0, sent by redis-py when it connects)."""
    return "not allowed in cluster mode" in str(exc)


def _detect(plain: Any, guard: ErrorBoundary) -> Steps[bool]:
    """Whether the server behind ``plain`` is a Redis Cluster node: ``INFO cluster``, else
    ``CLUSTER INFO``; a server that refuses both is taken as a plain one."""
    with guard("INFO cluster"):
        try:
            return _cluster_enabled((yield functools.partial(plain.info, "cluster")))
        except ResponseError as exc:
            if _cluster_refusal(exc):
                return True
            if not refused(exc):
                raise
        try:
            yield functools.partial(plain.execute_command, "CLUSTER INFO")
        except ResponseError as exc:
            if "cluster support disabled" in str(exc) or refused(exc):
                return False
            raise
        return True


def _replicas(manager: Any, service: str) -> Steps[int]:
    """How many replicas of ``service`` the first sentinel of ``manager`` (a redis-py
    ``Sentinel``) that answers lists (in any state); 0 when none answers."""
    for sentinel in manager.sentinels:
        try:
            return len((yield functools.partial(sentinel.sentinel_slaves, service)))
        except (RedisError, OSError):
            continue
    return 0


class FirstUse:
    """The first-use choice of one client (sync or async; see the module doc), and its
    bookkeeping: calls queued behind a choice that failed fail with it at once instead
    of each waiting through its own.

    A client reads :attr:`attempts` before it waits for its lock, then, holding it,
    drives :meth:`choose`.
    """

    def __init__(
        self, options: RedisOptions, topology: Topology, guard: ErrorBoundary, flavour: Flavour
    ) -> None:
        self._options = options
        self._topology = topology
        self._guard = guard
        self._flavour = flavour
        self.attempts = 0
        self._error: SessionStoreError | None = None

    def choose(self, seen: int, plain: Any, sentinel: Any) -> Steps[Any]:
        """The client to use, given the plain (or Sentinel primary's) client ``plain``
        and the ``Sentinel`` of a Sentinel URL (else None): ``plain``, or a cluster
        client (``plain`` is then closed). Raises at once the error of a choice that
        ended while the caller waited (``seen``: :attr:`attempts` before it waited). An
        error of a later choice (the async client's, on another event loop) replaces
        it; a success forgets it."""
        if self.attempts != seen and self._error is not None:
            raise self._error
        self.attempts += 1
        try:
            chosen = yield from self._choose(plain, sentinel)
        except SessionStoreError as exc:
            self._error = exc
            raise
        self._error = None
        return chosen

    def _choose(self, plain: Any, sentinel: Any) -> Steps[Any]:
        options, topology = self._options, self._topology
        if sentinel is not None:
            assert options.sentinel is not None
            if topology.durability.pending:
                found = yield from _replicas(sentinel, options.sentinel.service)
                topology.durability.settle(found)
            return plain
        if topology.cluster is None:
            topology.cluster = yield from _detect(plain, self._guard)
        if not topology.cluster:
            return plain
        check_cluster_url(options)
        with self._guard("CLUSTER SLOTS"):
            cluster = yield self._flavour.open_cluster(options)
        yield getattr(plain, self._flavour.close)
        return cluster
