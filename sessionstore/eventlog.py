"""Pure event-log decisions shared by every backend and both facades: validating a batch,
deciding between write, applied replay and conflict, and closing an interrupted turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from .contracts import StoredEvent
from .errors import (
    InvalidArgumentError,
    NotJSONSerializableError,
    SeqConflictError,
    UnsupportedVersionError,
)
from .jsondata import JSONLossError, dump_lossless, dump_lossless_all, load
from .models import FORMAT_VERSION, SessionEvent, SessionHeader, restored_event

TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
TOOL_NOT_STARTED = "TOOL_NOT_STARTED"


def check_unicode(name: str, text: str) -> str:
    """``text`` must encode as UTF-8 (no lone surrogates), on every backend alike."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{name} {text!r:.80} is not valid Unicode") from exc
    return text


def check_session_id(session_id: object) -> str:
    """A session id is a non-empty string of valid Unicode."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidArgumentError(f"session id must be a non-empty string, not {session_id!r:.80}")
    return check_unicode("session id", session_id)


def check_header(header: object) -> SessionHeader:
    """Validate a header given to ``create``/``writer``."""
    if not isinstance(header, SessionHeader):
        raise InvalidArgumentError(f"expected a SessionHeader, not {type(header).__name__}")
    check_session_id(header.id)
    for name in ("cwd", "parent_id"):
        value = getattr(header, name)
        if value is not None:
            check_unicode(f"header {name}", value)
    if header.version != FORMAT_VERSION:
        raise UnsupportedVersionError(header.id, header.version, FORMAT_VERSION)
    return header


def check_stored_version(session_id: str, version: object) -> None:
    """Raise :class:`UnsupportedVersionError` for a stored header of another version."""
    if version != FORMAT_VERSION:
        raise UnsupportedVersionError(session_id, version, FORMAT_VERSION)


def encode_batch(
    session_id: str, events: Iterable[SessionEvent | Mapping[str, Any]]
) -> list[StoredEvent]:
    """Validate a batch for ``append`` and encode its data as canonical JSON.

    Raises :class:`InvalidArgumentError` for an event that is not a valid
    :class:`SessionEvent`, :class:`SeqConflictError` for a gap inside the batch and
    :class:`NotJSONSerializableError` for data that is not lossless JSON.
    """
    if isinstance(events, SessionEvent | Mapping):
        raise InvalidArgumentError("append takes a list of events, not a single event")
    checked: list[SessionEvent] = []
    first = 0
    for index, raw in enumerate(events):
        event = raw if type(raw) is SessionEvent else _as_event(session_id, raw, index)
        seq, kind, event_id = event.seq, event.type, event.id
        if not kind.isascii() or (event_id is not None and not event_id.isascii()):
            _check_event_text(event)
        if index == 0:
            first = seq
        elif seq != first + index:
            raise SeqConflictError(session_id, first + index, seq, "gap inside the batch")
        checked.append(event)
    if len(checked) > 1:
        texts = dump_lossless_all([event.data for event in checked])
        if texts is not None:
            return [
                StoredEvent(event.seq, event.type, event.time, text, event.id)
                for event, text in zip(checked, texts, strict=True)
            ]
    stored: list[StoredEvent] = []
    for event in checked:
        stored.append(StoredEvent(event.seq, event.type, event.time, _dump_data(event), event.id))
    return stored


def _dump_data(event: SessionEvent) -> str:
    try:
        return dump_lossless(event.data)
    except JSONLossError as exc:
        raise NotJSONSerializableError(event.type, event.seq, exc.path, exc.reason) from None


def _check_event_text(event: SessionEvent) -> None:
    check_unicode(f"event type (seq {event.seq})", event.type)
    if event.id is not None:
        check_unicode(f"event id (seq {event.seq}, type {event.type!r})", event.id)


def _as_event(session_id: str, raw: object, index: int) -> SessionEvent:
    if isinstance(raw, SessionEvent):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidArgumentError(
            f"session {session_id!r}: event #{index} must be a SessionEvent or a dict, "
            f"not {type(raw).__name__}"
        )
    try:
        return SessionEvent.model_validate(dict(raw))
    except ValidationError as exc:
        raise InvalidArgumentError(
            f"session {session_id!r}: event #{index} (type {raw.get('type')!r}, seq "
            f"{raw.get('seq')!r}) is invalid: {exc.errors(include_url=False)}"
        ) from None


def decode_events(stored: list[StoredEvent]) -> list[SessionEvent]:
    """Stored (trusted, already validated) events back to :class:`SessionEvent`.

    Consumes ``stored`` (it is left empty), so a long log is not held twice.
    """
    decoded: list[SessionEvent] = []
    stored.reverse()
    while stored:
        e = stored.pop()
        decoded.append(restored_event(e.seq, e.type, e.time, load(e.data), e.id))
    return decoded


def plan_append(
    session_id: str,
    next_seq: int,
    batch: list[StoredEvent],
    stored_range: Callable[[int, int], list[StoredEvent]],
) -> bool:
    """Decide an append against the stored ``next_seq``: True to write, False for an
    applied replay (every event already stored identically); else :class:`SeqConflictError`.

    ``stored_range(first, last)`` returns the stored events with ``first <= seq <= last``.
    """
    first = batch[0].seq
    if first == next_seq:
        return True
    last = batch[-1].seq
    if first < next_seq and last < next_seq and stored_range(first, last) == batch:
        return False
    detail = "batch differs from the stored events" if first < next_seq else ""
    raise SeqConflictError(session_id, next_seq, first, detail)


def closers(events: list[SessionEvent]) -> list[SessionEvent]:
    """The events that close an interrupted final turn, in order (none if balanced).

    For each tool call of the open turn that has no ``tool/result``: an error result,
    ``TOOL_OUTCOME_UNKNOWN`` if a ``tool/call`` was recorded, ``TOOL_NOT_STARTED`` if the
    call was only requested by an ``assistant/message``; then ``step/end`` if a step is
    open; then ``turn/end`` with reason ``interrupted``. Seqs continue the log and every
    closer reuses the last event's time, so two repairers produce identical closers.
    """
    start = _open_turn_start(events)
    if start is None:
        return []
    turn: Any = None
    step: Any = None
    calls: dict[str, dict[str, Any]] = {}
    for event in events[start:]:
        data = event.data if isinstance(event.data, dict) else {}
        kind = event.type
        if kind == "turn/start":
            turn = data.get("turn")
        elif kind == "step/start":
            step = data.get("step")
        elif kind == "step/end":
            step = None
        elif kind == "assistant/message":
            for call in data.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    calls.setdefault(call["id"], {"step": data.get("step", step), "started": False})
        elif kind == "tool/call" and isinstance(data.get("call_id"), str):
            entry = calls.setdefault(data["call_id"], {"step": data.get("step", step)})
            entry["started"] = True
            entry["step"] = data.get("step", entry.get("step"))
        elif kind == "tool/result" and isinstance(data.get("call_id"), str):
            calls.setdefault(data["call_id"], {})["done"] = True
    seq = events[-1].seq + 1
    time = events[-1].time
    out: list[SessionEvent] = []
    for call_id, entry in calls.items():
        if entry.get("done"):
            continue
        code = TOOL_OUTCOME_UNKNOWN if entry.get("started") else TOOL_NOT_STARTED
        message = (
            "the session was interrupted after the tool call started; its outcome is unknown"
            if entry.get("started")
            else "the session was interrupted before the tool call started"
        )
        out.append(
            SessionEvent(
                seq=seq + len(out),
                type="tool/result",
                time=time,
                data={
                    "turn": turn,
                    "step": entry.get("step"),
                    "call_id": call_id,
                    "is_error": True,
                    "content": message,
                    "error": {"code": code, "message": message},
                },
            )
        )
    if step is not None:
        out.append(
            SessionEvent(
                seq=seq + len(out), type="step/end", time=time, data={"turn": turn, "step": step}
            )
        )
    out.append(
        SessionEvent(
            seq=seq + len(out),
            type="turn/end",
            time=time,
            data={"turn": turn, "reason": {"kind": "interrupted"}},
        )
    )
    return out


def _open_turn_start(events: list[SessionEvent]) -> int | None:
    """Index of the final ``turn/start`` when no ``turn/end`` follows it, else None."""
    for index in range(len(events) - 1, -1, -1):
        kind = events[index].type
        if kind == "turn/end":
            return None
        if kind == "turn/start":
            return index
    return None
