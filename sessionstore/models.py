"""The event-log records: :class:`SessionHeader`, :class:`SessionEvent` and
:class:`SessionInfo`.

Both are strict: a field takes only its own type (``seq="5"``, ``seq=True`` and
``time=1.0`` are refused, never converted). Built directly, a bad field raises pydantic's
``ValidationError``; every library call raises ``InvalidArgumentError`` instead.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, fields
from itertools import repeat, starmap
from operator import attrgetter
from typing import Annotated, Any, ClassVar, get_type_hints

import msgspec
from msgspec.structs import astuple
from pydantic import BaseModel, ConfigDict, Field, Strict, StrictStr, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.fields import FieldInfo

from .errors import InvalidArgumentError
from .jsondata import elide
from .when import now_ms

#: The log format version this library writes and reads.
FORMAT_VERSION = 1
#: Integers in headers and events stay within 64 bits, so every backend stores them alike.
INT64_MAX = 2**63 - 1
#: The earliest ``time`` an event may carry: where a writer of a log without events starts.
EARLIEST_TIME = -INT64_MAX


class SessionHeader(BaseModel):
    """Identity of one session log; stored once, when the log is materialised."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: str = Field(min_length=1)
    version: int = FORMAT_VERSION
    created_at: int = Field(default_factory=now_ms, ge=-INT64_MAX, le=INT64_MAX)
    cwd: str | None = None
    parent_id: str | None = None
    fork_seq: int | None = Field(default=None, ge=0, le=INT64_MAX)


_EVENT_SLOTS = ("seq", "type", "time", "data", "id")


@pydantic_dataclass(slots=True, config=ConfigDict(extra="forbid"))
class SessionEvent:
    """One log entry, immutable. ``data`` is not checked here:
    :meth:`sessionstore.EventLog.append` checks it is lossless JSON.

    A pydantic dataclass with slots rather than a ``BaseModel``: one object for the
    garbage collector instead of three, and cheaper to build (``docs/benchmarks.md``,
    "The event type"). Validation, its errors and the JSON schema are pydantic's; the
    methods of a frozen pydantic model are kept (``model_validate``,
    ``model_validate_json``, ``model_construct``, ``model_dump``, ``model_dump_json``,
    ``model_copy``, ``model_json_schema``, ``model_fields``, ``dict(event)``, and
    assignment raising ``ValidationError``). Not kept: ``isinstance(event, BaseModel)``,
    weak references, ``model_validate(..., strict=False)`` relaxing the fields (it raises
    ``InvalidArgumentError``), and ``exclude_unset`` (a dataclass does not track which
    fields were given, so every field is dumped).
    """

    seq: Annotated[int, Strict(), Field(ge=0, le=INT64_MAX)]
    type: StrictStr
    time: Annotated[int, Strict(), Field(ge=-INT64_MAX, le=INT64_MAX)]
    data: Any = Field(default_factory=dict)
    id: StrictStr | None = None

    #: The fields, as ``BaseModel.model_fields`` gives them.
    model_fields: ClassVar[dict[str, FieldInfo]]

    def __setattr__(self, name: str, value: Any) -> None:
        raise _frozen(name, value)

    def __delattr__(self, name: str) -> None:
        raise _frozen(name, None)

    def __hash__(self) -> int:
        """The hash of (seq, type, time, id): equal events hash alike whatever ``data``
        holds (a dict is not hashable, and ``1 == 1.0`` in it), and the events of one
        log, whose seqs differ, hash apart."""
        return hash((type(self), self.seq, self.type, self.time, self.id))

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        """(name, value) of each field, so ``dict(event)`` works as on a pydantic model."""
        for name in _EVENT_SLOTS:
            yield name, getattr(self, name)

    def __str__(self) -> str:
        return " ".join(f"{name}={value!r}" for name, value in self)

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _EVENT_SLOTS)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(_EVENT_SLOTS, state, strict=True):
            object.__setattr__(self, name, value)

    @classmethod
    def model_validate(cls, obj: Any, *, strict: bool | None = None) -> SessionEvent:
        """Validate ``obj`` (a mapping or a SessionEvent); ``ValidationError`` if invalid.
        Every field is always strict: ``strict`` may be None or True (the same), and
        ``strict=False``, which would ask pydantic to convert ``"5"`` to ``5``, raises
        ``InvalidArgumentError`` (convert the fields before validating)."""
        if strict is False:
            raise InvalidArgumentError(
                "SessionEvent fields are always strict: model_validate(strict=False) cannot "
                "relax them; convert the fields to their types first"
            )
        return _EVENT.validate_python(obj)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray) -> SessionEvent:
        """Parse and validate one event's JSON; ``ValidationError`` if invalid."""
        return _EVENT.validate_json(json_data)

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> SessionEvent:
        """An event built without validation, as pydantic's ``model_construct``: defaults
        fill what is missing, unknown names are ignored."""
        event = object.__new__(cls)
        values.setdefault("data", {})
        values.setdefault("id", None)
        for name in _EVENT_SLOTS:
            if name in values:
                object.__setattr__(event, name, values[name])
        return event

    @classmethod
    def model_json_schema(cls, **options: Any) -> dict[str, Any]:
        """The JSON schema of an event, by pydantic."""
        return _EVENT.json_schema(**options)

    def model_dump(self, **options: Any) -> dict[str, Any]:
        """The fields as a dict (pydantic's ``dump_python`` options: ``mode``,
        ``include``, ``exclude``, ``exclude_none``, ...)."""
        return _EVENT.dump_python(self, **options)

    def model_dump_json(self, *, indent: int | None = None, **options: Any) -> str:
        """The event as JSON text (pydantic's ``dump_json`` options)."""
        return _EVENT.dump_json(self, indent=indent, **options).decode()

    def model_copy(
        self, *, update: dict[str, Any] | None = None, deep: bool = False
    ) -> SessionEvent:
        """A copy with ``update`` applied, not validated (as pydantic's ``model_copy``)."""
        values = {name: getattr(self, name) for name in _EVENT_SLOTS}
        if deep:
            values = copy.deepcopy(values)
        return type(self).model_construct(**{**values, **(update or {})})


