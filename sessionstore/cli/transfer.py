"""``sessionstore copy``: move a namespace between any two stores (and verify it).

The work is :mod:`sessionstore.transfer`'s; this shows a progress bar on a terminal
and reports what was done, one line each (``--json``: one object).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import sessionstore

from ..connection import resolve_url
from ..errors import SessionStoreError
from ..transfer.copying import CopyReport
from ..transfer.records import EventPage, Record, SessionEnd, ValueItem
from .common import (
    EXIT_FAILED,
    Json,
    Namespace,
    console,
    emit_json,
    errors,
    fail,
    library_notices,
)
from .text import plain

FromUrl = Annotated[str, typer.Option("--from", help="URL of the store to copy from.")]
ToUrl = Annotated[str, typer.Option("--to", help="URL of the store to copy to.")]
ToNamespace = Annotated[
    str | None,
    typer.Option("--to-namespace", help="Namespace to copy into (default: the same)."),
]
Merge = Annotated[
    bool,
    typer.Option("--merge", help="Write into a destination namespace that holds other data too."),
]
Verify = Annotated[
    bool,
    typer.Option(
        "--verify",
        help="Then compare both sides (counts and a digest per session and value); "
        "exit 1 on any difference.",
    ),
]


@contextmanager
def progress_bar(total: int, what: str) -> Iterator[Callable[[Record], None] | None]:
    """A rich progress bar on stderr, counting events and values, when stderr is a
    terminal; yields what advances it (None: no bar)."""
    if not errors.is_terminal:
        yield None
        return
    bar = Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=True,
    )
    task = bar.add_task(what, total=total)

    def advance(record: Record) -> None:
        if isinstance(record, EventPage):
            bar.advance(task, len(record.events))
        elif isinstance(record, ValueItem | SessionEnd):
            bar.advance(task, 1)

    with bar:
        yield advance


def namespace_size(url: str, namespace: str) -> int:
    """Events, sessions and values of the namespace: what a progress bar counts."""
    with sessionstore.connect(url, namespace) as store:
        infos = store.events.list_info()
        return sum(info.next_seq + 1 for info in infos) + len(store.list_values())


def report_lines(report: CopyReport) -> list[str]:
    counts = report.counts
    lines = [
        f"copied {counts.sessions} sessions ({counts.events} events written, "
        f"{counts.present} already there) and {counts.values} values"
    ]
    lines += [
        f"session {session_id!r} had a live writer: copied up to seq {seq}"
        for session_id, seq in sorted(counts.live.items())
    ]
    lines += [f"not copied: {problem}" for problem in report.problems]
    if report.differences is not None:
        lines += [f"differs: {difference}" for difference in report.differences]
        if not report.differences:
            lines.append("verified: both sides hold the same")
    return lines


def copy(
    from_url: FromUrl,
    to_url: ToUrl,
    namespace: Namespace = "default",
    to_namespace: ToNamespace = None,
    merge: Merge = False,
    verify: Verify = False,
    json: Json = False,
) -> None:
    """Copy every session (header, fork lineage, every event with its seq, time, data
    and id, expiry) and every value (plain and history, every version at its logical
    time, expiry) of a namespace to another store, any backend to any other. Run it
    again after an interruption: it goes on where it stopped. A session with a live
    writer is copied up to the events committed when its turn came, and reported. A
    destination namespace holding other data is refused unless --merge. Exit 1 when
    something could not be copied or --verify found a difference. --json: one object
    {"sessions", "events", "present", "values", "live", "problems", "differences"}."""
    source, destination = resolve_url(from_url), resolve_url(to_url)
    try:
        with library_notices():
            total = namespace_size(source, namespace) if errors.is_terminal else 0
            with progress_bar(total, "copying") as advance:
                report = sessionstore.copy(
                    source,
                    destination,
                    namespace,
                    to_namespace=to_namespace,
                    merge=merge,
                    verify=verify,
                    on_record=advance,
                )
    except SessionStoreError as exc:
        where = destination if isinstance(exc, sessionstore.NamespaceNotEmptyError) else None
        fail(exc, where, "give --merge to copy into it anyway" if where else None)
    finish(report, json)


def finish(report: CopyReport, json: bool) -> None:
    """Print the report; exit 1 unless it is clean."""
    if json:
        payload: dict[str, Any] = asdict(report.counts)
        emit_json(payload | {"problems": report.problems, "differences": report.differences})
    else:
        for line in report_lines(report):
            console.print(plain(line))
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)
