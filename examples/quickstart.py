"""A backtest callback caching an expensive signal in session values, look-ahead safe.

Runs on the embedded default store (./.sessionstore) unless SESSIONSTORE_URL is set.
"""

from __future__ import annotations

import sessionstore

HOUR_MS = 3_600_000
START = 1_718_000_000_000


def ask_model(candle: int) -> str:
    """Stands in for a slow LLM call."""
    return "buy" if candle % 3 else "sell"


def main() -> None:
    with sessionstore.connect(namespace="quickstart") as store:
        session = store.session("BTCUSDT", strategy="llm-momentum", exchange="binance", frame="1h")
        session.wait_for_init(initial=True)
        session.set_data(None, START)  # a restarted backtest resets what an earlier run left
        calls = 0
        for candle in range(6):
            when = START + candle * HOUR_MS
            cached = session.get_data(when)
            if cached is None or when - cached["confirmedAt"] >= 2 * HOUR_MS:
                calls += 1
                cached = {"lastLlmSignal": ask_model(candle), "confirmedAt": when}
                session.set_data(cached, when)
            signal, asked_at = cached["lastLlmSignal"], cached["confirmedAt"]
            print(f"candle {candle}: signal {signal} (asked at {asked_at})")
        early = session.get_data(START - 1)
        print(f"model calls: {calls} for 6 candles; a read before the first candle sees {early!r}")
        session.dispose()


if __name__ == "__main__":
    main()
