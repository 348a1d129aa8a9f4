"""LangGraph checkpointers: sessionstore's ``SessionStoreSaver`` against LangGraph's own
savers, side by side in one run, on the same disk.

``python -m benchmarks --only langgraph`` (a group of the full run) gives its rows: ours on
SQLite against ``SqliteSaver`` (target: at least as fast) and ours on Redis reported beside
them (no target), for a step (``put`` + ``put_writes`` + ``get_tuple``) over a
1,000-step thread, ``list`` of its 1,000 checkpoints and a 3-node graph run for 1,000
steps; and the stored bytes of a 10,000-step thread against ``SqliteSaver``'s (bound: at
most twice). Each repetition runs every saver once on a fresh thread, the order turned
about each time; a row's ratio is the median of the repetitions' ratios.

``python -m benchmarks.langgraph_savers`` prints the whole table, every saver:

Ours (``SessionStoreSaver``) on memory, SQLite, files and Redis; theirs:
``InMemorySaver`` (``langgraph-checkpoint``) and ``SqliteSaver``
(``langgraph-checkpoint-sqlite``), each as it comes (``SqliteSaver`` on a connection of
its own, WAL, Python's default synchronous mode; ours on SQLite commits durably; Redis
without persistence, ``durability="none"``). For each saver, on a fresh thread:

* ``put`` + ``get_tuple``: ``--steps`` steps of one thread, each a ``put`` of a
  checkpoint (a counter and a 200-character text as its channel values, both new),
  one ``put_writes`` of it, then ``get_tuple`` of the latest checkpoint, as a graph
  does between steps; steps per second, and ``put`` (with its ``put_writes``) and
  ``get_tuple`` calls per second, each timed apart;
* ``list``: ``list`` of the thread's ``--steps`` checkpoints, ``--lists`` times;
  checkpoints listed per second;
* a graph: three nodes in a ring, ``--steps`` steps on one thread (default durability),
  steps per second;
* stored bytes: the thread after ``--size-steps`` steps (ours: ``stored_bytes``; on
  SQLite, ours and theirs alike: the database file, its write-ahead log folded in;
  ``InMemorySaver``: not measured).

Each figure is the best of ``--rounds`` rounds, the savers' order turned about each round
(a shared machine slows whatever runs when it is busy); the ratio is ours over theirs
(``SqliteSaver`` for the persistent stores, ``InMemorySaver`` for memory): above 1, ours
is faster (or, for bytes, smaller).
"""

from __future__ import annotations

import argparse
import operator
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402

import sessionstore  # noqa: E402
from benchmarks.harness import Result, Sizes, result  # noqa: E402
from benchmarks.servers import RedisServer  # noqa: E402
from sessionstore.integrations.langgraph import SessionStoreSaver, session_id  # noqa: E402

#: The savers, in the order printed; each ours is compared with the named one of theirs.
OURS = {"ours, memory": "InMemorySaver", "ours, SQLite": "SqliteSaver"}
OURS.update({"ours, files": "SqliteSaver", "ours, Redis": "SqliteSaver"})
TEXT = "x" * 200


