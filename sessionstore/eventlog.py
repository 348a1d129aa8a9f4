"""Pure event-log decisions shared by every backend and both facades: validating a batch,
deciding between write, applied replay and conflict, and closing an interrupted turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import Any

import msgspec
import orjson
from pydantic import ValidationError

from . import harness
from .arguments import check_unicode
from .contracts import EventBatch
from .errors import (
    InvalidArgumentError,
    NotJSONSerializableError,
    SeqConflictError,
    UnsupportedVersionError,
)
from .harness import TOOL_NOT_STARTED as TOOL_NOT_STARTED
from .harness import TOOL_OUTCOME_UNKNOWN as TOOL_OUTCOME_UNKNOWN
from .harness import harness_warnings as harness_warnings
from .jsondata import JSONLossError, dump_lossless, find_loss, plain, short_repr
from .jsontext import TEXT_TYPES, IndexedLossError, checked_texts
from .models import (
    FORMAT_VERSION,
    INT64_MAX,
    SessionEvent,
    SessionHeader,
    built_events,
    describe_invalid,
    events_from_json,
    stored_events,
)

#: The most bytes (UTF-8) of a header's text field (``id``, ``cwd``, ``parent_id``): the
#: Redis backend's scripts read no stored field longer.
HEADER_FIELD_BYTES = 65536
HEADER_FIELD_CHARS = HEADER_FIELD_BYTES // 4  # below it, no text can be too long


def check_session_id(session_id: object) -> str:
    """A session id is a non-empty string of valid Unicode without NUL characters."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidArgumentError(
            f"session id must be a non-empty string, not {short_repr(session_id)}"
        )
    if "\0" in session_id:
        raise InvalidArgumentError(f"session id {short_repr(session_id)} contains a NUL character")
    return check_unicode("session id", session_id)


def check_header(header: object) -> SessionHeader:
    """Validate a header given to ``create``/``writer`` (and so to ``fork`` and the
    integrations, which create through them): the one place a header enters a store.

    Every field is checked as the model declares it, however the object was built
    (``SessionHeader.model_construct(...)`` and ``model_copy(update=...)`` skip
    pydantic's validation), so no backend stores a header it could not load back. Raises
    :class:`UnsupportedVersionError` for another format version and
    :class:`InvalidArgumentError` naming the first bad field otherwise; returns
    ``header`` itself.
    """
    if not isinstance(header, SessionHeader):
        raise InvalidArgumentError(
            f"expected a SessionHeader, not {type(header).__name__} {short_repr(header)}"
        )
    values = vars(header)
    missing = [name for name in SessionHeader.model_fields if name not in values]
    if missing:
        raise InvalidArgumentError(f"the header has no {missing[0]} field")
    session_id = check_session_id(values["id"])
    if values["version"] != FORMAT_VERSION:
        raise UnsupportedVersionError(session_id, values["version"], FORMAT_VERSION)
    try:
        SessionHeader.model_validate({name: values[name] for name in SessionHeader.model_fields})
    except ValidationError as exc:
        raise InvalidArgumentError(
            f"the header of session {short_repr(session_id)} is invalid: {describe_invalid(exc)}"
        ) from None
    for name in ("id", "cwd", "parent_id"):
        value = values[name]
        if value is not None:
            check_unicode(f"header {name}", value)
            if len(value) > HEADER_FIELD_CHARS and len(value.encode()) > HEADER_FIELD_BYTES:
                raise InvalidArgumentError(
                    f"header {name} {short_repr(value)} is longer than {HEADER_FIELD_BYTES}"
                    " bytes (UTF-8), the most a header field holds"
                )
    return header


def check_stored_version(session_id: str, version: object, where: str | None = None) -> None:
    """Raise :class:`UnsupportedVersionError` for a stored header of another version;
    ``where`` names the log (its path or key) in the message."""
    if version != FORMAT_VERSION:
        raise UnsupportedVersionError(session_id, version, FORMAT_VERSION, where)


def header_differences(stored: SessionHeader, given: SessionHeader) -> tuple[str, ...]:
    """The names of the fields in which two headers differ, in field order."""
    return tuple(
        name for name in SessionHeader.model_fields if getattr(stored, name) != getattr(given, name)
    )


