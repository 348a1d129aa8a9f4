"""What an acknowledged event-log append means on Redis, and how it is verified.

=================  ========================================================================
durability         meaning
=================  ========================================================================
``fsync``          (default; on a ``redis+sentinel://`` URL only for a service without
                   replicas, see :class:`DurabilityChoice`) the server writes every
                   command to its AOF and fsyncs it before replying: checked once, at
                   the first event-log write (append, torn-tail cut, delete), with
                   ``CONFIG GET append*`` (``appendonly yes``, ``appendfsync always``);
                   on a Redis Cluster on every primary.
                   A user that may not run ``CONFIG GET`` (or a server that renamed
                   ``CONFIG``) gets :class:`DurabilityError` at that first write
``aof``            the server runs with AOF on and its last AOF write succeeded: checked
                   once, at the first event-log write, with ``INFO persistence``
                   (``aof_enabled:1``, ``aof_last_write_status:ok``), on every primary
                   of a cluster. The fsync policy (``appendfsync always``) is trusted:
                   an operator confirms it once with ``sessionstore doctor`` as an admin.
                   For users that may not run ``CONFIG``
``replicas:N``     each append, and each value write, is followed by ``WAIT N`` on the
                   same connection (on a cluster: to the primary serving the key's
                   slot, and the namespace index entry a creating write adds by a
                   ``WAIT`` of its own on the index's node): N replicas acknowledged
                   it. Fewer raise :class:`NotReplicatedError` (a
                   ``StoreUnavailableError``: applied on the primary). The default
                   on a ``redis+sentinel://`` URL whose service has replicas is
                   ``replicas:1``
``none``           no check: an acknowledged append may be lost in a crash
=================  ========================================================================

Reads never check: reading a log needs no promise about future crashes (so an operator
can list and read sessions on any server). The server checks (``fsync``, ``aof``) are
made for event logs only: values are cheap to recompute, logs are not; ``replicas:N``
waits for value writes too, so that a failover keeps what was acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import DurabilityError, InvalidArgumentError, NotReplicatedError
from .replies import text

FSYNC = "fsync"
AOF = "aof"
REPLICAS = "replicas"
NONE = "none"
#: The config parameters ``CONFIG GET`` is asked for (one pattern, valid since Redis 2).
CONFIG_PATTERN = "append*"
#: The ``INFO`` section ``durability="aof"`` reads.
INFO_SECTION = "persistence"


@dataclass(frozen=True)
class Durability:
    """A parsed ``durability`` option."""

    mode: str
    replicas: int = 0

    def __str__(self) -> str:
        return f"{REPLICAS}:{self.replicas}" if self.mode == REPLICAS else self.mode


#: The most replicas ``replicas:N`` may ask for (a write waits for N to confirm it).
MAX_REPLICAS = 1000


def parse_durability(value: str | None) -> Durability:
    """``"fsync"`` (also for None), ``"aof"``, ``"none"`` or ``"replicas:N"`` with N a
    whole number in [1, :data:`MAX_REPLICAS`]."""
    if value is None or value == FSYNC:
        return Durability(FSYNC)
    if value in (AOF, NONE):
        return Durability(value)
    if isinstance(value, str) and value.startswith(f"{REPLICAS}:"):
        count = value[len(REPLICAS) + 1 :]
        digits = count.isascii() and count.isdigit() and len(count) <= 6
        if digits and 1 <= int(count) <= MAX_REPLICAS:
            return Durability(REPLICAS, int(count))
    raise InvalidArgumentError(
        f"durability must be 'fsync', 'aof', 'none' or 'replicas:N' (N from 1 to"
        f" {MAX_REPLICAS}), not {value!r:.60}"
    )


#: The durability of a ``redis+sentinel://`` URL that names none, when the service has
#: replicas: a failover promotes a replica, so what only the primary holds is lost.
SENTINEL_DEFAULT = Durability(REPLICAS, 1)


class DurabilityChoice:
    """The durability of one store, shared by its sync and async clients.

    Given (argument or ``?durability=``), it is fixed. A ``redis+sentinel://`` URL that
    names none gets it at first use (:meth:`settle`): :data:`SENTINEL_DEFAULT` when the
    sentinels list a replica of the service (in any state: one down now is expected
    back), else ``fsync``, as on any other URL. Until then :attr:`current` is ``fsync``.
    """

    def __init__(self, given: Durability | None, sentinel: bool) -> None:
        self.current = given if given is not None else Durability(FSYNC)
        self.pending = given is None and sentinel

    def settle(self, replicas: int) -> None:
        """Fix the default from the number of replicas the sentinels list."""
        if self.pending:
            self.current = SENTINEL_DEFAULT if replicas > 0 else Durability(FSYNC)
            self.pending = False

    @property
    def replicas(self) -> int:
        """N of ``replicas:N``; 0 for the other modes."""
        return self.current.replicas if self.current.mode == REPLICAS else 0


_ALTERNATIVES = (
    "or connect with durability='replicas:N' to rely on N replicas acknowledging each "
    "append, or durability='none' to accept losing the latest events in a crash"
)


class ServerCheck:
    """The once-per-client check, before the first event-log write, that the server
    (every primary of a cluster) gives the durability asked for (``fsync``, ``aof``).

    :attr:`question` says what to ask each server (``"CONFIG GET"`` or ``"INFO"``);
    :meth:`judge` takes the replies. ``pending`` stays True until a check passed; a
    failed or impossible check raises again on the next write, so fixing the server (or
    the user's rights) is enough.
    """

    def __init__(self, durability: Durability, display_url: str) -> None:
        self.mode = durability.mode
        self.pending = durability.mode in (FSYNC, AOF)
        self.display_url = display_url

    @property
    def question(self) -> str:
        return "CONFIG GET" if self.mode == FSYNC else "INFO"

    def judge(self, replies: Mapping[str, Mapping[Any, Any] | None]) -> None:
        """Judge the replies (``CONFIG GET append*`` or ``INFO persistence``), by server
        (its address, or the display URL for a single server); None where the command
        was refused (not permitted, or renamed away).

        Raises :class:`DurabilityError` naming the first server that fails.
        """
        for server, reply in replies.items():
            if reply is None:
                raise self._refused(server)
            if self.mode == FSYNC:
                _judge_config(server, reply)
            else:
                _judge_info(server, reply)
        self.pending = False

    def _refused(self, server: str) -> DurabilityError:
        if self.mode == FSYNC:
            return DurabilityError(
                f"durability='fsync' could not be checked: the Redis server at {server} "
                "does not let this user run CONFIG GET (or CONFIG is renamed), so "
                "sessionstore cannot verify 'appendonly yes' and 'appendfsync always'. "
                "Have an admin confirm the server's settings once with `sessionstore "
                "doctor` and connect with durability='aof' (checked through INFO "
                "persistence)",
                hint="add ?durability=aof to the URL (sessionstore then checks the server "
                "through INFO persistence, which this user may run)",
            )
        return DurabilityError(
            f"durability='aof' could not be checked: the Redis server at {server} does not "
            "let this user run INFO persistence; grant it '+info|persistence' (the line "
            f"`sessionstore acl` prints does), {_ALTERNATIVES}"
        )


def _judge_config(server: str, config: Mapping[Any, Any]) -> None:
    settings = {text(name).lower(): text(value).lower() for name, value in config.items()}
    appendonly = settings.get("appendonly", "unknown")
    appendfsync = settings.get("appendfsync", "unknown")
    if appendonly != "yes" or appendfsync != "always":
        raise DurabilityError(
            f"the Redis server at {server} runs with appendonly {appendonly} "
            f"and appendfsync {appendfsync}, so an acknowledged event could be lost in a "
            "crash. Durable event logs need 'appendonly yes' and 'appendfsync always' "
            "(in redis.conf, or CONFIG SET appendonly yes / CONFIG SET appendfsync "
            f"always); {_ALTERNATIVES}"
        )


def _judge_info(server: str, info: Mapping[Any, Any]) -> None:
    fields = {text(name): text(value).lower() for name, value in info.items()}
    enabled = fields.get("aof_enabled", "unknown")
    status = fields.get("aof_last_write_status", "unknown")
    if enabled != "1":
        raise DurabilityError(
            f"the Redis server at {server} runs with AOF off (aof_enabled:{enabled}), so an "
            "acknowledged event could be lost in a crash (durability='aof'). Durable event "
            "logs need 'appendonly yes' and 'appendfsync always' (in redis.conf, or ask an "
            f"admin); {_ALTERNATIVES}"
        )
    if status != "ok":
        raise DurabilityError(
            f"the Redis server at {server} failed its last AOF write "
            f"(aof_last_write_status:{status}): it cannot make an append durable now "
            f"(durability='aof'); fix the server's disk, {_ALTERNATIVES}"
        )


def wait_ms(timeout: float) -> int:
    """How long ``WAIT`` may block: well within the socket timeout of the same call."""
    return max(1, int(timeout * 1000 * 0.8))


class Acks(int):
    """A ``WAIT`` reply (how many replicas acknowledged) and the primary that gave it
    (``host:port``), for :func:`check_acks` to name."""

    node: str

    def __new__(cls, count: int, node: str) -> Acks:
        made = super().__new__(cls, count)
        made.node = node
        return made


def check_acks(
    durability: Durability,
    acks: int,
    session_id: str,
    next_seq: int,
    display_url: str,
    waited_ms: int,
) -> None:
    """Raise :class:`NotReplicatedError` when fewer replicas than asked acknowledged an append.

    It names the primary that ran the ``WAIT``: on a cluster the node serving the
    session's slot (``acks`` is an :class:`Acks`), else ``display_url``."""
    if acks < durability.replicas:
        primary = acks.node if isinstance(acks, Acks) else display_url
        raise NotReplicatedError(
            f"session {session_id!r}: the batch ending before seq {next_seq} is applied on "
            f"the primary at {primary} but only {acks} of {durability.replicas} "
            f"replica(s) confirmed it within {waited_ms} ms (durability="
            f"'{durability}'); it may or may not survive a failover: append the same "
            "batch again (an applied replay) to wait for the replicas again"
        )


def check_value_acks(replicas: int, acks: int, key: str, display_url: str, waited_ms: int) -> None:
    """Raise :class:`NotReplicatedError` when fewer than ``replicas`` replicas acknowledged
    the write of ``key`` (a value, or an index entry): applied on the primary; calling it
    again is safe."""
    if acks < replicas:
        primary = acks.node if isinstance(acks, Acks) else display_url
        raise NotReplicatedError(
            f"the write of {key} is applied on the primary at {primary} but only {acks} of "
            f"{replicas} replica(s) confirmed it within {waited_ms} ms (durability="
            f"'replicas:{replicas}'); it may or may not survive a failover: calling again "
            "is safe"
        )