def _field_infos(cls: type) -> dict[str, FieldInfo]:
    """A pydantic dataclass's fields as ``BaseModel.model_fields`` lists them."""
    hints = get_type_hints(cls, include_extras=True)
    return {
        field.name: FieldInfo.from_annotated_attribute(
            hints[field.name], ... if field.default is MISSING else field.default
        )
        for field in fields(cls)
    }


SessionEvent.model_fields = _field_infos(SessionEvent)
_EVENT: TypeAdapter[SessionEvent] = TypeAdapter(SessionEvent)


def _frozen(name: str, value: Any) -> ValidationError:
    """The error a frozen pydantic model raises on assignment."""
    return ValidationError.from_exception_data(
        "SessionEvent", [{"type": "frozen_instance", "loc": (name,), "input": value}]
    )


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What ``info`` and ``list_info`` tell about a session from its metadata alone
    (no log parse): its ``header``, ``next_seq`` (the number of committed events),
    ``last_time`` (the ``time`` of the last committed event, None without events),
    ``expires_at`` (epoch ms, None when the session never expires) and ``busy`` (a live
    writer holds its lease)."""

    header: SessionHeader
    next_seq: int
    last_time: int | None
    expires_at: int | None
    busy: bool


#: Validates stored events in bulk (pydantic's public API; see :func:`events_from_json`).
_EVENT_LIST: TypeAdapter[list[SessionEvent]] = TypeAdapter(list[SessionEvent])


def events_from_json(text: bytes | str) -> list[SessionEvent]:
    """The events of a JSON array of event objects (``{"seq", "type", "time", "data",
    "id"?}``), parsed and validated in one pass by pydantic; ``ValidationError`` for
    anything that is not a valid :class:`SessionEvent` (``data`` may be any JSON here:
    a reader checks it is an object)."""
    return _EVENT_LIST.validate_json(text)


def events_from_records(records: list[dict[str, Any]]) -> list[SessionEvent]:
    """The events of parsed event objects, validated by pydantic (``data`` is kept as
    is, not copied); ``ValidationError`` for anything invalid."""
    return _EVENT_LIST.validate_python(records)


class _Built:
    """The slot layout of :class:`SessionEvent` with a plain ``__init__``: each instance
    turns itself into a SessionEvent (``__class__`` may be assigned between classes of
    the same slots), which builds an event at a fraction of validation's cost."""

    __slots__ = _EVENT_SLOTS

    def __init__(self, seq: int, kind: str, time: int, data: Any, event_id: str | None) -> None:
        self.seq = seq
        self.type = kind
        self.time = time
        self.data = data
        self.id = event_id
        self.__class__ = SessionEvent  # type: ignore[assignment]


def _constructed(seq: int, kind: str, time: int, data: Any, event_id: str | None) -> SessionEvent:
    return SessionEvent.model_construct(seq=seq, type=kind, time=time, data=data, id=event_id)


_build: Callable[[int, str, int, Any, str | None], Any] = _Built
try:
    _Built(0, "", 0, {}, None)
except TypeError:  # SessionEvent has gained a slot (a pydantic change): construct instead
    _build = _constructed

_INTS, _STRS, _DICTS = {int}, {str}, {dict}
_IDS = {str, type(None)}