def check_lease(lease: object) -> int:
    """A writer's ``lease``: seconds > 0 and at most a day (not a bool), in whole ms."""
    if (
        isinstance(lease, bool)
        or not isinstance(lease, int | float)
        or not 0 < lease <= 86400
        or lease != lease
    ):
        raise InvalidArgumentError(f"lease must be seconds in (0, 86400], not {short_repr(lease)}")
    return max(1, round(lease * 1000))


def check_seq(seq: object) -> int:
    """A seq argument (``read_from``, ``follow``, ``fork``'s ``at_seq``): an int from 0
    to 2**63 - 1 (not a bool)."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= INT64_MAX:
        raise InvalidArgumentError(f"seq must be an int >= 0, not {short_repr(seq)}")
    return seq


def check_batch(batch: object) -> int:
    """The ``batch`` size of ``iter_events``: an int from 1 to 2**63 - 1 (not a bool)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 0 < batch <= INT64_MAX:
        raise InvalidArgumentError(f"batch must be an int >= 1, not {short_repr(batch)}")
    return batch


def check_window(window: object) -> float:
    """The drain ``window`` of a writer: seconds in [0, 86400] (not a bool); a long window
    leaves draining to ``flush``."""
    if isinstance(window, bool) or not isinstance(window, int | float) or not 0 <= window <= 86400:
        raise InvalidArgumentError(
            f"window must be seconds in [0, 86400], not {short_repr(window)}"
        )
    return float(window)


_TIME_MIN = -INT64_MAX
#: What ``append`` refuses as its batch: one event, or text.
_NOT_A_BATCH = (SessionEvent, Mapping, str, bytes)


def encode_batch(session_id: str, events: Iterable[SessionEvent | Mapping[str, Any]]) -> EventBatch:
    """Validate a batch for ``append`` and encode each event as canonical JSON (see
    :func:`event_text`). An event's data may be JSON text (:mod:`sessionstore.jsontext`):
    checked with one parse and kept as it is in the event's text (the batch's events
    keep it as they were given).

    Raises :class:`InvalidArgumentError` for an event that is not a valid
    :class:`SessionEvent`, :class:`SeqConflictError` for a gap inside the batch,
    :class:`NotJSONSerializableError` for data that is not lossless JSON and
    :class:`~sessionstore.errors.HarnessFieldError` for a harness event whose fields
    repair reads are malformed (see :mod:`sessionstore.harness`).
    """
    if type(events) is not list:
        if isinstance(events, _NOT_A_BATCH):
            raise InvalidArgumentError("append takes a list of events, not a single event")
        try:
            events = list(events)
        except TypeError:
            raise InvalidArgumentError(
                f"append takes a list of events, not {type(events).__name__}"
            ) from None
    checked: list[Any] = list(events)  # each becomes the SessionEvent validated
    records: list[dict[str, Any]] = []  # what each event's text encodes
    suspect: list[SessionEvent] = []  # harness events that need a closer look
    well_formed = harness.WELL_FORMED
    first = 0
    objects = True  # every event's data is a dict
    texted: list[int] = []  # the events whose data is JSON text
    for index, event in enumerate(checked):
        if type(event) is not SessionEvent:
            event = checked[index] = _as_event(session_id, event, index)
        try:
            seq, kind, time, data, event_id = (
                event.seq,
                event.type,
                event.time,
                event.data,
                event.id,
            )
        except AttributeError:
            seq = None  # built without a field (``model_construct``): validated below
        if not (
            type(seq) is int
            and type(time) is int
            and type(kind) is str
            and _TIME_MIN <= time <= INT64_MAX
            and (event_id is None or type(event_id) is str)
            and (index or 0 <= seq <= INT64_MAX)
        ):
            # Built without validation (``model_construct``): validate it now. (Only the
            # first seq needs its range checked here: the others must continue it.)
            fields = {name: getattr(event, name, None) for name in SessionEvent.model_fields}
            event = checked[index] = _as_event(session_id, fields, index)
            seq, kind, event_id, time = event.seq, event.type, event.id, event.time
            data = event.data
        if not kind.isascii() or (event_id is not None and not event_id.isascii()):
            _check_event_text(event)
        if index:
            if seq != first + index:
                raise SeqConflictError(session_id, first + index, seq, "gap inside the batch")
        else:
            first = seq
        if type(data) is dict:
            quick = well_formed.get(kind)
            if quick is not None and not quick(data):
                suspect.append(event)
        elif type(data) in TEXT_TYPES:
            texted.append(index)
        else:
            objects = False
            if kind in well_formed:
                suspect.append(event)
        if event_id is None:
            records.append({"seq": seq, "type": kind, "time": time, "data": data})
        else:
            records.append({"seq": seq, "type": kind, "time": time, "data": data, "id": event_id})
    if texted:
        texts = _texts_with_json_text(checked, records, texted, suspect)
    else:
        texts = _lossless_texts(checked, records, objects)
    # Harness fields are judged once the data is known to be JSON, so that lossy data
    # is reported as such.
    for event in suspect:
        harness.check_event(event.type, event.seq, event.data)
    return EventBatch(checked, texts)


