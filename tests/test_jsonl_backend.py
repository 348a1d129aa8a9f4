"""The JSONL backend for session event logs (``file://``): file format, lazy
materialisation, torn tails versus corruption, headers, listing and cross-process appends."""

from __future__ import annotations

import multiprocessing
import os
import random
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.events import batch_of, stored

import sessionstore
from sessionstore import (
    CorruptLogError,
    SeqConflictError,
    SessionEvent,
    SessionExistsError,
    SessionHeader,
    SessionNotFoundError,
    UnsupportedVersionError,
)
from sessionstore.backends import fdpool, jsonl, jsonl_cache, jsonl_format, jsonl_io
from sessionstore.backends.jsonl import JsonlEvents
from sessionstore.backends.jsonl_format import ParsedLog, event_lines
from sessionstore.contracts import EventBatch
from sessionstore.eventlog import encode_batch
from sessionstore.jsondata import dump_lossless
from sessionstore.store import Store

SID = "session-1"
HEADER = SessionHeader(id=SID, created_at=1_700_000_000_000, cwd="/work", parent_id="p", fork_seq=3)
BATCHES = [(0, 3), (3, 5), (5, 8)]


def connect(tmp_path: Path, namespace: str = "ns") -> Store:
    return sessionstore.connect((tmp_path / "store").as_uri(), namespace=namespace)


def event(seq: int, **data: Any) -> SessionEvent:
    return SessionEvent(seq=seq, type="note", time=1000 + seq, data=data)


def events(first: int, stop: int) -> list[SessionEvent]:
    return [
        SessionEvent(
            seq=seq,
            type="note",
            time=1000 + seq,
            data={"n": seq, "text": f'ünïcode \u2028 "quoted" {seq}', "f": seq / 3},
            id=f"e{seq}" if seq % 2 else None,
        )
        for seq in range(first, stop)
    ]


def three_batch_log(store: Store) -> tuple[Path, list[int]]:
    """A log of three batches; returns its path and the file size after each batch."""
    store.events.create(HEADER)
    path = Path(store.events.locate(SID) or "")
    sizes = []
    for first, stop in BATCHES:
        store.events.append(SID, events(first, stop))
        sizes.append(path.stat().st_size)
    return path, sizes


def line_of(raw: bytes, offset: int) -> int:
    return raw.count(b"\n", 0, offset) + 1


# --- format and layout ----------------------------------------------------------------


def test_nothing_exists_on_disk_before_the_first_append(tmp_path: Path) -> None:
    with connect(tmp_path) as store:
        store.events.create(HEADER)
        path = Path(store.events.locate(SID) or "")
        assert path.is_absolute()
        assert path == tmp_path / "store" / "ns" / "logs" / f"{SID}.jsonl"
        assert not (tmp_path / "store").exists()
        assert store.events.list() == []
        store.events.append(SID, events(0, 2))
        assert path.exists()
        assert store.events.list() == [HEADER]


def test_file_is_a_header_line_then_one_line_per_event(tmp_path: Path) -> None:
    with connect(tmp_path) as store:
        path, _ = three_batch_log(store)
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert orjson.loads(lines[0]) == {
        "id": SID,
        "version": 1,
        "created_at": 1_700_000_000_000,
        "cwd": "/work",
        "parent_id": "p",
        "fork_seq": 3,
    }
    records = [orjson.loads(line) for line in lines[1:]]
    assert [r["seq"] for r in records] == list(range(8))
    assert [r["batch_end"] for r in records] == [2, 2, 2, 4, 4, 7, 7, 7]
    assert list(records[1]) == ["seq", "type", "time", "data", "id", "batch_end"]
    assert list(records[0]) == ["seq", "type", "time", "data", "batch_end"]
    assert records[1]["data"] == events(1, 2)[0].data


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(), json_values, max_size=5))
def test_data_comes_back_as_the_same_canonical_text(tmp_path: Path, data: dict[str, Any]) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    session_id = uuid.uuid4().hex
    batch = encode_batch(session_id, [SessionEvent(seq=0, type="t", time=1, data=data)])
    backend.append(session_id, batch, SessionHeader(id=session_id))
    _, [read] = backend.read(session_id)
    assert read == SessionEvent(seq=0, type="t", time=1, data=data)
    assert dump_lossless(read.data).encode() in batch.texts[0]
    line = Path(backend.locate(session_id) or "").read_bytes().split(b"\n")[1]
    assert orjson.dumps(orjson.loads(line)) == line


@pytest.mark.parametrize(
    "session_id", ["../../etc/passwd", "a/b", ".", "..", "%2E", "\n", "日本", "x" * 1000]
)
def test_hostile_session_ids_stay_in_the_logs_folder(tmp_path: Path, session_id: str) -> None:
    logs = tmp_path / "store" / "ns" / "logs"
    with connect(tmp_path) as store:
        store.events.create(SessionHeader(id=session_id))
        store.events.append(session_id, events(0, 1))
        path = Path(store.events.locate(session_id) or "")
        assert path.parent == logs
        assert len(path.name.encode()) <= 255
        assert [p for p in (tmp_path / "store").rglob("*") if p.is_file()] == [path]
        assert store.events.load(session_id).header.id == session_id


