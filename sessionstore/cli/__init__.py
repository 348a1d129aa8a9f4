"""The ``sessionstore`` command: ``demo`` (the main job) and the operator subcommands."""

from __future__ import annotations

import sys

import typer

from ..errors import SessionStoreError
from .app import app
from .common import EXIT_ERROR, errors, say_error
from .text import plain


def main(args: list[str] | None = None) -> None:
    """Run the command. Every error ends as one escaped line on stderr and a non-zero exit
    code, never a traceback: a bad command line exits 2, an interrupt 130. Only an
    exception outside the :class:`SessionStoreError` hierarchy (a bug) is "unexpected"."""
    try:
        code = app(args=args, standalone_mode=False)
    except typer.TyperException as exc:  # a bad command line
        # With no arguments at all the help has been printed already.
        if type(exc).__name__ != "NoArgsIsHelpError":
            ctx = getattr(exc, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            errors.print(plain("error: ", exc.format_message().rstrip("."), where))
        code = exc.exit_code
    except typer.Abort:
        errors.print(plain("error: aborted"))
        code = 1
    except SessionStoreError as exc:  # an expected error no command turned into its line
        say_error(exc, None)
        code = EXIT_ERROR
    except Exception as exc:  # the promise is one line, even for a bug of sessionstore
        errors.print(plain(f"error: unexpected {type(exc).__name__}: ", exc))
        code = EXIT_ERROR
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "main"]
