"""Listings that fit the terminal without leaving anything out.

:func:`print_listing` prints rows as a table when it fits the console's width (80 columns
on a pipe unless ``COLUMNS`` says), its cells wrapped to fit; when even wrapped cells
cannot fit, it prints each row as a block, its first
cell on a line of its own and every other column under it as ``header: value`` (the value on
lines of its own when it does not fit beside its header), so no
column is ever dropped and no cell is cut. Only a first cell longer than the width (an
id is never cut) makes a line run long.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from .common import console

Cell = Text | str

#: The narrowest a column other than the first is folded to (an ISO time in three lines)
#: before the rows are printed as blocks instead.
FOLDED_WIDTH = 10


def human_bytes(count: int | None) -> str:
    """A byte count for people: ``812 B``, ``14.2 KiB``, ``3.0 MiB``...; ``-`` for None."""
    if count is None:
        return "-"
    size, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"


def listing_table(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> Table:
    """The table form: the first column never wraps; the others wrap or fold their cells
    (down to :data:`FOLDED_WIDTH`), never cut them."""
    table = Table(expand=False)
    for place, header in enumerate(headers):
        if place == 0:
            width = max((Text(str(row[0])).cell_len for row in rows), default=len(header))
            table.add_column(header, no_wrap=True, min_width=width)
        else:
            widest = max((Text(str(row[place])).cell_len for row in rows), default=0)
            shortest = min(max(widest, len(header.split()[0])), FOLDED_WIDTH)
            table.add_column(header, overflow="fold", min_width=shortest)
    for row in rows:
        table.add_row(*row)
    return table


def print_listing(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> None:
    """``rows`` (one cell per header) as a table, or as blocks when the table is wider
    than the console (see the module docstring)."""
    table = listing_table(headers, rows)
    # Each column has a cell's padding on both sides and a border on one, plus the last.
    needed = sum(column.min_width or 0 for column in table.columns) + 3 * len(headers) + 1
    if needed <= console.width:
        console.print(table)
        return
    for number, row in enumerate(rows):
        if number:
            console.print()
        console.print(_cell_text(row[0]), crop=False, soft_wrap=True)
        for header, cell in zip(headers[1:], row[1:], strict=True):
            label, value = Text(f"  {header}:", style="bold"), _cell_text(cell)
            if label.cell_len + 1 + value.cell_len <= console.width:
                console.print(Text.assemble(label, " ", value))
            else:  # the value on lines of its own, folded to the width
                console.print(label, overflow="fold", soft_wrap=False)
                console.print(Text.assemble("    ", value), overflow="fold", soft_wrap=False)


def _cell_text(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)
