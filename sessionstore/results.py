"""What the listing and loading calls return, besides the models."""

from __future__ import annotations

import secrets
from typing import NamedTuple

from .keys import ValueKey
from .models import SessionEvent, SessionHeader

#: Session ids and value symbols that begin with this are the library's own checks (the
#: demo's first write, ``sessionstore doctor``): written and deleted at once, and never
#: listed, also when a crash left one behind.
PROBE_PREFIX = "~probe-"


def probe_name(purpose: str) -> str:
    """A fresh reserved name for a check (see :data:`PROBE_PREFIX`)."""
    return f"{PROBE_PREFIX}{purpose}-{secrets.token_hex(6)}"


def is_probe(name: str) -> bool:
    return name.startswith(PROBE_PREFIX)


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
