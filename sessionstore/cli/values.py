"""``sessionstore values ...``: get, list and clear session values.

Values are printed as JSON (the exact form of :mod:`.common`), never as a Python repr.
``get`` tells apart a key with nothing stored, a value stored for a later time than
``--when`` (withheld: look-ahead protection), and a history value read without
``--history`` (read as the history it is, and said so).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from ..admin import value_usage
from ..codec import load_value
from ..contracts import Stored
from ..errors import CorruptDataError, InvalidArgumentError
from ..results import ValueRecords
from ..when import MAX_ABS_EPOCH_MS, to_epoch_ms
from .common import (
    APP_SETTINGS,
    EXIT_ERROR,
    Json,
    Namespace,
    Persist,
    Url,
    console,
    emit_json,
    emit_rows,
    errors,
    guarded,
    iso,
    json_text,
    note,
    open_store,
    retention,
    say_nothing_found,
)
from .tables import human_bytes, print_listing
from .text import count, plain, shorten

app = typer.Typer(help="Session values.", **APP_SETTINGS)

Symbol = Annotated[str, typer.Argument(help="Symbol, e.g. BTCUSDT.")]
#: A value's retention: unlike a session's, later writes without a ttl leave it as it is.
ValueTtl = Annotated[
    float | None,
    typer.Option(
        "--ttl",
        help="Seconds from now; later writes without a ttl keep this expiry (a write "
        "through a handle with a ttl sets its own).",
    ),
]
Strategy = Annotated[str, typer.Argument(help="Strategy name.")]
Exchange = Annotated[str, typer.Argument(help="Exchange name.")]
Frame = Annotated[str, typer.Argument(help="Frame, e.g. 1h.")]
Mode = Annotated[str, typer.Option(help="backtest or live.")]
History = Annotated[
    bool,
    typer.Option(
        "--history",
        help="Every version of the key's history (when, value), oldest first (a key "
        "without one: its plain record), instead of the one visible at --when.",
    ),
]
#: Longest value ``get`` prints whole without --json.
SHOWN_CHARS = 2000


#: Epoch milliseconds as --when takes them: ASCII digits, with an optional minus
#: (``str.isdigit`` is true of other scripts' digits and of superscripts too).
EPOCH_MS = re.compile(r"-?[0-9]+")


def parse_when(text: str) -> int:
    """``latest`` (the newest value of any time), epoch ms (:data:`EPOCH_MS`), or an
    ISO-8601 datetime (naive is UTC), as epoch ms. Anything else, or a time out of
    range, raises :class:`InvalidArgumentError`."""
    if text == "latest":
        return MAX_ABS_EPOCH_MS
    when: int | datetime
    if EPOCH_MS.fullmatch(text):
        try:
            when = int(text)
        except ValueError:  # more digits than int() converts
            raise InvalidArgumentError(
                f"--when of {len(text)} characters is out of range "
                f"(|when| <= {MAX_ABS_EPOCH_MS} ms)"
            ) from None
    else:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidArgumentError(
                f"--when must be 'latest', epoch milliseconds or an ISO datetime, not {text!r}"
            ) from None
    return to_epoch_ms(when)


def value_of(record: Stored, where: str) -> Any:
    return None if record.payload is None else load_value(record.payload, where)


def visible(records: list[Stored], at: int) -> Stored | None:
    """The record a read at ``at`` sees: the newest stored for a time at or before it."""
    seen = [record for record in records if record.when <= at]
    return seen[-1] if seen else None


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
    """The value visible at --when (never one stored for a later time), printed as JSON.
    A history value is read as of --when (and said so on stderr). A value stored for a
    later time than --when is reported as withheld, with the time it is stored for.

    A key holding both a plain value and a history (written by a plain and a history
    handle) is read as its plain value; --history lists the versions of its history, and
    each names the other on stderr.

    --json: one object {"history", "state", "when", "value"}: state is "stored",
    "withheld" (stored for "when", later than --when), "cleared" or "absent". With
    --history, one object per version {"when", "value", "at_when"} (a key without a
    history: its plain record), at_when being "visible", "withheld" (later than --when)
    or "older". Values are exact JSON: bytes as {"$bytes": base64}, a map with keys that
    are not strings as {"$map": [[key, value], ...]}, NaN and infinities as {"$float":
    "nan"}."""
    at = parse_when(when)
    with open_store(url, namespace, existing=True) as store:
        found = store.session(symbol, strategy, exchange, frame, mode=mode).records()
    if history:
        print_versions(found, at, json)
        return
    if found.history:
        errors.print(
            plain("note: a history value: read as of --when (--history lists its versions)")
        )
    elif found.versions:
        errors.print(
            plain(
                "note: a plain value, read as such; the key holds a history too "
                f"({count(len(found.versions), 'version')}: --history lists them)"
            )
        )
    records = found.records()
    shown = visible(records, at)
    result: dict[str, Any] = {"history": found.history, "state": "absent", "when": None}
    if shown is not None:
        state = "stored" if shown.payload is not None else "cleared"
        result.update(state=state, when=shown.when, value=value_of(shown, found.where))
    elif records:
        result.update(state="withheld", when=records[0].when)
    result.setdefault("value", None)
    if json:
        emit_json(result)
    else:
        console.print(plain(describe(result)))


def describe(result: dict[str, Any]) -> str:
    """What ``get`` prints without --json: the value as JSON, or why there is none."""
    state = result["state"]
    if state == "absent":
        return "(nothing stored)"
    if state == "withheld":
        return f"stored for {iso(result['when'])}, later than --when: withheld"
    if state == "cleared":
        return f"(cleared for {iso(result['when'])})"
    text = json_text(result["value"])
    if len(text) > SHOWN_CHARS:
        return f"{shorten(text, SHOWN_CHARS)} (--json gives it whole)"
    return text


def print_versions(found: ValueRecords, at: int, json: bool) -> None:
    """``get --history``: every version of the key's history (a key without one: its
    plain record, said so) as a table or JSON lines. A plain record beside the history
    is named on stderr (``get`` without --history reads it)."""
    records = found.versions or found.records()
    if found.plain is not None and found.versions:
        errors.print(
            plain(
                f"note: the key holds a plain value too ({record_text(found.plain, found.where)};"
                " get without --history shows it): listed are the versions of its history"
            )
        )
    elif found.plain is not None:
        errors.print(plain("note: a plain value: its one record"))
    current = visible(records, at)
    rows = [
        {
            "when": record.when,
            "value": value_of(record, found.where),
            "at_when": "visible"
            if record is current
            else "withheld"
            if record.when > at
            else "older",
        }
        for record in records
    ]
    if json:
        emit_rows(rows)
        return
    if not rows:
        console.print("(nothing stored)", markup=False)
        return
    table = Table("when (logical time)", "value (JSON)", "at --when")
    for row in rows:
        shown = plain(shorten(json_text(row["value"]), 200))
        table.add_row(iso(row["when"]), shown, row["at_when"])
    console.print(table)


def record_text(record: Stored, where: str) -> str:
    """A record in a line of text: when it is stored for and its value as JSON (cut to 200
    characters), or that it is a clear."""
    if record.payload is None:
        return f"cleared for {iso(record.when)}"
    return f"stored for {iso(record.when)}: {shorten(json_text(value_of(record, where)), 200)}"


@app.command("list")
@guarded
def list_values(url: Url = None, namespace: Namespace = "default", json: Json = False) -> None:
    """Every stored value of the namespace, with its size (bytes of its stored payloads),
    its records (1, or a history's versions) and when it expires (wall clock), read from
    each value's records. Nothing is cut or left out: when the table is wider than the
    terminal each value is a block of lines instead. A damaged value is listed as such
    (and said on stderr); the others are listed all the same. --json: one object per
    value (symbol, strategy, exchange, frame, mode, history, bytes, records, expires_at:
    epoch ms or null; records null for a damaged value)."""
    rows: list[dict[str, Any]] = []
    with open_store(url, namespace, existing=True) as store:
        for ref in store.list_values():
            try:
                usage = value_usage(store, ref)
            except CorruptDataError as exc:
                note(f"value {', '.join(ref[:5])} is damaged: {exc}")
                rows.append({**ref._asdict(), "bytes": None, "records": None, "expires_at": None})
                continue
            if usage.records:  # removed or expired since it was listed
                rows.append({**ref._asdict(), **usage._asdict()})
    if not rows:
        say_nothing_found("values", url, namespace)
    if json:
        emit_rows(rows)
        return
    headers = ["symbol", "strategy", "exchange", "frame", "mode", "kind", "size", "records"]
    print_listing(
        [*headers, "expires (wall clock)"],
        [
            [
                *(plain(row[name]) for name in ("symbol", "strategy", "exchange", "frame", "mode")),
                "history" if row["history"] else "value",
                human_bytes(row["bytes"]),
                "DAMAGED" if row["records"] is None else str(row["records"]),
                "-"
                if row["records"] is None
                else "never"
                if row["expires_at"] is None
                else iso(row["expires_at"]),
            ]
            for row in rows
        ],
    )


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


@app.command()
@guarded
def expire(
    symbol: Symbol,
    strategy: Strategy,
    exchange: Exchange,
    frame: Frame,
    ttl: ValueTtl = None,
    persist: Persist = False,
    mode: Mode = "backtest",
    url: Url = None,
    namespace: Namespace = "default",
    json: Json = False,
) -> None:
    """Set the retention of what is stored of the key, its value and its history alike
    (--ttl SECONDS), or remove it (--persist). Later writes without a ttl keep it (a
    write through a handle with a ttl sets its own).
    Nothing stored under the key: exit 2, as `sessions expire` of a missing session.
    --json: one object {"found"} (false: nothing was stored, nothing changed)."""
    seconds = retention(ttl, persist)
    with open_store(url, namespace) as store:
        found = store.session(symbol, strategy, exchange, frame, mode=mode).set_ttl(seconds)
    if json:
        emit_json({"found": found})
    elif found:
        console.print("never expires" if persist else f"expires in {ttl:g} s", markup=False)
    if not found:
        if not json:
            key = ", ".join((symbol, strategy, exchange, frame, mode))
            errors.print(plain("error: not found: nothing is stored under ", f"({key})"))
        raise typer.Exit(EXIT_ERROR)
