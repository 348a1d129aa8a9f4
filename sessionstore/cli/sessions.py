"""``sessionstore sessions ...``: list, show, tail, verify and delete event-log sessions."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from ..errors import CorruptLogError, SessionNotFoundError, UnsupportedVersionError
from ..eventlog import closers
from ..models import SessionEvent
from .common import EXIT_FAILED, Json, Namespace, Url, console, emit_json, guarded, iso, open_store

app = typer.Typer(
    help="Event-log sessions.", no_args_is_help=True, pretty_exceptions_show_locals=False
)

SessionId = Annotated[str, typer.Argument(help="Session id.")]
FromSeq = Annotated[int, typer.Option("--from", min=0, help="First seq to show.")]


def turn_state(events: list[SessionEvent]) -> str:
    """``balanced``, or ``open turn N`` when the final turn has no end (it may be live)."""
    if not closers(events):
        return "balanced"
    starts = [e for e in events if e.type == "turn/start"]
    turn = starts[-1].data.get("turn") if starts and isinstance(starts[-1].data, dict) else None
    return f"open turn {turn}" if turn is not None else "open turn"


@app.command("list")
@guarded
def list_sessions(url: Url = None, namespace: Namespace = "default", json: Json = False) -> None:
    """Id, created, events, last activity and turn state of every session."""
    rows: list[dict[str, Any]] = []
    with open_store(url, namespace) as store:
        for header in store.events.list():
            events = store.events.read_from(header.id, 0)
            rows.append(
                {
                    "id": header.id,
                    "created_at": header.created_at,
                    "events": len(events),
                    "last_activity": events[-1].time if events else None,
                    "state": turn_state(events),
                }
            )
    if json:
        emit_json(rows)
        return
    table = Table("id", "created", "events", "last activity", "state")
    for row in rows:
        table.add_row(
            row["id"],
            iso(row["created_at"]),
            str(row["events"]),
            iso(row["last_activity"]),
            row["state"],
        )
    console.print(table)


def describe(event: SessionEvent) -> str:
    """One readable line; turn, step and tool structure shown by indentation."""
    data: dict[str, Any] = event.data if isinstance(event.data, dict) else {}
    kind = event.type
    if kind == "turn/start":
        return f"turn {data.get('turn')}"
    if kind == "turn/end":
        reason = (data.get("reason") or {}).get("kind", "?")
        return f"end of turn {data.get('turn')} ({reason})"
    if kind == "step/start":
        return f"  step {data.get('step')}"
    if kind == "step/end":
        return f"  end of step {data.get('step')}"
    if kind == "tool/call":
        return (
            f"    call {data.get('name')}({_short(data.get('arguments'))}) [{data.get('call_id')}]"
        )
    if kind == "tool/result":
        code = (data.get("error") or {}).get("code")
        outcome = f"error {code}" if data.get("is_error") else "ok"
        return f"    result [{data.get('call_id')}] {outcome}: {_short(data.get('content'))}"
    return f"    {kind} {_short(data)}"


def _short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def print_events(events: list[SessionEvent], json: bool) -> None:
    for event in events:
        if json:
            emit_json(event.model_dump())
        else:
            console.print(f"{event.seq:>6}  {iso(event.time)}  {describe(event)}", markup=False)


@app.command()
@guarded
def show(
    session_id: SessionId,
    from_seq: FromSeq = 0,
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """The committed events of a session, readable (nothing is repaired or written)."""
    with open_store(url, namespace) as store:
        print_events(store.events.read_from(session_id, from_seq), json)


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
    """The last events of a session; with --follow, new events as they land (Ctrl-C stops;
    Redis blocks on the stream, other stores look again every --interval seconds)."""
    with open_store(url, namespace) as store:
        events = store.events.read_from(session_id, 0)
        print_events(events[len(events) - last :] if last else [], json)
        if follow:
            for event in store.events.follow(session_id, len(events), poll=interval):
                print_events([event], json)


@app.command()
@guarded
def verify(
    session_id: Annotated[str | None, typer.Argument(help="Session id (default: all).")] = None,
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """Check contiguity, format and version without repairing. Exit 1 on corruption; an
    open final turn is reported (it may be live) but is not a failure."""
    results: list[dict[str, Any]] = []
    with open_store(url, namespace) as store:
        ids = [session_id] if session_id else [h.id for h in store.events.list()]
        for sid in ids:
            try:
                events = store.events.read_from(sid, 0)
            except (CorruptLogError, UnsupportedVersionError) as exc:
                results.append({"id": sid, "ok": False, "state": "corrupt", "reason": str(exc)})
                continue
            except SessionNotFoundError as exc:
                results.append({"id": sid, "ok": False, "state": "missing", "reason": str(exc)})
                continue
            results.append(
                {"id": sid, "ok": True, "state": turn_state(events), "events": len(events)}
            )
    if json:
        emit_json(results)
    else:
        for result in results:
            status = "[green]ok[/]" if result["ok"] else "[red]FAIL[/]"
            detail = result.get("reason") or f"{result['events']} events, {result['state']}"
            console.print(f"{status}  {result['id']}: {detail}", soft_wrap=True)
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
    """Remove a session entirely."""
    with open_store(url, namespace) as store:
        store.events.delete(session_id)
    if json:
        emit_json({"deleted": session_id})
    else:
        console.print(f"deleted {session_id}", markup=False)
