"""``sessionstore copy``: move a namespace between any two stores (and verify it).

The work is :mod:`sessionstore.transfer`'s; this shows a progress bar on a terminal
and reports what was done, one line each (``--json``: one object).
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import IO, Annotated, Any, Protocol, cast

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import sessionstore

from ..connection import resolve_url
from ..errors import InvalidArgumentError, SessionStoreError
from ..transfer.archive import export_archive, import_archive
from ..transfer.copying import CopyReport
from ..transfer.records import EventPage, Record, SessionEnd, ValueItem
from .common import (
    EXIT_FAILED,
    Json,
    Namespace,
    Url,
    check_exists,
    console,
    emit_json,
    errors,
    fail,
    library_notices,
)
from .text import count, plain

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


def report_lines(report: CopyReport, done: str = "copied") -> list[str]:
    counts = report.counts
    lines = [
        f"{done} {count(counts.sessions, 'session')} ({count(counts.events, 'event')} "
        f"written, {counts.present} already there) and {count(counts.values, 'value')}"
    ]
    lines += [
        f"session {session_id!r} had a live writer: {done} up to seq {seq}"
        for session_id, seq in sorted(counts.live.items())
    ]
    lines += [f"session {session_id!r} had expired: left out" for session_id in counts.expired]
    lines += [f"value {name!r} had expired: left out" for name in counts.expired_values]
    lines += [f"not {done}: {problem}" for problem in report.problems]
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
    {"sessions", "events", "present", "values", "live", "expired", "expired_values",
    "problems", "differences"}."""
    source, destination = resolve_url(from_url), resolve_url(to_url)
    try:
        with library_notices():
            check_exists(source)  # before the progress bar's count opens it
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


def finish(report: CopyReport, json: bool, done: str = "copied") -> None:
    """Print the report; exit 1 unless it is clean."""
    if json:
        payload: dict[str, Any] = asdict(report.counts)
        emit_json(payload | {"problems": report.problems, "differences": report.differences})
    else:
        for line in report_lines(report, done):
            console.print(plain(line))
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


Output = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="Write to this file (gzipped when it ends in .gz); default stdout."
    ),
]
Gzip = Annotated[bool, typer.Option("--gzip", help="Gzip the archive.")]


def export(
    url: Url = None,
    namespace: Namespace = "default",
    output: Output = None,
    gzip_it: Gzip = False,
    json: Json = False,
) -> None:
    """Write the archive of a namespace (JSON Lines, format version 1, see
    docs/operations.md) to stdout or --output: every session with its events, every value
    with its versions, their expiries, and an end line with counts and a digest. What
    was exported, and every session that had a live writer (exported up to its
    committed events), is said on stderr. --json (with --output: stdout carries the
    archive otherwise): one object {"sessions", "events", "values", "lines", "sha256",
    "live"} on stdout."""
    if json and output is None:
        raise InvalidArgumentError("--json needs --output: without it stdout carries the archive")
    resolved = resolve_url(url)
    compress = gzip_it or (output is not None and output.name.endswith(".gz"))
    try:
        with library_notices(), ExitStack() as closing:
            out = HeldBack(lambda: _open_output(output, compress, closing))
            # export_archive only writes to its output.
            end = export_archive(resolved, namespace, cast(IO[bytes], out))
    except SessionStoreError as exc:
        fail(exc, resolved)
    if json:
        emit_json(end)
        return
    errors.print(
        plain(
            f"exported {count(end['sessions'], 'session')} ({count(end['events'], 'event')}) "
            f"and {count(end['values'], 'value')} of namespace {namespace!r}"
        )
    )
    for session_id in end["live"]:
        errors.print(
            plain(f"session {session_id!r} had a live writer: exported up to its committed events")
        )


class Writable(Protocol):
    """What an archive can be written to (a file, stdout, a gzip stream)."""

    def write(self, data: bytes, /) -> int: ...


class HeldBack:
    """Where ``export`` writes the archive: the first write (the format line, written
    before the store is read) is held back until a second comes, the store having
    answered; only then is the output opened (``open_output``) and both written. So an
    export that cannot connect, log in or read writes nothing and creates no file."""

    def __init__(self, open_output: Callable[[], Writable]) -> None:
        self._open_output = open_output
        self._held: bytes | None = None
        self._out: Writable | None = None

    def write(self, data: bytes) -> int:
        if self._out is None:
            if self._held is None:
                self._held = bytes(data)
                return len(data)
            self._out = self._open_output()
            self._out.write(self._held)
        return self._out.write(data)


def _open_output(output: Path | None, compress: bool, closing: ExitStack) -> Writable:
    """The archive's output: stdout, or the file ``output`` (created, or emptied), gzipped
    when ``compress``; ``closing`` closes it (stdout: flushes it). A file that cannot be
    opened raises :class:`InvalidArgumentError` naming it."""
    if output is None:
        raw = sys.stdout.buffer
        closing.callback(raw.flush)
    else:
        try:
            raw = closing.enter_context(output.open("wb"))
        except OSError as exc:
            raise InvalidArgumentError(f"cannot write {output}: {exc.strerror}") from None
    if not compress:
        return raw
    return closing.enter_context(gzip.GzipFile(fileobj=raw, mode="wb", mtime=0))


def import_(
    file: Annotated[
        Path | None, typer.Argument(help="The archive (plain or gzipped); default stdin.")
    ] = None,
    url: Url = None,
    namespace: Namespace = "default",
    merge: Merge = False,
    json: Json = False,
) -> None:
    """Import an archive written by `sessionstore export` into a namespace, exactly. The
    whole archive is read first: a damaged or truncated one is refused with the line
    number and nothing is written. A namespace holding other data is refused unless
    --merge. Run it again after an interruption: it goes on where it stopped. Exit 1
    when something could not be written. --json: one object, as for copy."""
    resolved = resolve_url(url)
    try:
        with library_notices(), _source(file) as source:
            report = import_archive(resolved, namespace, source, merge=merge)
    except SessionStoreError as exc:
        hint = (
            "give --merge to import into it anyway"
            if isinstance(exc, sessionstore.NamespaceNotEmptyError)
            else None
        )
        fail(exc, resolved, hint)
    finish(report, json, "imported")


@contextmanager
def _source(file: Path | None) -> Iterator[IO[bytes]]:
    if file is None:
        yield sys.stdin.buffer
        return
    try:
        opened = file.open("rb")
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {file}: {exc.strerror}") from None
    with opened:
        yield opened
