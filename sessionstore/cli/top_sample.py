"""What ``sessionstore top`` reads of a store at one moment (a :class:`Snapshot`), and
what changed between two of them (a :class:`Refresh`).

Everything is read from the store itself, as the namespace's own least-privilege user
may read it (:mod:`sessionstore.redis.acl`): no agent runs in the workers and nothing is
written. Rates are differences of two snapshots, so they count what was stored, never
what was tried:

- **events** of a session: its committed ``next_seq`` (Redis: the ``next_seq`` field
  of its meta hash; files and SQLite: ``events.info``), exact;
- **value writes** (Redis only): every value write of a store takes a writer slot
  whose number counts that store's writes up by one, and the value's ``seq`` hash
  keeps the slot's latest applied number (see :mod:`sessionstore.keys`). The largest
  number of each slot across the sampled values, compared with the previous snapshot's,
  is how many writes that slot applied in between: exact for a slot seen before (when
  its writes land in sampled values), and counted as one write per value it wrote when
  the slot is new (a writer that started, or was not seen, before);
- **leases held**: the writer leases of the sampled sessions (compute leases cannot be
  found without ``SCAN``);
- **bytes**: what the sampled sessions and values take (Redis: a session's event text
  as its appends counted it, as ``sessions list`` shows it, none for a log without a
  count up to its ``next_seq``; a plain value's payload, ``HSTRLEN``; none for a history,
  whose versions are not read; files and SQLite: ``events.stored_bytes``);
- **server** (Redis only): clients connected, memory used and commands processed,
  server-wide (``INFO persistence clients memory stats``, which the user may read,
  see :mod:`sessionstore.redis.acl`; left out when refused).

Work per snapshot is bounded: at most ``cap`` sessions and ``cap`` values are read, on
Redis those most recently added to or refreshed in the namespace's index (a session or
value written continuously is refreshed at least every five minutes, see
:mod:`sessionstore.redis.index`); how many of how many is part of every snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import sessionstore

from .. import keys
from ..connection import REDIS_SCHEMES, scheme_of
from ..errors import InvalidArgumentError

#: A seq hash with more fields than this was not made by the library (it keeps about
#: 64): its records are not read.
SEQ_READ_LIMIT = 256


@dataclass(frozen=True, slots=True)
class SessionState:
    """One sampled session: its committed events, whether a writer holds its lease, and
    its size in bytes (None: unknown)."""

    next_seq: int
    busy: bool
    size: int | None


@dataclass(frozen=True, slots=True)
class ValueState:
    """One sampled value: plain or history, the record of each writer slot that wrote it
    (``slot -> "<n>:<s>:<window>..."``), its size in bytes (None: unknown)."""

    history: bool
    records: dict[str, str]
    size: int | None


@dataclass(frozen=True, slots=True)
class Server:
    """Server-wide counters (Redis ``INFO``); None where the user may not read them."""

    clients: int | None = None
    memory: int | None = None
    commands: int | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one look at the namespace found (``taken``: ``time.monotonic()``)."""

    taken: float
    sessions_total: int
    sessions: dict[str, SessionState]
    #: None: values are not observed on this store (their count may still be known).
    values: dict[str, ValueState] | None
    values_total: int | None
    server: Server = field(default_factory=Server)


class Sampler(Protocol):
    """Takes snapshots of one namespace."""

    def sample(self) -> Snapshot: ...

    def close(self) -> None: ...


def open_sampler(url: str, namespace: str, cap: int) -> Sampler:
    """The sampler for the store ``url`` names: Redis (sessions, values, server) or a
    file or SQLite store (sessions). A memory or dummy store lives in one process: there
    is nothing another process could watch, so it raises :class:`InvalidArgumentError`."""
    scheme = scheme_of(url)
    if scheme in REDIS_SCHEMES:
        return RedisSampler(url, namespace, cap)
    if scheme in ("memory", "dummy"):
        raise InvalidArgumentError(
            f"a {scheme}:// store lives inside the one process that opened it: top watches "
            "a Redis, SQLite or file store that other processes write"
        )
    return LocalSampler(url, namespace, cap)


class LocalSampler:
    """Files and SQLite, through the public API: the newest ``cap`` sessions by creation
    (their ``info`` and ``stored_bytes``) and the number of values. The listings
    (``events.list``, ``list_values``) are read whole: the public API has no bounded
    one. Value writes leave no counter there: values per second are not observed."""

    def __init__(self, url: str, namespace: str, cap: int) -> None:
        self._store = sessionstore.connect(url, namespace)
        self._cap = cap

    def sample(self) -> Snapshot:
        events = self._store.events
        headers = events.list()
        sessions = {}
        for header in headers[-self._cap :]:
            try:
                info = events.info(header.id)
                size: int | None = events.stored_bytes(header.id)
            except sessionstore.SessionNotFoundError:
                continue  # deleted since the listing
            sessions[header.id] = SessionState(info.next_seq, info.busy, size)
        values_total = len(self._store.list_values())
        return Snapshot(time.monotonic(), len(headers), sessions, None, values_total)

    def close(self) -> None:
        self._store.close()


