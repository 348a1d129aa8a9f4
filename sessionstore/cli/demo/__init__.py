"""``sessionstore demo``: a parallel backtest with rich progress and a summary table."""

from __future__ import annotations

import shlex
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ...connection import DEFAULT_DIR, ENV_URL, mask_url, resolve_url
from ...errors import SessionStoreError
from ..common import EXIT_ERROR, Json, emit_json, errors, fail, mask_address
from ..text import plain
from . import data
from .check import DemoResult
from .dask import SchedulerError
from .engine import run
from .ownership import ForeignDataError
from .workers import WorkerReport


def demo(
    url: Annotated[
        str | None,
        typer.Option(
            help=f"Store URL (default: ${ENV_URL}, else ./{DEFAULT_DIR}).",
            envvar=ENV_URL,
            show_envvar=False,
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=0,
            max=data.MAX_WORKERS,
            help="Worker processes, or Dask tasks with --scheduler (0: one per CPU; "
            f"at most {data.MAX_WORKERS}).",
        ),
    ] = 0,
    symbols: Annotated[
        int,
        typer.Option(
            min=1, max=data.MAX_SYMBOLS, help=f"Symbols to backtest (at most {data.MAX_SYMBOLS})."
        ),
    ] = 8,
    candles: Annotated[
        int,
        typer.Option(
            min=2,
            max=data.MAX_CANDLES,
            help=f"Candles per symbol (2 to {data.MAX_CANDLES}).",
        ),
    ] = 48,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of the demo's data.")
    ] = "demo",
    crash: Annotated[
        bool, typer.Option(help="Kill one worker mid-turn and show the repair.")
    ] = False,
    reset: Annotated[
        bool,
        typer.Option(
            "--reset",
            help="Start even though the namespace holds sessions or values that are not "
            "the demo's own. They are kept: the demo deletes only its own leftovers.",
        ),
    ] = False,
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="Run the workers as Dask distributed tasks: 'local' starts a LocalCluster "
            "of --workers processes; an address (tcp://host:8786) uses an existing "
            "cluster, whose workers must reach the store's URL. Default: local processes.",
        ),
    ] = None,
    json: Json = False,
) -> None:
    """Run a parallel backtest that caches model answers in session values and logs every
    decision as a turn; exit 1 if any invariant fails.

    The demo's own data: sessions momentum-SYMnnnUSDT and contrarian-SYMnnnUSDT (header
    cwd /demo/<strategy>) and history values (SYMnnnUSDT, llm-signal, synthetic, 1h). It
    deletes its own leftovers of an earlier run and nothing else. A namespace holding
    anything else is refused (exit 2, nothing written) unless --reset is given. A store
    that cannot take the run (a Redis without durable AOF) is refused before any write;
    a refusal is printed alone: the banner comes only once the run starts.
    With --scheduler the workers are Dask tasks, the store their task argument; progress
    counts the candles whose turns the store holds. --json: one object, the summary."""
    console = Console()
    store_url = resolve_url(url)
    worker_count = workers or data.default_workers()
    plan = [jobs for jobs in data.plan(symbols, worker_count) if jobs]
    look = sessions_command(url, namespace)
    heading = None
    if not json:
        heading = Text("sessionstore demo", style="bold").append_text(
            plain(
                f" on {mask_url(store_url)}, namespace {namespace!r}: {len(plan)} workers, "
                f"{symbols} symbols x {len(data.VARIANTS)} strategies x {candles} candles"
            )
        )
        if scheduler is not None:
            where = (
                "a local Dask cluster"
                if scheduler == "local"
                else f"Dask at {mask_address(scheduler)}"
            )
            heading.append_text(plain(f", as tasks on {where}"))
        if crash:
            heading.append(" (one worker will crash mid-turn)", style="red")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    progress = Progress(*columns, console=console, transient=False, disable=json)

    def start() -> None:
        """The banner, once the store has taken the run (a refusal comes first, alone)."""
        if heading is not None:
            console.print(heading)
            console.print(plain(f"its sessions: {look}"), soft_wrap=True)
        progress.start()

    tasks = {
        n: progress.add_task(f"worker {n}", total=len(jobs) * candles)
        for n, jobs in enumerate(plan)
    }
    try:
        result = run(
            store_url,
            namespace=namespace,
            workers=worker_count,
            symbol_count=symbols,
            candle_count=candles,
            crash=crash,
            reset=reset,
            on_start=start,
            on_progress=lambda worker, count: progress.advance(tasks[worker], count),
            scheduler=scheduler,
        )
    except SchedulerError as exc:
        if progress.live.is_started:
            progress.stop()
        errors.print(plain("error: ", exc))
        raise typer.Exit(EXIT_ERROR) from None
    except ForeignDataError as exc:
        errors.print(plain("error: ", exc))
        also = "" if exc.taken else ", or give --reset to start anyway"
        errors.print(
            plain(
                f"hint: run the demo in another namespace (--namespace){also}: the demo "
                "never deletes data it did not write"
            )
        )
        raise typer.Exit(EXIT_ERROR) from None
    except SessionStoreError as exc:
        if progress.live.is_started:
            progress.stop()
        fail(exc, store_url)
    progress.stop()
    if json:
        emit_json(summary_json(result, store_url, look))
    else:
        print_summary(console, result, look)
    if not result.ok:
        raise typer.Exit(1)


