"""The demo's data: the names it writes under, its jobs and its seeded synthetic candles."""

from __future__ import annotations

import hashlib
import os
import random
import re
from dataclasses import dataclass

START_MS = 1_718_000_000_000
CANDLE_MS = 3_600_000
VARIANTS = ("momentum", "contrarian")
STRATEGY = "llm-signal"
EXCHANGE = "synthetic"
FRAME = "1h"
MODE = "backtest"
#: The demo's symbols: ``SYM000USDT``, ``SYM001USDT``, ...
SYMBOL = re.compile(r"SYM[0-9]{3,}USDT")
#: Its session ids: a variant and a symbol.
SESSION_ID = re.compile(rf"({'|'.join(VARIANTS)})-({SYMBOL.pattern})")
#: The most worker processes (or Dask tasks) a run takes: each is a process of its own,
#: and the parent keeps a list and a progress bar per worker.
MAX_WORKERS = 1024
#: The most symbols a run takes (two sessions each; the jobs are dealt up front).
MAX_SYMBOLS = 10_000
#: The most candles per symbol (six events each, read back whole by the check).
MAX_CANDLES = 10_000


@dataclass(frozen=True)
class Job:
    """One strategy variant over one symbol."""

    symbol: str
    variant: str

    @property
    def session_id(self) -> str:
        return f"{self.variant}-{self.symbol}"

    @property
    def cwd(self) -> str:
        return f"/demo/{self.variant}"


def default_workers() -> int:
    """The workers of a run that names none: one per CPU, at most :data:`MAX_WORKERS`."""
    return min(os.cpu_count() or 2, MAX_WORKERS)


def symbols(count: int) -> list[str]:
    return [f"SYM{n:03d}USDT" for n in range(count)]


def plan(symbol_count: int, workers: int) -> list[list[Job]]:
    """Deal the (symbol, variant) jobs to workers so both variants of a symbol run in
    different processes, where possible, and share the cached answers."""
    dealt: list[list[Job]] = [[] for _ in range(workers)]
    for offset, variant in enumerate(VARIANTS):
        for index, symbol in enumerate(symbols(symbol_count)):
            dealt[(index + offset) % workers].append(Job(symbol, variant))
    return dealt


def candles(symbol: str, count: int) -> list[float]:
    """Seeded random-walk closes: the same symbol always gives the same candles."""
    seed = int.from_bytes(hashlib.sha256(symbol.encode()).digest()[:8], "big")
    rng = random.Random(seed)
    price, out = 100.0, []
    for _ in range(count):
        price *= 1 + rng.gauss(0, 0.01)
        out.append(round(price, 4))
    return out
