"""Part 5 of the fault suite: torn tails and corruption, on JSONL files, SQLite and Redis.

A crash can only tear the end of a log: the final batch, partly written. ``load`` must
then return the committed prefix (plus closers for an interrupted turn), cut the torn
tail off durably and never raise. Anything wrong *before* the end is corruption: ``load``
and ``read_from`` raise :class:`CorruptLogError` naming the line or the seq, and rewrite
nothing.

=========  ================================================  ====================================
backend    torn tail (load repairs)                          corruption (CorruptLogError)
=========  ================================================  ====================================
JSONL      the file cut at every byte offset inside its      a byte flipped (XOR 0xFF) anywhere
           last batch                                        but the final newline; a line deleted
SQLite     1..k rows of a batch past ``next_seq``, well      a row below ``next_seq`` deleted or
           formed or not                                     altered (type, time, data, id);
                                                             ``next_seq`` malformed
Redis      1..k stream entries past ``next_seq``, well       an entry below ``next_seq`` deleted
           formed or not                                     or altered (fields, seq, data,
                                                             time); ``next_seq`` malformed
=========  ================================================  ====================================

The rules themselves are proven once, on every backend, by the conformance suite
(``tests/conformance/test_events.py``); this is the fault-suite sweep of each format's
damage (every byte offset, every field) on an agent-harness log, and feeds the figures.

Known limit: no format has checksums, so damage that still reads as a well-formed event
(a digit of a time changed, a letter of a string) is not detected.
"""

from __future__ import annotations

import random
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from conftest import url_for
from support.artifacts import snapshot

import sessionstore
from sessionstore import CorruptLogError, SessionEvent, SessionHeader, keys

from . import figures
from .conftest import iterations
from .figures import figures_run  # noqa: F401 - used by pytestmark
from .test_writer_killed import (
    SESSION,
    T0,
    Workload,
    check_batches,
    check_closers,
    ends_mid_turn,
)

pytestmark = pytest.mark.usefixtures("figures_run")


def build_log(
    store: sessionstore.Store, rng: random.Random, last_size: int
) -> tuple[list[SessionEvent], list[SessionEvent]]:
    """Append batches of a harness log whose prefix ends mid-turn (so that load has
    closers to add); return (the committed prefix, the final batch, not appended)."""
    work = Workload("torn", rng)
    store.events.create(SessionHeader(id=SESSION, created_at=T0))
    prefix: list[SessionEvent] = []
    number = 0
    while len(prefix) < 20 or not ends_mid_turn(prefix):
        batch = work.batch(len(prefix), rng.randint(1, 6), f"b{number}")
        store.events.append(SESSION, batch)
        prefix += batch
        number += 1
    return prefix, work.batch(len(prefix), last_size, f"b{number}")


def fresh(url: str, namespace: str) -> sessionstore.Store:
    """A store with no memory of the log (the file backend remembers what it validated)."""
    return sessionstore.connect(url, namespace)


# --- JSONL -------------------------------------------------------------------------------


def line_of(raw: bytes, offset: int) -> int:
    """The 1-based line holding byte ``offset`` (a newline belongs to its line)."""
    return raw.count(b"\n", 0, offset) + 1


def test_jsonl_a_torn_last_batch_at_every_byte_offset_loads_the_committed_prefix(tmp_path):
    url, namespace = (tmp_path / "store").as_uri(), "torn"
    rng = random.Random()
    with sessionstore.connect(url, namespace) as store:
        prefix, last = build_log(store, rng, last_size=3)
        store.events.append(SESSION, last)
        path = Path(store.events.locate(SESSION) or "")
    full = path.read_bytes()
    committed_end = len(full) - sum(len(line) for line in full.splitlines(True)[-len(last) :])
    tried = lost = 0
    for cut in range(committed_end, len(full) + 1):
        path.write_bytes(full[:cut])
        expected = prefix + last if cut == len(full) else prefix
        with fresh(url, namespace) as store:
            assert store.events.read_from(SESSION, 0) == expected
            assert path.read_bytes() == full[:cut], "a read without repair wrote"
            loaded = store.events.load(SESSION).events
        tried += 1
        lost += sum(1 for a, b in zip(expected, loaded, strict=False) if a != b)
        check_closers(expected, loaded)
        # The torn tail is cut off durably, the committed bytes are untouched, the
        # closers follow them, and the next append lands after them.
        kept = full if cut == len(full) else full[:committed_end]
        assert path.read_bytes().startswith(kept)
        with fresh(url, namespace) as store:
            assert store.events.read_from(SESSION, 0) == loaded
    figures.record(
        "torn_and_corrupt",
        "file",
        inputs=tried,
        faults=tried - 1,
        lost=lost,
        torn_loads=tried - 1,
        acked_events=len(prefix) + len(last),
    )
    assert lost == 0


