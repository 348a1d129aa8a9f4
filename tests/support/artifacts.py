"""Look at, and damage, what a backend stored: raw files, SQLite rows, Redis keys.

The conformance suites use this to prove "nothing was written" and to inject torn
tails and corruption the way a crash or a bad disk would.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.cluster

from sessionstore import keys
from sessionstore.connection import file_root
from sessionstore.redis.options import split_own_params


def _sqlite_path(url: str) -> str:
    return url[len("sqlite:///") :]


REDIS = ("redis", "cluster", "acl", "fakeredis")


def _redis(backend: str, url: str) -> Any:
    """A raw admin client: a cluster client for "cluster" (the keys live on three
    primaries); for "acl" the server's admin (the restricted user may not SCAN)."""
    url = split_own_params(url)[0]
    if backend == "cluster":
        return redis.cluster.RedisCluster.from_url(url)
    if backend == "acl":
        parts = urlsplit(url)
        url = urlunsplit(parts._replace(netloc=f"{parts.hostname}:{parts.port}"))
    return redis.Redis.from_url(url)


def footprint(backend: str, url: str, namespace: str) -> list[str]:
    """Everything stored for ``namespace``: file paths, SQLite rows or Redis keys."""
    if backend == "file":
        root = file_root(url)
        return sorted(
            str(p) for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")
        )
    if backend == "sqlite":
        if not Path(_sqlite_path(url)).exists():
            return []
        with sqlite3.connect(_sqlite_path(url)) as db:
            rows: list[str] = []
            for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
                columns = [c[1] for c in db.execute(f"PRAGMA table_info({table})")]
                if "namespace" in columns:
                    found = db.execute(f"SELECT * FROM {table} WHERE namespace=?", (namespace,))
                    rows += [f"{table}:{row}" for row in found]
            return rows
    if backend in REDIS:
        client = _redis(backend, url)
        # The namespace index keeps entries of deleted data on purpose (cleaned lazily),
        # and a value's writer records outlive it for the resend window (then expire).
        index = set(keys.index_keys(namespace))
        tokens = f"{keys.namespace_prefix(namespace)}{keys.SEQ_KIND}:"
        try:
            return sorted(
                name
                for name in (
                    k.decode() for k in client.scan_iter(match=keys.namespace_pattern(namespace))
                )
                if name not in index and not name.startswith(tokens)
            )
        finally:
            client.close()
    return []


def tear_tail(
    backend: str,
    url: str,
    namespace: str,
    session_id: str,
    log_path: str | None,
    next_seq: int,
    records: int = 1,
) -> None:
    """Leave a partly written final batch behind, as a crash mid-append would: its
    first ``records`` events from ``next_seq`` on (a file also has the start of the line
    of the event after them, the batch's last)."""
    seqs = range(next_seq, next_seq + records)
    if backend == "file":
        assert log_path is not None
        lines = [
            json.dumps(
                {"seq": seq, "type": "x", "time": 1, "data": {}, "batch_end": next_seq + records}
            )
            for seq in [*seqs, next_seq + records]
        ]
        with open(log_path, "a") as file:
            file.write("".join(line + "\n" for line in lines[:-1]) + lines[-1][:9])
    elif backend == "sqlite":
        with sqlite3.connect(_sqlite_path(url)) as db:
            db.executemany(
                "INSERT INTO log_events (namespace, session_id, seq, type, time, data, event_id)"
                " VALUES (?, ?, ?, 'x', 1, '{}', NULL)",
                [(namespace, session_id, seq) for seq in seqs],
            )
    elif backend in REDIS:
        _, stream = keys.log_keys(namespace, session_id)
        client = _redis(backend, url)
        for seq in seqs:
            client.xadd(
                stream, {"seq": seq, "type": "x", "time": 1, "data": "{}"}, id=keys.stream_id(seq)
            )
        client.close()
    else:
        raise AssertionError(f"{backend} cannot tear")


def remove_event(
    backend: str, url: str, namespace: str, session_id: str, log_path: str | None, seq: int
) -> None:
    """Lose event ``seq`` from the middle of a log (corruption, not a torn tail)."""
    if backend == "file":
        assert log_path is not None
        lines = Path(log_path).read_bytes().splitlines(keepends=True)
        del lines[seq + 1]
        Path(log_path).write_bytes(b"".join(lines))
    elif backend == "sqlite":
        with sqlite3.connect(_sqlite_path(url)) as db:
            db.execute(
                "DELETE FROM log_events WHERE namespace=? AND session_id=? AND seq=?",
                (namespace, session_id, seq),
            )
    elif backend in REDIS:
        _, stream = keys.log_keys(namespace, session_id)
        client = _redis(backend, url)
        # The entries are rewritten with the entry holding it split around it.
        entries = client.xrange(stream)
        client.delete(stream)
        for entry_id, fields in entries:
            last, count = (int(part) for part in entry_id.split(b"-"))
            if not last - count < seq <= last or b"events" not in fields:
                if b"events" in fields or int(fields[b"seq"]) != seq:
                    client.xadd(stream, fields, id=entry_id)
                continue
            texts = fields[b"events"][1:-1].split(b",\n")
            before, after = texts[: seq - (last - count + 1)], texts[seq - last + count :]
            for end, part in ((seq - 1, before), (last, after)):
                if part:
                    value = b"[" + b",\n".join(part) + b"]"
                    client.xadd(stream, {"events": value}, id=f"{end}-{len(part)}")
        client.close()
    else:
        raise AssertionError(f"{backend} cannot be damaged")


def set_stored_version(
    backend: str, url: str, namespace: str, session_id: str, log_path: str | None, version: int
) -> None:
    """Rewrite the stored header's format version."""
    if backend == "file":
        assert log_path is not None
        lines = Path(log_path).read_bytes().splitlines(keepends=True)
        header = json.loads(lines[0])
        header["version"] = version
        lines[0] = json.dumps(header).encode() + b"\n"
        Path(log_path).write_bytes(b"".join(lines))
    elif backend == "sqlite":
        with sqlite3.connect(_sqlite_path(url)) as db:
            db.execute(
                "UPDATE log_sessions SET version=? WHERE namespace=? AND id=?",
                (version, namespace, session_id),
            )
    elif backend in REDIS:
        meta, _ = keys.log_keys(namespace, session_id)
        client = _redis(backend, url)
        client.hset(meta, "version", version)
        client.close()
    else:
        raise AssertionError(f"{backend} has no stored header")


def snapshot(
    backend: str, url: str, namespace: str, session_id: str, log_path: str | None
) -> object:
    """A byte-exact picture of one stored log, to prove nothing was rewritten."""
    if backend == "file":
        assert log_path is not None
        return Path(log_path).read_bytes()
    if backend == "sqlite":
        with sqlite3.connect(_sqlite_path(url)) as db:
            return (
                db.execute(
                    "SELECT * FROM log_sessions WHERE namespace=? AND id=?", (namespace, session_id)
                ).fetchall(),
                db.execute(
                    "SELECT * FROM log_events WHERE namespace=? AND session_id=? ORDER BY seq",
                    (namespace, session_id),
                ).fetchall(),
            )
    if backend in REDIS:
        meta, stream = keys.log_keys(namespace, session_id)
        client = _redis(backend, url)
        try:
            return client.hgetall(meta), client.xrange(stream)
        finally:
            client.close()
    raise AssertionError(backend)


__all__ = ["footprint", "remove_event", "set_stored_version", "snapshot", "tear_tail"]