def test_namespaces_are_isolated(tmp_path: Path) -> None:
    with connect(tmp_path, "a") as first, connect(tmp_path, "b") as second:
        first.events.create(HEADER)
        first.events.append(SID, events(0, 1))
        assert second.events.list() == []
        with pytest.raises(SessionNotFoundError):
            second.events.load(SID)
        assert first.events.locate(SID) != second.events.locate(SID)


# --- append rules -----------------------------------------------------------------------


def test_an_identical_replay_writes_nothing_and_a_different_one_conflicts(
    tmp_path: Path,
) -> None:
    with connect(tmp_path) as store:
        path, _ = three_batch_log(store)
        before = path.read_bytes()
        assert store.events.append(SID, events(3, 5)) == 8
        assert path.read_bytes() == before
        with pytest.raises(SeqConflictError):
            store.events.append(SID, [event(3, other=True)])
        with pytest.raises(SeqConflictError):
            store.events.append(SID, [event(9)])
        assert path.read_bytes() == before
        assert store.events.append(SID, [event(8)]) == 9


def test_header_rules_of_the_backend(tmp_path: Path) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    path = Path(backend.locate(SID) or "")
    first = encode_batch(SID, events(0, 2))
    with pytest.raises(SessionNotFoundError):
        backend.append(SID, first, None)
    with pytest.raises(SeqConflictError):
        backend.append(SID, encode_batch(SID, events(1, 2)), HEADER)
    assert not path.exists()
    assert backend.append(SID, first, HEADER) == 2
    with pytest.raises(SessionExistsError):
        backend.append(SID, encode_batch(SID, events(2, 3)), SessionHeader(id=SID))
    assert backend.append(SID, encode_batch(SID, events(2, 3)), HEADER) == 3
    assert backend.append(SID, encode_batch(SID, events(3, 4)), None) == 4


def test_read_honours_from_seq_and_limit(tmp_path: Path) -> None:
    with connect(tmp_path) as store:
        three_batch_log(store)
        backend = JsonlEvents(tmp_path / "store", "ns")
        header, found = backend.read(SID, 2, limit=3)
        assert header == HEADER
        assert [e.seq for e in found] == [2, 3, 4]
        assert backend.read(SID, 7, limit=5)[1] == events(7, 8)
        assert backend.read(SID, 9)[1] == []
        assert [e.seq for e in store.events.iter_events(SID, batch=3)] == list(range(8))


# --- torn tails -------------------------------------------------------------------------


def test_a_torn_first_append(tmp_path: Path) -> None:
    with connect(tmp_path) as store:
        store.events.create(HEADER)
        store.events.append(SID, events(0, 3))
        path = Path(store.events.locate(SID) or "")
        full = path.read_bytes()
    header_end = full.index(b"\n") + 1
    backend = JsonlEvents(tmp_path / "store", "ns")
    for cut in range(len(full)):
        path.write_bytes(full[:cut])
        if cut < header_end:
            assert not backend.exists(SID)
            assert backend.list() == []
            with pytest.raises(SessionNotFoundError):
                backend.read(SID, repair=True)
            assert path.read_bytes() == full[:cut]
        else:
            assert backend.read(SID, repair=True) == (HEADER, [])
            assert path.read_bytes() == full[:header_end]
    path.write_bytes(full[: header_end - 1])
    with connect(tmp_path) as store:
        store.events.create(HEADER)
        store.events.append(SID, events(0, 3))
    assert path.read_bytes() == full


# --- corruption -------------------------------------------------------------------------


def test_a_damaged_byte_is_corruption_unless_it_is_the_final_newline(tmp_path: Path) -> None:
    """A complete line that does not parse is damage, the last line's too (SQLite and
    Redis refuse a damaged last event alike); only a last line without its newline is a
    torn write."""
    with connect(tmp_path) as store:
        path, sizes = three_batch_log(store)
    full = path.read_bytes()
    for offset in range(len(full)):
        damaged = full[:offset] + b"\xff" + full[offset + 1 :]
        path.write_bytes(damaged)
        with connect(tmp_path) as store:
            if offset == len(full) - 1:
                assert store.events.load(SID).events == events(0, 5)
                assert path.read_bytes() == full[: sizes[1]]
                continue
            with pytest.raises(CorruptLogError) as caught:
                store.events.load(SID)
            assert caught.value.line == line_of(full, offset), offset
            # an event line names its seq; the header (line 1) has none
            assert (caught.value.seq is None) == (line_of(full, offset) == 1), offset
            assert caught.value.session_id == SID
            with pytest.raises(CorruptLogError):
                store.events.append(SID, [event(8)])
        assert path.read_bytes() == damaged, f"rewritten after damage at {offset}"


