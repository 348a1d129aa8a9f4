"""What the listing and loading calls return, besides the models."""

from __future__ import annotations

from typing import NamedTuple

from .keys import ValueKey
from .models import SessionEvent, SessionHeader


class ValueRef(NamedTuple):
    """One stored session value, as ``Store.list_values`` reports it."""

    symbol: str
    strategy: str
    exchange: str
    frame: str
    mode: str
    history: bool


def value_refs(found: list[tuple[ValueKey, bool]]) -> list[ValueRef]:
    return sorted(ValueRef(*key.parts, history) for key, history in found)


class LoadedSession(NamedTuple):
    """What ``load`` returns: the header and the balanced list of events."""

    header: SessionHeader
    events: list[SessionEvent]