def _record(seq: int, kind: str, time: int, data: Any, event_id: str | None) -> dict[str, Any]:
    if event_id is None:
        return {"seq": seq, "type": kind, "time": time, "data": data}
    return {"seq": seq, "type": kind, "time": time, "data": data, "id": event_id}


def event_text(event: SessionEvent) -> bytes:
    """The canonical JSON of an event as every backend stores it: what ``orjson.dumps``
    writes for ``{"seq", "type", "time", "data", "id"}``, ``id`` left out when None. Two
    events are identical when their texts are equal. :class:`NotJSONSerializableError`
    for one whose data ``orjson`` cannot write (nested deeper than
    :data:`~sessionstore.jsondata.MAX_DEPTH`, as an older version let JSON text be)."""
    try:
        return orjson.dumps(_record(event.seq, event.type, event.time, event.data, event.id))
    except orjson.JSONEncodeError as exc:
        raise NotJSONSerializableError(event.type, event.seq, "$", str(exc)) from None


def data_of_text(text: bytes, has_id: bool) -> bytes:
    """The canonical JSON of the ``data`` inside an :func:`event_text` (of an event with
    an id when ``has_id``). Outside strings, which hold no bare quote, ``,"data":`` only
    occurs as that key, and ``,"id":`` last as the one after it."""
    start = text.index(b',"data":') + 8
    return text[start : text.rindex(b',"id":')] if has_id else text[start:-1]


_RECORD_DATA = itemgetter("data")


def _lossless_texts(
    events: list[SessionEvent], records: list[dict[str, Any]], objects: bool
) -> list[bytes]:
    """The text of each of ``records`` (see :func:`event_text`), once the batch is known
    to survive a JSON round trip unchanged; else the data that does not is named by
    :class:`NotJSONSerializableError`. ``objects``: every event's data is a dict.

    The usual batch is decided by one ``orjson.dumps`` per record and one
    :func:`~sessionstore.jsondata.plain` of all the data: only each ``data`` needs it,
    the other fields were checked to be exactly an int or a str, which JSON keeps as
    they are. Anything that does not decide (a tuple, an enum, a subclass, a NaN) is left
    to the round trip of each event's data on its own, which gives the verdict."""
    dumps = orjson.dumps
    if objects:
        try:
            texts = list(map(dumps, records))
        except (orjson.JSONEncodeError, RecursionError):
            pass
        else:
            if plain(list(map(_RECORD_DATA, records))):
                return texts
    texts = []
    for event, record in zip(events, records, strict=True):
        _dump_data(event)  # names the first event whose data does not survive
        try:
            texts.append(dumps(record))
        except orjson.JSONEncodeError:
            # The data survives alone, but not nested one level deeper in its record.
            _name_loss(event, find_loss)
            raise
    return texts