def test_zero_bytes_in_the_final_batch_are_a_torn_write(tmp_path: Path) -> None:
    """A crash before the fsync can leave zeros where bytes of the final batch were not
    written yet, with bytes after them written (its final newline too): the batch is
    torn and left out, when what follows the zeros is that batch's (known by a line of
    it before them) or zeros to the end. Zeros followed by events that may be of a later
    batch, and zeros in an earlier batch, are damage: refused, nothing rewritten."""
    with connect(tmp_path) as store:
        path, sizes = three_batch_log(store)
    full = path.read_bytes()
    first_line_end = full.index(b"\n", sizes[1])  # the final batch's first line
    holes = {(a, b) for a in range(sizes[1], len(full)) for b in (a + 1, a + 9, len(full) - 1)}
    for start, stop in sorted((a, min(b, len(full))) for a, b in holes if a < b):
        damaged = full[:start] + bytes(stop - start) + full[stop:]
        path.write_bytes(damaged)
        with connect(tmp_path) as store:
            if start > first_line_end or stop >= len(full) - 1:
                assert store.events.load(SID).events == events(0, 5), (start, stop)
                assert path.read_bytes() == full[: sizes[1]], (start, stop)
                continue
            with pytest.raises(CorruptLogError):
                store.events.load(SID)
        assert path.read_bytes() == damaged, (start, stop)
    rng = random.Random(7)
    earlier = rng.sample(range(sizes[1] - 1), 60) + [sizes[0] - 1, sizes[1] - 2]
    # a whole committed batch zeroed, a committed one after it
    earlier_batch = (sizes[0], sizes[1] - 1)
    for start, stop in [(o, o + 2) for o in earlier] + [earlier_batch]:
        damaged = full[:start] + bytes(stop - start) + full[stop:]
        path.write_bytes(damaged)
        with connect(tmp_path) as store, pytest.raises(CorruptLogError):
            store.events.load(SID)
        assert path.read_bytes() == damaged, (start, stop)


def test_a_deleted_line_before_the_end_is_corruption(tmp_path: Path) -> None:
    with connect(tmp_path) as store:
        path, _ = three_batch_log(store)
    full = path.read_bytes()
    lines = full.splitlines(keepends=True)
    for number in range(1, len(lines)):
        damaged = b"".join(lines[: number - 1] + lines[number:])
        path.write_bytes(damaged)
        with connect(tmp_path) as store, pytest.raises(CorruptLogError) as caught:
            store.events.load(SID)
        assert caught.value.line == number
        assert path.read_bytes() == damaged


def _edit_line(raw: bytes, number: int, edit: Any) -> bytes:
    lines = raw.split(b"\n")
    record = orjson.loads(lines[number - 1])
    lines[number - 1] = orjson.dumps(edit(record))
    return b"\n".join(lines)


@pytest.mark.parametrize(
    ("number", "edit", "seq"),
    [
        (3, lambda r: {k: v for k, v in r.items() if k != "time"}, 1),
        (3, lambda r: {**r, "type": 5}, 1),
        (3, lambda r: {**r, "data": [1]}, 1),
        (3, lambda r: {**r, "batch_end": 6}, 1),
        (5, lambda r: {**r, "batch_end": 2}, 3),
        (4, lambda r: {**r, "seq": 3}, 3),
        (4, lambda r: [r], 2),
        (3, lambda r: {**r, "time": 2**63}, 1),
        (3, lambda r: {**r, "id": 5}, 1),
        (3, lambda r: {**r, "note": "an unknown field"}, 1),
        (1, lambda r: {**r, "id": "someone-else"}, None),
        (1, lambda r: {k: v for k, v in r.items() if k != "created_at"}, None),
    ],
)
def test_inconsistent_lines_before_the_end_are_corruption(
    tmp_path: Path, number: int, edit: Any, seq: int | None
) -> None:
    with connect(tmp_path) as store:
        path, _ = three_batch_log(store)
    damaged = _edit_line(path.read_bytes(), number, edit)
    path.write_bytes(damaged)
    with connect(tmp_path) as store, pytest.raises(CorruptLogError) as caught:
        store.events.load(SID)
    assert (caught.value.line, caught.value.seq) == (number, seq)
    with connect(tmp_path) as store, pytest.raises(CorruptLogError) as caught:
        list(store.events.iter_events(SID, batch=2))
    assert (caught.value.line, caught.value.seq) == (number, seq)
    assert path.read_bytes() == damaged


def test_a_duplicated_line_is_corruption(tmp_path: Path) -> None:
    with connect(tmp_path) as store:
        path, _ = three_batch_log(store)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4] + lines[3:]))
    with connect(tmp_path) as store, pytest.raises(CorruptLogError) as caught:
        store.events.read_from(SID, 0)
    assert caught.value.line == 5


