"""The harness event types and the fields of theirs that crash repair reads.

Repair (:func:`sessionstore.eventlog.closers`) reads these fields of the events of an
open turn; this module defines their shape once. ``append`` refuses a harness event
whose field breaks it (:func:`check_event` raises :class:`HarnessFieldError`); the
readers below, which repair uses, treat such a field as absent, so a log written
before the check still loads; :func:`harness_warnings` lists what they ignored.

- ``turn/start``: ``turn``, optional: an int, a string or null.
- ``step/start``: ``step``, required: an int or a string.
- ``assistant/message``: ``step``, optional: an int, a string or null; ``tool_calls``,
  optional: null or a list of objects, each with ``id`` a string.
- ``tool/call``: ``call_id``, required: a string; ``step``, optional: an int, a string
  or null.
- ``tool/result``: ``call_id``, required: a string.
- ``step/end``, ``turn/end``: only the type is read.

Every other field of these events, and every other event type, is free-form.

Repair closes an interrupted turn (:func:`sessionstore.eventlog.closers`): each tool
call of the step still open that has no ``tool/result`` gets an error result whose
``error.code`` is :data:`TOOL_OUTCOME_UNKNOWN` (its ``tool/call`` was recorded: it may
have run) or :data:`TOOL_NOT_STARTED` (only requested by an ``assistant/message``), and
whose ``content`` and ``error.message`` are :data:`CLOSER_MESSAGES` of that code, worded
for the model that reads them. A call requested in a step that has already ended gets
no result. The wording is part of the contract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import HarnessFieldError

TURN_START = "turn/start"
TURN_END = "turn/end"
STEP_START = "step/start"
STEP_END = "step/end"
ASSISTANT_MESSAGE = "assistant/message"
TOOL_CALL = "tool/call"
TOOL_RESULT = "tool/result"

#: The error code of a closer for a call whose ``tool/call`` was recorded.
TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
#: The error code of a closer for a call that was only requested.
TOOL_NOT_STARTED = "TOOL_NOT_STARTED"

#: What a closer tells the model, by error code (``content`` and ``error.message``).
CLOSER_MESSAGES = {
    TOOL_OUTCOME_UNKNOWN: (
        "The session was interrupted while this tool call was running, so it may or may"
        " not have taken effect. Repeat it only if it is read-only or idempotent;"
        " otherwise first check whether its effect happened, or ask the user."
    ),
    TOOL_NOT_STARTED: (
        "The session was interrupted before this tool call started: it never ran and"
        " can safely be made again."
    ),
}

#: The event types whose fields repair reads.
HARNESS_TYPES = frozenset(
    {TURN_START, STEP_START, ASSISTANT_MESSAGE, TOOL_CALL, TOOL_RESULT, STEP_END, TURN_END}
)

_MARKER = "an int or a string"


def _is_marker(value: object) -> bool:
    """A turn or step number: an int (not a bool) or a string."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _marker_problem(
    data: Mapping[str, Any], name: str, *, required: bool
) -> tuple[str, str] | None:
    if name not in data:
        return (f"$.{name}", f"missing (must be {_MARKER})") if required else None
    value = data[name]
    if _is_marker(value) or (value is None and not required):
        return None
    shape = _MARKER if required else f"{_MARKER} or null"
    return f"$.{name}", f"must be {shape}, not {_kind(value)}"


def _call_id_problem(data: Mapping[str, Any]) -> tuple[str, str] | None:
    if "call_id" not in data:
        return "$.call_id", "missing (must be a string)"
    value = data["call_id"]
    return (
        None if isinstance(value, str) else ("$.call_id", f"must be a string, not {_kind(value)}")
    )


def _tool_calls_problem(data: Mapping[str, Any]) -> tuple[str, str] | None:
    calls = data.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return "$.tool_calls", f"must be a list of objects or null, not {_kind(calls)}"
    for index, call in enumerate(calls):
        path = f"$.tool_calls[{index}]"
        if not isinstance(call, Mapping):
            return path, f"must be an object with a string id, not {_kind(call)}"
        if "id" not in call:
            return f"{path}.id", "missing (must be a string)"
        if not isinstance(call["id"], str):
            return f"{path}.id", f"must be a string, not {_kind(call['id'])}"
    return None


def _turn_start(data: Mapping[str, Any]) -> tuple[str, str] | None:
    return _marker_problem(data, "turn", required=False)


def _step_start(data: Mapping[str, Any]) -> tuple[str, str] | None:
    return _marker_problem(data, "step", required=True)


