"""The typer application and the options every subcommand shares."""

from __future__ import annotations

import typer

from . import namespaces, sessions, values
from .acl import acl
from .common import APP_SETTINGS, JSON_RULE, guarded
from .demo import demo
from .doctor import doctor
from .top import top
from .transfer import copy, export, import_

HELP = (
    "Shared, durable, look-ahead-safe session store: demo and operator tools.\n\n"
    f"Every subcommand takes --json. {JSON_RULE} Errors are one line on stderr: exit 2 "
    "when the command could not run, 1 when a check failed (verify, doctor, demo)."
)

app = typer.Typer(
    name="sessionstore",
    help=HELP,
    add_completion=False,
    **APP_SETTINGS,
)


@app.callback(help=HELP)
def root() -> None:
    pass


app.command()(demo)
app.command("doctor")(guarded(doctor))
app.command("acl")(guarded(acl))
app.command("copy")(guarded(copy))
app.command("export")(guarded(export))
app.command("import")(guarded(import_))
app.command("top")(guarded(top))
app.add_typer(namespaces.app, name="namespaces")
app.add_typer(sessions.app, name="sessions")
app.add_typer(values.app, name="values")