def _texts_with_json_text(
    events: list[SessionEvent],
    records: list[dict[str, Any]],
    texted: list[int],
    suspect: list[SessionEvent],
) -> list[bytes]:
    """The texts of a batch in which the events at ``texted`` have data that is JSON
    text (see :mod:`sessionstore.jsontext`): its canonical form goes into the event's
    text as it is; the other events are encoded as usual. A harness event's fields are
    read from the parsed object (added to ``suspect`` when they need a closer look)."""
    raw = msgspec.Raw
    given = [events[index].data for index in texted]
    try:
        canonical, parsed = checked_texts(
            [bytes(data) if type(data) is raw else data for data in given]
        )
    except IndexedLossError as exc:
        event = events[texted[exc.index]]
        raise NotJSONSerializableError(event.type, event.seq, exc.path, exc.reason) from None
    fragment = orjson.Fragment
    for index, text in zip(texted, canonical, strict=True):
        records[index]["data"] = fragment(text)
    if len(texted) == len(events):
        texts = list(map(orjson.dumps, records))
    else:
        texts = _mixed_texts(events, records, set(texted))
    well_formed = harness.WELL_FORMED
    for index, data in zip(texted, parsed, strict=True):
        quick = well_formed.get(events[index].type)
        if quick is not None and not quick(data):
            suspect.append(events[index].model_copy(update={"data": data}))
    return texts


def _mixed_texts(
    events: list[SessionEvent], records: list[dict[str, Any]], texted: set[int]
) -> list[bytes]:
    """The texts of a batch mixing data that is text (at ``texted``, whose records hold
    it as a fragment already) and Python data (checked as usual)."""
    plain = [index for index in range(len(events)) if index not in texted]
    found = _lossless_texts(
        [events[index] for index in plain],
        [records[index] for index in plain],
        all(type(events[index].data) is dict for index in plain),
    )
    texts = dict(zip(plain, found, strict=True))
    return [
        texts[index] if index in texts else orjson.dumps(record)
        for index, record in enumerate(records)
    ]


def new_event(seq: int, type: object, time: int, data: object) -> SessionEvent:
    """A new event as a writer's ``emit`` builds it: ``type`` must be a string, else
    :class:`InvalidArgumentError` (``data`` is checked by :func:`encode_batch`)."""
    if not isinstance(type, str):
        raise InvalidArgumentError(f"event type must be a string, not {short_repr(type)}")
    try:
        return SessionEvent(seq=seq, type=type, time=time, data={} if data is None else data)
    except ValidationError as exc:
        raise InvalidArgumentError(f"event {short_repr(type)}: {describe_invalid(exc)}") from exc


def _dump_data(event: SessionEvent) -> str:
    return _name_loss(event, dump_lossless)


def _name_loss(event: SessionEvent, check: Callable[[Any], str]) -> str:
    """``check(event.data)``, its :class:`JSONLossError` raised as the
    :class:`NotJSONSerializableError` naming the event."""
    try:
        return check(event.data)
    except JSONLossError as exc:
        raise NotJSONSerializableError(event.type, event.seq, exc.path, exc.reason) from None


def _check_event_text(event: SessionEvent) -> None:
    check_unicode(f"event type (seq {event.seq})", event.type)
    if event.id is not None:
        check_unicode(f"event id (seq {event.seq}, type {short_repr(event.type)})", event.id)


def _as_event(session_id: str, raw: object, index: int) -> SessionEvent:
    if isinstance(raw, SessionEvent):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidArgumentError(
            f"session {short_repr(session_id)}: event #{index} must be a SessionEvent or a "
            f"dict, not {type(raw).__name__}"
        )
    try:
        return SessionEvent.model_validate(dict(raw))
    except ValidationError as exc:
        raise InvalidArgumentError(
            f"session {short_repr(session_id)}: event #{index} (type "
            f"{short_repr(raw.get('type'))}, seq {short_repr(raw.get('seq'))}) is invalid: "
            f"{describe_invalid(exc)}"
        ) from exc


def events_of_texts(texts: list[bytes], first: int) -> list[SessionEvent]:
    """Stored texts (see :func:`event_text`) of the events from seq ``first`` back to
    :class:`SessionEvent`, parsed, checked and built in one pass by
    :func:`stored_events`, else parsed by ``orjson`` and built by :func:`built_events`;
    texts both refuse are validated by pydantic: ``ValidationError`` for one that is not
    a valid event."""
    if not texts:
        return []
    joined = b"[" + b",".join(texts) + b"]"
    events = stored_events(joined, first, len(texts))
    if events is None:
        try:
            events = built_events(orjson.loads(joined), first)
        except orjson.JSONDecodeError:
            events = None
    return events if events is not None else events_from_json(joined)


