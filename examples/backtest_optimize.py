"""backtesting.py's ``Backtest.optimize`` over a parameter grid, with the strategy's
expensive signal cached in a sessionstore history value shared by every worker.

The signal stands in for a model call: deterministic, from the closes up to the current
bar only, and deliberately slow. Each bar's signal is cached in one history session value
keyed by (symbol, strategy, exchange, frame), one version per bar at the bar's time, so
every parameter combination and every process of the optimisation's pool reuses what the
others computed: ``get_or_compute`` lets exactly one process compute a bar's signal while
the others wait for it, and stores it with ``put``, which keeps every other bar's
version whatever order the processes reach the bars in. So the model is called once per
bar. A read at a bar never sees a signal written for a later bar (each read that returns
a signal checks the bar it was computed for).

The pool is spawned and gets the session handle pickled, as its initializer's argument:
each worker connects by the URL, namespace and options it carries. The same optimisation
then runs without the store, for the wall time and to check the result is the same.

Every run uses the namespace ``backtest-example`` and deletes its two values (the cached
signals and the tally) before it starts (what an interrupted run left) and when it ends,
so runs never pile up data. On Redis a delete leaves the value's entry in the namespace
index, which the first listing 10 minutes later removes (docs/operations.md, "The
namespace index"), and the tokens of its last writes, which expire after their resend
window (about a minute): each run re-adds the same two entries, so that is all it leaves. Two
runs at once on one store would share the namespace: run one at a time.

    python3 -m pip install 'sessionstore[examples]'
    python3 examples/backtest_optimize.py                 # a SQLite store in a temp dir
    python3 examples/backtest_optimize.py --url redis://localhost:6379/0

Uses the GOOG daily candles backtesting.py ships (no download).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import backtesting
import numpy as np
import pandas as pd
from backtesting import Backtest, Strategy
from backtesting.test import GOOG

import sessionstore

#: The namespace every run reuses (and empties): nothing else is written there.
NAMESPACE = "backtest-example"
KEY = ("GOOG", "zscore-signal", "nasdaq", "1d")
TALLY = ("GOOG", "zscore-signal-tally", "nasdaq", "1d")
#: Seconds one signal "costs": the stand-in for a model call.
MODEL_SECONDS = 0.002
WINDOW = 20
GRID = {"entry": [0.0, 0.5, 1.0], "exit": [-1.0, -0.5, 0.0]}
SMALL_GRID = {"entry": [0.0, 1.0], "exit": [-0.5, 0.0]}


def model_signal(closes: np.ndarray) -> float:
    """The slow model: a z-score of the last close against the last ``WINDOW`` closes.
    It sees the closes up to the current bar only (backtesting.py's ``self.data``)."""
    time.sleep(MODEL_SECONDS)
    window = np.asarray(closes[-WINDOW:], dtype=float)
    spread = float(window.std())
    return 0.0 if len(window) < 2 or spread == 0 else float((window[-1] - window.mean()) / spread)


def bar_ms(stamp: pd.Timestamp) -> int:
    return int(stamp.value // 1_000_000)


class SignalStrategy(Strategy):
    """Long while the signal is above ``entry``, flat once it falls below ``exit``."""

    entry = 0.5
    exit = 0.0
    #: Installed in every process by :func:`install`: the cached signals (a history
    #: session handle, or None to call the model every time), the tally and the bar count.
    cache: sessionstore.Session | None = None
    tally: sessionstore.Session | None = None
    bars = 0

    def init(self) -> None:
        self.counts = {"lookups": 0, "hits": 0, "waited": 0, "lookahead": 0, "calls": 0}

    def next(self) -> None:
        signal = self.signal()
        if not self.position and signal > self.entry:
            self.buy()
        elif self.position and signal < self.exit:
            self.position.close()
        if len(self.data) == self.bars and self.tally is not None:
            self.report()

    def signal(self) -> float:
        bar = bar_ms(self.data.index[-1])
        cache = type(self).cache
        if cache is None:
            self.counts["calls"] += 1
            return model_signal(self.data.Close)
        self.counts["lookups"] += 1
        stored = cache.get_data(bar)
        if stored is not None and stored["bar"] > bar:
            self.counts["lookahead"] += 1  # a signal of a later bar: must never happen
        if stored is not None and stored["bar"] == bar:
            self.counts["hits"] += 1
            return float(stored["signal"])
        closes = self.data.Close
        computed: list[bool] = []

        def compute() -> dict[str, Any]:
            computed.append(True)
            return {"bar": bar, "signal": model_signal(closes)}

        answer = cache.get_or_compute(bar, compute)
        self.counts["calls" if computed else "waited"] += 1
        return float(answer["signal"])

    def report(self) -> None:
        """Add this run's counts to the tally every process shares."""
        counts = {**self.counts, "runs": 1}
        assert self.tally is not None
        self.tally.update(
            lambda seen: {k: (seen or {}).get(k, 0) + v for k, v in counts.items()}, 0
        )


def install(
    cache: sessionstore.Session | None, tally: sessionstore.Session | None, bars: int
) -> None:
    """Run in every pool process (its arguments arrive pickled) and in the parent."""
    SignalStrategy.cache, SignalStrategy.tally, SignalStrategy.bars = cache, tally, bars


def optimize(
    data: pd.DataFrame,
    grid: dict[str, list[float]],
    cache: sessionstore.Session | None,
    tally: sessionstore.Session | None,
    processes: int | None,
) -> tuple[pd.Series, pd.Series, float]:
    """``Backtest.optimize`` over ``grid`` in a spawned pool whose processes get
    ``cache`` and ``tally`` pickled; (best stats, heatmap, wall seconds)."""
    install(cache, tally, len(data))
    context = multiprocessing.get_context("spawn")
    backtesting.Pool = partial(  # type: ignore[attr-defined]
        context.Pool, processes, initializer=install, initargs=(cache, tally, len(data))
    )
    bt = Backtest(data, SignalStrategy, cash=1_000_000, commission=0.001, finalize_trades=True)
    started = time.monotonic()
    stats, heatmap = bt.optimize(**grid, maximize="Equity Final [$]", return_heatmap=True)
    return stats, heatmap, time.monotonic() - started


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="store URL (default: a SQLite file in a temp dir)")
    parser.add_argument("--bars", type=int, default=600, help="the last N GOOG bars")
    parser.add_argument("--small", action="store_true", help="a 2x2 grid")
    parser.add_argument("--processes", type=int, default=None, help="pool size")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    data = GOOG.iloc[-args.bars :]
    grid = SMALL_GRID if args.small else GRID
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{Path(tmp) / 'signals.db'}"
        with sessionstore.connect(url, NAMESPACE) as store:
            cache = store.session(*KEY, history=True)
            tally = store.session(*TALLY)
            cache.delete()  # what an interrupted run left
            tally.delete()
            cached, cached_map, cached_wall = optimize(data, grid, cache, tally, args.processes)
            counts = tally.get_data(0) or {}
            bars = [bar_ms(stamp) for stamp in data.index]
            distinct = sum(1 for bar in bars if (cache.get_data(bar) or {}).get("bar") == bar)
            cache.delete()
            tally.delete()
        plain, plain_map, plain_wall = optimize(data, grid, None, None, args.processes)
    same = (
        cached._strategy._params == plain._strategy._params
        and cached.drop(["_strategy", "_equity_curve", "_trades"]).equals(
            plain.drop(["_strategy", "_equity_curve", "_trades"])
        )
        and cached_map.equals(plain_map)
    )
    lookups = counts.get("lookups", 0)
    result = {
        "bars": len(data),
        "combinations": int(np.prod([len(v) for v in grid.values()])),
        "runs": counts.get("runs", 0),
        "signal_lookups": lookups,
        "model_calls": counts.get("calls", 0),
        "distinct_bars": distinct,
        "reused": counts.get("hits", 0),
        "waited": counts.get("waited", 0),
        "reuse_rate": counts.get("hits", 0) / lookups if lookups else 0.0,
        "lookahead_reads": counts.get("lookahead", 0),
        "best_params": {name: float(v) for name, v in cached._strategy._params.items()},
        "best_equity": float(cached["Equity Final [$]"]),
        "same_result_without_store": bool(same),
        "wall_with_store": round(cached_wall, 3),
        "wall_without_store": round(plain_wall, 3),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['combinations']} parameter combinations over {result['bars']} GOOG bars"
            f" ({result['runs']} backtests)\n"
            f"signals: {lookups} looked up, {result['model_calls']} computed (for "
            f"{result['distinct_bars']} distinct bars), {result['reused']} reused "
            f"({result['reuse_rate']:.0%} reuse rate), {result['waited']} waited for\n"
            f"look-ahead: {result['lookahead_reads']} reads saw a later bar's signal\n"
            f"best: {result['best_params']} -> equity {result['best_equity']:,.0f}"
            f" (the same without the store: {result['same_result_without_store']})\n"
            f"wall time: {cached_wall:.2f} s with the store, {plain_wall:.2f} s without"
        )
    return result


if __name__ == "__main__":
    main()
