"""What in a namespace is the demo's own, and the deletion of its leftovers.

The demo marks what it writes by names no other use is likely to pick, the same in every
run (:func:`owns_session`, :func:`owns_value`):

- event-log sessions ``momentum-SYMnnnUSDT`` and ``contrarian-SYMnnnUSDT`` whose header
  has ``cwd="/demo/momentum"`` (or ``"/demo/contrarian"``); its first write, a check
  that the store takes writes, is a session under a reserved name
  (:data:`~sessionstore.results.PROBE_PREFIX`) deleted at once, which no listing shows;
- history values (``SYMnnnUSDT``, ``llm-signal``, ``synthetic``, ``1h``, ``backtest``).

Anything else in the namespace is not the demo's own, and the demo never deletes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import SessionStoreError
from ...keys import label_of
from ...models import SessionHeader
from ...results import ValueRef
from ...store import Store
from ...when import MAX_ABS_EPOCH_MS
from .data import EXCHANGE, FRAME, MODE, SESSION_ID, STRATEGY, SYMBOL


def owns_session(header: SessionHeader) -> bool:
    """True for an event-log session the demo writes (see the module docstring)."""
    match = SESSION_ID.fullmatch(header.id)
    if match is None:
        return False
    return header.cwd == f"/demo/{match.group(1)}"


def owns_value(ref: ValueRef) -> bool:
    """True for a session value the demo writes (see the module docstring)."""
    return (
        ref.history
        and SYMBOL.fullmatch(ref.symbol) is not None
        and (ref.strategy, ref.exchange, ref.frame, ref.mode) == (STRATEGY, EXCHANGE, FRAME, MODE)
    )


class ForeignDataError(SessionStoreError):
    """The namespace holds sessions or values that are not the demo's own: the demo
    refuses to start there without ``reset=True``, and even with it when such a session
    has an id the demo must write (``taken``). Nothing is written."""

    def __init__(
        self,
        namespace: str,
        sessions: list[str],
        values: list[ValueRef],
        taken: list[str] | None = None,
    ) -> None:
        self.namespace, self.sessions, self.values = namespace, sessions, values
        self.taken = taken or []
        named = [f"session {sid!r}" for sid in sessions[:3]]
        named += [f"value {label_of(ref[:5])!r}" for ref in values[: max(0, 3 - len(named))]]
        more = len(sessions) + len(values) - len(named)
        message = (
            f"namespace {namespace!r} holds {len(sessions)} session(s) and {len(values)} "
            f"value(s) that are not the demo's own ({', '.join(named)}"
            f"{f' and {more} more' if more else ''})"
        )
        if self.taken:
            message += (
                f"; session(s) {', '.join(map(repr, self.taken[:3]))} have ids the demo "
                "writes, so it cannot run there even with --reset"
            )
        super().__init__(message)


@dataclass
class Survey:
    """What a namespace holds, split into the demo's own and the rest."""

    own_sessions: list[str]
    own_values: list[ValueRef]
    foreign_sessions: list[str]
    foreign_values: list[ValueRef]


def survey(store: Store) -> Survey:
    """Read (never write) what the namespace holds."""
    headers, refs = store.events.list(), store.list_values()
    return Survey(
        [h.id for h in headers if owns_session(h)],
        [r for r in refs if owns_value(r)],
        [h.id for h in headers if not owns_session(h)],
        [r for r in refs if not owns_value(r)],
    )


def delete_own(store: Store, found: Survey) -> None:
    """Delete the demo's own leftovers (of any earlier run); nothing else. The demo's
    values are history values: a plain value stored under the same key is not its own
    and stays (only the history is cleared then)."""
    for session_id in found.own_sessions:
        store.events.delete(session_id)
    foreign = {ref[:5] for ref in found.foreign_values}
    for ref in found.own_values:
        history = store.session(*ref[:4], mode=ref.mode, history=True)
        if ref[:5] in foreign:
            history.set_data(None, -MAX_ABS_EPOCH_MS)  # drops every version, keeps the plain one
        else:
            history.delete()
