"""The per-namespace index of sessions and values (layout in :mod:`sessionstore.keys`).

Every write that can create data sends its entry before its data (:func:`add_call`,
sent by :mod:`.scripts`; the server decides whether it writes, so no client trusts an
entry it added before; with ``durability="replicas:N"`` confirmed by N replicas as the
data is, so a failover never keeps a session's data without its entry); listings read
the index instead of scanning the keyspace:

1. ``ZRANGE`` of the index by rank (one slot, also on a cluster), :data:`SCAN_COUNT`
   entries a call whatever its size (a tenant may fill its own index by hand), each
   page starting at the last entry of the one before: an entry added or removed before
   it meanwhile shifts the ranks, which that entry then shows, and the reading starts
   again (after :data:`PAGED_READS`, one ``ZRANGE`` of the whole index). Ranks are the
   data's, so a page read from another server (a failover, a slot moved) continues
   where the last one ended, as a ``ZSCAN`` cursor would not;
2. one pipelined check per entry (``HGETALL`` of a session's meta hash, ``HGET w`` of a
   value hash, ``EXISTS`` of a history) -- on a cluster redis-py splits the pipeline by
   node;
3. entries whose data is gone are skipped, and those older than
   :data:`~sessionstore.keys.GRACE_MS` are removed by ``index_forget.lua``.

So a listing costs a few calls per 1,000 entries of the namespace, each bounded, whatever
the size of the server's keyspace, and needs no ``SCAN``. :func:`rebuild` (``sessionstore doctor
--fix``) indexes data written before the index existed; it needs ``SCAN``, so an admin
runs it once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError, ResponseError

from .. import keys
from ..drive import Steps, drive
from ..errors import InvalidArgumentError
from ..jsondata import elide
from ..when import now_ms
from . import scripts
from .boundary import ErrorBoundary
from .client import SyncClient
from .firstuse import Topology
from .options import RedisOptions, parse_options
from .replies import text, wrong_type
from .scan import SCAN_COUNT, scan_keys

#: How one listing checks an entry: queue the check on a pipeline, given the member.
Queue = Callable[[Any, str], None]


#: How old (ms, by the writer's clock) an entry may grow before a write refreshes it:
#: half of ``GRACE_MS``. A listing removes an entry only when its score is older than
#: ``GRACE_MS`` and its data is gone, so a write that found its entry younger lands
#: (within this half plus the call's timeout) long before the entry can be removed;
#: clocks of clients must agree within the other half, less that timeout.
REFRESH_MS = keys.GRACE_MS // 2


#: Readings of an index a page at a time before one ``ZRANGE`` reads it whole: each
#: starts again when entries were added or removed before the page it read up to.
PAGED_READS = 3

#: The longest index entry ``index_add.lua`` takes (``INDEX_MEMBER_BYTES`` there).
INDEX_MEMBER_BYTES = 262144


def add_call(index: str, member: str) -> scripts.Entry:
    """The ``index_add.lua`` call a creating write sends before its data: the server adds
    the entry, or refreshes it when older than :data:`REFRESH_MS`, with the writer's wall
    clock (:func:`~sessionstore.when.now_ms`) as its score; else it writes nothing. The
    server decides on every write, so an entry lost with the server's data (a restart
    without persistence, a lagging replica promoted, a flush) is back with the next
    write, before its data.

    An entry longer than the script takes raises ``InvalidArgumentError`` here, before
    anything is sent: a write whose script runs apart from its entry's (every write but
    a single server's ``value_swap``) would otherwise be applied although refused."""
    size = len(member.encode("utf-8", "surrogatepass"))
    if size > INDEX_MEMBER_BYTES:
        raise InvalidArgumentError(
            f"the index entry of {elide(member)} (a session id or a value's key, escaped)"
            f" is {size} bytes: at most {INDEX_MEMBER_BYTES}"
        )
    now = now_ms()
    return scripts.Entry("index_add", [index], [now, now - REFRESH_MS, member])


def session_entry(namespace: str, session_id: str) -> scripts.Entry:
    """:func:`add_call` for a log session."""
    return add_call(keys.index_keys(namespace)[0], keys.session_member(session_id))


def value_entry(
    key: keys.ValueKey, payload: bytes | None, *, history: bool
) -> scripts.Entry | None:
    """:func:`add_call` for a write of a session value (plain or history); None for a
    plain clear, which creates nothing."""
    if payload is None and not history:
        return None
    return add_call(keys.index_keys(key.namespace)[1], keys.value_member(key, history))