class RedisSampler:
    """Redis, Sentinel and Cluster, with the least-privilege user's commands: the
    namespace's index (``ZCARD``, ``ZREVRANGEBYSCORE ... LIMIT``), then one pipeline of
    ``HMGET``, ``EXISTS``, ``HLEN`` and ``HSTRLEN`` for what it sampled, one of
    ``HGETALL`` for the values' seq hashes, and one ``INFO``: a fixed few steps of
    server work for each key sampled."""

    def __init__(self, url: str, namespace: str, cap: int) -> None:
        from ..redis.boundary import ErrorBoundary
        from ..redis.client import SyncClient
        from ..redis.firstuse import Topology
        from ..redis.options import parse_options

        options = parse_options(url, None, None)
        self._guard = ErrorBoundary(options.display_url, options.timeout)
        topology = Topology(options.cluster, options.durability_choice())
        self._handle = SyncClient(options, topology, self._guard)
        self._namespace = namespace
        self._cap = cap
        self._info_refused = False

    def sample(self) -> Snapshot:
        client = self._handle.get()
        session_index, value_index = keys.index_keys(self._namespace)
        with self._guard("ZCARD+ZREVRANGEBYSCORE", session_index):
            pipe = client.pipeline(transaction=False)
            for index in (session_index, value_index):
                pipe.zcard(index)
                pipe.zrevrangebyscore(index, "+inf", "-inf", start=0, num=self._cap)
            sessions_total, session_members, values_total, value_members = pipe.execute()
        ids = [_text(member) for member in session_members]
        session_ids = [found for found in map(keys.session_of_member, ids) if found is not None]
        found_values = [keys.value_of_member(_text(m), self._namespace) for m in value_members]
        value_keys = [found for found in found_values if found is not None]
        sessions = self._sessions(client, session_ids)
        values = self._values(client, value_keys)
        return Snapshot(
            time.monotonic(),
            int(sessions_total),
            sessions,
            values,
            int(values_total),
            self._server(client),
        )

    def _sessions(self, client: Any, session_ids: list[str]) -> dict[str, SessionState]:
        if not session_ids:
            return {}
        with self._guard("HMGET+EXISTS", "the sampled sessions"):
            pipe = client.pipeline(transaction=False)
            for session_id in session_ids:
                meta, _ = keys.log_keys(self._namespace, session_id)
                pipe.hmget(meta, "next_seq", "bytes", "bytes_to")
                pipe.exists(keys.log_lease_key(self._namespace, session_id))
            replies = iter(pipe.execute())
        sessions = {}
        for session_id in session_ids:
            (next_seq, counted, counted_to), lease = next(replies), next(replies)
            if next_seq is not None or lease:  # else not written yet, or gone
                size = _count(counted) if counted_to == next_seq else None
                sessions[session_id] = SessionState(int(next_seq or 0), bool(lease), size)
        return sessions

    def _values(
        self, client: Any, value_keys: list[tuple[keys.ValueKey, bool]]
    ) -> dict[str, ValueState]:
        if not value_keys:
            return {}
        with self._guard("HLEN+HSTRLEN", "the sampled values"):
            pipe = client.pipeline(transaction=False)
            for key, history in value_keys:
                pipe.hlen(keys.seq_key(key))
                if not history:
                    pipe.hstrlen(keys.value_key(key), "v")
            replies = iter(pipe.execute())
            lengths: list[int] = []
            sizes: list[int | None] = []
            for _, history in value_keys:
                lengths.append(int(next(replies)))
                sizes.append(None if history else int(next(replies)) or None)
        readable = [
            (index, keys.seq_key(key))
            for index, (key, _) in enumerate(value_keys)
            if 0 < lengths[index] <= SEQ_READ_LIMIT
        ]
        records: dict[int, dict[str, str]] = {}
        if readable:
            with self._guard("HGETALL", "the sampled values' seq hashes"):
                pipe = client.pipeline(transaction=False)
                for _, name in readable:
                    pipe.hgetall(name)
                for (index, _), found in zip(readable, pipe.execute(), strict=True):
                    records[index] = {_text(slot): _text(record) for slot, record in found.items()}
        return {
            key.label(): ValueState(history, records.get(index, {}), sizes[index])
            for index, (key, history) in enumerate(value_keys)
        }

    def _server(self, client: Any) -> Server:
        """Clients, memory and commands of every primary, summed; an empty
        :class:`Server` once the user was refused ``INFO``."""
        if self._info_refused:
            return Server()
        nodes = client.get_primaries() if hasattr(client, "get_primaries") else [None]
        clients = memory = commands = 0
        for node in nodes:
            target = {} if node is None else {"target_nodes": node}
            try:
                with self._guard("INFO", None):
                    info = client.info("persistence", "clients", "memory", "stats", **target)
            except sessionstore.AccessDeniedError:
                self._info_refused = True
                return Server()
            except sessionstore.StoreUnavailableError:
                raise
            except sessionstore.SessionStoreError:  # an INFO of one section only (Redis 6)
                return Server()
            clients += int(info.get("connected_clients", 0))
            memory += int(info.get("used_memory", 0))
            commands += int(info.get("total_commands_processed", 0))
        return Server(clients, memory, commands)

    def close(self) -> None:
        self._handle.close()


