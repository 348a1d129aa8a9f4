"""What the listing and loading calls return, besides the models."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import NamedTuple

from .contracts import Stored
from .keys import ValueKey
from .models import SessionEvent, SessionHeader

#: Session ids and value symbols of the form ``~probe-<purpose>-<12 hex digits>``
#: (:data:`PROBE_PREFIX`, a lowercase word, a random token) are the library's own checks
#: (the demo's first write, ``sessionstore doctor``): written and deleted at once, and
#: never listed, also when a crash left one behind. Other names that begin with the
#: prefix are a user's, listed and exported as any other.
PROBE_PREFIX = "~probe-"
_PROBE_TOKEN_BYTES = 6
_PROBE = re.compile(rf"{re.escape(PROBE_PREFIX)}[a-z]+-[0-9a-f]{{{2 * _PROBE_TOKEN_BYTES}}}")


def probe_name(purpose: str) -> str:
    """A fresh reserved name for a check (see :data:`PROBE_PREFIX`); ``purpose`` is a
    lowercase word."""
    return f"{PROBE_PREFIX}{purpose}-{secrets.token_hex(_PROBE_TOKEN_BYTES)}"


def is_probe(name: str) -> bool:
    """Whether ``name`` is one :func:`probe_name` makes."""
    return name.startswith(PROBE_PREFIX) and _PROBE.fullmatch(name) is not None


class ValueRef(NamedTuple):
    """One stored session value, as ``Store.list_values`` reports it."""

    symbol: str
    strategy: str
    exchange: str
    frame: str
    mode: str
    history: bool


def value_refs(found: list[tuple[ValueKey, bool]]) -> list[ValueRef]:
    """The listed values, sorted; the library's own checks (:data:`PROBE_PREFIX`) left out."""
    return sorted(
        ValueRef(*key.parts, history) for key, history in found if not is_probe(key.symbol)
    )


@dataclass(frozen=True, slots=True)
class ValueRecords:
    """What is stored under one value's key, as :meth:`sessionstore.Session.records`
    returns it: the ``plain`` record (or None) and the history ``versions``, oldest
    first; each :class:`~sessionstore.contracts.Stored` has its msgpack ``payload``
    (None for a clear) and the logical time ``when`` (epoch ms) it was stored for."""

    plain: Stored | None
    versions: list[Stored]
    #: The key's label, to name it when a record is damaged.
    where: str = ""
    #: When the plain record expires (epoch ms of the backend's clock), None: never or
    #: no record.
    plain_expires_at: int | None = None
    #: When the history expires (all its versions together), None: never or no history.
    history_expires_at: int | None = None

    @property
    def expires_at(self) -> int | None:
        """When what a read of the key sees expires: the history's for a history, else
        the plain record's (None: never, or nothing stored)."""
        return self.history_expires_at if self.history else self.plain_expires_at

    @property
    def history(self) -> bool:
        """True when the key reads as a history (it has versions and no plain record)."""
        return self.plain is None and bool(self.versions)

    def records(self) -> list[Stored]:
        """The records a read of the key sees: the versions of a history, else the plain
        record (none when nothing is stored)."""
        return self.versions if self.history else [self.plain] if self.plain else []


class NamespaceUsage(NamedTuple):
    """One namespace of a store, as :func:`sessionstore.namespaces` reports it: how many
    event-log sessions and session values it holds."""

    name: str
    sessions: int
    values: int


def namespace_usages(counts: dict[str, dict[str, int]]) -> list[NamespaceUsage]:
    """``{namespace: {"sessions": n, "values": n}}`` as usages sorted by name, empty
    namespaces left out."""
    usages = (
        NamespaceUsage(name, found.get("sessions", 0), found.get("values", 0))
        for name, found in counts.items()
    )
    return sorted(usage for usage in usages if usage.sessions or usage.values)


class LoadedSession(NamedTuple):
    """What ``load`` returns: the header and the balanced list of events."""

    header: SessionHeader
    events: list[SessionEvent]