def test_jsonl_damage_before_the_end_is_corruption_and_nothing_is_rewritten(tmp_path):
    url, namespace = (tmp_path / "store").as_uri(), "corrupt"
    rng = random.Random()
    with sessionstore.connect(url, namespace) as store:
        prefix, last = build_log(store, rng, last_size=3)
        store.events.append(SESSION, last)
        path = Path(store.events.locate(SESSION) or "")
    full = path.read_bytes()
    # Damage to the final newline only tears the last line; a complete line that does not
    # parse is damage, the last one's too.
    final = len(full) - 1
    newlines = [i for i in range(final) if full[i : i + 1] == b"\n"]
    budget = iterations(normal=800, ci=200, soak=final)
    offsets = sorted(set(newlines + [0] + rng.sample(range(final), min(budget, final))))
    damaged_inputs: list[tuple[str, bytes, int]] = [
        (f"byte {o} flipped", full[:o] + bytes([full[o] ^ 0xFF]) + full[o + 1 :], line_of(full, o))
        for o in offsets
    ]
    lines = full.splitlines(keepends=True)
    for index in range(len(lines) - 1):  # deleting the last line is a torn tail
        damaged_inputs.append(
            (f"line {index + 1} deleted", b"".join(lines[:index] + lines[index + 1 :]), 0)
        )
    refused = 0
    for what, damaged, line in damaged_inputs:
        path.write_bytes(damaged)
        with fresh(url, namespace) as store:
            with pytest.raises(CorruptLogError) as caught:
                store.events.load(SESSION)
            error = caught.value
            assert error.line is not None or error.seq is not None, what
            if line:
                assert error.line == line, f"{what}: reported {error}"
            with pytest.raises(CorruptLogError):
                store.events.read_from(SESSION, 0)
            with pytest.raises(CorruptLogError):
                store.events.append(SESSION, [SessionEvent(seq=len(prefix) + 3, type="x", time=1)])
        assert path.read_bytes() == damaged, f"{what}: the file was rewritten"
        refused += 1
    figures.record(
        "torn_and_corrupt",
        "file",
        inputs=len(damaged_inputs),
        faults=len(damaged_inputs),
        corrupt_refused=refused,
    )


# --- SQLite ------------------------------------------------------------------------------


def _db(url: str) -> sqlite3.Connection:
    return sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)


def _insert(db: sqlite3.Connection, namespace: str, rows: list[tuple[Any, ...]]) -> None:
    db.executemany(
        "INSERT INTO log_events (namespace, session_id, seq, type, time, data, event_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(namespace, SESSION, *row) for row in rows],
    )


def _row(event: SessionEvent) -> tuple[Any, ...]:
    return (
        event.seq,
        event.type,
        event.time,
        sessionstore.jsondata.dump_lossless(event.data),
        event.id,
    )


