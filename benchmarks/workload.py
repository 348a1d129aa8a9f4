"""The payloads every scenario uses, built the same way for ours and the baselines.

Event logs follow an agent harness: turns of eight events (``turn/start``,
``step/start``, ``assistant/message`` with a tool call, ``tool/call``, ``tool/result``,
``step/end``, a final ``assistant/message``, ``turn/end``) whose ``data`` is 19 to 378
bytes of JSON (144 on average). A log of a multiple of eight events is balanced, so
``load`` has nothing to repair. A session value is a small strategy state dict (197
bytes of msgpack).
"""

from __future__ import annotations

from typing import Any

from sessionstore import SessionEvent

#: Event times start here (epoch ms) and advance by one per seq.
T0 = 1_718_000_000_000
TURN = 8
_LISTING = " ".join(f"src/module_{n:02d}.py" for n in range(18))
_PROSE = (
    "Looking at the failing test, the fixture opens the store before the server is up; "
    "I will move the connect call after the readiness probe and rerun the suite."
)


def event_data(seq: int) -> dict[str, Any]:
    """The ``data`` of event ``seq`` (its place in the turn decides its shape)."""
    turn, place = divmod(seq, TURN)
    call = f"call_{turn:06d}"
    command = {"cmd": f"pytest -x tests/test_{turn % 50:02d}.py", "timeout": 120}
    if place == 0:
        return {"turn": turn, "input": f"Please fix the failing test number {turn}."}
    if place == 1:
        return {"turn": turn, "step": 1}
    if place == 2:
        return {
            "turn": turn,
            "step": 1,
            "content": _PROSE,
            "tool_calls": [{"id": call, "name": "bash", "arguments": command}],
        }
    if place == 3:
        return {"turn": turn, "step": 1, "call_id": call, "name": "bash", "arguments": command}
    if place == 4:
        return {"turn": turn, "step": 1, "call_id": call, "is_error": False, "content": _LISTING}
    if place == 5:
        return {"turn": turn, "step": 1}
    if place == 6:
        return {"turn": turn, "content": _PROSE, "usage": {"input": 1830, "output": 212}}
    return {"turn": turn, "reason": {"kind": "completed"}}


_TYPES = (
    "turn/start",
    "step/start",
    "assistant/message",
    "tool/call",
    "tool/result",
    "step/end",
    "assistant/message",
    "turn/end",
)


def event_type(seq: int) -> str:
    return _TYPES[seq % TURN]


def events(first: int, count: int) -> list[SessionEvent]:
    """Pre-built events ``first .. first + count - 1``."""
    return [
        SessionEvent(seq=seq, type=event_type(seq), time=T0 + seq, data=event_data(seq))
        for seq in range(first, first + count)
    ]


def batches(first: int, calls: int, size: int) -> list[list[SessionEvent]]:
    """``calls`` contiguous batches of ``size`` pre-built events from seq ``first``."""
    flat = events(first, calls * size)
    return [flat[i : i + size] for i in range(0, len(flat), size)]


def items(first: int, count: int) -> list[dict[str, Any]]:
    """The same payloads as :func:`events`, as plain dicts for a peer library: the
    event's type and its data (what a conversation item carries)."""
    return [{"type": event_type(seq), **event_data(seq)} for seq in range(first, first + count)]


def value(counter: int = 0) -> dict[str, Any]:
    """A session value: a strategy's state, with a counter for the update scenarios."""
    return {
        "lastLlmSignal": "buy",
        "confirmedAt": T0,
        "counter": counter,
        "position": {"side": "long", "size": 0.25, "entry": 67321.5},
        "indicators": [64980.0, 65210.5, 65877.25, 66502.0, 67010.75],
        "note": "breakout confirmed on rising volume",
    }


def bump(current: dict[str, Any] | None) -> dict[str, Any]:
    """What every update does: increment the counter (starting from :func:`value`)."""
    state = dict(current) if current else value()
    state["counter"] += 1
    return state
