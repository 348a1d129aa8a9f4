"""An agent harness recording a session, crashing mid-turn, and resuming cleanly; a live
session looked at from a second process; a fork.

Runs on the embedded default store (./.sessionstore) unless SESSIONSTORE_URL is set.
"""

from __future__ import annotations

import contextlib
import multiprocessing

import sessionstore
from sessionstore import SessionBusyError, SessionEvent, SessionHeader, SessionNotFoundError

T = 1_718_000_000_000


def main() -> None:
    with sessionstore.connect(namespace="eventlog-example") as store:
        log = store.events
        for old in ("agent-1", "agent-2", "agent-3", "agent-1-retry"):  # start afresh
            with contextlib.suppress(SessionNotFoundError):
                log.delete(old)
        header = SessionHeader(id="agent-1", cwd="/home/me/project")
        log.create(header)  # lazy: nothing is written until the first append
        print("log file:", log.locate(header))

        log.append(
            "agent-1",
            [
                SessionEvent(seq=0, type="turn/start", time=T, data={"turn": 1}),
                SessionEvent(seq=1, type="step/start", time=T + 1, data={"turn": 1, "step": 1}),
                SessionEvent(
                    seq=2,
                    type="tool/call",
                    time=T + 2,
                    data={
                        "turn": 1,
                        "step": 1,
                        "call_id": "c1",
                        "name": "bash",
                        "arguments": {"cmd": "ls"},
                    },
                ),
            ],
        )
        # ... the process dies here, before the tool result. On resume:
        loaded = log.load("agent-1")
        for event in loaded.events:
            print(event.seq, event.type, event.data.get("error", {}).get("code", ""))

        # The next turn continues at the next seq; a wrong seq is refused.
        next_seq = loaded.events[-1].seq + 1
        log.append(
            "agent-1", [SessionEvent(seq=next_seq, type="turn/start", time=T + 9, data={"turn": 2})]
        )
        try:
            log.append("agent-1", [SessionEvent(seq=1, type="note", time=T + 9, data={})])
        except sessionstore.SeqConflictError as conflict:
            print("refused:", conflict)

        # A write-behind writer assigns seq and time and drains in the background.
        with log.writer(SessionHeader(id="agent-2")) as writer:
            writer.emit("turn/start", {"turn": 1})
            writer.emit("turn/end", {"turn": 1, "reason": {"kind": "done"}})
        print("sessions:", [h.id for h in log.list()])

        # A live session: while its writer holds the lease, another process can inspect
        # it (balanced, nothing written) but not load it.
        live = SessionHeader(id="agent-3", cwd="/home/me/project", created_at=T)
        with log.writer(live) as writer:
            writer.emit("turn/start", {"turn": 1})
            writer.emit("step/start", {"turn": 1, "step": 1})
            writer.flush()
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                print(pool.apply(look_at, ("agent-3",)))
        print("after close:", [e.type for e in log.load("agent-3").events][-2:])

        # A fork: a new session that begins with agent-1's first three events.
        child = log.fork("agent-1", "agent-1-retry", at_seq=3)
        events = log.load("agent-1-retry").events
        print("fork of", child.parent_id, "at", child.fork_seq, "->", [e.type for e in events])


def look_at(session_id: str) -> str:
    """In a second process: inspect a live session, and try to load it."""
    with sessionstore.connect(namespace="eventlog-example") as store:
        seen = store.events.inspect(session_id)
        info = store.events.info(session_id)
        try:
            store.events.load(session_id)
            verdict = "loaded"
        except SessionBusyError:
            verdict = "busy"
        types = [e.type for e in seen.events]
        return f"inspected: {types} (stored: {info.next_seq}, busy: {info.busy}); load: {verdict}"


if __name__ == "__main__":
    main()