@contextmanager
def savers(folder: Path, redis_url: str) -> Iterator[dict[str, Callable[[str], Any]]]:
    """Each saver's maker: ``make(tag)`` gives a fresh saver (a new database, folder or
    namespace) and its stored-bytes probe; all are closed at the end."""
    opened: list[Any] = []

    def ours(url: str) -> Callable[[str], tuple[Any, Callable[[], int]]]:
        def make(tag: str) -> tuple[Any, Callable[[], int]]:
            store = sessionstore.connect(url.format(tag=tag), f"bench-{tag}")
            opened.append(store)
            return SessionStoreSaver(store), lambda: store.events.stored_bytes(session_id("t"))

        return make

    def sqlite_file(tag: str) -> Path:
        return folder / f"{tag}.db"

    def ours_sqlite(tag: str) -> tuple[Any, Callable[[], int]]:
        path = sqlite_file("ours-" + tag)
        saver = SessionStoreSaver(f"sqlite:///{path}", namespace="bench")
        opened.append(saver)
        return saver, lambda: _folded_bytes(sqlite3.connect(path), path)

    def theirs_sqlite(tag: str) -> tuple[Any, Callable[[], int]]:
        path = sqlite_file("theirs-" + tag)
        conn = sqlite3.connect(path, check_same_thread=False)
        opened.append(conn)
        return SqliteSaver(conn), lambda: _folded_bytes(conn, path)

    def theirs_memory(tag: str) -> tuple[Any, Callable[[], int]]:
        return InMemorySaver(), lambda: 0

    yield {
        "InMemorySaver": theirs_memory,
        "SqliteSaver": theirs_sqlite,
        "ours, memory": ours("memory://"),
        "ours, SQLite": ours_sqlite,
        "ours, files": ours((folder / "files-{tag}").as_uri()),
        "ours, Redis": ours(redis_url),
    }
    for item in opened:
        item.close()


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _folded_bytes(conn: sqlite3.Connection, path: Path) -> int:
    """The size of the database file once its write-ahead log is folded into it."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return _file_bytes(path)


def step_args(i: int, parent: str | None) -> tuple[dict[str, Any], Any, Any, Any]:
    """What ``put`` takes at step ``i`` of thread "t", continuing from ``parent``."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=i))
    version = f"{i + 1:032}.0"
    checkpoint["channel_values"] = {"counter": i, "text": TEXT}
    checkpoint["channel_versions"] = {"counter": version, "text": version}
    config: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent
    metadata = {"source": "loop", "step": i, "parents": {}}
    return config, checkpoint, metadata, {"counter": version, "text": version}


def steps(saver: Any, count: int) -> tuple[float, float, float]:
    """(steps, put + put_writes calls, get_tuple calls) per second over ``count`` steps."""
    parent = None
    putting = getting = 0.0
    latest = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    began = time.perf_counter()
    for i in range(count):
        t0 = time.perf_counter()
        stored = saver.put(*step_args(i, parent))
        saver.put_writes(stored, [("counter", i + 1)], f"task-{i}")
        t1 = time.perf_counter()
        found = saver.get_tuple(latest)
        t2 = time.perf_counter()
        putting, getting = putting + t1 - t0, getting + t2 - t1
        parent = found.checkpoint["id"]
    total = time.perf_counter() - began
    return count / total, count / putting, count / getting


def listing(saver: Any, count: int, lists: int) -> float:
    """Checkpoints listed per second, ``list`` of the whole thread ``lists`` times."""
    config = {"configurable": {"thread_id": "t"}}
    began = time.perf_counter()
    for _ in range(lists):
        found = sum(1 for _ in saver.list(config))
        assert found == count, found
    return count * lists / (time.perf_counter() - began)


class Ring(TypedDict):
    n: int
    seen: Annotated[list[str], operator.add]


def ring_graph(limit: int) -> Any:
    def node(name: str) -> Any:
        def step(state: Ring) -> dict[str, Any]:
            return {"n": state["n"] + 1, "seen": [name]}

        return step

    def onward(target: str) -> Callable[[Ring], str]:
        return lambda state: "__end__" if state["n"] >= limit else target

    builder = StateGraph(Ring)
    for name in ("a", "b", "c"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "a")
    builder.add_conditional_edges("a", onward("b"))
    builder.add_conditional_edges("b", onward("c"))
    builder.add_conditional_edges("c", onward("a"))
    return builder


def graph_steps(saver: Any, count: int) -> float:
    graph = ring_graph(count).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "g"}, "recursion_limit": count + 10}
    began = time.perf_counter()
    done = graph.invoke({"n": 0, "seen": []}, config)
    assert done["n"] == count, done["n"]
    return count / (time.perf_counter() - began)


def measure(options: argparse.Namespace) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    with (
        RedisServer() as server,
        tempfile.TemporaryDirectory(prefix="sessionstore-bench-lg-") as tmp,
        savers(Path(tmp), server.url + "?durability=none") as made,
    ):
        for round_ in range(options.rounds):
            order = list(made.items())
            for name, make in order if round_ % 2 == 0 else order[::-1]:
                row = found.setdefault(name, {})
                saver, _ = make(f"r{round_}")
                rates = steps(saver, options.steps)
                listed = listing(saver, options.steps, options.lists)
                graphed = graph_steps(saver, options.steps)
                for key, value in zip(
                    ("steps/s", "put/s", "get_tuple/s", "listed/s", "graph steps/s"),
                    (*rates, listed, graphed),
                    strict=True,
                ):
                    row[key] = max(row.get(key, 0.0), value)
        for name, make in made.items():
            saver, size = make("size")
            steps(saver, options.size_steps)
            found[name]["bytes"] = size()
    return found


