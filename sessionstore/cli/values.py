"""``sessionstore values ...``: get, list and clear session values."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from ..errors import InvalidArgumentError
from ..when import MAX_ABS_EPOCH_MS
from .common import Json, Namespace, Url, console, emit_json, guarded, open_store

app = typer.Typer(help="Session values.", no_args_is_help=True, pretty_exceptions_show_locals=False)

Symbol = Annotated[str, typer.Argument(help="Symbol, e.g. BTCUSDT.")]
Strategy = Annotated[str, typer.Argument(help="Strategy name.")]
Exchange = Annotated[str, typer.Argument(help="Exchange name.")]
Frame = Annotated[str, typer.Argument(help="Frame, e.g. 1h.")]
Mode = Annotated[str, typer.Option(help="backtest or live.")]
History = Annotated[bool, typer.Option("--history", help="The key's as-of history.")]


def parse_when(text: str) -> int | datetime:
    """``latest`` (the newest value of any time), epoch ms, or an ISO-8601 datetime."""
    if text == "latest":
        return MAX_ABS_EPOCH_MS
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgumentError(
            f"--when must be 'latest', epoch milliseconds or an ISO datetime, not {text!r}"
        ) from None


@app.command()
@guarded
def get(
    symbol: Symbol,
    strategy: Strategy,
    exchange: Exchange,
    frame: Frame,
    mode: Mode = "backtest",
    history: History = False,
    when: Annotated[str, typer.Option(help="Read as of: latest, epoch ms or ISO.")] = "latest",
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """The value visible at --when (never one written for a later time)."""
    at = parse_when(when)
    with open_store(url, namespace) as store:
        session = store.session(symbol, strategy, exchange, frame, mode=mode, history=history)
        value = session.get_data(at)
    if json:
        emit_json(value)
    else:
        console.print(_show(value), markup=False)


def _show(value: Any) -> str:
    return "(nothing stored)" if value is None else repr(value)


@app.command("list")
@guarded
def list_values(url: Url = None, namespace: Namespace = "default", json: Json = False) -> None:
    """Every stored value of the namespace."""
    with open_store(url, namespace) as store:
        refs = store.list_values()
    if json:
        emit_json([ref._asdict() for ref in refs])
        return
    table = Table("symbol", "strategy", "exchange", "frame", "mode", "kind")
    for ref in refs:
        table.add_row(*ref[:5], "history" if ref.history else "value")
    console.print(table)


@app.command()
@guarded
def clear(
    symbol: Symbol,
    strategy: Strategy,
    exchange: Exchange,
    frame: Frame,
    mode: Mode = "backtest",
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """Remove every stored record of the key (its value and its history)."""
    with open_store(url, namespace) as store:
        found = store.session(symbol, strategy, exchange, frame, mode=mode).delete()
    if json:
        emit_json({"cleared": found})
    else:
        console.print("cleared" if found else "nothing stored", markup=False)
