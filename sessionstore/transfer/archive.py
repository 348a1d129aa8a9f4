"""The archive of a namespace (``sessionstore export`` / ``import``): JSON Lines, one
record per line, readable with ``jq``, optionally gzipped.

Format version 1, line by line::

    {"format": "sessionstore-archive", "version": 1, "namespace": "<exported from>"}
    {"type": "session", "header": {"id", "version", "created_at", "cwd", "parent_id",
     "fork_seq"}, "events": <count>, "expires_at": <epoch ms>|null, "live": <bool>}
    {"type": "events", "session": "<id>", "events": [{"seq", "type", "time", "data",
     "id"?}, ...]}                       (at most 1000 a line, in seq order, from 0)
    {"type": "session_end", "session": "<id>"}
    {"type": "value", "key": {"symbol", "strategy", "exchange", "frame", "mode"},
     "plain": {"when": <ms>, "payload": "<base64 msgpack>"}|null,
     "versions": [{"when": <ms>, "payload": "<base64 msgpack>"|null}, ...],
     "expires_at": <epoch ms>|null}
    {"type": "end", "sessions": n, "events": n, "values": n, "lines": n,
     "sha256": "<hex of every line before this one, newlines included>"}

Each event is the canonical JSON every backend stores (``id`` left out when None);
a value's records are its msgpack bytes as stored (a null payload is a recorded
clear), so nothing is lost in either. A ``live`` session had a writer when it was
exported: it holds the events committed then. An archive is read whole before
anything is imported: a line that is not such a record, records out of order, an
archive cut short (no ``end`` line) or altered (its lines' digest differs) is
refused with the number of the line, and nothing is written.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import orjson

from ..arguments import check_binary_stream, check_flag, value_key
from ..codec import load_value
from ..contracts import Stored
from ..errors import HarnessFieldError, SessionStoreError
from ..eventlog import encode_batch, event_text
from ..keys import label_of
from ..models import SessionEvent, SessionHeader
from ..results import ValueRef
from ..store import Store, connect
from ..when import expired, now_ms
from . import records as rec
from .copying import CopyReport, NamespaceNotEmptyError, opened, write_all
from .intake import NamespaceWriter
from .records import Record, read_namespace

FORMAT = "sessionstore-archive"
VERSION = 1
_KEY = ("symbol", "strategy", "exchange", "frame", "mode")
_GZIP_MAGIC = b"\x1f\x8b"


class ArchiveError(SessionStoreError):
    """An archive that cannot be imported: ``line`` (1-based) says where, ``detail``
    what is wrong there."""

    def __init__(self, line: int, detail: str) -> None:
        self.line, self.detail = line, detail
        super().__init__(f"archive line {line}: {detail}; nothing was imported")


def _payload(record: Stored | None) -> dict[str, Any] | None:
    if record is None:
        return None
    data = None if record.payload is None else base64.b64encode(record.payload).decode()
    return {"when": record.when, "payload": data}


def record_lines(records: Iterable[Record], namespace: str) -> Iterator[bytes]:
    """Each record as one line of the archive (newline included), the first and the
    ``end`` line added."""
    digest, lines = hashlib.sha256(), 0
    counts = {"sessions": 0, "events": 0, "values": 0}

    def line(obj: Any) -> bytes:
        nonlocal lines
        text = orjson.dumps(obj) + b"\n"
        digest.update(text)
        lines += 1
        return text

    yield line({"format": FORMAT, "version": VERSION, "namespace": namespace})
    for record in records:
        if isinstance(record, rec.SessionStart):
            counts["sessions"] += 1
            yield line(
                {
                    "type": "session",
                    "header": record.header.model_dump(mode="json"),
                    "events": record.next_seq,
                    "expires_at": record.expires_at,
                    "live": record.busy,
                }
            )
        elif isinstance(record, rec.EventPage):
            counts["events"] += len(record.events)
            texts = b",".join(event_text(event) for event in record.events)
            session = orjson.dumps(record.session_id)
            text = b'{"type":"events","session":' + session + b',"events":[' + texts + b"]}\n"
            digest.update(text)
            lines += 1
            yield text
        elif isinstance(record, rec.SessionEnd):
            yield line({"type": "session_end", "session": record.session_id})
        elif isinstance(record, rec.SessionDamaged | rec.ValueDamaged):
            raise record.error  # an archive holds nothing damaged: the export stops
        else:
            counts["values"] += 1
            yield line(
                {
                    "type": "value",
                    "key": dict(zip(_KEY, record.ref[:5], strict=True)),
                    "plain": _payload(record.plain),
                    "versions": [_payload(version) for version in record.versions],
                    "expires_at": record.expires_at,
                }
            )
    end = {"type": "end", **counts, "lines": lines, "sha256": digest.hexdigest()}
    yield orjson.dumps(end) + b"\n"


class _Reader:
    """Parses the lines of an archive into records, checking every rule of the format."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.number = 0
        self.session: rec.SessionStart | None = None
        self.seen = 0
        self.counts = {"sessions": 0, "events": 0, "values": 0}
        self.ended = False

    def fail(self, detail: str) -> ArchiveError:
        return ArchiveError(self.number, detail)

    def parse(self, text: bytes) -> Record | None:
        self.number += 1
        if self.ended:
            raise self.fail("a line after the end record")
        try:
            obj = orjson.loads(text.rstrip(b"\n"))
        except orjson.JSONDecodeError as exc:
            raise self.fail(f"not JSON ({exc.msg} at character {exc.pos})") from None
        if not isinstance(obj, dict):
            raise self.fail("not a JSON object")
        try:
            return self._record(obj, text)
        except ArchiveError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, SessionStoreError) as exc:
            detail = str(exc)[:200] or type(exc).__name__
            raise self.fail(
                f"a malformed {obj.get('type', 'record')!s:.40} record ({detail})"
            ) from None

    def _record(self, obj: dict[str, Any], text: bytes) -> Record | None:
        if self.number == 1:
            if obj.get("format") != FORMAT:
                raise self.fail(f"not a {FORMAT} (no format line)")
            if obj.get("version") != VERSION:
                raise self.fail(f"format version {obj.get('version')!r}; this reads {VERSION}")
            self.digest.update(text)
            return None
        kind = obj["type"]
        if kind == "end":
            self._end(obj)
            return None
        self.digest.update(text)
        if kind == "session":
            self._no_open_session()
            start = rec.SessionStart(
                SessionHeader.model_validate(obj["header"]),
                _count(obj["events"]),
                _optional_int(obj["expires_at"]),
                bool(obj.get("live", False)),
            )
            self.session, self.seen = start, 0
            self.counts["sessions"] += 1
            return start
        if kind == "events":
            session = self._open_session(obj["session"])
            events = [SessionEvent(**event) for event in obj["events"]]
            for event in events:
                if event.seq != self.seen:
                    raise self.fail(f"event seq {event.seq} where {self.seen} was due")
                self.seen += 1
            # What an append would refuse (data that is not a lossless object) is
            # refused here, before anything is written. A harness event's fields are
            # not: a log written before their check still loads, and the write reports
            # it as a copy does.
            with contextlib.suppress(HarnessFieldError):
                encode_batch(session.header.id, events)
            if self.seen > session.next_seq:
                raise self.fail(f"more events than the {session.next_seq} announced")
            self.counts["events"] += len(events)
            return rec.EventPage(session.header.id, events)
        if kind == "session_end":
            session = self._open_session(obj["session"])
            if self.seen != session.next_seq:
                raise self.fail(f"{self.seen} events where {session.next_seq} were announced")
            self.session = None
            return rec.SessionEnd(session.header.id)
        if kind == "value":
            self._no_open_session()
            key = obj["key"]
            symbol, strategy, exchange, frame, mode = (key[name] for name in _KEY)
            parts = [symbol, strategy, exchange, frame, mode]
            if not all(isinstance(part, str) for part in parts):
                raise self.fail("a value key part that is not a string")
            value_key("archive", *parts)  # the key's parts and mode, as a write checks them
            plain = _stored(obj["plain"], plain=True)
            versions = [_version(version) for version in obj["versions"]]
            for stored in (plain, *versions):
                if stored is not None and stored.payload is not None:
                    load_value(stored.payload, label_of(parts))  # msgpack a read can load
            self.counts["values"] += 1
            ref = ValueRef(symbol, strategy, exchange, frame, mode, bool(versions) and not plain)
            return rec.ValueItem(ref, plain, versions, _optional_int(obj["expires_at"]))
        raise self.fail(f"an unknown record type {kind!r:.40}")

    def _no_open_session(self) -> None:
        if self.session is not None:
            raise self.fail(f"session {self.session.header.id!r} has no session_end before it")

    def _open_session(self, session_id: object) -> rec.SessionStart:
        if self.session is None or self.session.header.id != session_id:
            raise self.fail(f"records of session {session_id!r:.60} outside it")
        return self.session

    def _end(self, obj: dict[str, Any]) -> None:
        self._no_open_session()
        expected = {**self.counts, "lines": self.number - 1}
        found = {name: obj.get(name) for name in expected}
        if found != expected:
            raise self.fail(f"the end record counts {found}, the archive holds {expected}")
        if obj.get("sha256") != self.digest.hexdigest():
            raise self.fail("the lines before it do not match its sha256: the archive was altered")
        self.ended = True

    def finish(self) -> None:
        if not self.ended:
            self.number += 1
            raise self.fail("the archive ends before its end record (truncated)")


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("a count that is not a non-negative int")
    return value


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("a time that is not an int")
    return value