AREA = "LangGraph checkpointers"
#: The savers of the group's rows: the baseline first.
PAIRED = ("SqliteSaver", "ours, SQLite", "ours, Redis")
#: The group's throughput rows: (figure, scenario, unit).
ROWS = (
    ("steps/s", "put + put_writes + get_tuple per step, {steps:,}-step thread", "steps/s"),
    ("listed/s", "list of {steps:,} checkpoints", "checkpoints/s"),
    ("graph steps/s", "3-node graph run, {steps:,} steps", "steps/s"),
)
#: The bound on stored bytes, ours over ``SqliteSaver``'s (lower is better).
BYTES_BOUND = 2.0


def langgraph_results(url: str, sizes: Sizes) -> list[Result]:
    """The group's rows (see the module docstring), Redis on ``url``."""
    quick = sizes == Sizes.quick()
    count, lists, size_steps = (100, 2, 300) if quick else (1000, 5, 10_000)
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in PAIRED}
    with (
        tempfile.TemporaryDirectory(prefix="sessionstore-bench-lg-") as tmp,
        savers(Path(tmp), url + "?durability=none") as made,
    ):
        for rep in range(sizes.reps):
            order = PAIRED if rep % 2 == 0 else PAIRED[::-1]
            for name in order:
                saver, _ = made[name](f"r{rep}")
                rate = steps(saver, count)[0]
                figures = (rate, listing(saver, count, lists), graph_steps(saver, count))
                for (key, _, _), figure in zip(ROWS, figures, strict=True):
                    samples[name].setdefault(key, []).append(figure)
        sizes_found = {}
        for name in PAIRED:
            saver, size = made[name]("size")
            steps(saver, size_steps)
            sizes_found[name] = float(size())
    rows: list[Result] = []
    settings = (
        "SqliteSaver on a connection of its own (WAL); ours on SQLite commits durably; "
        f"Redis durability='none'; {sizes.reps} repetitions, the order turned about"
    )
    for name, target in (("ours, SQLite", 1.0), ("ours, Redis", 0.0)):
        label = name.removeprefix("ours, ")
        for key, scenario, unit in ROWS:
            rows.append(
                result(
                    AREA,
                    f"{label}: {scenario.format(steps=count)}",
                    "SqliteSaver" + ("" if target else ", no target"),
                    (samples[name][key], samples["SqliteSaver"][key]),
                    unit,
                    target,
                    settings,
                )
            )
        rows.append(
            Result(
                AREA,
                f"{label}: stored bytes of a {size_steps:,}-step thread",
                "SqliteSaver, its database file",
                sizes_found[name],
                sizes_found["SqliteSaver"],
                "bytes",
                BYTES_BOUND,
                settings,
                lower_is_better=True,
            )
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lists", type=int, default=5)
    parser.add_argument("--size-steps", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args(argv)
    found = measure(options)
    columns = ("steps/s", "put/s", "get_tuple/s", "listed/s", "graph steps/s", "bytes")
    print(
        f"{options.steps} steps a thread, best of {options.rounds}; bytes after "
        f"{options.size_steps} steps"
    )
    print(f"{'saver':16}" + "".join(f"{c:>15}" for c in columns))
    for name, row in found.items():
        print(f"{name:16}" + "".join(f"{row[c]:15,.0f}" for c in columns))
    print("\nratios, ours / theirs (above 1: ours faster, or smaller for bytes)")
    print(f"{'saver':16}{'vs':>15}" + "".join(f"{c:>15}" for c in columns))
    for name, theirs in OURS.items():
        row, base = found[name], found[theirs]
        cells = [
            "-" if not base[c] else f"{base[c] / row[c] if c == 'bytes' else row[c] / base[c]:.2f}"
            for c in columns
        ]
        print(f"{name:16}{theirs:>15}" + "".join(f"{cell:>15}" for cell in cells))


if __name__ == "__main__":
    main()