def _chunks(items: Sequence[Any]) -> list[Sequence[Any]]:
    return [items[start : start + SCAN_COUNT] for start in range(0, len(items), SCAN_COUNT)]


@dataclass
class Listing:
    """One listing of an index, sans I/O: what to send, and what the replies mean.

    A driver reads the index (:func:`range_steps`) and hands it to :meth:`take_range`,
    sends the checks of each :meth:`chunks` (queued by ``queue``) and hands their replies
    to :meth:`take_checks`; then sends :meth:`forget_calls`. :attr:`found` holds (member,
    check reply) of every entry whose data is there; an error reply about the data (a key
    of the wrong type) counts as there, for the caller to report; any other error reply
    is raised (see :meth:`take_checks`).
    """

    index: str
    queue: Queue
    members: list[str]
    scores: list[float]
    found: list[tuple[str, Any]]
    gone: list[str]

    @classmethod
    def of(cls, index: str, queue: Queue) -> Listing:
        return cls(index, queue, [], [], [], [])

    def take_range(self, reply: Sequence[Any]) -> None:
        """The index's (member, score) pairs, as ``ZRANGE ... WITHSCORES`` orders them."""
        for member, score in reply:
            self.members.append(text(member))
            self.scores.append(float(score))

    def chunks(self) -> list[Sequence[str]]:
        return _chunks(self.members)

    def take_checks(self, chunk: Sequence[str], replies: Sequence[Any]) -> None:
        """Raises the error reply of an entry whose server could not answer (a node
        down, refusing, a slot not served): the listing fails rather than come back
        shorter. Only a reply about the data (a key of the wrong type) is kept."""
        for member, reply in zip(chunk, replies, strict=True):
            if isinstance(reply, RedisError) and not wrong_type(reply):
                raise reply
            if isinstance(reply, RedisError) or reply:
                self.found.append((member, reply))
            else:
                self.gone.append(member)

    def forget_calls(self, now: int | None = None) -> list[list[Any]]:
        """ARGV of each ``index_forget.lua`` call: the cutoff, then members."""
        cutoff = (now_ms() if now is None else now) - keys.GRACE_MS
        score = dict(zip(self.members, self.scores, strict=True))
        stale = [member for member in self.gone if score[member] <= cutoff]
        return [[cutoff, *chunk] for chunk in _chunks(stale)]


def list_steps(client: Any, guard: ErrorBoundary, index: str, queue: Queue) -> Steps[Listing]:
    """Run a :class:`Listing` (see the module doc)."""
    listing = Listing.of(index, queue)
    listing.take_range((yield from range_steps(client, guard, index)))
    for chunk in listing.chunks():
        with guard("pipelined checks of", index):
            pipe = client.pipeline(transaction=False)
            for member in chunk:
                queue(pipe, member)
            listing.take_checks(
                chunk, (yield functools.partial(pipe.execute, raise_on_error=False))
            )
    for args in listing.forget_calls():
        with guard("index_forget.lua", index):
            yield from scripts.run_steps(client, "index_forget", [index], args)
    return listing


def range_steps(client: Any, guard: ErrorBoundary, index: str) -> Steps[list[Any]]:
    """The (member, score) pairs of ``index`` in ``ZRANGE``'s order, read a page of
    :data:`SCAN_COUNT` a call (see the module doc): every entry there from start to end,
    each once."""
    for _ in range(PAGED_READS):
        found = yield from _paged(client, guard, index)
        if found is not None:
            return found
    with guard("ZRANGE", index):
        whole: list[Any] = yield functools.partial(client.zrange, index, 0, -1, withscores=True)
    return whole


def _paged(client: Any, guard: ErrorBoundary, index: str) -> Steps[list[Any] | None]:
    """The whole index read by rank a page at a time; None when the ranks shifted
    between two pages (the entry a page starts at is not the last one read)."""
    found: list[Any] = []
    while True:
        start = max(len(found) - 1, 0)
        stop = start + SCAN_COUNT  # inclusive: the last entry read, then SCAN_COUNT more
        with guard("ZRANGE", index):
            page = yield functools.partial(client.zrange, index, start, stop, withscores=True)
        ended = len(page) <= stop - start
        if found:
            if not page or tuple(page[0]) != tuple(found[-1]):
                return None
            page = page[1:]
        found += page
        if ended:
            return found


# Old stores: find and index what the index lacks (an admin's job: it needs SCAN) ---------


@dataclass(frozen=True)
class IndexReport:
    """What :func:`audit` found missing from the index, or :func:`rebuild` added."""

    sessions: int
    values: int

    @property
    def total(self) -> int:
        return self.sessions + self.values


