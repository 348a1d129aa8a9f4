"""``sessionstore sessions ...``: list, show, tail, verify and delete event-log sessions.

One damaged session never hides the others: ``list`` and ``verify`` go on past it and say
what is wrong with it. ``list`` and ``tail`` read metadata (``info``/``list_info``) and
the last events of a log only, never a whole log; ``show`` and ``verify`` read it all.
Everything stored is printed literally (see :mod:`.text`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from ..errors import (
    CorruptDataError,
    SessionNotFoundError,
    UnsupportedVersionError,
)
from ..harness import harness_warnings
from ..models import SessionEvent, SessionInfo
from .common import (
    APP_SETTINGS,
    EXIT_ERROR,
    EXIT_FAILED,
    Json,
    Namespace,
    Persist,
    Ttl,
    Url,
    console,
    emit_json,
    emit_rows,
    errors,
    guarded,
    iso,
    library_notices,
    note,
    open_store,
    retention,
    say_nothing_found,
)
from .tables import human_bytes, print_listing
from .text import plain, preview

app = typer.Typer(help="Event-log sessions.", **APP_SETTINGS)

SessionId = Annotated[str, typer.Argument(help="Session id.")]
FromSeq = Annotated[int, typer.Option("--from", min=0, help="First seq to show.")]

#: What makes a stored session unreadable (as opposed to a store that cannot be reached).
DAMAGE = (CorruptDataError, UnsupportedVersionError)


def _data(event: SessionEvent) -> dict[str, Any]:
    return event.data if isinstance(event.data, dict) else {}


def turn_state(events: list[SessionEvent], *, whole: bool = True) -> str:
    """``balanced``, or ``open turn N`` when the final turn has no end (it may be live).
    Reads nothing but event types and the final ``turn/start``'s ``turn``. When
    ``events`` are only the last events of a log (``whole`` False) and hold neither a
    ``turn/start`` nor a ``turn/end``: ``unknown``."""
    for event in reversed(events):
        if event.type == "turn/end":
            return "balanced"
        if event.type == "turn/start":
            turn = _data(event).get("turn")
            return "open turn" if turn is None else f"open turn {preview(turn, 40)}"
    return "balanced" if whole else "unknown"


#: How many of its last events ``sessions list`` reads of each session for its turn
#: state; a final turn that began earlier shows as ``unknown``.
STATE_TAIL = 64


def last_events(store: Any, info: SessionInfo, count: int) -> list[SessionEvent]:
    """The last ``count`` committed events as of ``info`` (read from that seq on, never
    the whole log; events appended since are left out)."""
    if count <= 0 or info.next_seq == 0:
        return []
    start = max(0, info.next_seq - count)
    return store.events.read_from(info.header.id, start)[: info.next_seq - start]


#: Columns of the ``sessions list`` table, with their headers. ``created`` is wall-clock
#: time (when the session was created); ``last event`` is the logical time its last
#: event carries (a backtest's candle time, say), not when it was written; ``expires``
#: is wall-clock time too.
HEADERS = {
    "id": "id",
    "created": "created (wall clock)",
    "events": "events",
    "bytes": "size",
    "last": "last event (logical time)",
    "state": "state",
    "busy": "busy",
    "expires": "expires (wall clock)",
}


@app.command("list")
@guarded
def list_sessions(url: Url = None, namespace: Namespace = "default", json: Json = False) -> None:
    """Id, creation time (wall clock), events, time of the last event (logical: the time
    the event carries), turn state and busy (a live writer holds the session's lease) of
    every session, from metadata and the last events of each log (never a whole log).
    The turn state is read from the last 64 events: a final turn that began before them
    is 'unknown'. Nothing is cut or left out: when the table is wider than the terminal
    (80 columns on a pipe unless COLUMNS says) each session is a block of lines instead.
    A damaged session is listed as such (and said on stderr); the others are listed all
    the same. Size is what the session takes in the store (Redis: the bytes of its
    stored event text, as its appends counted them; estimated for a log written before
    they did). --json: one object per session (created_at: wall-clock ms; last_activity:
    the logical time in ms of its last event; bytes; expires_at: epoch ms or null)."""
    rows: list[dict[str, Any]] = []
    with open_store(url, namespace, existing=True) as store:
        try:
            infos = store.events.list_info()
        except DAMAGE as exc:
            errors.print(plain("error: cannot list the sessions: ", exc))
            raise typer.Exit(EXIT_ERROR) from None
        for info in infos:
            header = info.header
            row: dict[str, Any] = {
                "id": header.id,
                "created_at": header.created_at,
                "cwd": header.cwd,
                "parent_id": header.parent_id,
                "fork_seq": header.fork_seq,
            }
            try:
                tail_events = last_events(store, info, STATE_TAIL)
                row["bytes"] = store.events.stored_bytes(header.id)
            except SessionNotFoundError:
                continue  # deleted since it was listed
            except DAMAGE as exc:
                note(f"session '{header.id}' is damaged: {exc}")
                row.update(events=None, last_activity=None, state="corrupt", reason=str(exc))
                row.setdefault("bytes", None)
            else:
                whole = info.next_seq <= STATE_TAIL
                row.update(
                    events=info.next_seq,
                    last_activity=info.last_time,
                    state=turn_state(tail_events, whole=whole),
                )
            row.update(busy=info.busy, expires_at=info.expires_at)
            rows.append(row)
    if not rows:
        say_nothing_found("sessions", url, namespace)
    if json:
        emit_rows(rows)
    elif rows:
        print_session_table(rows)


def _cells(row: dict[str, Any]) -> list[Text | str]:
    cells: dict[str, Text | str] = {
        "id": plain(row["id"]),
        "created": iso(row["created_at"]),
        "events": "-" if row["events"] is None else str(row["events"]),
        "bytes": human_bytes(row["bytes"]),
        "last": iso(row["last_activity"]),
        "state": Text("CORRUPT", style="red") if row["state"] == "corrupt" else plain(row["state"]),
        "busy": Text("busy", style="yellow") if row["busy"] else "-",
        "expires": "never" if row["expires_at"] is None else iso(row["expires_at"]),
    }
    return [cells[name] for name in HEADERS]


def print_session_table(rows: list[dict[str, Any]]) -> None:
    """The table of ``sessions list`` (see :func:`list_sessions`)."""
    print_listing(list(HEADERS.values()), [_cells(row) for row in rows])


def describe(event: SessionEvent) -> str:
    """One readable line; turn, step and tool structure shown by indentation. Any data
    (fields missing or of another shape) gives a line; stored text is made literal."""
    data = _data(event)

    def field(name: str, width: int = 40) -> str:
        return preview(data.get(name), width)

    def sub(name: str, key: str) -> str:
        value = data.get(name)
        return preview(value.get(key) if isinstance(value, dict) else value, 40)

    kind = event.type
    if kind == "turn/start":
        return f"turn {field('turn')}"
    if kind == "turn/end":
        return f"end of turn {field('turn')} ({sub('reason', 'kind')})"
    if kind == "step/start":
        return f"  step {field('step')}"
    if kind == "step/end":
        return f"  end of step {field('step')}"
    if kind == "tool/call":
        return f"    call {field('name')}({preview(data.get('arguments'))}) [{field('call_id')}]"
    if kind == "tool/result":
        outcome = f"error {sub('error', 'code')}" if data.get("is_error") else "ok"
        return f"    result [{field('call_id')}] {outcome}: {preview(data.get('content'))}"
    return f"    {preview(kind)} {preview(event.data)}"


def print_events(events: list[SessionEvent], json: bool) -> None:
    for event in events:
        if json:
            emit_json(event.model_dump())
        else:
            console.print(plain(f"{event.seq:>6}  {iso(event.time)}  {describe(event)}"))


def lineage(info: SessionInfo) -> str | None:
    """``forked from P at seq N`` for a fork (the first N events are the parent's), else None."""
    header = info.header
    if header.parent_id is None:
        return None
    at = "" if header.fork_seq is None else f" at seq {header.fork_seq}"
    return f"forked from {header.parent_id}{at}"


@app.command()
@guarded
def show(
    session_id: SessionId,
    from_seq: FromSeq = 0,
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """A session as 'load' would return it, readable, without writing anything or
    looking at the writer lease (a live session can be shown). A fork's first line names
    its parent and the fork point. The events committed when the command started come
    first; when the final turn is open and no writer holds the lease, the events load
    would append to close it follow, marked 'not stored'; when a writer holds it, a
    last line says the session is live. --json: one object per event (a closer not
    stored has "stored": false)."""
    with open_store(url, namespace, existing=True) as store:
        info = store.events.info(session_id)
        loaded = store.events.inspect(session_id)
    # Events committed after ``info`` (by a live writer) are left out: the view is the
    # log as of ``info``, and only past that point can inspect have added closers.
    stored = [e for e in loaded.events if from_seq <= e.seq < info.next_seq]
    closing = [] if info.busy else [e for e in loaded.events if e.seq >= info.next_seq]
    forked = lineage(info)
    if json:
        print_events(stored, json)
        for event in closing:
            if event.seq >= from_seq:
                emit_json({**event.model_dump(), "stored": False})
        return
    if forked is not None:
        console.print(plain(forked))
    print_events(stored, json)
    for event in closing:
        if event.seq >= from_seq:
            line = f"{event.seq:>6}  {iso(event.time)}  {describe(event)}"
            console.print(plain(line, "  (not stored: load would append it)"))
    if info.busy:
        console.print(plain("live: a writer holds the lease; its open turn is not closed"))


@app.command()
@guarded
def tail(
    session_id: SessionId,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events.")
    ] = False,
    last: Annotated[int, typer.Option(min=0, help="How many existing events to show first.")] = 10,
    interval: Annotated[float, typer.Option(min=0.01, help="Seconds between polls.")] = 0.5,
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """The last events of a session, read from the session's metadata and its last
    events only (never the whole log); with --follow, new events as they land (Ctrl-C
    stops; Redis blocks on the stream, other stores look again every --interval
    seconds)."""
    with open_store(url, namespace, existing=True) as store:
        info = store.events.info(session_id)
        print_events(last_events(store, info, last), json)
        if follow:
            for event in store.events.follow(session_id, info.next_seq, poll=interval):
                print_events([event], json)


def check_session(store: Any, session_id: str) -> dict[str, Any] | None:
    """What ``verify`` says of one session: ``ok``, ``state`` (``balanced``, ``open turn
    N``, ``corrupt``), ``events``, ``reason`` and ``warnings``; None when the session
    does not exist."""
    try:
        events = store.events.read_from(session_id, 0)
    except DAMAGE as exc:
        return {"id": session_id, "ok": False, "state": "corrupt", "reason": str(exc)}
    except SessionNotFoundError:
        return None
    return {
        "id": session_id,
        "ok": True,
        "state": turn_state(events),
        "events": len(events),
        "warnings": harness_warnings(events),
    }


def verdict(result: dict[str, Any]) -> Text:
    """``ID: ok (...)``, ``ID: open turn N (...)``, ``ID: CORRUPT: ...``, ``ID: WARNING: ...``."""
    line = plain(result["id"] if result["id"] is not None else "(unlisted)", ": ")
    if not result["ok"]:
        line.append(result["state"].upper(), style="red")
        return line.append_text(plain(": ", result["reason"]))
    counts = plain(f" ({result['events']} events)")
    if result["state"] == "balanced":
        line.append("ok", style="green").append_text(counts)
    else:
        line.append_text(plain(result["state"], style="yellow")).append_text(counts)
    for warning in result["warnings"]:
        line.append("; ").append("WARNING", style="yellow").append_text(plain(": ", warning))
    return line


@app.command()
@guarded
def verify(
    session_id: Annotated[str | None, typer.Argument(help="Session id (default: all).")] = None,
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """Check contiguity, format and version of every session (or one) without repairing:
    one line a session, ok, open turn, CORRUPT or WARNING (a harness field that repair
    cannot read, in a log written before append checked them). Exit 1 when any is
    damaged; an open final turn (it may be live) and a warning are not failures. A
    session named that does not exist is an error, as for show (exit 2).
    --json: one object per session checked."""
    results: list[dict[str, Any]] = []
    with open_store(url, namespace, existing=True) as store:
        if session_id is not None:
            ids = [session_id]
        else:
            with library_notices() as skipped:
                try:
                    ids = [header.id for header in store.events.list()]
                except DAMAGE as exc:
                    errors.print(plain("error: cannot list the sessions: ", exc))
                    raise typer.Exit(EXIT_FAILED) from None
            # A session the listing passed over (its header is unreadable) is damaged.
            results += [
                {"id": None, "ok": False, "state": "corrupt", "reason": reason}
                for reason in skipped
            ]
        for sid in ids:
            result = check_session(store, sid)
            if result is None:
                if session_id is not None:
                    raise SessionNotFoundError(session_id)
                continue  # deleted since it was listed
            results.append(result)
    if json:
        emit_rows(results)
    else:
        for result in results:
            console.print(verdict(result))
        damaged = sum(not r["ok"] for r in results)
        warned = sum(bool(r.get("warnings")) for r in results)
        console.print(
            plain(f"{len(results)} session(s) checked: {damaged} damaged, {warned} with warnings")
        )
    if not all(r["ok"] for r in results):
        raise typer.Exit(EXIT_FAILED)


@app.command()
@guarded
def delete(
    session_id: SessionId,
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """Remove a session entirely. On Redis this is an event-log write: a server that
    cannot give the durability asked for refuses it (DurabilityError)."""
    with open_store(url, namespace) as store:
        store.events.delete(session_id)
    if json:
        emit_json({"deleted": session_id})
    else:
        console.print(plain("deleted ", session_id))


@app.command()
@guarded
def expire(
    session_id: SessionId,
    ttl: Ttl = None,
    persist: Persist = False,
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """Set a session's retention (--ttl SECONDS) or remove it (--persist). --json: one
    object {"id", "expires_at"} (epoch ms, or null when it never expires)."""
    seconds = retention(ttl, persist)
    with open_store(url, namespace) as store:
        expires_at = store.events.set_ttl(session_id, seconds)
    if json:
        emit_json({"id": session_id, "expires_at": expires_at})
    elif expires_at is None:
        console.print(plain(f"session {session_id!r} never expires"))
    else:
        console.print(plain(f"session {session_id!r} expires at {iso(expires_at)}"))
