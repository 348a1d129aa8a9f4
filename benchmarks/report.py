"""The report: a console table, ``docs/benchmarks.md`` and the chart ``docs/benchmarks.png``."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .findings import FINDINGS, LANDED, LAYOUTS
from .harness import Growth, Result

COLUMNS = ("Scenario", "Ours", "Baseline", "Ratio", "Target", "Result")


@dataclass
class RunInfo:
    """What the report says about the run besides the results."""

    command: str
    date: str
    wall_seconds: float
    quick: bool
    load_before: str
    load_after: str
    redis_server: str
    machine: dict[str, str] = field(default_factory=dict)
    #: How many times every scenario ran (``--runs``); the report gives the first run.
    runs: int = 1


def uptime() -> str:
    """``uptime``'s line (the load averages), or the load averages alone without it."""
    try:
        out = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout
        if out.strip():
            return out.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    one, five, fifteen = os.getloadavg()
    return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f}"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(redis_server: str) -> dict[str, str]:
    return {
        "nproc": str(os.cpu_count()),
        "CPU": _cpu_model(),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "redis-server": redis_server,
        "redis-py": _version("redis"),
        "hiredis": _version("hiredis"),
        "SQLite": sqlite3.sqlite_version,
        "openai-agents": _version("openai-agents"),
        "sessionstore": _version("sessionstore"),
    }


def _number(value: float, unit: str) -> str:
    if unit == "MiB":
        return f"{value:,.1f} {unit}"
    return f"{value:,.0f} {unit}"


def _cells(result: Result, spread: bool) -> tuple[str, ...]:
    return (
        result.key,
        _number(result.ours, result.unit),
        f"{_number(result.baseline, result.unit)} ({result.baseline_name})",
        f"{result.ratio:.2f}",
        *((result.spread_text,) if spread else ()),
        result.target_text,
        result.verdict,
    )


def _spread(results: Sequence[Result]) -> bool:
    """Whether the rows come from several runs (and so have a spread to show)."""
    return any(r.run_ratios for r in results)