def _text(reply: Any) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


def _count(raw: Any) -> int | None:
    """A session's byte count as its meta hash holds it; None when it holds none, or
    one that is not a whole number from 0."""
    from ..redis.stored_numbers import stored_int  # the Redis package only for Redis

    found = stored_int(raw)
    return found if found is not None and found >= 0 else None


@dataclass(frozen=True, slots=True)
class SessionRate:
    """One session between two snapshots."""

    id: str
    events: int
    next_seq: int
    busy: bool
    size: int | None


@dataclass(frozen=True, slots=True)
class ValueRate:
    """One value between two snapshots: the writes seen (at least; see the module doc)."""

    key: str
    history: bool
    writes: int
    size: int | None


@dataclass(frozen=True, slots=True)
class Refresh:
    """What changed between two snapshots of one namespace."""

    seconds: float
    sessions_total: int
    sessions_sampled: int
    values_total: int | None
    values_sampled: int | None
    events: int
    #: None where value writes are not observed (files, SQLite).
    value_writes: int | None
    leases: int
    size: int
    server: Server
    commands: int | None
    sessions: list[SessionRate]
    values: list[ValueRate]

    def per_second(self, count: int | None) -> float | None:
        return None if count is None else count / self.seconds if self.seconds > 0 else 0.0


def compare(before: Snapshot, after: Snapshot) -> Refresh:
    """The :class:`Refresh` from ``before`` to ``after`` (see the module doc for what is
    exact and what is a lower bound)."""
    sessions = []
    for session_id, state in after.sessions.items():
        earlier = before.sessions.get(session_id)
        # A session sampled for the first time: its events are not counted (it may be old).
        events = 0 if earlier is None else max(0, state.next_seq - earlier.next_seq)
        sessions.append(SessionRate(session_id, events, state.next_seq, state.busy, state.size))
    sessions.sort(key=lambda rate: (-rate.events, rate.id))
    values: list[ValueRate] = []
    value_writes = None
    if after.values is not None:
        values, value_writes = _value_writes(before.values or {}, after.values)
    size = sum(rate.size or 0 for rate in sessions) + sum(rate.size or 0 for rate in values)
    commands = None
    if after.server.commands is not None and before.server.commands is not None:
        commands = max(0, after.server.commands - before.server.commands)
    return Refresh(
        seconds=after.taken - before.taken,
        sessions_total=after.sessions_total,
        sessions_sampled=len(after.sessions),
        values_total=after.values_total,
        values_sampled=None if after.values is None else len(after.values),
        events=sum(rate.events for rate in sessions),
        value_writes=value_writes,
        leases=sum(rate.busy for rate in sessions),
        size=size,
        server=after.server,
        commands=commands,
        sessions=sessions,
        values=values,
    )


def _value_writes(
    before: dict[str, ValueState], after: dict[str, ValueState]
) -> tuple[list[ValueRate], int]:
    """(each value's writes seen, the namespace's value writes) from the slots' numbers."""
    old_top, new_top = _slot_numbers(before), _slot_numbers(after)
    rates = []
    first_seen: dict[str, int] = {}
    for label, state in after.items():
        earlier = before.get(label)
        changed = [
            slot
            for slot, record in state.records.items()
            if earlier is None or earlier.records.get(slot) != record
        ]
        if earlier is None:
            changed = []  # a value sampled for the first time: its records may be old
        for slot in changed:
            if slot not in old_top:
                first_seen[slot] = first_seen.get(slot, 0) + 1
        rates.append(ValueRate(label, state.history, len(changed), state.size))
    rates.sort(key=lambda rate: (-rate.writes, rate.key))
    total = sum(
        max(0, number - old_top[slot]) for slot, number in new_top.items() if slot in old_top
    )
    return rates, total + sum(first_seen.values())


def _slot_numbers(values: dict[str, ValueState]) -> dict[str, int]:
    """Each writer slot's largest number among ``values``' records."""
    top: dict[str, int] = {}
    for state in values.values():
        for slot, record in state.records.items():
            number = _number(record)
            if number is not None and number > top.get(slot, -1):
                top[slot] = number
    return top


def _number(record: str) -> int | None:
    head = record.partition(":")[0]
    return int(head) if head.isdigit() else None


def snapshots(sampler: Sampler, interval: float) -> Iterator[Refresh]:
    """A :class:`Refresh` every ``interval`` seconds (the first one ``interval`` after
    the first snapshot), for as long as the caller iterates."""
    before = sampler.sample()
    while True:
        time.sleep(max(0.0, interval - (time.monotonic() - before.taken)))
        after = sampler.sample()
        yield compare(before, after)
        before = after