def test_an_unknown_header_version_is_unsupported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with connect(tmp_path) as store:
        path, _ = three_batch_log(store)
    damaged = _edit_line(path.read_bytes(), 1, lambda r: {**r, "version": 2, "new": "field"})
    path.write_bytes(damaged)
    with connect(tmp_path) as store:
        with pytest.raises(UnsupportedVersionError) as caught:
            store.events.load(SID)
        assert caught.value.found == 2
        with pytest.raises(UnsupportedVersionError):
            store.events.append(SID, [event(8)])
        with caplog.at_level("WARNING", logger="sessionstore"):
            assert store.events.list() == []
        assert "version 2" in caplog.text
    assert path.read_bytes() == damaged


# --- list and delete --------------------------------------------------------------------


def test_list_reads_only_the_header_lines(tmp_path: Path) -> None:
    headers = [SessionHeader(id=f"s{n}", created_at=n) for n in range(3)]
    with connect(tmp_path) as store:
        for header in headers:
            store.events.create(header)
            store.events.append(header.id, events(0, 2))
        second = Path(store.events.locate("s1") or "")
        second.write_bytes(second.read_bytes().replace(b'"seq":0', b'"seq":x'))
        third = Path(store.events.locate("s2") or "")
        third.write_bytes(third.read_bytes()[:10])
        (third.parent / "notes.txt").write_text("not a log\n")
        assert store.events.list() == headers[:2]
        with pytest.raises(CorruptLogError):
            store.events.load("s1")


def test_delete_removes_the_file(tmp_path: Path) -> None:
    with connect(tmp_path) as store:
        path, _ = three_batch_log(store)
        store.events.delete(SID)
        assert not path.exists()
        with pytest.raises(SessionNotFoundError):
            store.events.delete(SID)
        with pytest.raises(SessionNotFoundError):
            store.events.load(SID)
        store.events.create(HEADER)
        store.events.append(SID, events(0, 1))
        assert store.events.load(SID).events == events(0, 1)


# --- appends parse only what they have not seen ----------------------------------------


def batch(first: int, stop: int) -> EventBatch:
    return encode_batch(SID, events(first, stop))