def console_table(results: Sequence[Result]) -> str:
    spread = _spread(results)
    head = (*COLUMNS[:4], "Runs", *COLUMNS[4:]) if spread else COLUMNS
    rows = [head, *(_cells(r, spread) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _markdown_table(results: Sequence[Result]) -> str:
    spread = _spread(results)
    runs = " Runs (lowest-highest) |" if spread else ""
    head = f"| Area | Scenario | Ours | Baseline | Ratio |{runs} Target | Result |"
    rule = "| --- | --- | ---: | --- | ---: |" + (" ---: |" if spread else "") + " ---: | --- |"
    lines = [head, rule]
    for r in results:
        verdict = f"**{r.verdict}**" if not r.passed else r.verdict
        cell = f" {r.spread_text} |" if spread else ""
        lines.append(
            f"| {r.area} | {r.scenario} | {_number(r.ours, r.unit)} | "
            f"{_number(r.baseline, r.unit)} ({r.baseline_name}) | {r.ratio:.2f} |{cell} "
            f"{r.target_text} | {verdict} |"
        )
    return "\n".join(lines)


def _runs_text(results: Sequence[Result], info: RunInfo) -> str:
    """What the table's figures are, for a report of several runs ("" for one)."""
    if info.runs == 1:
        return ""
    steady = sum(r.passed_every_run for r in results)
    return (
        f"Every scenario ran {info.runs} times, each run in a process of its own, one after "
        f"the other on the same server: "
        f"the figures and verdicts are the first run's; the column Runs gives the lowest and "
        f"the highest ratio of the row over the {info.runs} runs; {steady} of "
        f"{len(results)} targets were met in every run.\n\n"
    )


def _settings(results: Sequence[Result]) -> str:
    seen: dict[str, str] = {}
    for r in results:
        seen.setdefault(r.area, r.settings)
    return "\n".join(f"- **{area}**: {settings}" for area, settings in seen.items())


def _samples(results: Sequence[Result]) -> str:
    lines = []
    for r in results:
        if r.samples:
            ours = ", ".join(f"{x:,.0f}" for x in r.samples["ours"])
            theirs = ", ".join(f"{x:,.0f}" for x in r.samples["baseline"])
            lines.append(f"- {r.key}: ours [{ours}]; baseline [{theirs}] {r.unit}")
    return "\n".join(lines)


def _findings(results: Sequence[Result]) -> str:
    missed = [r for r in results if not r.passed]
    if not missed:
        return "Every target was met in this run."
    parts = []
    for r in missed:
        text = FINDINGS.get(r.key, "Not profiled yet.")
        parts.append(f"### {r.key} ({r.ratio:.2f}, target {r.target_text})\n\n{text.strip()}")
    return "\n\n".join(parts)


def growth_table(growth: Growth) -> str:
    """One cost at scale as a Markdown table (its points), headed by its dimension and
    followed by its summary."""
    head = "| " + " | ".join(growth.columns) + " |"
    rule = "| " + " | ".join("---:" for _ in growth.columns) + " |"
    rows = ["| " + " | ".join(point) + " |" for point in growth.points]
    return "\n".join(
        [f"### {growth.dimension}", "", growth.settings + ".", "", head, rule, *rows, "",
         f"Largest run: {growth.largest}; {growth.summary}."]
    )  # fmt: skip


def _scale(growths: Sequence[Growth]) -> str:
    if not growths:
        return "Not run this time (`python -m benchmarks --only scale` runs it)."
    largest = "; ".join(growth.largest for growth in growths)
    tables = "\n\n".join(growth_table(growth) for growth in growths)
    return f"""How each cost grows with the size of what it works on (how each is measured: "Cost
at scale" under "What each scenario measures").

The largest configuration run: {largest}.

{tables}"""


def _descriptions(docstrings: Sequence[str]) -> str:
    """Module docstrings as Markdown: reST roles and double backticks become plain code,
    the first line of each becomes a heading."""
    parts = []
    for doc in docstrings:
        text = re.sub(r":\w+:`([^`]+)`", r"`\1`", doc.strip()).replace("``", "`")
        title, _, body = text.partition("\n")
        parts.append(f"### {title.rstrip('.')}\n{body}\n")
    return "\n".join(parts)


def markdown(
    results: Sequence[Result],
    growths: Sequence[Growth],
    info: RunInfo,
    descriptions: Sequence[str],
) -> str:
    passed = sum(r.passed for r in results)
    machine_lines = "\n".join(f"| {name} | {value} |" for name, value in info.machine.items())
    kind = "quick smoke run (tiny sizes; not meaningful)" if info.quick else "full run"
    return f"""# Benchmarks

```bash
python -m benchmarks                # everything; writes docs/benchmarks.md and .png
python -m benchmarks --quick        # smoke test, tiny sizes; writes nothing without --out
python -m benchmarks --only values  # one group (redis-log, values, peers, local, writers,
                                    # scale; repeatable); writes nothing without --out
python -m benchmarks --runs 3       # everything three times: the first run's figures,
                                    # each row's spread of ratios over the three
python -m benchmarks --out DIR      # write benchmarks.md and benchmarks.png to DIR
```

It needs `redis-server` on PATH and `pip install -e '.[bench]'` (openai-agents with its
Redis extra, matplotlib). It starts its own `redis-server` on a free port (no AOF, no RDB
snapshots) and removes it at the end; the local backends write in a temporary directory.
Speed is reported here, never asserted by the tests.

## Results

{kind}: `{info.command}` on {info.date}, {info.wall_seconds:.0f} s wall time;
**{passed} of {len(results)} targets met**.

{_runs_text(results, info)}{_markdown_table(results)}

Ours and baseline are medians over the repetitions; the ratio is the median of the
per-repetition ratios ours / baseline (each repetition runs both sides interleaved, so its
ratio is a paired one). For memory rows it is our peak over the baseline's size, and lower
is better.

![Ratios against their targets](benchmarks.png)

| Machine | |
| --- | --- |
{machine_lines}
| load before the run | `{info.load_before}` |
| load after the run | `{info.load_after}` |

The machine is shared: other work ran at the same time (see the load), so absolute
figures vary from run to run, by 2x for latency-bound scenarios; the ratios are much
steadier because both sides run interleaved. Every sample is listed at the end.

## Cost at scale

{_scale(growths)}

## Why targets are missed

{LANDED}

Found by profiling the scenario (cProfile and `time.process_time` on the client, with the
network or the fsync stubbed out where a note says so, `INFO commandstats` on the server);
each note names what the time goes to and why it is still there.

{_findings(results)}

## The Redis stream layout

{LAYOUTS}

## Method

- One `redis-server` is started per run; every Redis scenario runs ours and its baseline
  against it, in the same process, on the same data shapes, and each side with its own
  keys (the load baseline reads the very stream ours wrote).
- Every comparison runs one untimed warm-up block of each side; then each repetition
  prepares several blocks of each side and runs them interleaved (ours, baseline, baseline,
  ours, ...), each block timed on its own, and each side's rate is its operations over its
  own time. The machine's pace changes within seconds; interleaving small blocks puts both
  sides under the same conditions. Multi-process comparisons alternate whole repetitions
  in ABBA order instead. The garbage collector runs, untimed, before each repetition,
  and for the reads (loads, `read_records_from`, `get_items`) before every block too:
  a read builds its events with collection deferred (`sessionstore/gcdefer.py`), so the
  collections its objects would start later land in whatever runs next; each block
  pays only for the collections it starts itself.
- Only the operations are timed: events are pre-built `SessionEvent` objects (dicts with
  the same content for the peer library), built before the clock starts; each side
  encodes them itself, as it would in use.
- Multi-process scenarios fork workers that connect and warm up, meet at a barrier, then
  run; the rate is all operations over the span from the first start to the last finish.
- Memory is measured with `tracemalloc` (Python allocations): the peak while `load` runs
  against the memory retained by the plain list of decoded dicts.
- Redis event-log appends connect with `durability="none"`, because the server runs
  without AOF for the throughput scenarios. With the default `durability="fsync"` the
  library adds one `CONFIG GET` at a store's first write; the cost of the server's own
  fsync on every write (AOF `appendfsync always`) is not measured here.

Settings:

{_settings(results)}

## What each scenario measures

{_descriptions(descriptions)}
## Samples

{_samples(results)}
"""


def chart(results: Sequence[Result], path: Path, title: str = "") -> None:
    """A horizontal bar per scenario: its ratio, green when it meets the target (the
    black mark); memory and cost-per-writer rows, where lower is better, in their own
    panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [
        (
            [r for r in results if not r.lower_is_better],
            "throughput: ours / baseline (higher is better)",
        ),
        (
            [r for r in results if r.lower_is_better],
            "memory, cost per writer: ours / baseline (lower is better)",
        ),
    ]
    groups = [(rows, title) for rows, title in groups if rows]
    heights = [len(rows) for rows, _ in groups]
    fig, axes = plt.subplots(
        len(groups),
        1,
        figsize=(11, 0.42 * sum(heights) + 1.6 * len(groups)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, (rows, heading) in zip(axes[:, 0], groups, strict=True):
        labels = [r.key for r in rows][::-1]
        ratios = [r.ratio for r in rows][::-1]
        targets = [r.target for r in rows][::-1]
        colours = ["#3a9a4a" if r.passed else "#c8423b" for r in rows][::-1]
        positions = range(len(rows))
        ax.barh(positions, ratios, color=colours, height=0.6)
        ax.scatter(targets, positions, marker="|", s=400, color="black", zorder=3, label="target")
        for y, ratio, target in zip(positions, ratios, targets, strict=True):
            ax.text(max(ratio, target), y, f"  {ratio:.2f}", va="center", fontsize=8)
        ax.set_yticks(list(positions), labels, fontsize=8)
        ax.set_title(heading, fontsize=10)
        ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlim(0, max([*ratios, *targets]) * 1.15)
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: The line after which ``benchmarks.md`` holds sections that benchmarks of their own
#: write (``python -m benchmarks.adk_sessions``, ...): a full run keeps them as they are.
KEPT_MARKER = "<!-- Sections below come from benchmarks of their own; a full run keeps them. -->"


def kept_sections(path: Path) -> str:
    """The marker and what follows it in the ``benchmarks.md`` at ``path`` (nothing when
    it has none)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return ""
    at = text.find(KEPT_MARKER)
    return "" if at < 0 else "\n" + text[at:]


def write(
    results: Sequence[Result],
    growths: Sequence[Growth],
    info: RunInfo,
    descriptions: Sequence[str],
    out: Path,
) -> list[Path]:
    """Write ``benchmarks.md`` to ``out`` (keeping :func:`kept_sections` of the one there),
    and ``benchmarks.png`` when there are rows to chart; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "benchmarks.md"]
    written[0].write_text(
        markdown(results, growths, info, descriptions) + kept_sections(written[0])
    )
    if results:
        passed = sum(r.passed for r in results)
        title = f"sessionstore benchmarks, {info.date}: {passed} of {len(results)} targets met"
        written.append(out / "benchmarks.png")
        chart(results, written[1], title)
    return written


def python_command() -> str:
    return " ".join(["python -m benchmarks", *sys.argv[1:]])
