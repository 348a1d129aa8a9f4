"""The typer application and the options every subcommand shares."""

from __future__ import annotations

import typer

from . import sessions
from .demo import demo

app = typer.Typer(
    name="sessionstore",
    help="Shared, durable, look-ahead-safe session store: demo and operator tools.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def root() -> None:
    """Shared, durable, look-ahead-safe session store: demo and operator tools."""


app.command()(demo)
app.add_typer(sessions.app, name="sessions")