def plan_append(
    session_id: str,
    next_seq: int,
    batch: EventBatch,
    stored_texts: Callable[[int, int], list[bytes]],
) -> bool:
    """Decide an append against the stored ``next_seq``: True to write, False for an
    applied replay (every event already stored identically); else :class:`SeqConflictError`.

    ``stored_texts(first, last)`` returns the :func:`event_text` of the stored events
    with ``first <= seq <= last``.
    """
    first = batch.events[0].seq
    if first == next_seq:
        return True
    last = batch.events[-1].seq
    if first < next_seq and last < next_seq and stored_texts(first, last) == batch.texts:
        return False
    detail = "batch differs from the stored events" if first < next_seq else ""
    raise SeqConflictError(session_id, next_seq, first, detail)


def check_ends_with(
    session_id: str, last: SessionEvent, next_seq: int, stored: bytes | None
) -> None:
    """Refuse a delete guarded by ``last`` (see :meth:`.contracts.EventBackend.delete`) of the log
    whose next seq is ``next_seq`` and whose event at ``last.seq`` has the text
    ``stored`` (None: no event there, or not read): :class:`SeqConflictError` unless the
    log ends with exactly ``last``."""
    if next_seq == last.seq + 1 and stored == event_text(last):
        return
    raise not_ending_with(session_id, last, next_seq)


def not_ending_with(session_id: str, last: SessionEvent, next_seq: int) -> SeqConflictError:
    """The error of a delete guarded by ``last`` of a log (whose next seq is
    ``next_seq``, -1 when unknown) that does not end with it."""
    detail = "the log no longer ends with the event given"
    return SeqConflictError(session_id, last.seq + 1, next_seq, detail)


def closers(events: list[SessionEvent]) -> list[SessionEvent]:
    """The events that close an interrupted final turn, in order (none if balanced).

    For each tool call of the step still open that has no ``tool/result``: an error
    result, ``TOOL_OUTCOME_UNKNOWN`` if a ``tool/call`` was recorded, ``TOOL_NOT_STARTED``
    if the call was only requested by an ``assistant/message``, worded as
    :data:`~sessionstore.harness.CLOSER_MESSAGES` says; a call of a step that has ended
    gets none. Then ``step/end`` if a step is open; then ``turn/end`` with reason
    ``interrupted``. Seqs continue the log and every
    closer reuses the last event's time, so two repairers produce identical closers.

    The fields read are those of :mod:`sessionstore.harness`; one that is malformed (in
    a log written before append checked them) counts as absent, so this never raises.
    """
    start = _open_turn_start(events)
    if start is None:
        return []
    turn: Any = None
    step: Any = None
    calls: dict[str, dict[str, Any]] = {}
    for event in events[start:]:
        data = event.data if isinstance(event.data, Mapping) else {}
        kind = event.type
        if kind == harness.TURN_START:
            turn = harness.marker(data, "turn")
        elif kind == harness.STEP_START:
            step = harness.marker(data, "step")
        elif kind == harness.STEP_END:
            # A call of a step that has ended gets no closer: only the open step's do.
            step = None
            calls = {}
        elif kind == harness.ASSISTANT_MESSAGE:
            requested_step = harness.marker(data, "step", step)
            for requested in harness.requested_calls(data):
                calls.setdefault(requested, {"step": requested_step, "started": False})
        elif kind == harness.TOOL_CALL and (started := harness.call_id(data)) is not None:
            entry = calls.setdefault(started, {"step": harness.marker(data, "step", step)})
            entry["started"] = True
            entry["step"] = harness.marker(data, "step", entry.get("step"))
        elif kind == harness.TOOL_RESULT and (done := harness.call_id(data)) is not None:
            calls.setdefault(done, {})["done"] = True
    seq = events[-1].seq + 1
    time = events[-1].time
    out: list[SessionEvent] = []
    for call_id, entry in calls.items():
        if entry.get("done"):
            continue
        code = TOOL_OUTCOME_UNKNOWN if entry.get("started") else TOOL_NOT_STARTED
        message = harness.CLOSER_MESSAGES[code]
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
        if kind == harness.TURN_END:
            return None
        if kind == harness.TURN_START:
            return index
    return None