def built_events(records: list[Any], first: int) -> list[SessionEvent] | None:
    """The events of parsed event objects (``orjson.loads`` output) when they are exactly
    what :func:`events_from_records` accepts with seqs ``first``, ``first + 1``, ... and
    ``data`` objects: equal events, built without pydantic, the fields checked column by
    column. None for anything else (a missing, extra or mistyped field, ``"id": null``,
    a bool for an int, a value outside 64 bits, a seq out of place, data that is not an
    object): the caller then has the full validation name the damage. Data is kept as
    is, not copied."""
    count = len(records)
    if not count:
        return []
    if set(map(type, records)) != _DICTS:
        return None
    # One list per field (a missing field reads as None, which no check below lets by).
    columns: list[list[Any]] = [list(map(dict.get, records, repeat(name))) for name in _EVENT_SLOTS]
    seqs, kinds, times, datas, ids = columns
    if (
        set(map(type, seqs)) != _INTS
        or seqs != list(range(first, first + count))
        or not 0 <= first <= first + count - 1 <= INT64_MAX
        or set(map(type, kinds)) != _STRS
        or set(map(type, times)) != _INTS
        or min(times) < -INT64_MAX
        or max(times) > INT64_MAX
        or set(map(type, datas)) != _DICTS
        or not set(map(type, ids)) <= _IDS
        # Four fields each, and a fifth (an id) where one was found: nothing else.
        or sum(map(len, records)) != 5 * count - ids.count(None)
    ):
        return None
    return list(map(_build, seqs, kinds, times, datas, ids))


#: A stored seq and time, as msgspec checks them while it parses (the ranges of
#: :class:`SessionEvent`'s fields).
StoredSeq = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
StoredTime = Annotated[int, msgspec.Meta(ge=-INT64_MAX, le=INT64_MAX)]


class _StoredEvent(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The exact shape of a stored event object, checked by msgspec while it parses:
    the fields and strictness of :class:`SessionEvent` (no bool for an int, no float
    for an int, 64-bit ranges, no other field) and a ``data`` object."""

    seq: StoredSeq
    type: str
    time: StoredTime
    data: dict[str, Any]
    id: str | None = None


_STORED = msgspec.json.Decoder(list[_StoredEvent])
_SEQ = attrgetter("seq")


def stored_events(
    text: bytes, first: int, count: int, skip: int = 0, stop: int | None = None
) -> list[SessionEvent] | None:
    """Events ``skip`` to ``stop`` of a JSON array of ``count`` stored event objects
    whose seqs are ``first``, ``first + 1``, ...: parsed and checked in one pass by
    msgspec (:class:`_StoredEvent`), then built without pydantic; equal to what the full
    validation (``orjson.loads``, then :func:`events_from_records`) gives. None for
    anything else (not JSON, not ``count``
    objects, a missing, extra or mistyped field, a seq out of place, data that is not
    an object, text msgspec would not decode as orjson does: see
    :func:`decodes_alike`): the caller then has the full validation name the damage."""
    found = decoded_in_place(_STORED, text, first, count, skip, stop)
    if found is None:
        return None
    # The struct's fields in the order of the event's (seq, type, time, data, id).
    return list(starmap(_build, map(astuple, found)))


def decoded_in_place(
    decoder: msgspec.json.Decoder[list[Any]],
    text: bytes,
    first: int,
    count: int,
    skip: int = 0,
    stop: int | None = None,
    *,
    numbers: bool = True,
) -> list[Any] | None:
    """Items ``skip`` to ``stop`` of ``text`` decoded by ``decoder`` into ``count`` objects
    with a ``seq`` each, when it decodes as ``orjson`` would parse it (see
    :func:`decodes_alike`; ``numbers``: the decoder parses the numbers inside data) and
    their seqs are ``first``, ``first + 1``, ...; else None."""
    if not decodes_alike(text, numbers):
        return None
    try:
        found = decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(found) != count or list(map(_SEQ, found)) != list(range(first, first + count)):
        return None
    return found[skip:stop] if skip or (stop is not None and stop < count) else found


def holds_stored_events(text: bytes, first: int, count: int) -> bool:
    """Whether :func:`stored_events` takes ``text`` (``count`` events from seq ``first``),
    without building the events."""
    return decoded_in_place(_STORED, text, first, count) is not None


#: orjson parses 1023 levels of nesting; msgspec as many as the recursion limit lets it,
#: which an application (or a test runner) may raise, and far past it can overflow the C
#: stack. Above this limit the msgspec paths step aside for orjson's.
MSGSPEC_RECURSION_LIMIT = 1024
#: Digits to "0", everything else to a space: a run of 19 "0"s is a long integer.
_DIGITS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_NUMBER = b"0" * 19


def decodes_alike(text: bytes, numbers: bool = True) -> bool:
    """Whether msgspec decodes ``text`` into what ``orjson.loads`` makes of it: the
    recursion limit keeps it within orjson's nesting, and (with ``numbers``) no run of 19
    digits could be an integer past 64 bits, which msgspec keeps exact where orjson
    makes a float (a run inside a string is let through to orjson too)."""
    if sys.getrecursionlimit() > MSGSPEC_RECURSION_LIMIT:
        return False
    return not numbers or text.translate(_DIGITS).find(_LONG_NUMBER) < 0


def describe_invalid(exc: ValidationError, most: int = 3) -> str:
    """A short account of what ``exc`` found wrong: field and message of its first
    ``most`` errors, without the input values (which may be huge)."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False)[:most]:
        where = ".".join(str(part) for part in error["loc"]) or "(the record)"
        parts.append(f"{elide(where)}: {error['msg']}")
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)