def _assistant_message(data: Mapping[str, Any]) -> tuple[str, str] | None:
    return _marker_problem(data, "step", required=False) or _tool_calls_problem(data)


def _tool_call(data: Mapping[str, Any]) -> tuple[str, str] | None:
    return _call_id_problem(data) or _marker_problem(data, "step", required=False)


def _type_only(data: Mapping[str, Any]) -> tuple[str, str] | None:
    return None


_PROBLEMS = {
    TURN_START: _turn_start,
    STEP_START: _step_start,
    ASSISTANT_MESSAGE: _assistant_message,
    TOOL_CALL: _tool_call,
    TOOL_RESULT: _call_id_problem,
    STEP_END: _type_only,
    TURN_END: _type_only,
}


def problem(kind: str, data: object) -> tuple[str, str] | None:
    """The first harness field of an event of type ``kind`` with this ``data`` that
    breaks its shape, as (JSON path, what is wrong); None when there is none (also for
    every other type)."""
    find = _PROBLEMS.get(kind)
    if find is None:
        return None
    if not isinstance(data, Mapping):
        return "$", f"must be an object, not {_kind(data)}"
    return find(data)


# The common shapes, judged with exact type checks; anything else goes to the full
# rules above (which also say what is wrong). One per harness type.


def _fast_turn_start(data: dict[str, Any]) -> bool:
    turn = data.get("turn")
    return turn is None or type(turn) is int or type(turn) is str


def _fast_step_start(data: dict[str, Any]) -> bool:
    step = data.get("step")
    return type(step) is int or type(step) is str


def _fast_assistant_message(data: dict[str, Any]) -> bool:
    step = data.get("step")
    if not (step is None or type(step) is int or type(step) is str):
        return False
    calls = data.get("tool_calls")
    if calls is None:
        return True
    if type(calls) is not list:
        return False
    for call in calls:  # noqa: SIM110 - a loop costs less than all() of a generator
        if type(call) is not dict or type(call.get("id")) is not str:
            return False
    return True


def _fast_tool_call(data: dict[str, Any]) -> bool:
    if type(data.get("call_id")) is not str:
        return False
    step = data.get("step")
    return step is None or type(step) is int or type(step) is str


def _fast_tool_result(data: dict[str, Any]) -> bool:
    return type(data.get("call_id")) is str


def _fast_type_only(data: dict[str, Any]) -> bool:
    return True


#: Harness type -> a quick test that is True for well-formed common shapes (False
#: means: ask :func:`problem`).
WELL_FORMED = {
    TURN_START: _fast_turn_start,
    STEP_START: _fast_step_start,
    ASSISTANT_MESSAGE: _fast_assistant_message,
    TOOL_CALL: _fast_tool_call,
    TOOL_RESULT: _fast_tool_result,
    STEP_END: _fast_type_only,
    TURN_END: _fast_type_only,
}


def check_event(kind: str, seq: int, data: object) -> None:
    """Raise :class:`HarnessFieldError` (naming type, seq and path) when a harness field
    of this event breaks its shape; other event types pass unchecked."""
    quick = WELL_FORMED.get(kind)
    if quick is None or (type(data) is dict and quick(data)):
        return
    found = problem(kind, data)
    if found is not None:
        raise HarnessFieldError(kind, seq, *found)


def harness_warnings(events: Iterable[Any]) -> list[str]:
    """One line per stored harness event whose fields repair cannot read (and so
    ignores), e.g. ``seq 4 (assistant/message): $.tool_calls[0].id must be a string,
    not int``. Pure; for ``verify`` of a log written before append checked them.
    ``events`` are :class:`~sessionstore.models.SessionEvent` objects."""
    lines = []
    for event in events:
        found = problem(event.type, event.data)
        if found is not None:
            lines.append(f"seq {event.seq} ({event.type}): {found[0]} {found[1]}")
    return lines


# --- what repair reads: a malformed field counts as absent ---------------------------------


def marker(data: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """``data[name]`` if it is a turn or step number or null, else ``default``."""
    value = data.get(name, default)
    return value if value is None or _is_marker(value) else default


def call_id(data: Mapping[str, Any]) -> str | None:
    """The ``call_id`` of a ``tool/call`` or ``tool/result``, or None."""
    value = data.get("call_id")
    return value if isinstance(value, str) else None


def requested_calls(data: Mapping[str, Any]) -> list[str]:
    """The ids of the well-formed ``tool_calls`` of an ``assistant/message``."""
    calls = data.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [
        call["id"]
        for call in calls
        if isinstance(call, Mapping) and isinstance(call.get("id"), str)
    ]