def test_sqlite_rows_past_next_seq_are_a_torn_tail(tmp_path):
    url, namespace = f"sqlite:///{tmp_path / 'store.db'}", "torn"
    rng = random.Random()
    tried = lost = acked = 0
    for round_ in range(iterations(normal=2, ci=1, soak=20)):
        namespace = f"torn-{round_}"
        with sessionstore.connect(url, namespace) as store:
            prefix, last = build_log(store, rng, last_size=rng.randint(2, 8))
        acked += len(prefix)
        variants = [("well formed", [_row(e) for e in last[:j]]) for j in range(1, len(last) + 1)]
        variants += [
            ("malformed", [(len(prefix), None, "x", "{", 7)]),
            ("with a gap", [_row(last[0]), (len(prefix) + 5, "x", 1, "{}", None)]),
        ]
        db = _db(url)
        try:
            for what, rows in variants:
                _insert(db, namespace, rows)
                with fresh(url, namespace) as store:
                    assert store.events.read_from(SESSION, 0) == prefix, what
                    loaded = store.events.load(SESSION).events
                    check_closers(prefix, loaded)
                    # Cut durably: only the committed rows and the closers are left.
                    (count,) = db.execute(
                        "SELECT COUNT(*) FROM log_events WHERE namespace=?", (namespace,)
                    ).fetchone()
                    assert count == len(loaded), what
                    lost += sum(1 for a, b in zip(prefix, loaded, strict=False) if a != b)
                    # Undo the closers for the next variant: back to the committed prefix.
                    db.execute(
                        "DELETE FROM log_events WHERE namespace=? AND seq>=?",
                        (namespace, len(prefix)),
                    )
                    db.execute(
                        "UPDATE log_sessions SET next_seq=? WHERE namespace=?",
                        (len(prefix), namespace),
                    )
                tried += 1
            # Finally the real last batch lands after a torn tail.
            _insert(db, namespace, [_row(e) for e in last[:1]])
            with fresh(url, namespace) as store:
                assert store.events.append(SESSION, last) == len(prefix) + len(last)
                assert check_batches(store.events.read_from(SESSION, 0)) >= 1
        finally:
            db.close()
    figures.record(
        "torn_and_corrupt",
        "sqlite",
        inputs=tried,
        faults=tried,
        torn_loads=tried,
        lost=lost,
        acked_events=acked,
    )
    assert lost == 0


SQLITE_DAMAGE = {
    "row deleted": "DELETE FROM log_events WHERE namespace=:ns AND seq=:seq",
    "type NULL": "UPDATE log_events SET type=NULL WHERE namespace=:ns AND seq=:seq",
    "time text": "UPDATE log_events SET time='soon' WHERE namespace=:ns AND seq=:seq",
    "data not JSON": "UPDATE log_events SET data='{\"turn\":' WHERE namespace=:ns AND seq=:seq",
    "data not an object": "UPDATE log_events SET data='[1]' WHERE namespace=:ns AND seq=:seq",
    "data a blob": "UPDATE log_events SET data=x'00ff' WHERE namespace=:ns AND seq=:seq",
    # (an integer id would be stored as text: the column has TEXT affinity)
    "id a blob": "UPDATE log_events SET event_id=x'07' WHERE namespace=:ns AND seq=:seq",
}


def test_sqlite_damage_below_next_seq_is_corruption_and_nothing_is_rewritten(tmp_path):
    url, namespace = f"sqlite:///{tmp_path / 'store.db'}", "corrupt"
    rng = random.Random()
    with sessionstore.connect(url, namespace) as store:
        prefix, _ = build_log(store, rng, last_size=1)
    seqs = list(range(len(prefix)))
    budget = iterations(normal=len(seqs), ci=6, soak=len(seqs))
    chosen = sorted(set([0, len(prefix) - 1] + rng.sample(seqs, min(budget, len(seqs)))))
    db = _db(url)
    tried = 0
    try:
        original = {
            row[0]: row
            for row in db.execute(
                "SELECT seq, type, time, data, event_id FROM log_events WHERE namespace=?",
                (namespace,),
            )
        }
        for seq in chosen:
            for what, sql in SQLITE_DAMAGE.items():
                db.execute(sql, {"ns": namespace, "seq": seq})
                before = snapshot("sqlite", url, namespace, SESSION, None)
                with fresh(url, namespace) as store:
                    with pytest.raises(CorruptLogError) as caught:
                        store.events.load(SESSION)
                    assert caught.value.seq == seq, f"{what} at {seq}: {caught.value}"
                    with pytest.raises(CorruptLogError):
                        store.events.read_from(SESSION, 0)
                assert snapshot("sqlite", url, namespace, SESSION, None) == before, what
                db.execute("DELETE FROM log_events WHERE namespace=? AND seq=?", (namespace, seq))
                _insert(db, namespace, [original[seq]])
                tried += 1
        for what, value in (("next_seq text", "many"), ("next_seq negative", -1)):
            db.execute("UPDATE log_sessions SET next_seq=? WHERE namespace=?", (value, namespace))
            before = snapshot("sqlite", url, namespace, SESSION, None)
            with fresh(url, namespace) as store, pytest.raises(CorruptLogError):
                store.events.load(SESSION)
            assert snapshot("sqlite", url, namespace, SESSION, None) == before, what
            tried += 1
        db.execute("UPDATE log_sessions SET next_seq=? WHERE namespace=?", (len(prefix), namespace))
        with fresh(url, namespace) as store:
            assert store.events.read_from(SESSION, 0) == prefix  # all restored
    finally:
        db.close()
    figures.record(
        "torn_and_corrupt",
        "sqlite",
        inputs=tried,
        faults=tried,
        corrupt_refused=tried,
    )


