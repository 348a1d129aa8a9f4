"""The SQL statements a SQLite backend runs, as its connection traces them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sessionstore.backends.sqlite_db import Database


def traced(database: Database, action: Callable[[], Any], words: int | None = 3) -> list[str]:
    """The first ``words`` words (None: all) of each statement this thread's connection
    runs during ``action()``."""
    statements: list[str] = []
    database.connection().set_trace_callback(statements.append)
    try:
        action()
    finally:
        database.connection().set_trace_callback(None)
    if words is None:
        return statements
    return [" ".join(statement.split()[:words]) for statement in statements]
