"""What an acknowledged event-log append means on Redis, and how it is verified.

=================  ========================================================================
durability         meaning
=================  ========================================================================
``fsync``          (default) the server writes every command to its AOF and fsyncs it
                   before replying: checked once, at the first event-log write (append,
                   torn-tail cut, delete), with ``CONFIG GET append*`` (``appendonly
                   yes``, ``appendfsync always``); on a Redis Cluster on every primary
``replicas:N``     each append is followed by ``WAIT N`` on the same connection (on a
                   cluster: to the primary serving the session's slot): N replicas
                   acknowledged it
``none``           no check: an acknowledged append may be lost in a crash
=================  ========================================================================

Reads never check: reading a log needs no promise about future crashes (so an operator
can list and read sessions on any server). Session values are never checked: they are
cheap to recompute, logs are not.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import DurabilityError, InvalidArgumentError

FSYNC = "fsync"
REPLICAS = "replicas"
NONE = "none"
#: The config parameters ``CONFIG GET`` is asked for (one pattern, valid since Redis 2).
CONFIG_PATTERN = "append*"


@dataclass(frozen=True)
class Durability:
    """A parsed ``durability`` option."""

    mode: str
    replicas: int = 0

    def __str__(self) -> str:
        return f"{REPLICAS}:{self.replicas}" if self.mode == REPLICAS else self.mode


def parse_durability(value: str | None) -> Durability:
    """``"fsync"`` (also for None), ``"none"`` or ``"replicas:N"`` with N >= 1."""
    if value is None or value == FSYNC:
        return Durability(FSYNC)
    if value == NONE:
        return Durability(NONE)
    if isinstance(value, str) and value.startswith(f"{REPLICAS}:"):
        count = value[len(REPLICAS) + 1 :]
        if count.isdigit() and int(count) >= 1:
            return Durability(REPLICAS, int(count))
    raise InvalidArgumentError(
        f"durability must be 'fsync', 'none' or 'replicas:N' (N >= 1), not {value!r:.60}"
    )


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class FsyncCheck:
    """The once-per-client check that the server (every primary of a cluster) fsyncs every
    write (``durability="fsync"``).

    ``pending`` stays True until a check passed or could not be made for lack of
    permission; a failed check raises again on the next call, so fixing the server
    configuration is enough.
    """

    def __init__(self, durability: Durability, display_url: str) -> None:
        self.pending = durability.mode == FSYNC
        self.display_url = display_url

    def judge(self, configs: Mapping[str, Mapping[Any, Any] | None]) -> None:
        """Judge the replies of ``CONFIG GET append*``, by server (its address, or the
        display URL for a single server); None where CONFIG was not permitted.

        Raises :class:`DurabilityError` when a server does not run ``appendonly yes``
        with ``appendfsync always``.
        """
        for server, config in configs.items():
            if config is not None:
                self._judge_one(server, config)
        if any(config is None for config in configs.values()):
            warnings.warn(
                f"the Redis server at {self.display_url} does not let this user run "
                "CONFIG GET, so sessionstore cannot verify that it fsyncs every write "
                "(appendonly yes, appendfsync always); event logs are only as durable as "
                "the server's configuration",
                RuntimeWarning,
                stacklevel=4,
            )
        self.pending = False

    def _judge_one(self, server: str, config: Mapping[Any, Any]) -> None:
        settings = {_text(name).lower(): _text(value).lower() for name, value in config.items()}
        appendonly = settings.get("appendonly", "unknown")
        appendfsync = settings.get("appendfsync", "unknown")
        if appendonly != "yes" or appendfsync != "always":
            raise DurabilityError(
                f"the Redis server at {server} runs with appendonly {appendonly} "
                f"and appendfsync {appendfsync}, so an acknowledged event could be lost in a "
                "crash. Durable event logs need 'appendonly yes' and 'appendfsync always' "
                "(in redis.conf, or CONFIG SET appendonly yes / CONFIG SET appendfsync "
                "always); or connect with durability='replicas:N' to rely on N replicas "
                "acknowledging each append, or durability='none' to accept losing the "
                "latest events in a crash"
            )


def wait_ms(timeout: float) -> int:
    """How long ``WAIT`` may block: well within the socket timeout of the same call."""
    return max(1, int(timeout * 1000 * 0.8))


def check_acks(
    durability: Durability,
    acks: int,
    session_id: str,
    next_seq: int,
    display_url: str,
    waited_ms: int,
) -> None:
    """Raise :class:`DurabilityError` when fewer replicas than asked acknowledged an append."""
    if acks < durability.replicas:
        raise DurabilityError(
            f"session {session_id!r}: the batch ending before seq {next_seq} is applied on "
            f"the primary at {display_url} but only {acks} of {durability.replicas} "
            f"replica(s) confirmed it within {waited_ms} ms (durability="
            f"'{durability}'); it may be lost if the primary fails now"
        )