# --- Redis -------------------------------------------------------------------------------


def _fields(event: SessionEvent) -> dict[str, Any]:
    fields = {
        "seq": event.seq,
        "type": event.type,
        "time": event.time,
        "data": sessionstore.jsondata.dump_lossless(event.data),
    }
    if event.id is not None:
        fields["id"] = event.id
    return fields


def _rebuild(client: redis.Redis, stream: str, entries: list[tuple[bytes, dict]]) -> None:
    """Replace the stream with ``entries`` (ids kept), as damage would leave it."""
    pipe = client.pipeline(transaction=True)
    pipe.delete(stream)
    for entry_id, fields in entries:
        pipe.xadd(stream, fields, id=entry_id)
    pipe.execute()


def test_redis_entries_past_next_seq_are_a_torn_tail(request, tmp_path):
    url = url_for("redis", request, tmp_path)
    rng = random.Random()
    client = redis.Redis.from_url(url)
    tried = lost = acked = 0
    try:
        for round_ in range(iterations(normal=2, ci=1, soak=20)):
            namespace = f"torn-{uuid.uuid4().hex[:8]}-{round_}"
            with sessionstore.connect(url, namespace) as store:
                prefix, last = build_log(store, rng, last_size=rng.randint(2, 8))
            acked += len(prefix)
            meta, stream = keys.log_keys(namespace, SESSION)
            pristine = client.xrange(stream)
            variants = [
                ("well formed", [(keys.stream_id(e.seq), _fields(e)) for e in last[:j]])
                for j in range(1, len(last) + 1)
            ]
            variants += [
                ("malformed", [(keys.stream_id(len(prefix)), {"junk": "x"})]),
                ("with a gap", [(keys.stream_id(len(prefix) + 4), _fields(last[0]))]),
            ]
            for what, torn in variants:
                for entry_id, fields in torn:
                    client.xadd(stream, fields, id=entry_id)
                with fresh(url, namespace) as store:
                    assert store.events.read_from(SESSION, 0) == prefix, what
                    loaded = store.events.load(SESSION).events
                check_closers(prefix, loaded)
                closed = 1 if len(loaded) > len(prefix) else 0  # closers: one more entry
                assert client.xlen(stream) == len(pristine) + closed, f"{what}: tail not cut"
                lost += sum(1 for a, b in zip(prefix, loaded, strict=False) if a != b)
                # Back to the committed prefix for the next variant.
                _rebuild(client, stream, pristine)
                client.hset(meta, mapping={"next_seq": len(prefix), "entries": len(pristine)})
                tried += 1
            client.xadd(stream, _fields(last[0]), id=keys.stream_id(len(prefix)))
            with fresh(url, namespace) as store:
                assert store.events.append(SESSION, last) == len(prefix) + len(last)
                assert store.events.read_from(SESSION, 0) == prefix + last
    finally:
        client.close()
    figures.record(
        "torn_and_corrupt",
        "redis",
        inputs=tried,
        faults=tried,
        torn_loads=tried,
        lost=lost,
        acked_events=acked,
    )
    assert lost == 0