def _stored(client: Any, guard: ErrorBoundary, namespace: str) -> tuple[list[str], list[str]]:
    """(session members, value members) of the data stored in ``namespace`` (SCAN on
    every primary); value hashes without a value (``t`` alone) are left out."""
    found: dict[str, list[str]] = {}
    for kind, pattern in (
        ("meta", keys.log_meta_pattern(namespace)),
        ("plain", keys.value_pattern(namespace)),
        ("history", keys.history_pattern(namespace)),
    ):
        with guard("SCAN", pattern):
            found[kind] = [text(name) for name in scan_keys(client, pattern, SCAN_COUNT)]
    sessions = _members(keys.member_of_meta_key, found["meta"], namespace)
    whens: list[Any] = []
    for chunk in _chunks(found["plain"]):
        with guard("HGET", keys.value_pattern(namespace)), client.pipeline(False) as pipe:
            for name in chunk:
                pipe.hget(name, "w")
            whens += pipe.execute()
    plain = [name for name, when in zip(found["plain"], whens, strict=True) if when is not None]
    values = _members(keys.member_of_value_name, [*plain, *found["history"]], namespace)
    return sessions, values


def _members(
    member: Callable[[str, str], str | None], names: list[str], namespace: str
) -> list[str]:
    """The index members of the key ``names`` (:mod:`sessionstore.keys` parses them)."""
    return [found for found in (member(name, namespace) for name in names) if found is not None]


def _missing(client: Any, guard: ErrorBoundary, namespace: str) -> dict[str, list[str]]:
    """Index key -> the members its data has but it lacks."""
    sessions, values = _stored(client, guard, namespace)
    missing: dict[str, list[str]] = {}
    for index, members in zip(keys.index_keys(namespace), (sessions, values), strict=True):
        indexed = {text(m) for m, _ in drive(range_steps(client, guard, index))}
        missing[index] = [member for member in members if member not in indexed]
    return missing


def _admin_client(url: str, timeout: float | None) -> tuple[SyncClient, ErrorBoundary]:
    options: RedisOptions = parse_options(url, timeout, None)
    guard = ErrorBoundary(options.display_url, options.timeout)
    return SyncClient(options, Topology(options.cluster), guard), guard


def audit(url: str, namespace: str, *, timeout: float | None = None) -> IndexReport:
    """How many sessions and values of ``namespace`` are stored but not indexed (they
    would not be listed). Needs ``SCAN``: raises ``AccessDeniedError`` for a user that
    may not run it."""
    handle, guard = _admin_client(url, timeout)
    try:
        missing = _missing(handle.get(), guard, namespace)
    finally:
        handle.close()
    sessions, values = keys.index_keys(namespace)
    return IndexReport(len(missing[sessions]), len(missing[values]))


def rebuild(url: str, namespace: str, *, timeout: float | None = None) -> IndexReport:
    """Add every stored session and value of ``namespace`` that the index lacks (stores
    written before the index existed); returns how many were added. Idempotent; needs
    ``SCAN`` (an admin)."""
    handle, guard = _admin_client(url, timeout)
    added: dict[str, int] = {}
    try:
        client = handle.get()
        for index, members in _missing(client, guard, namespace).items():
            added[index] = 0
            for chunk in _chunks(members):
                with guard("ZADD", index):
                    added[index] += int(client.zadd(index, dict.fromkeys(chunk, now_ms()), nx=True))
    finally:
        handle.close()
    sessions, values = keys.index_keys(namespace)
    return IndexReport(added[sessions], added[values])


def namespaces(url: str, *, timeout: float | None = None) -> dict[str, dict[str, int]]:
    """Every namespace whose index is on the server -> the entries of its two indexes
    (``{"sessions": n, "values": n}``), found by ``SCAN`` on every primary: needs an
    admin (``AccessDeniedError`` for the least-privilege user). A key that matches the
    pattern but is not an index of the layout is passed over."""
    handle, guard = _admin_client(url, timeout)
    found: dict[str, dict[str, int]] = {}
    try:
        client = handle.get()
        pattern = keys.index_scan_pattern()
        with guard("SCAN", pattern):
            names = [text(name) for name in scan_keys(client, pattern, SCAN_COUNT)]
        for name in names:
            parsed = keys.namespace_of_index_key(name)
            if parsed is None:
                continue
            with guard("ZCARD", name):
                try:
                    count = int(client.zcard(name))
                except ResponseError as exc:
                    if not wrong_type(exc):
                        raise
                    continue
            found.setdefault(parsed[0], {})[parsed[1]] = count
    finally:
        handle.close()
    return found