@pytest.fixture
def parsing(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many event lines and whole logs the backend parses while the test runs."""
    counts = {"lines": 0, "logs": 0}
    parse_event, parse_log = jsonl_format.parse_event, jsonl_format.parse_log

    def counted_event(line: bytes) -> tuple[dict[str, Any], int]:
        counts["lines"] += 1
        return parse_event(line)

    def counted_log(session_id: str, raw: bytes, where: str | None = None) -> ParsedLog:
        counts["logs"] += 1
        return parse_log(session_id, raw, where)

    monkeypatch.setattr(jsonl_format, "parse_event", counted_event)
    monkeypatch.setattr(jsonl_io, "parse_event", counted_event)
    validated_whole = jsonl_cache.validated_whole

    def counted_validation(*args: Any) -> Any:
        counts["logs"] += 1
        return validated_whole(*args)

    monkeypatch.setattr(jsonl, "parse_log", counted_log)
    monkeypatch.setattr(jsonl_cache, "validated_whole", counted_validation)
    return counts


def reset(counts: dict[str, int]) -> None:
    counts.update(lines=0, logs=0)


def test_appends_do_not_reread_what_they_wrote(tmp_path: Path, parsing: dict[str, int]) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    backend.append(SID, batch(0, 3), HEADER)
    reset(parsing)
    for first in range(3, 300, 3):
        assert backend.append(SID, batch(first, first + 3), None) == first + 3
    assert parsing == {"lines": 0, "logs": 0}
    assert backend.read(SID) == (HEADER, events(0, 300))


def test_an_append_parses_only_the_batches_appended_elsewhere_since(
    tmp_path: Path, parsing: dict[str, int]
) -> None:
    mine, other = JsonlEvents(tmp_path, "ns"), JsonlEvents(tmp_path, "ns")
    mine.append(SID, batch(0, 3), HEADER)
    mine.append(SID, batch(3, 5), None)
    other.append(SID, batch(5, 6), None)
    other.append(SID, batch(6, 8), None)
    reset(parsing)
    with pytest.raises(SeqConflictError) as caught:
        mine.append(SID, encode_batch(SID, [event(5, other=True)]), None)
    assert caught.value.expected == 8
    assert mine.append(SID, batch(8, 10), None) == 10
    assert parsing == {"lines": 3, "logs": 0}
    path = Path(mine.locate(SID) or "")
    before = path.read_bytes()
    assert mine.append(SID, batch(5, 7), None) == 10, "an applied replay of older events"
    assert path.read_bytes() == before
    assert other.read(SID) == (HEADER, events(0, 10))


def test_an_append_after_another_store_appended_lands_contiguously(tmp_path: Path) -> None:
    with connect(tmp_path) as mine, connect(tmp_path) as other:
        mine.events.create(HEADER)
        mine.events.append(SID, events(0, 3))
        other.events.append(SID, events(3, 5))
        with pytest.raises(SeqConflictError) as caught:
            mine.events.append(SID, [event(3, mine=True)])
        assert caught.value.expected == 5
        assert mine.events.append(SID, events(5, 8)) == 8
        other.events.append(SID, events(8, 9))
        assert mine.events.append(SID, events(9, 10)) == 10
        assert other.events.load(SID).events == events(0, 10)


def test_a_torn_tail_left_beyond_what_an_append_saw_is_cut_off(
    tmp_path: Path, parsing: dict[str, int]
) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    backend.append(SID, batch(0, 3), HEADER)
    path = Path(backend.locate(SID) or "")
    committed = path.read_bytes()
    lines = event_lines(batch(3, 6))
    for cut in range(1, len(lines)):
        path.write_bytes(committed)
        backend.read(SID)
        with path.open("ab") as log:
            log.write(lines[:cut])
        reset(parsing)
        with pytest.raises(SeqConflictError):
            backend.append(SID, batch(4, 5), None)
        assert path.read_bytes() == committed + lines[:cut], "a refused append wrote"
        assert backend.append(SID, batch(3, 6), None) == 6
        assert path.read_bytes() == committed + lines, f"not cut back at {cut}"
        assert parsing["logs"] == 0


def test_a_log_rewritten_in_place_is_parsed_whole(tmp_path: Path) -> None:
    backend = JsonlEvents(tmp_path / "a", "ns")
    backend.append(SID, batch(0, 3), HEADER)
    path = Path(backend.locate(SID) or "")
    other = JsonlEvents(tmp_path / "b", "ns")
    longer = [stored(seq, "other", seq, {"pad": "x" * seq}) for seq in range(6)]
    other.append(SID, batch_of(longer), HEADER)
    path.write_bytes(Path(other.locate(SID) or "").read_bytes())
    assert backend.append(SID, batch(6, 7), None) == 7
    assert backend.read(SID) == (HEADER, longer + events(6, 7))


def test_a_session_recreated_elsewhere_is_seen_as_such(tmp_path: Path) -> None:
    mine, other = JsonlEvents(tmp_path, "ns"), JsonlEvents(tmp_path, "ns")
    mine.append(SID, batch(0, 3), HEADER)
    other.delete(SID)
    recreated = SessionHeader(id=SID, cwd="/elsewhere")
    other.append(SID, batch(0, 5), recreated)
    with pytest.raises(SessionExistsError):
        mine.append(SID, batch(5, 6), HEADER)
    assert mine.append(SID, batch(5, 6), None) == 6
    assert other.read(SID) == (recreated, events(0, 6))


def test_a_forked_child_parses_the_log_whole_before_its_first_append(
    tmp_path: Path, parsing: dict[str, int]
) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    backend.append(SID, batch(0, 3), HEADER)

    def child() -> None:
        reset(parsing)
        backend.append(SID, batch(3, 5), None)
        backend.append(SID, batch(5, 6), None)
        sys.exit(parsing["logs"])

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join()
    assert process.exitcode == 1
    reset(parsing)
    assert backend.append(SID, batch(6, 8), None) == 8
    assert parsing == {"lines": 3, "logs": 0}
    assert backend.read(SID) == (HEADER, events(0, 8))


# --- several processes ------------------------------------------------------------------


def _append_contending(url: str, worker: int, count: int) -> None:
    with sessionstore.connect(url, "ns") as store:
        done = 0
        while done < count:
            next_seq = len(store.events.read_from(SID, 0))
            size = min(1 + done % 3, count - done)
            batch = [event(next_seq + i, worker=worker, n=done + i) for i in range(size)]
            try:
                store.events.append(SID, batch)
            except SeqConflictError:
                continue
            done += size


@pytest.mark.slow
def test_concurrent_appends_from_four_processes_stay_contiguous(tmp_path: Path) -> None:
    count = 60
    with connect(tmp_path) as store:
        store.events.create(HEADER)
        store.events.append(SID, [event(0, worker=-1, n=0)])
        url = store.url
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_append_contending, args=(url, worker, count)) for worker in range(4)
    ]
    for process in workers:
        process.start()
    for process in workers:
        process.join()
    assert [process.exitcode for process in workers] == [0] * 4
    with connect(tmp_path) as store:
        logged = store.events.load(SID).events
    assert [e.seq for e in logged] == list(range(1 + 4 * count))
    for worker in range(4):
        mine = [e.data["n"] for e in logged if e.data["worker"] == worker]
        assert mine == list(range(count))


# --- the line encoding --------------------------------------------------------------------


def reference_lines(events: list[SessionEvent]) -> bytes:
    """What ``orjson.dumps`` writes for each event's record: the format's definition."""
    lines = []
    for e in events:
        record: dict[str, Any] = {
            "seq": e.seq,
            "type": e.type,
            "time": e.time,
            "data": e.data,
        }
        if e.id is not None:
            record["id"] = e.id
        record["batch_end"] = events[-1].seq
        lines.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
    return b"".join(lines)


texts = st.text(st.characters(exclude_categories=("Cs",)))


@settings(max_examples=200)
@given(
    st.integers(min_value=0, max_value=2**63 - 1),
    st.lists(
        st.tuples(
            texts,
            st.integers(min_value=-(2**63 - 1), max_value=2**63 - 1),
            st.dictionaries(texts, json_values, max_size=3),
            st.none() | texts,
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_event_lines_are_the_bytes_orjson_writes_for_each_record(
    first: int, fields: list[tuple[str, int, dict[str, Any], str | None]]
) -> None:
    special = ['"', "\\", "\n", "\x00", "\x1f", "\u2028", "ü", "😀", "\x7f"]
    written = [
        stored(first + n, kind + special[n % 9], time, data, event_id)
        for n, (kind, time, data, event_id) in enumerate(fields)
    ]
    assert event_lines(batch_of(written)) == reference_lines(written)


# --- open logs kept between appends -------------------------------------------------------


def open_fds(root: Path) -> int:
    """This process's descriptors open on files under ``root`` (others, such as sockets
    that earlier tests left to the garbage collector, may close at any moment)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        found += target.startswith(f"{root}{os.sep}")
    return found


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``os.open`` is called with while the test runs (a file's bare name
    when it is opened relative to its folder's descriptor)."""
    calls: list[str] = []
    real_open = os.open

    def counted(path: Any, *args: Any, **kwargs: Any) -> int:
        calls.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    return calls


def test_appends_keep_the_log_open(tmp_path: Path, opens: list[str]) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    backend.append(SID, batch(0, 3), HEADER)
    name = Path(backend.locate(SID) or "").name
    opens.clear()
    for first in range(3, 60, 3):
        assert backend.append(SID, batch(first, first + 3), None) == first + 3
    with pytest.raises(SeqConflictError):
        backend.append(SID, encode_batch(SID, [event(3, other=True)]), None)
    assert backend.append(SID, batch(60, 61), None) == 61
    assert name not in opens
    assert backend.read(SID) == (HEADER, events(0, 61))


def test_an_append_lands_in_the_log_that_replaced_the_open_one(tmp_path: Path) -> None:
    mine, other = JsonlEvents(tmp_path / "a", "ns"), JsonlEvents(tmp_path / "b", "ns")
    mine.append(SID, batch(0, 3), HEADER)
    path = Path(mine.locate(SID) or "")
    # The open file stays linked elsewhere: its link count alone would not tell.
    old = tmp_path / "old.jsonl"
    os.link(path, old)
    before = old.read_bytes()
    other.append(SID, batch(0, 5), HEADER)
    os.replace(Path(other.locate(SID) or ""), path)
    with pytest.raises(SeqConflictError) as caught:
        mine.append(SID, encode_batch(SID, [event(3, other=True)]), None)
    assert caught.value.expected == 5
    assert mine.append(SID, batch(5, 6), None) == 6
    assert old.read_bytes() == before
    assert mine.read(SID) == (HEADER, events(0, 6))


def test_an_append_to_a_log_moved_away_or_deleted_elsewhere_finds_it_gone(
    tmp_path: Path,
) -> None:
    mine, other = JsonlEvents(tmp_path, "ns"), JsonlEvents(tmp_path, "ns")
    mine.append(SID, batch(0, 3), HEADER)
    path = Path(mine.locate(SID) or "")
    moved = tmp_path / "moved.jsonl"
    os.rename(path, moved)
    before = moved.read_bytes()
    with pytest.raises(SessionNotFoundError):
        mine.append(SID, batch(3, 4), None)
    assert moved.read_bytes() == before
    os.rename(moved, path)
    assert mine.append(SID, batch(3, 4), None) == 4
    other.delete(SID)
    with pytest.raises(SessionNotFoundError):
        mine.append(SID, batch(4, 5), None)
    assert not path.exists()
    assert mine.append(SID, batch(0, 1), HEADER) == 1
    assert other.read(SID) == (HEADER, events(0, 1))


def test_a_same_size_rewrite_in_place_of_the_open_log_is_parsed_whole(
    tmp_path: Path, parsing: dict[str, int]
) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    backend.append(SID, batch(0, 3), HEADER)
    path = Path(backend.locate(SID) or "")
    raw = path.read_bytes()
    damaged = raw.replace(b'"n":1,', b'"n":7,')
    assert len(damaged) == len(raw) and damaged != raw
    mtime = path.stat().st_mtime_ns
    with path.open("r+b") as log:  # the same file, rewritten
        log.write(damaged)
    os.utime(path, ns=(mtime + 10_000_000, mtime + 10_000_000))
    reset(parsing)
    assert backend.append(SID, batch(3, 4), None) == 4
    assert parsing["logs"] == 1
    [changed] = [e for e in backend.read(SID)[1] if e.seq == 1]
    assert changed.data["n"] == 7


@needs_proc
def test_few_logs_are_kept_open_and_close_closes_them(tmp_path: Path) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    start = open_fds(tmp_path)
    for n in range(fdpool.HELD_FILES + 8):
        backend.append(f"s{n}", batch(0, 1), SessionHeader(id=f"s{n}"))
    assert open_fds(tmp_path) == start + fdpool.HELD_FILES
    backend.delete("s20")
    assert open_fds(tmp_path) == start + fdpool.HELD_FILES - 1
    backend.close()
    assert open_fds(tmp_path) == start
    assert backend.append("s0", batch(1, 2), None) == 2
    assert open_fds(tmp_path) == start + 1
    del backend
    assert open_fds(tmp_path) == start, "a collected backend closes its logs"


@needs_proc
def test_closing_the_store_closes_the_logs_it_kept_open(tmp_path: Path) -> None:
    start = open_fds(tmp_path)
    store = connect(tmp_path)
    store.events.create(HEADER)
    store.events.append(SID, [SessionEvent(seq=0, type="note", time=1)])
    assert open_fds(tmp_path) > start
    store.close()
    assert open_fds(tmp_path) == start


def test_a_forked_child_opens_the_log_anew_and_the_parent_keeps_its_own(
    tmp_path: Path, opens: list[str]
) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    backend.append(SID, batch(0, 3), HEADER)
    name = Path(backend.locate(SID) or "").name

    def child() -> None:
        opens.clear()
        backend.append(SID, batch(3, 5), None)
        backend.append(SID, batch(5, 6), None)
        sys.exit(opens.count(name))

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join()
    assert process.exitcode == 1
    opens.clear()
    assert backend.append(SID, batch(6, 8), None) == 8
    assert name not in opens
    assert backend.read(SID) == (HEADER, events(0, 8))


def _append_from_threads(backend: JsonlEvents, threads: int, count: int) -> None:
    def work(worker: int) -> None:
        done = 0
        while done < count:
            next_seq = len(backend.read(SID)[1])
            stored = encode_batch(SID, [event(next_seq, worker=worker, n=done)])
            try:
                backend.append(SID, stored, None)
            except SeqConflictError:
                continue
            done += 1

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))