def _redis_damage(entries: list[tuple[bytes, dict]], seq: int, what: str) -> tuple[list, int]:
    """``entries`` with event ``seq`` damaged in the entry holding it, and the seq the
    damage is reported at (a deleted entry: the first of its events)."""
    spans = [tuple(int(part) for part in entry_id.split(b"-")) for entry_id, _ in entries]
    index = next(i for i, (last, count) in enumerate(spans) if last - count < seq <= last)
    (entry_id, fields), (last, count) = entries[index], spans[index]
    if what == "entry deleted":
        return entries[:index] + entries[index + 1 :], last - count + 1
    texts = fields[b"events"][1:-1].split(b",\n")
    at = seq - (last - count + 1)
    event = orjson.loads(texts[at])
    if what == "type missing":
        del event["type"]
    elif what == "seq field wrong":
        event["seq"] = 999999
    elif what == "time not an integer":
        event["time"] = "soon"
    texts[at] = orjson.dumps(event)
    if what == "data not JSON":
        texts[at] = texts[at][: texts[at].index(b'"data":')] + b'"data":{"turn":}'
    elif what == "data not UTF-8":
        texts[at] = texts[at][:-1] + b',"x":"\xff\xfe"}'
    damaged = {b"events": b"[" + b",\n".join(texts) + b"]"}
    return entries[:index] + [(entry_id, damaged)] + entries[index + 1 :], seq


REDIS_DAMAGE = (
    "entry deleted",
    "type missing",
    "seq field wrong",
    "data not JSON",
    "time not an integer",
    "data not UTF-8",
)


def test_redis_damage_below_next_seq_is_corruption_and_nothing_is_rewritten(request, tmp_path):
    url = url_for("redis", request, tmp_path)
    namespace = f"corrupt-{uuid.uuid4().hex[:8]}"
    rng = random.Random()
    with sessionstore.connect(url, namespace) as store:
        prefix, _ = build_log(store, rng, last_size=1)
    meta, stream = keys.log_keys(namespace, SESSION)
    client = redis.Redis.from_url(url)
    tried = 0
    try:
        pristine = client.xrange(stream)
        seqs = list(range(len(prefix)))
        budget = iterations(normal=len(seqs), ci=6, soak=len(seqs))
        chosen = sorted(set([0, len(prefix) - 1] + rng.sample(seqs, min(budget, len(seqs)))))
        for seq in chosen:
            for what in REDIS_DAMAGE:
                damaged, reported = _redis_damage(pristine, seq, what)
                _rebuild(client, stream, damaged)
                before = snapshot("redis", url, namespace, SESSION, None)
                with fresh(url, namespace) as store:
                    with pytest.raises(CorruptLogError) as caught:
                        store.events.load(SESSION)
                    assert caught.value.seq == reported, f"{what} at {seq}: {caught.value}"
                    with pytest.raises(CorruptLogError):
                        store.events.read_from(SESSION, 0)
                    if what == "entry deleted":
                        # An append checks the entry count, not each entry (O(batch)).
                        with pytest.raises(CorruptLogError):
                            store.events.append(
                                SESSION, [SessionEvent(seq=len(prefix), type="x", time=1)]
                            )
                assert snapshot("redis", url, namespace, SESSION, None) == before, what
                tried += 1
        _rebuild(client, stream, pristine)
        for what, value in (("next_seq text", "many"), ("next_seq beyond", len(prefix) + 3)):
            client.hset(meta, "next_seq", value)
            before = snapshot("redis", url, namespace, SESSION, None)
            with fresh(url, namespace) as store, pytest.raises(CorruptLogError):
                store.events.load(SESSION)
            assert snapshot("redis", url, namespace, SESSION, None) == before, what
            tried += 1
        client.hset(meta, "next_seq", len(prefix))
        with fresh(url, namespace) as store:
            assert store.events.read_from(SESSION, 0) == prefix
    finally:
        client.close()
    figures.record(
        "torn_and_corrupt",
        "redis",
        inputs=tried,
        faults=tried,
        corrupt_refused=tried,
    )
