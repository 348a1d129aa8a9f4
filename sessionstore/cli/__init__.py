"""The ``sessionstore`` command: ``demo`` (the main job) and the operator subcommands."""

from __future__ import annotations

from .app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
