"""``sessionstore top``: what a namespace is writing, refreshed, read from the store alone.

The numbers come from :mod:`.top_sample` (what is exact, what is a lower bound and what
is server-wide is said there); this module shows them: a screen redrawn in place on a
terminal, one frame after another on a pipe, or one JSON object per refresh.
"""

from __future__ import annotations

import itertools
import time
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..connection import mask_url, resolve_url
from ..errors import SessionStoreError
from .common import Json, Namespace, Url, check_exists, console, emit_json, fail
from .tables import human_bytes
from .text import count, plain
from .top_sample import Refresh, Sampler, open_sampler, snapshots

#: Lines of a screen that are not table rows (the summary, the headers, the notes).
_CHROME = 14


def top(
    url: Url = None,
    namespace: Namespace = "default",
    interval: Annotated[
        float, typer.Option(min=0.05, max=3600, help="Seconds between two refreshes.")
    ] = 2.0,
    sample: Annotated[
        int,
        typer.Option(
            min=1,
            max=10_000,
            help="Sessions and values read per refresh, at most (on Redis the most "
            "recently indexed ones).",
        ),
    ] = 50,
    iterations: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many refreshes.")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="One refresh, then stop.")] = False,
    json: Json = False,
) -> None:
    """What the namespace is writing, refreshed every --interval seconds until Ctrl-C:
    events per second (namespace and each session), value writes per second (Redis),
    writer leases held, the bytes of what was sampled and, on Redis, the server's
    clients, memory and commands per second (server-wide). Read from the store alone,
    with the commands the namespace's least-privilege user may run; nothing is written.
    Rates compare two looks at the store: a session's events are exact, value writes are
    exact for writers seen before (a new writer counts one write per value it wrote).
    At most --sample sessions and values are read per refresh (the screen says how many
    of how many). Redis, SQLite and file stores (no value rates on the last two);
    memory:// is refused. --json: one object per refresh {"namespace", "seconds",
    "events", "events_per_s", "value_writes", "value_writes_per_s", "leases", "bytes",
    "sessions": {"total", "sampled", "rows"}, "values": {...}, "server": {...}}."""
    resolved = resolve_url(url)
    refreshes = 1 if once else iterations
    try:
        check_exists(resolved)
        sampler = open_sampler(resolved, namespace, sample)
        try:
            _watch(sampler, resolved, namespace, interval, refreshes, json)
        finally:
            sampler.close()
    except SessionStoreError as exc:
        fail(exc, resolved)


def _watch(
    sampler: Sampler, url: str, namespace: str, interval: float, refreshes: int | None, json: bool
) -> None:
    shown = itertools.islice(snapshots(sampler, interval), refreshes)
    title = f"namespace {namespace!r} of {mask_url(url)}, every {interval:g} s"
    try:
        if json:
            for refresh in shown:
                emit_json(as_json(refresh, namespace))
        elif console.is_terminal:
            with Live(console=console, auto_refresh=False) as live:
                live.update(_waiting(title), refresh=True)
                for refresh in shown:
                    live.update(screen(refresh, title, console.size.height), refresh=True)
        else:
            for refresh in shown:
                console.print(screen(refresh, title, None))
                console.print()
    except KeyboardInterrupt:  # the way to leave top
        return


def as_json(refresh: Refresh, namespace: str) -> dict[str, Any]:
    """One refresh as the ``--json`` object."""
    rate = refresh.per_second
    server = refresh.server
    return {
        "namespace": namespace,
        "time": int(time.time() * 1000),
        "seconds": round(refresh.seconds, 6),
        "events": refresh.events,
        "events_per_s": rate(refresh.events),
        "value_writes": refresh.value_writes,
        "value_writes_per_s": rate(refresh.value_writes),
        "leases": refresh.leases,
        "bytes": refresh.size,
        "sessions": {
            "total": refresh.sessions_total,
            "sampled": refresh.sessions_sampled,
            "rows": [
                {
                    "id": row.id,
                    "events": row.events,
                    "events_per_s": rate(row.events),
                    "next_seq": row.next_seq,
                    "lease": row.busy,
                    "bytes": row.size,
                }
                for row in refresh.sessions
            ],
        },
        "values": {
            "total": refresh.values_total,
            "sampled": refresh.values_sampled,
            "rows": [
                {"key": row.key, "history": row.history, "writes": row.writes, "bytes": row.size}
                for row in refresh.values
            ],
        },
        "server": {
            "clients": server.clients,
            "memory": server.memory,
            "commands": refresh.commands,
            "commands_per_s": rate(refresh.commands),
        },
    }


def _waiting(title: str) -> Text:
    return plain(title, "\nfirst refresh pending")


def screen(refresh: Refresh, title: str, height: int | None) -> RenderableType:
    """One frame: the summary, then the busiest sessions and values (as many as
    ``height`` lines hold; all of them when None)."""
    rate = refresh.per_second
    lines = [plain(title, f", last {refresh.seconds:.1f} s")]
    values = (
        "value writes: not observed on this store"
        if refresh.value_writes is None
        else f"value writes {rate(refresh.value_writes):,.1f}/s"
    )
    lines.append(
        plain(
            f"events {rate(refresh.events):,.1f}/s · {values} · leases held {refresh.leases}"
            f" · {human_bytes(refresh.size)} in what was sampled"
        )
    )
    sampled = f"sampled: {refresh.sessions_sampled} of {count(refresh.sessions_total, 'session')}"
    if refresh.values_total is not None:
        shown = "" if refresh.values_sampled is None else f"{refresh.values_sampled} of "
        sampled += f", {shown}{count(refresh.values_total, 'value')}"
    if refresh.sessions_sampled < refresh.sessions_total or (
        (refresh.values_sampled or 0) < (refresh.values_total or 0)
    ):
        sampled += " (the most recently written; --sample sets how many)"
    lines.append(plain(sampled))
    server = refresh.server
    if server.clients is not None:
        lines.append(
            plain(
                f"server (all namespaces): {count(server.clients, 'client')} connected · "
                f"{human_bytes(server.memory)} used · {rate(refresh.commands) or 0:,.0f} "
                "commands/s"
            )
        )
    rows = None if height is None else max(2, height - _CHROME)
    parts: list[RenderableType] = [*lines, _sessions_table(refresh, rows)]
    if refresh.values_sampled:
        parts.append(_values_table(refresh, rows))
    return Group(*parts)


def _sessions_table(refresh: Refresh, rows: int | None) -> RenderableType:
    table = Table("session", "events/s", "events", "lease", "size", box=None)
    shown = refresh.sessions if rows is None else refresh.sessions[: rows // 2 or 1]
    for row in shown:
        table.add_row(
            plain(row.id),
            f"{refresh.per_second(row.events):,.1f}",
            str(row.next_seq),
            "held" if row.busy else "-",
            human_bytes(row.size),
        )
    return _with_rest(table, len(refresh.sessions) - len(shown), "session")


def _values_table(refresh: Refresh, rows: int | None) -> RenderableType:
    table = Table("value", "kind", "writes seen", "size", box=None)
    shown = refresh.values if rows is None else refresh.values[: rows // 2 or 1]
    for row in shown:
        table.add_row(
            plain(row.key),
            "history" if row.history else "plain",
            f"≥{row.writes}" if row.writes else "-",
            human_bytes(row.size),
        )
    return _with_rest(table, len(refresh.values) - len(shown), "value")


def _with_rest(table: Table, rest: int, noun: str) -> RenderableType:
    if rest <= 0:
        return table
    return Group(table, plain(f"... and {count(rest, noun)} more (--json lists them all)"))
