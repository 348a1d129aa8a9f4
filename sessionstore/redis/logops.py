"""The operations of session event logs on Redis, written once for the sync and async
backends (:mod:`.events`): a meta hash, a stream and a digest hash per session (see
:mod:`.logformat`).

* ``append``: ``log_append.lua`` (checks -- a writer's lease first, its fence --, torn-tail
  cut, the events' digests, XADDs, ``next_seq`` last, then ``PEXPIRE`` of the three keys
  for a session with a ttl), then ``WAIT`` in the same round trip for
  ``durability="replicas:N"``. A retry of the same call after a lost reply finds its
  events' digests stored and returns it as an applied replay.
* ``read``: ``HGETALL meta`` and ``XRANGE`` pipelined, then more XRANGE chunks for long
  logs. Damage is confirmed by reading the meta hash again (a session deleted meanwhile
  is not damage). With ``repair=True`` a torn tail is cut by ``log_cut_tail.lua``,
  which rechecks ``next_seq`` so a concurrent append is never cut.
* leases: the hash ``...:lease`` (fields ``owner`` and ``epoch``, with an expiry) is
  taken by ``lease_acquire.lua``, renewed by ``lease_renew.lua``, given up by
  ``lease_release.lua``; ``HGET`` tells whether another owner holds it (an expired lease
  is gone). The key ``...:epoch`` keeps the newest lease's epoch, which a writer's
  append checks (see :mod:`sessionstore.keys`).
* ``info``: ``HGETALL meta`` and ``EXISTS lease`` pipelined (``last_time`` and, for a
  session with a ttl, ``expires_at`` are kept in the meta hash by ``log_append.lua``);
  ``list_info``: the index listing as for ``list``, then the leases, pipelined.
* ``stored_bytes``: ``HMGET meta bytes bytes_to next_seq entries`` (the count
  ``log_append.lua`` keeps); a log without a count up to ``next_seq`` is estimated from
  its two ends (:meth:`LogOps.stored_bytes`).
* ``exists``: ``EXISTS meta``; ``list``: the namespace's sessions index (see
  :mod:`.index`): ``ZRANGE``, then pipelined ``HGETALL`` of each meta hash; a session
  whose header is damaged is skipped and logged (logger ``sessionstore``), never hiding
  the others; ``delete``: ``log_delete.lua`` (the index entry goes lazily); ``prune``:
  the server expires sessions itself, so it only clears index entries of sessions gone.

An append that materialises a session (it carries the header) adds its index entry
first, in the same round trip on a single server (see :mod:`.scripts`).

With ``durability="fsync"`` or ``"aof"`` the first write of each backend object
(append, torn-tail cut, delete) verifies the server's persistence, on every primary of
a cluster (see :mod:`.durability`); reads never do.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from .. import keys
from ..contracts import EventBatch
from ..drive import Steps
from ..errors import CorruptLogError, SessionNotFoundError, UnsupportedVersionError
from ..eventlog import event_text, not_ending_with
from ..leases import Lease, taken
from ..models import SessionEvent, SessionHeader, SessionInfo
from . import scripts
from .boundary import ErrorBoundary
from .durability import (
    CONFIG_PATTERN,
    INFO_SECTION,
    DurabilityChoice,
    ServerCheck,
    check_acks,
    wait_ms,
)
from .index import Listing, Queue, list_steps, session_entry
from .logformat import (
    append_args,
    decode_append,
    decode_header,
    decode_info,
    entry_start,
    estimated_bytes,
    event_digests,
    restore_id,
    stream_id,
    whole_count,
)
from .logparse import READ_ATTEMPTS, LogRead
from .pools import is_cluster
from .replies import refused, text

log = logging.getLogger("sessionstore")
#: The most torn-tail entries one ``log_cut_tail.lua`` call cuts (its ``TAIL_CUT``): a
#: reply that cut as many is followed by another call.
TAIL_CUT = 1000
#: How many times an append cuts a torn tail its script reported and is sent again
#: before the log is reported damaged (one cut is enough unless entries keep coming).
TAIL_ATTEMPTS = 3
#: Entries read at each end of a log that has no byte count to estimate it.
SAMPLE_ENTRIES = 50


def _servers(client: Any, display_url: str) -> list[tuple[str, Any]]:
    """(name, cluster node or None) of every server whose persistence counts."""
    if is_cluster(client):
        return [(node.name, node) for node in client.get_primaries()]
    return [(display_url, None)]


def _ask(client: Any, check: ServerCheck, node: Any) -> Any:
    """The question of ``check`` for one server, as a redis-py call (sync or async)."""
    target = {} if node is None else {"target_nodes": node}
    if check.question == "CONFIG GET":
        return client.config_get(CONFIG_PATTERN, **target)
    return client.info(INFO_SECTION, **target)


def _meta_key(namespace: str, member: str) -> str:
    # A member that is no escaped id names a key that does not exist: it is left out.
    return keys.log_keys(namespace, keys.session_of_member(member) or member)[0]


def _meta_of(namespace: str) -> Queue:
    def queue(pipe: Any, member: str) -> None:
        pipe.hgetall(_meta_key(namespace, member))

    return queue


def _exists_of(namespace: str) -> Queue:
    def queue(pipe: Any, member: str) -> None:
        pipe.exists(_meta_key(namespace, member))

    return queue


def _readable(member: str, meta: Any) -> str:
    """The session id of a listed index entry whose meta hash could be read, else
    :class:`CorruptLogError`."""
    session_id = keys.session_of_member(member)
    if session_id is None:
        raise CorruptLogError(member, "the index entry is not an escaped session id")
    if isinstance(meta, Exception):
        raise CorruptLogError(session_id, f"the meta hash cannot be read: {meta}")
    return session_id


def decode_listing(namespace: str, listing: Listing) -> list[SessionHeader]:
    """The headers of a listing of the sessions index. A session whose meta hash is
    damaged (not a hash, a malformed field) or of another format version is skipped and
    logged: it never hides the others."""
    headers: list[SessionHeader] = []
    for member, meta in listing.found:
        session_id = keys.session_of_member(member)
        try:
            headers.append(decode_header(_readable(member, meta), meta, check_version=True))
        except (CorruptLogError, UnsupportedVersionError) as exc:
            log.warning("events.list() skipped session %r of namespace %r: %s",
                        session_id or member, namespace, exc)  # fmt: skip
    return headers


def _busy(owner_reply: Any, owner: str | None) -> bool:
    """Whether the ``HGET lease owner`` reply names an owner other than ``owner``."""
    # Compared as bytes: a damaged owner need not be UTF-8.
    return owner_reply is not None and (owner is None or bytes(owner_reply) != owner.encode())


def decode_infos(
    namespace: str, listing: Listing, leases: list[Any], expiries: list[Any]
) -> list[SessionInfo]:
    """The :class:`SessionInfo` of each session of a listing, given the ``EXISTS`` of
    each one's lease and the ``PEXPIRETIME`` of its meta hash; a damaged session is
    skipped and logged, as by ``list``."""
    found: list[SessionInfo] = []
    for (member, meta), lease, expiry in zip(listing.found, leases, expiries, strict=True):
        session_id = keys.session_of_member(member)
        try:
            listed = _readable(member, meta)
            where = keys.log_keys(namespace, listed)[0]
            found.append(decode_info(listed, meta, bool(lease), where, expiry))
        except (CorruptLogError, UnsupportedVersionError, SessionNotFoundError) as exc:
            log.warning("events.list_info() skipped session %r of namespace %r: %s",
                        session_id or member, namespace, exc)  # fmt: skip
    return found


def _lease_keys(namespace: str, listing: Listing) -> list[str]:
    return [
        keys.log_lease_key(namespace, keys.session_of_member(member) or member)
        for member, _ in listing.found
    ]


def xread_args(stream: str, from_seq: int, timeout: float, guard: ErrorBoundary) -> list[Any]:
    """``XREAD BLOCK`` for the first entry after ``from_seq - 1``, blocking at most
    ``timeout`` and always less than the socket timeout, so the read never times out."""
    block_ms = max(1, int(min(timeout, guard.timeout * 0.8) * 1000))
    return ["XREAD", "COUNT", 1, "BLOCK", block_ms, "STREAMS", stream, restore_id(from_seq)]


# The operations, written once --------------------------------------------------------------


class LogOps:
    """Every event-log operation as :data:`~sessionstore.drive.Steps` on a client (sync or
    async). :class:`~.events.RedisEvents` and :class:`~.events.AsyncRedisEvents` run
    them."""

    def __init__(
        self, namespace: str, boundary: ErrorBoundary, durability: DurabilityChoice
    ) -> None:
        self._namespace = namespace
        self._guard = boundary
        self._durability = durability
        self._check = ServerCheck(durability.current, boundary.display_url)
        self._wait_ms = wait_ms(boundary.timeout)

    def _server_check(self) -> ServerCheck:
        """The check of the store's durability (settled at first use on a Sentinel URL)."""
        current = self._durability.current
        if self._check.mode != current.mode:
            self._check = ServerCheck(current, self._guard.display_url)
        return self._check

    def _keys(self, session_id: str) -> tuple[str, str]:
        return keys.log_keys(self._namespace, session_id)

    def _all_keys(self, session_id: str) -> list[str]:
        """Meta hash, stream and digest hash: the keys a session's data lives in."""
        return [*self._keys(session_id), keys.log_digest_key(self._namespace, session_id)]

    def _lease(self, session_id: str) -> str:
        return keys.log_lease_key(self._namespace, session_id)

    def _epoch(self, session_id: str) -> str:
        return keys.log_epoch_key(self._namespace, session_id)

    def _lease_keys(self, session_id: str) -> list[str]:
        """KEYS of the ``lease_*.lua`` scripts: the lease hash and the epoch key."""
        return [self._lease(session_id), self._epoch(session_id)]

    def check_durable(self, client: Any) -> Steps[None]:
        """Before the first write: the durability check (see the module doc). Every
        server is asked, a refusal counting as None; then the replies are judged."""
        check = self._server_check()
        if not check.pending:
            return
        replies: dict[str, Any] = {}
        for name, node in _servers(client, self._guard.display_url):
            with self._guard(check.question, None if node is None else name):
                try:
                    replies[name] = yield functools.partial(_ask, client, check, node)
                except ResponseError as exc:
                    if not refused(exc):
                        raise
                    replies[name] = None
        check.judge(replies)

    def exists(self, client: Any, session_id: str) -> Steps[bool]:
        meta, _ = self._keys(session_id)
        with self._guard("EXISTS", meta):
            return bool((yield functools.partial(client.exists, meta)))

    def wait_for_events(
        self, client: Any, session_id: str, from_seq: int, timeout: float
    ) -> Steps[None]:
        """``XREAD BLOCK`` on the session's stream for an entry at or past ``from_seq``."""
        _, stream = self._keys(session_id)
        command = xread_args(stream, from_seq, timeout, self._guard)
        with self._guard("XREAD", stream):
            yield functools.partial(client.execute_command, *command)

    def append(
        self,
        client: Any,
        session_id: str,
        batch: EventBatch,
        header: SessionHeader | None,
        ttl_ms: int | None,
        lease: Lease | None,
    ) -> Steps[int]:
        yield from self.check_durable(client)
        # The epoch key only for a writer's append: a plain one does not look at it, and
        # a key that does not exist would make Redis refuse the call (TRYAGAIN) while the
        # session's slot migrates.
        fence = [] if lease is None else [self._epoch(session_id)]
        names = [*self._all_keys(session_id), *fence]
        args = append_args(batch, header, ttl_ms, None if lease is None else lease.epoch)
        # Only an append that may materialise the session (it carries the header, and
        # its batch starts at seq 0: a log not stored takes no other) can create data,
        # so only it adds the index entry first.
        materialises = header is not None and batch.events[0].seq == 0
        first = session_entry(self._namespace, session_id) if materialises else None
        replicas = self._durability.replicas
        problem = ""
        for attempt in range(TAIL_ATTEMPTS + 1):
            with self._guard("log_append.lua", names[0]):
                if replicas:
                    reply, acks = yield from scripts.run_then_wait_steps(
                        client, "log_append", names, args, replicas, self._wait_ms, first
                    )
                else:
                    reply = yield from scripts.run_steps(client, "log_append", names, args, first)
            if text(reply[0]) != "TAIL":
                break
            # A torn tail, which the script leaves to the caller: cut, then send again
            # (found cut by another meanwhile, or the log moved on: sent again too).
            tail_from, length, held = (int(part) for part in reply[1:4])
            if attempt == TAIL_ATTEMPTS:
                raise CorruptLogError(
                    session_id,
                    f"the stream holds {length} entries where the meta hash counts {held}"
                    f" before next_seq {tail_from}"
                    + (f": {problem}" if problem else ", and no torn tail past it to cut"),
                )
            problem = yield from self._cut_torn_tail(client, session_id, tail_from)
        next_seq = decode_append(session_id, batch, reply)
        if replicas:
            check_acks(
                self._durability.current,
                acks,
                session_id,
                next_seq,
                self._guard.display_url,
                self._wait_ms,
            )
        return next_seq

    def read(
        self,
        client: Any,
        session_id: str,
        from_seq: int,
        repair: bool,
        limit: int | None,
        records: bool = False,
    ) -> Steps[tuple[SessionHeader, list[Any]]]:
        """:meth:`~sessionstore.contracts.EventBackend.read`, or with ``records``
        :meth:`~sessionstore.contracts.EventBackend.read_records`."""
        meta, stream = self._keys(session_id)
        for attempt in range(READ_ATTEMPTS):
            plan = LogRead(session_id, from_seq, limit, records, where=meta)
            try:
                yield from self._fetch(client, plan, meta, stream)
            except CorruptLogError:
                with self._guard("HGETALL", meta):
                    again = yield functools.partial(client.hgetall, meta)
                if plan.same_meta(again) or attempt == READ_ATTEMPTS - 1:
                    raise
                continue
            if repair:
                yield from self._cut_tail(client, plan, meta, stream)
            return plan.result()
        raise AssertionError("unreachable")

    def _fetch(self, client: Any, plan: LogRead, meta: str, stream: str) -> Steps[None]:
        with self._guard("HGETALL+XRANGE", meta):
            pipe = client.pipeline(transaction=False)
            pipe.hgetall(meta)
            pipe.xrange(stream, *plan.first_range())
            found, entries = yield pipe.execute
        plan.take_meta(found)
        plan.take(entries)
        while not plan.done:
            with self._guard("XRANGE", stream):
                entries = yield functools.partial(client.xrange, stream, *plan.next_range())
            plan.take(entries)

    def _cut_tail(self, client: Any, plan: LogRead, meta: str, stream: str) -> Steps[None]:
        if plan.tail_unknown:
            with self._guard("XRANGE", stream):
                plan.tail = bool(
                    (yield functools.partial(client.xrange, stream, *plan.tail_probe()))
                )
        if plan.tail:
            yield from self.check_durable(client)
            problem = yield from self._cut_torn_tail(client, plan.session_id, plan.next_seq)
            if problem:
                raise CorruptLogError(plan.session_id, problem)

    def _cut_torn_tail(self, client: Any, session_id: str, next_seq: int) -> Steps[str]:
        """Cut the entries that end at or past ``next_seq``: this client reads their ids
        (``XRANGE``, :data:`TAIL_CUT` a round) and ``log_cut_tail.lua`` deletes those,
        once it finds ``next_seq`` unchanged (the script never reads an entry; a log
        that moved on meanwhile is left to the caller's next call). Returns "", or what
        was found that is no tail: an entry that starts before ``next_seq`` and ends
        past it, never cut (damage, unless the log moved on since ``next_seq`` was
        read: the caller tells)."""
        meta, stream = self._keys(session_id)
        while True:
            with self._guard("XRANGE", stream):
                tail = yield functools.partial(
                    client.xrange, stream, stream_id(next_seq, 0), "+", TAIL_CUT
                )
            if not tail:
                return ""
            ids = [text(entry_id) for entry_id, _ in tail]
            for entry_id in ids:
                if entry_start(entry_id) < next_seq:
                    return f"stream entry {entry_id} spans next_seq {next_seq}"
            args = [str(next_seq), restore_id(next_seq), *ids]
            with self._guard("log_cut_tail.lua", meta):
                reply = yield from scripts.run_steps(client, "log_cut_tail", [meta, stream], args)
            if text(reply[0]) != "OK" or len(tail) < TAIL_CUT:
                return ""

    def acquire_lease(self, client: Any, session_id: str, owner: str, ttl_ms: int) -> Steps[int]:
        names = self._lease_keys(session_id)
        with self._guard("lease_acquire.lua", names[0]):
            reply = yield from scripts.run_steps(client, "lease_acquire", names, [owner, ttl_ms])
        return taken(int(reply[0]), reply[1] == 1) if reply else 0

    def renew_lease(self, client: Any, session_id: str, lease: Lease, ttl_ms: int) -> Steps[bool]:
        names = self._lease_keys(session_id)
        with self._guard("lease_renew.lua", names[0]):
            return bool(
                (yield from scripts.run_steps(client, "lease_renew", names, [*lease, ttl_ms]))
            )

    def renew_leases(
        self, client: Any, leases: Sequence[tuple[str, Lease, int]]
    ) -> Steps[list[bool]]:
        """:meth:`renew_lease` of each (session id, lease, ttl ms), in one pipeline on a
        single server (one round trip for them all); a lease whose call met an error
        reply (the library not loaded yet, say) is renewed again alone, by
        :meth:`renew_lease`, which deals with it. On a cluster, where the leases live
        on several nodes, each is renewed alone."""
        if is_cluster(client) or len(leases) < 2:
            found = []
            for session_id, lease, ttl_ms in leases:
                found.append((yield from self.renew_lease(client, session_id, lease, ttl_ms)))
            return found
        commands: list[scripts.Command] = [
            scripts.call_command(client, "lease_renew", self._lease_keys(sid), [*lease, ttl])
            for sid, lease, ttl in leases
        ]
        with self._guard("lease_renew.lua", self._lease(leases[0][0])):
            replies = yield functools.partial(scripts.client_batch(client), commands)
        renewed = []
        for (session_id, lease, ttl_ms), reply in zip(leases, replies, strict=True):
            if isinstance(reply, Exception):
                reply = yield from self.renew_lease(client, session_id, lease, ttl_ms)
            renewed.append(bool(reply))
        return renewed

    def release_lease(self, client: Any, session_id: str, owner: str) -> Steps[None]:
        names = self._lease_keys(session_id)
        with self._guard("lease_release.lua", names[0]):
            yield from scripts.run_steps(client, "lease_release", names, [owner])

    def lease_busy(self, client: Any, session_id: str, owner: str | None) -> Steps[bool]:
        lease = self._lease(session_id)
        with self._guard("HGET", lease):
            return _busy((yield functools.partial(client.hget, lease, "owner")), owner)

    def info(self, client: Any, session_id: str) -> Steps[SessionInfo]:
        meta, _ = self._keys(session_id)
        with self._guard("HGETALL+EXISTS+PEXPIRETIME", meta):
            pipe = client.pipeline(transaction=False)
            pipe.hgetall(meta)
            pipe.exists(self._lease(session_id))
            pipe.pexpiretime(meta)
            found, lease, expiry = yield pipe.execute
        return decode_info(session_id, found, bool(lease), meta, expiry)

    def _listing(self, client: Any, queue: Queue) -> Steps[Listing]:
        index = keys.index_keys(self._namespace)[0]
        return (yield from list_steps(client, self._guard, index, queue))

    def list_info(self, client: Any) -> Steps[list[SessionInfo]]:
        listing = yield from self._listing(client, _meta_of(self._namespace))
        leases = _lease_keys(self._namespace, listing)
        replies: list[Any] = []
        if leases:
            with self._guard("EXISTS+PEXPIRETIME", listing.index):
                pipe = client.pipeline(transaction=False)
                for lease, (member, _) in zip(leases, listing.found, strict=True):
                    pipe.exists(lease)
                    pipe.pexpiretime(_meta_key(self._namespace, member))
                replies = yield pipe.execute
        return decode_infos(self._namespace, listing, replies[0::2], replies[1::2])

    def list(self, client: Any) -> Steps[list[SessionHeader]]:
        listing = yield from self._listing(client, _meta_of(self._namespace))
        return decode_listing(self._namespace, listing)

    def delete(self, client: Any, session_id: str, last: SessionEvent | None = None) -> Steps[None]:
        """Delete the log; with ``last``, only if it still ends with that event (told by
        its digest: see ``log_delete.lua``)."""
        yield from self.check_durable(client)
        names = self._all_keys(session_id)
        args: list[Any] = []
        if last is not None:
            args = [str(last.seq + 1), event_digests([event_text(last)])]
        with self._guard("log_delete.lua", names[0]):
            reply = yield from scripts.run_steps(client, "log_delete", names, args)
        if isinstance(reply, list) and last is not None:  # {"CONFLICT", next_seq}
            found = whole_count(reply[1])
            raise not_ending_with(session_id, last, -1 if found is None else found)
        if text(reply) == "NOTFOUND":
            raise SessionNotFoundError(session_id)

    def stored_bytes(self, client: Any, session_id: str) -> Steps[int]:
        """The ``bytes`` field of the meta hash while its ``bytes_to`` is ``next_seq``
        (see :mod:`.logformat`); else (a log materialised before it was counted, appended
        to by a client of an older version since, or whose count is damaged)
        :func:`estimated_bytes` of its first and last :data:`SAMPLE_ENTRIES` entries
        below ``next_seq`` (two reads, whatever its size). A size is never refused for
        damage: a damaged ``next_seq`` or ``entries`` is measured as the stream is."""
        meta, stream = self._keys(session_id)
        with self._guard("HMGET", meta):
            counted, counted_to, next_seq, entries = yield functools.partial(
                client.hmget, meta, "bytes", "bytes_to", "next_seq", "entries"
            )
        if next_seq is None and counted is None:
            raise SessionNotFoundError(session_id)
        count = whole_count(counted)
        if count is not None and counted_to == next_seq:
            return count
        seqs = whole_count(next_seq)
        held = seqs if entries is None else whole_count(entries)
        end = "+" if seqs is None else restore_id(seqs)
        with self._guard("XRANGE+XREVRANGE+XLEN", stream):
            pipe = client.pipeline(transaction=False)
            pipe.xrange(stream, "-", end, SAMPLE_ENTRIES)
            pipe.xrevrange(stream, end, "-", SAMPLE_ENTRIES)
            pipe.xlen(stream)
            first, last, length = yield pipe.execute
        return estimated_bytes(int(length) if held is None else held, first, last)

    def set_retention(self, client: Any, session_id: str, ttl_ms: int | None) -> Steps[int | None]:
        yield from self.check_durable(client)
        names = self._all_keys(session_id)
        with self._guard("log_expire.lua", names[0]):
            reply = yield from scripts.run_steps(client, "log_expire", names, [ttl_ms or 0])
        if text(reply) == "NOTFOUND":
            raise SessionNotFoundError(session_id)
        return None if int(reply) < 0 else int(reply)

    def prune(self, client: Any) -> Steps[int]:
        """The server expires sessions by itself, their keys together: only the index
        entries of sessions gone are cleared (see :mod:`.index`); returns 0."""
        yield from self._listing(client, _exists_of(self._namespace))
        return 0
