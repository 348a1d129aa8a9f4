"""``sessionstore demo``: a parallel backtest with rich progress and a summary table."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import demo as engine
from ..connection import DEFAULT_DIR, ENV_URL, mask_url, resolve_url
from ..errors import DurabilityError, SessionStoreError
from .common import fail

_DURABILITY_HINT = (
    "for a throwaway run on this server, add ?durability=none to the URL (the demo then "
    "accepts losing the latest events in a crash)"
)


def demo(
    url: Annotated[
        str | None,
        typer.Option(
            help=f"Store URL (default: ${ENV_URL}, else ./{DEFAULT_DIR}).",
            envvar=ENV_URL,
            show_envvar=False,
        ),
    ] = None,
    workers: Annotated[int, typer.Option(min=0, help="Worker processes (0: one per CPU).")] = 0,
    symbols: Annotated[int, typer.Option(min=1, help="Symbols to backtest.")] = 8,
    candles: Annotated[int, typer.Option(min=2, help="Candles per symbol.")] = 48,
    namespace: Annotated[str, typer.Option(help="Namespace of the demo's data.")] = "demo",
    crash: Annotated[
        bool, typer.Option(help="Kill one worker mid-turn and show the repair.")
    ] = False,
) -> None:
    """Run a parallel backtest that caches model answers in session values and logs every
    decision as a turn; exit 1 if any invariant fails."""
    console = Console()
    store_url = resolve_url(url)
    worker_count = workers or os.cpu_count() or 2
    plan = [jobs for jobs in engine.plan(symbols, worker_count) if jobs]
    console.print(
        f"[bold]sessionstore demo[/] on {mask_url(store_url)}: {len(plan)} workers, "
        f"{symbols} symbols x {len(engine.VARIANTS)} strategies x {candles} candles"
        + (" [red](one worker will crash mid-turn)[/]" if crash else "")
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        tasks = {
            n: progress.add_task(f"worker {n}", total=len(jobs) * candles)
            for n, jobs in enumerate(plan)
        }
        try:
            result = engine.run(
                store_url,
                namespace=namespace,
                workers=worker_count,
                symbol_count=symbols,
                candle_count=candles,
                crash=crash,
                on_progress=lambda worker, count: progress.advance(tasks[worker], count),
            )
        except SessionStoreError as exc:
            progress.stop()
            fail(exc, store_url, _DURABILITY_HINT if isinstance(exc, DurabilityError) else None)
    console.print(summary(result))
    if result.repaired:
        console.print(
            f"Recovered {len(result.repaired)} interrupted session(s) on load: "
            f"{', '.join(result.repaired)}; closers: {', '.join(result.repair_codes) or 'turn/end'}"
        )
    if not result.ok:
        for problem in result.problems:
            console.print(f"[red]invariant failed:[/] {problem}")
        raise typer.Exit(1)
    console.print("[green]all invariants hold[/]")


def summary(result: engine.DemoResult) -> Table:
    candles_done = result.total("candles")
    calls, reused = result.total("model_calls"), result.total("reused")
    lookups = calls + reused
    table = Table(title="backtest summary", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows = [
        ("candles processed", f"{candles_done}"),
        ("model calls made", f"{calls}"),
        ("model answers reused", f"{reused} ({reused / lookups:.0%} hit rate)" if lookups else "0"),
        ("look-ahead refusals", f"{result.total('lookahead_refusals')}"),
        ("reads from the future", f"{result.total('future_reads')}"),
        ("events written", f"{result.total('events')}"),
        ("sessions balanced", f"{result.balanced}/{result.sessions}"),
        ("crashed workers", f"{sum(w.crashed for w in result.workers)}"),
        ("sessions repaired on load", f"{len(result.repaired)}"),
        ("wall time", f"{result.wall_seconds:.2f} s"),
        (
            "throughput",
            f"{candles_done / result.wall_seconds:,.0f} candles/s" if result.wall_seconds else "-",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