def test_threads_sharing_a_backend_exclude_each_other(tmp_path: Path) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    backend.append(SID, batch(0, 1), HEADER)
    _append_from_threads(backend, threads=4, count=40)
    _, logged = JsonlEvents(tmp_path, "ns").read(SID)
    assert [e.seq for e in logged] == list(range(1 + 4 * 40))
    for worker in range(4):
        assert [e.data["n"] for e in logged if e.data.get("worker") == worker] == list(range(40))


# --- reads cost what they return ----------------------------------------------------------


@pytest.fixture
def preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the reads (``os.pread``) from files while the test runs."""
    sizes: list[int] = []
    real_pread = os.pread

    def counted(fd: int, length: int, offset: int) -> bytes:
        data = real_pread(fd, length, offset)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counted)
    return sizes


def long_log(backend: JsonlEvents, count: int, size: int = 100) -> None:
    backend.append(SID, batch(0, size), HEADER)
    for first in range(size, count, size):
        backend.append(SID, batch(first, min(first + size, count)), None)


def log_size(backend: JsonlEvents) -> int:
    return Path(backend.locate(SID) or "").stat().st_size


def test_read_from_near_the_end_parses_only_what_it_returns_once_validated(
    tmp_path: Path, parsing: dict[str, int], preads: list[int]
) -> None:
    long_log(JsonlEvents(tmp_path, "ns"), 5000)
    reader = JsonlEvents(tmp_path, "ns")
    reset(parsing)
    assert reader.read(SID, 4990)[1] == events(4990, 5000)
    assert parsing["logs"] == 1, "the first read validates the whole log"
    reset(parsing)
    preads.clear()
    assert reader.read(SID, 4995)[1] == events(4995, 5000)
    assert reader.read(SID, 4000, limit=3)[1] == events(4000, 4003)
    assert parsing == {"lines": 8, "logs": 0}
    assert sum(preads) < log_size(reader) // 20


def test_follow_picks_up_a_new_event_without_rereading_the_log(
    tmp_path: Path, parsing: dict[str, int], preads: list[int]
) -> None:
    with connect(tmp_path) as writer, connect(tmp_path) as reader:
        writer.events.create(HEADER)
        for first in range(0, 3000, 100):
            writer.events.append(SID, events(first, first + 100))
        followed = reader.events.follow(SID, 0, poll=0.01)
        assert [next(followed).seq for _ in range(3000)] == list(range(3000))
        reset(parsing)
        preads.clear()
        assert reader.events.read_from(SID, 3000) == [], "an empty poll"
        assert parsing == {"lines": 0, "logs": 0}
        writer.events.append(SID, events(3000, 3001))
        assert next(followed) == events(3000, 3001)[0]
        assert parsing == {"lines": 1, "logs": 0}
        assert sum(preads) < 4096


def test_damage_before_the_read_range_is_found_by_the_first_read(tmp_path: Path) -> None:
    long_log(JsonlEvents(tmp_path / "store", "ns"), 1000)
    path = Path(JsonlEvents(tmp_path / "store", "ns").locate(SID) or "")
    raw = path.read_bytes()
    path.write_bytes(_edit_line(raw, 3, lambda record: {**record, "seq": 7}))
    with pytest.raises(CorruptLogError) as caught:
        JsonlEvents(tmp_path / "store", "ns").read(SID, 990)
    assert caught.value.line == 3
    with connect(tmp_path) as store, pytest.raises(CorruptLogError):
        list(store.events.iter_events(SID, batch=10))


def test_damage_appended_since_the_last_read_is_found_by_the_next_one(tmp_path: Path) -> None:
    writer, reader = JsonlEvents(tmp_path, "ns"), JsonlEvents(tmp_path, "ns")
    long_log(writer, 500)
    assert reader.read(SID, 499)[1] == events(499, 500)
    writer.append(SID, batch(500, 510), None)
    writer.append(SID, batch(510, 520), None)
    path = Path(writer.locate(SID) or "")
    raw = path.read_bytes()
    path.write_bytes(_edit_line(raw, 2 + 505, lambda record: {**record, "time": "late"}))
    with pytest.raises(CorruptLogError) as caught:
        reader.read(SID, 515)
    assert caught.value.line == 2 + 505


def test_a_validated_line_rewritten_unseen_is_never_returned(tmp_path: Path) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    long_log(backend, 500)
    assert backend.read(SID, 0, limit=1)[1] == events(0, 1)
    path = Path(backend.locate(SID) or "")
    raw, st = path.read_bytes(), path.stat()
    at = raw.index(b'{"seq":300,')
    with path.open("r+b") as log:  # the same file and size, its mtime put back
        log.seek(at + 1)
        log.write(b"\xff")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(CorruptLogError) as caught:
        backend.read(SID, 290, limit=20)
    assert caught.value.line == 2 + 300


@pytest.mark.parametrize("size", [1, 7, 64, 150])
def test_every_range_read_matches_the_whole_log(tmp_path: Path, size: int) -> None:
    writer = JsonlEvents(tmp_path, "ns")
    long_log(writer, 300, size)
    grown = JsonlEvents(tmp_path, "ns")
    assert grown.read(SID, 0, limit=1)[1] == events(0, 1)
    writer.append(SID, batch(300, 301), None)
    writer.append(SID, batch(301, 400), None)
    whole = events(0, 400)
    readers = {"writer": writer, "grown": grown, "fresh": JsonlEvents(tmp_path, "ns")}
    for name, reader in readers.items():
        for first in range(0, 401, 13):
            for limit in (None, 1, 64, 100):
                stop = None if limit is None else first + limit
                assert reader.read(SID, first, limit=limit)[1] == whole[first:stop], (name, first)


@pytest.mark.parametrize(
    "sizes", [[1] * 130, [7, 57, 1, 64, 100, 3], [63, 2, 128, 200], [64, 64, 65]]
)
def test_the_index_an_append_keeps_is_the_one_a_whole_parse_finds(
    tmp_path: Path, sizes: list[int]
) -> None:
    backend = JsonlEvents(tmp_path, "ns")
    first = 0
    for size in sizes:
        backend.append(SID, batch(first, first + size), HEADER if first == 0 else None)
        first += size
    raw = Path(backend.locate(SID) or "").read_bytes()
    whole = jsonl_format.parse_log(SID, raw)
    kept = backend._states.get(SID)
    assert kept is not None
    assert len(whole.offsets) == -(-first // jsonl_format.INDEX_EVERY)
    assert tuple(kept.offsets) == tuple(whole.offsets)
    for number, offset in enumerate(whole.offsets):
        assert raw.startswith(b'{"seq":%d,' % (number * jsonl_format.INDEX_EVERY), offset)


def test_a_log_is_validated_in_bounded_memory(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The first read of a log validates it whole, a chunk at a time: what it holds at
    once grows with its batches (each is parsed whole), not with the log (a copy of a
    long log reads it so)."""
    import tracemalloc

    monkeypatch.setattr(jsonl_cache, "VALIDATE_CHUNK", 1 << 16)
    url = (tmp_path / "store").as_uri()
    with sessionstore.connect(url, "ns") as store:
        store.events.create(HEADER)
        for first in range(0, 12_000, 200):
            data = {"text": "x" * 200}
            store.events.append(
                SID,
                [
                    SessionEvent(seq=s, type="n", time=s, data=data)
                    for s in range(first, first + 200)
                ],
            )
    size = next((tmp_path / "store").rglob("*.jsonl")).stat().st_size
    with sessionstore.connect(url, "ns") as store:
        tracemalloc.start()
        try:
            assert [e.seq for e in store.events.read_from(SID, 11_990)] == list(
                range(11_990, 12_000)
            )
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert store.events.info(SID).next_seq == 12_000
    assert size > 2_500_000 and peak < size / 4, (size, peak)
