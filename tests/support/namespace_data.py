"""A small namespace holding every kind of record a copy, an export or a delete must
carry exactly: a forked log, events whose times go backwards, events with and without
ids, a session and a value with an expiry, plain values with bytes and maps keyed by
ints, a history with a recorded clear."""

from __future__ import annotations

from typing import Any

import sessionstore
from sessionstore import SessionEvent, SessionHeader

T0 = 1_718_000_000_000
PLAIN = ("BTCUSDT", "llm-momentum", "binance", "1h")
HISTORY = ("BTCUSDT", "llm-signal", "binance", "1h")
EXPIRING = ("ETHUSDT", "cache", "binance", "1m")


def events(count: int, start: int = 0) -> list[SessionEvent]:
    """``count`` events from seq ``start``: times going back every third event, an id on
    every other one."""
    return [
        SessionEvent(
            seq=seq,
            type="turn/start" if seq == 0 else "note",
            time=T0 + 1000 * seq - (5000 if seq % 3 == 2 else 0),
            data={"turn": 1} if seq == 0 else {"n": seq, "text": f"é{seq}", "nested": [seq, None]},
            id=f"ev-{seq}" if seq % 2 else None,
        )
        for seq in range(start, start + count)
    ]


def seed(url: str, namespace: str, *, log_events: int = 7) -> None:
    """Write the namespace (see the module docstring)."""
    with sessionstore.connect(url, namespace) as store:
        log = store.events
        log.create(SessionHeader(id="agent-7", cwd="/srv/agent", created_at=T0))
        log.append("agent-7", events(log_events))
        log.fork("agent-7", "agent-7b", at_seq=3)
        log.append(
            "agent-7b",
            [
                SessionEvent(seq=e.seq, type=e.type, time=e.time, data={"child": e.seq})
                for e in events(2, 3)
            ],
        )
        log.create(SessionHeader(id="short-lived", created_at=T0 + 1))
        log.append("short-lived", events(1))
        log.set_ttl("short-lived", 3600)
        store.session(*PLAIN).set_data({"signal": "buy", "raw": b"\x00\xff", 1: [1.5]}, T0)
        history = store.session(*HISTORY, history=True)
        history.put({"signal": "buy"}, T0)
        history.put(None, T0 + 60_000)
        history.put({"signal": "sell"}, T0 - 60_000)
        expiring = store.session(*EXPIRING, mode="live")
        expiring.set_data([1, 2, 3], T0)
        expiring.set_ttl(7200)


def contents(url: str, namespace: str) -> dict[str, Any]:
    """Everything the namespace holds, as comparable data (expiries to the minute)."""
    with sessionstore.connect(url, namespace) as store:
        sessions = {
            info.header.id: (
                info.header.model_dump(),
                [e.model_dump() for e in store.events.iter_events(info.header.id)],
                info.expires_at is not None,
            )
            for info in store.events.list_info()
        }
        values = {}
        for ref in store.list_values():
            found = store.session(*ref[:4], mode=ref.mode).records()
            values[ref] = (found.plain, found.versions)
    return {"sessions": sessions, "values": values}


def url_of(backend: str, request: Any, tmp_path: Any, side: str = "store") -> str:
    """A URL of ``backend`` (file, sqlite, redis, cluster); ``side`` names the folder or
    database file, so that two stores of one kind may sit side by side."""
    if backend == "file":
        return (tmp_path / f"{side}-files").as_uri()
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / f'{side}.db'}"
    fixture = "redis_server" if backend == "redis" else "redis_cluster"
    return str(request.getfixturevalue(fixture).url)