def sessions_command(url: str | None, namespace: str) -> str:
    """The command that lists the demo's sessions, ready to paste: a URL holding a secret
    is never printed (masked, it would not authenticate); the command then reads it from
    ``$SESSIONSTORE_URL`` and says so."""
    words = shlex.join(["sessionstore", "sessions", "list", "-n", namespace])
    if url is None:
        return words
    if mask_url(url) == url:
        return f"{words} --url {shlex.quote(url)}"
    return f'{words} --url "${ENV_URL}"  (with {ENV_URL} set to this URL, password included)'


def print_summary(console: Console, result: DemoResult, look: str) -> None:
    console.print(summary(result))
    for worker in result.crashed:
        console.print(plain(crashed_line(worker)), soft_wrap=True)
    if result.repaired:
        console.print(
            plain(
                f"Recovered {len(result.repaired)} interrupted session(s) on load: "
                f"{', '.join(result.repaired)}; "
                f"closers: {', '.join(result.repair_codes) or 'turn/end'}"
            )
        )
    console.print(plain(f"namespace {result.namespace!r}; its sessions: {look}"), soft_wrap=True)
    for problem in result.problems:
        console.print(Text("invariant failed:", style="red").append_text(plain(" ", problem)))
    if result.ok:
        console.print("[green]all invariants hold[/]")


def crashed_line(worker: WorkerReport) -> str:
    where = f" in {worker.interrupted}" if worker.interrupted else ""
    return (
        f"crashed worker {worker.worker}: killed mid-turn{where} after {worker.candles} "
        f"candle(s) ({worker.model_calls} model call(s), {worker.reused} reused, "
        f"{worker.waited} waited for), "
        f"{worker.events} event(s) written; read back from its durable logs and counted "
        "in the totals"
    )


def summary(result: DemoResult) -> Table:
    candles_done = result.total("candles")
    calls, reused = result.total("model_calls"), result.total("reused")
    waited = result.total("waited")
    lookups = calls + reused + waited
    crashed_events = sum(w.events for w in result.crashed)
    table = Table(title="backtest summary", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows: list[tuple[str, str | Text]] = [
        ("namespace", plain(result.namespace)),
        ("candles processed", f"{candles_done} (model calls + answers reused + waited for)"),
        (
            "model calls made",
            f"{calls} (distinct (symbol, candle) answers: {result.distinct_answers})",
        ),
        ("model answers reused", f"{reused} ({reused / lookups:.0%} hit rate)" if lookups else "0"),
        ("answers waited for", f"{waited} (another worker was asking the model)"),
        ("look-ahead refusals", f"{result.total('lookahead_refusals')}"),
        ("reads from the future", f"{result.total('future_reads')}"),
        (
            "events written",
            f"{result.events_written} ({result.total('events') - crashed_events} by finished "
            f"workers, {crashed_events} by crashed ones, {result.repair_events} closers "
            "by the repair)",
        ),
        ("sessions balanced", f"{result.balanced}/{result.sessions}"),
        ("crashed workers", f"{len(result.crashed)}"),
        ("sessions repaired on load", f"{len(result.repaired)}"),
        (
            "earlier demo data deleted",
            f"{result.deleted[0]} session(s), {result.deleted[1]} value(s) (its own only)",
        ),
        ("wall time", f"{result.wall_seconds:.2f} s"),
        (
            "throughput",
            f"{candles_done / result.wall_seconds:,.0f} candles/s" if result.wall_seconds else "-",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def summary_json(result: DemoResult, url: str, look: str) -> dict[str, Any]:
    crashed_events = sum(w.events for w in result.crashed)
    return {
        "url": mask_url(url),
        "namespace": result.namespace,
        "sessions_command": look,
        "ok": result.ok,
        "candles": result.total("candles"),
        "model_calls": result.total("model_calls"),
        "reused": result.total("reused"),
        "waited": result.total("waited"),
        "distinct_answers": result.distinct_answers,
        "lookahead_refusals": result.total("lookahead_refusals"),
        "future_reads": result.total("future_reads"),
        "events_written": result.events_written,
        "events_by": {
            "finished_workers": result.total("events") - crashed_events,
            "crashed_workers": crashed_events,
            "repair": result.repair_events,
        },
        "sessions": result.sessions,
        "balanced": result.balanced,
        "repaired": result.repaired,
        "repair_codes": result.repair_codes,
        "crashed_workers": [
            {
                "worker": w.worker,
                "candles": w.candles,
                "model_calls": w.model_calls,
                "reused": w.reused,
                "waited": w.waited,
                "events": w.events,
                "interrupted": w.interrupted,
            }
            for w in result.crashed
        ],
        "deleted": {"sessions": result.deleted[0], "values": result.deleted[1]},
        "wall_seconds": round(result.wall_seconds, 3),
        "problems": result.problems,
    }