def _stored(obj: Any, *, plain: bool = False) -> Stored | None:
    if obj is None and plain:
        return None
    when, payload = _optional_int(obj["when"]), obj["payload"]
    if when is None:
        raise ValueError("a record without its 'when'")
    if payload is None:
        if plain:
            raise ValueError("a plain record without a payload")
        return Stored(None, when)
    return Stored(base64.b64decode(payload, validate=True), when)


def _version(obj: Any) -> Stored:
    found = _stored(obj)
    if found is None:
        raise ValueError("a version that is null")
    return found


def read_records(lines: Iterable[bytes]) -> Iterator[Record]:
    """The records of an archive's lines; :class:`ArchiveError` naming the line at the
    first that breaks a rule of the format (see the module docstring)."""
    reader = _Reader()
    texts = iter(lines)
    while True:
        try:
            text = next(texts, None)
        except (OSError, EOFError, zlib.error) as exc:  # a damaged gzip stream
            raise ArchiveError(reader.number + 1, f"the gzip stream is damaged ({exc})") from None
        if text is None:
            break
        record = reader.parse(text)
        if record is not None:
            yield record
    reader.finish()


def check(lines: Iterable[bytes]) -> tuple[set[str], set[ValueRef], bool]:
    """Read a whole archive (raising :class:`ArchiveError` as :func:`read_records`);
    the session ids and value keys it holds, and whether a session of it has not
    expired (and so is to be written)."""
    sessions: set[str] = set()
    values: set[ValueRef] = set()
    live = False
    now = now_ms()
    for record in read_records(lines):
        if isinstance(record, rec.SessionStart):
            sessions.add(record.header.id)
            live = live or not expired(record.expires_at, now)
        elif isinstance(record, rec.ValueItem):
            values.add(record.ref)
    return sessions, values, live


