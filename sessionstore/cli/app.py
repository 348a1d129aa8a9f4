"""The typer application and the options every subcommand shares."""

from __future__ import annotations

import typer

from . import sessions, values
from .demo import demo
from .doctor import acl, doctor

app = typer.Typer(
    name="sessionstore",
    help="Shared, durable, look-ahead-safe session store: demo and operator tools.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def root() -> None:
    """Shared, durable, look-ahead-safe session store: demo and operator tools."""


app.command()(demo)
app.command()(doctor)
app.command()(acl)
app.add_typer(sessions.app, name="sessions")
app.add_typer(values.app, name="values")
