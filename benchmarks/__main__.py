"""``python -m benchmarks``: run every scenario, print the table, write the report.

Options: ``--quick`` (tiny sizes, a smoke test), ``--only GROUP`` (repeatable),
``--runs N`` (run everything chosen N times, each run in a process of its own: the report
gives the first run's figures and each row's lowest and highest ratio over the N runs)
and ``--out DIR`` (where ``benchmarks.md`` and ``benchmarks.png`` go). A full run writes
to ``docs/`` by default; a quick or partial one writes nothing unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import (
    async_api,
    event_check,
    json_text,
    langgraph_savers,
    local,
    peers,
    redis_log,
    report,
    scale,
    telemetry_cost,
    tenant_attack,
    values,
    workload,
    writers,
)
from .harness import Growth, Result, Sizes

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.servers import RedisServer  # noqa: E402

#: A group's part: the rows of its comparisons, or the points of its costs at scale.
Group = Callable[[str, Sizes], Sequence[Result | Growth]]

GROUPS: dict[str, list[Group]] = {
    "redis-log": [
        redis_log.append_results,
        event_check.check_results,
        json_text.text_append_results,
        redis_log.load_results,
        redis_log.scaling_results,
    ],
    "values": [values.get_set_results, values.update_results],
    "async": [async_api.async_results],
    "peers": [peers.peer_results],
    "local": [
        lambda _url, sizes: local.sqlite_results(sizes),
        lambda _url, sizes: local.jsonl_results(sizes),
    ],
    "writers": [writers.writer_results],
    "scale": [scale.scale_results],
    "tenants": [tenant_attack.attack_results],
    "langgraph": [langgraph_savers.langgraph_results],
    "telemetry": [telemetry_cost.telemetry_results],
}
#: What each scenario measures, for the report: the docstrings of the scenario modules.
DESCRIPTIONS = [
    module.__doc__ or ""
    for module in (
        workload,
        redis_log,
        event_check,
        json_text,
        values,
        async_api,
        peers,
        local,
        writers,
        scale,
        tenant_attack,
        langgraph_savers,
        telemetry_cost,
    )
]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark sessionstore against raw drivers and openai-agents.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for benchmarks.md and benchmarks.png (default: docs/ for a full run, "
        "nothing for --quick or --only)",
    )
    parser.add_argument(
        "--only", action="append", choices=list(GROUPS), help="run only this group (repeatable)"
    )
    parser.add_argument(
        "--runs",
        type=_positive,
        default=1,
        help="run everything chosen this many times; the report gives the first run and "
        "each row's spread of ratios over the runs (default 1)",
    )
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"--runs must be 1 or more, not {number}")
    return number


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if shutil.which("redis-server") is None:
        print("redis-server is not on PATH (apt-get install redis-server)", file=sys.stderr)
        return 2
    sizes = Sizes.quick() if args.quick else Sizes()
    full = not (args.quick or args.only)
    out = args.out if args.out is not None or not full else ROOT / "docs"
    chosen = args.only or list(GROUPS)
    load_before = report.uptime()
    print(f"load before: {load_before}", flush=True)
    started = time.perf_counter()
    runs: list[list[Result]] = []
    growths: list[Growth] = []
    with RedisServer() as server:
        client_info = _server_version(server.url)
        for run in range(1, args.runs + 1):
            if args.runs > 1:
                print(f"run {run} of {args.runs}; load: {report.uptime()}", flush=True)
                rows = _in_child(server.url, chosen, sizes, show_growth=run == 1)
            else:
                rows = run_groups(server.url, chosen, sizes, show_growth=True)
            runs.append([row for row in rows if isinstance(row, Result)])
            if run == 1:
                growths = [row for row in rows if isinstance(row, Growth)]
    results = runs[0]
    if args.runs > 1:
        spread(results, runs)
    wall = time.perf_counter() - started
    info = report.RunInfo(
        command=report.python_command(),
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        wall_seconds=wall,
        quick=args.quick,
        runs=args.runs,
        load_before=load_before,
        load_after=report.uptime(),
        redis_server=client_info,
        machine=report.machine(client_info),
    )
    print()
    print(report.console_table(results))
    passed = sum(r.passed for r in results)
    print(f"\n{passed} of {len(results)} targets met; {wall:.0f} s; load after: {info.load_after}")
    if args.runs > 1:
        steady = sum(r.passed_every_run for r in results)
        print(f"{steady} of {len(results)} met in each of the {args.runs} runs")
    if out is not None:
        written = report.write(results, growths, info, DESCRIPTIONS, out)
        print("wrote " + " and ".join(str(path) for path in written))
    return 0


def run_groups(
    url: str, chosen: Sequence[str], sizes: Sizes, *, show_growth: bool
) -> list[Result | Growth]:
    """Every row of the ``chosen`` groups against the server at ``url``, each printed as
    it comes (a growth table only with ``show_growth``); the server is emptied after
    each group."""
    rows: list[Result | Growth] = []
    for name in chosen:
        for group in GROUPS[name]:
            for row in group(url, sizes):
                rows.append(row)
                if isinstance(row, Result):
                    print(_progress(row), flush=True)
                elif show_growth:
                    print(report.growth_table(row), flush=True)
            _flush(url)
    return rows


def _in_child(
    url: str, chosen: Sequence[str], sizes: Sizes, *, show_growth: bool
) -> list[Result | Growth]:
    """:func:`run_groups` in a child process of its own (forked), so that each run of
    several starts from the same state: what one run leaves in the process (caches,
    the objects the garbage collector keeps walking) weighed on the next, slowing the
    event loads of later runs by up to half."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        send.send(run_groups(url, chosen, sizes, show_growth=show_growth))

    process = context.Process(target=child)
    process.start()
    send.close()
    try:
        rows: list[Result | Growth] = receive.recv()
    except EOFError:
        process.join()
        code = process.exitcode
        raise SystemExit(f"a run ended without its results (exit code {code})") from None
    process.join()
    return rows


def spread(results: list[Result], runs: list[list[Result]]) -> None:
    """Give each row of ``results`` its ratio in every run of ``runs`` (matched by key;
    a run where the row is missing adds nothing)."""
    for row in results:
        row.run_ratios = [r.ratio for rows in runs for r in rows if r.key == row.key]


def _progress(row: Result) -> str:
    return (
        f"{row.verdict}  {row.key}: ours {row.ours:,.1f} {row.unit}, baseline "
        f"{row.baseline:,.1f} {row.unit}, ratio {row.ratio:.2f} (target {row.target_text})"
    )


def _server_version(url: str) -> str:
    import redis

    client = redis.Redis.from_url(url)
    try:
        found = client.info("server")
        return f"{found['redis_version']} (AOF off, no RDB snapshots)"
    finally:
        client.close()


def _flush(url: str) -> None:
    """Start the next group on an empty server."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushall()
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