def other_data(store: Store, sessions: set[str], values: set[ValueRef]) -> tuple[int, int]:
    """How many sessions and values ``store``'s namespace holds that are not these
    (values compared by key, whatever their kind)."""
    keys = {ref[:5] for ref in values}
    return (
        sum(header.id not in sessions for header in store.events.list()),
        sum(ref[:5] not in keys for ref in store.list_values()),
    )


@contextmanager
def opened_lines(source: IO[bytes]) -> Iterator[Iterator[bytes]]:
    """The lines of ``source`` (gunzipped when it is gzip), read again from the start
    on every iteration: a stream that cannot seek is first copied to a temporary file."""
    spool: IO[bytes] | None = None
    if not source.seekable():
        spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
        shutil.copyfileobj(source, spool)
        source = spool
    try:
        yield _Rereadable(source)  # type: ignore[misc]
    finally:
        if spool is not None:
            spool.close()


class _Rereadable:
    def __init__(self, source: IO[bytes]) -> None:
        self.source = source

    def __iter__(self) -> Iterator[bytes]:
        self.source.seek(0)
        head = self.source.read(2)
        self.source.seek(0)
        if head == _GZIP_MAGIC:
            yield from gzip.GzipFile(fileobj=self.source, mode="rb")
        else:
            yield from self.source


def export_archive(
    url: str | os.PathLike[str] | None,
    namespace: str,
    out: IO[bytes],
    *,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Write the archive of ``namespace`` of the store ``url`` to ``out`` (see the
    module docstring); returns the counts of its end record and ``live``, the sessions
    that had a live writer (exported up to their committed events)."""
    check_binary_stream("out", out, "write")
    source = opened(url, namespace, timeout, source=True)
    live: list[str] = []
    end: dict[str, Any] = {}
    with source as store:
        records = read_namespace(store)
        for text in record_lines(records, namespace):
            out.write(text)
            if text.startswith(b'{"type":"session",'):
                found = orjson.loads(text)
                if found["live"]:
                    live.append(found["header"]["id"])
            end = orjson.loads(text)
    end.pop("type", None)
    return {**end, "live": live}


def import_archive(
    url: str | os.PathLike[str] | None,
    namespace: str,
    source: IO[bytes],
    *,
    merge: bool = False,
    timeout: float | None = None,
    on_record: Callable[[Record], None] | None = None,
) -> CopyReport:
    """Import an archive (plain or gzipped; a stream that cannot seek is first copied
    to a temporary file) into ``namespace`` of the store ``url``, exactly as
    :func:`~.copying.copy` writes. The whole archive is read first: a damaged or
    truncated one raises :class:`ArchiveError` naming the line, and nothing is
    written. A namespace holding sessions or values the archive does not raises
    :class:`~.copying.NamespaceNotEmptyError` unless ``merge``. An import interrupted
    and run again goes on where it stopped, as a copy does."""
    check_binary_stream("source", source, "read")
    merge = check_flag("merge", merge)
    with opened_lines(source) as lines:
        sessions, values, live = check(lines)
        with connect(url, namespace, timeout=timeout) as store:
            if not merge:
                found = other_data(store, sessions, values)
                if any(found):
                    raise NamespaceNotEmptyError(namespace, *found)
            if live:
                store.check_durable()  # before any write, not at the first session
            writer = NamespaceWriter(store)
            write_all(read_records(lines), writer, on_record)
    return CopyReport(writer.counts, writer.problems)
