"""The demo's model: a deterministic, deliberately slow signal from the candles, whose
answer stays valid for a bucket of :data:`SIGNAL_CANDLES` candles."""

from __future__ import annotations

import time
from typing import Any

from .data import CANDLE_MS, START_MS

#: A model answer stays valid for this many candles, so callbacks in between reuse it.
SIGNAL_CANDLES = 4
MODEL_SECONDS = 0.004


def bucket_start(index: int) -> int:
    return index - index % SIGNAL_CANDLES


def ask_model(closes: list[float], index: int) -> dict[str, Any]:
    """The slow model: a signal from the candles up to ``index`` only (never later ones)."""
    time.sleep(MODEL_SECONDS)
    return model_answer(closes, index)


def model_answer(closes: list[float], index: int) -> dict[str, Any]:
    window = closes[max(0, index - 8) : index + 1]
    trend = window[-1] - window[0]
    return {
        "signal": "buy" if trend > 0 else "sell",
        "bucket": index,
        "confirmedAt": START_MS + index * CANDLE_MS,
        "basis": round(trend, 4),
    }
