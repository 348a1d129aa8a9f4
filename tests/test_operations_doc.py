"""docs/operations.md cannot go stale: its key layout is the library's, and every console
recipe in it is run against a live server seeded as the document says, output compared."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.redis_server import RedisServer

from sessionstore import keys
from sessionstore.redis.library import library

DOC = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def recipes() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every ``$ `` line of a console block."""
    found: list[tuple[str, list[str]]] = []
    for block in BLOCK.findall(DOC.read_text()):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            else:
                found[-1][1].append(line)
    return found


SETUP = re.compile(r"```python\n(from sessionstore import .*?)```", re.S)


@pytest.fixture(scope="module")
def seeded():
    """A server seeded by the document's own setup block, run as printed."""
    (setup,) = SETUP.findall(DOC.read_text())
    with RedisServer() as server:
        exec(setup.replace("redis://localhost:6379/0", server.url), {})  # noqa: S102
        yield server


def run(command: str, port: int) -> str:
    if command.startswith("redis-cli "):
        command = f"redis-cli -p {port} --no-raw {command[len('redis-cli ') :]}"
    elif command.startswith("sessionstore "):
        command = f"{sys.executable} -m sessionstore {command[len('sessionstore ') :]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSTORE_")}
    env["SESSIONSTORE_URL"] = f"redis://127.0.0.1:{port}/0"
    result = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_recipe_prints_what_the_document_shows(seeded):
    """One test, in the document's order: a recipe may change what the next shows (an
    expiry set, then removed), and parallel test workers would split them up."""
    version = library().version  # the document writes <version>: it changes with the Lua
    for command, expected in recipes():
        shown = run(command, seeded.port).replace(version, "<version>")
        assert shown.rstrip("\n").splitlines() == expected, command


def test_the_recipes_use_the_library_key_names():
    text = DOC.read_text()
    value = keys.value_key(
        keys.ValueKey("run-42", "BTCUSDT", "llm-momentum", "binance", "1h", "backtest")
    )
    meta, events = keys.log_keys("run-42", "agent-7")
    for name in (value, meta, events, *keys.index_keys("run-42")):
        assert name in text


def test_the_layout_table_lists_every_kind_of_key_the_library_builds():
    text = DOC.read_text()
    for pattern in (
        "ss:<ns>:val:{",
        "ss:<ns>:hist:{",
        "}:at`",
        "}:v`",
        "ss:<ns>:log:{<session id>}:meta",
        "ss:<ns>:log:{<session id>}:events",
        "ss:<ns>:idx:{<ns>}:sessions",
        "ss:<ns>:idx:{<ns>}:values",
        "ss:<ns>:seq:{",
        "ss:<ns>:log:{<session id>}:lease",
    ):
        assert pattern in text
    for name in (
        "value_swap",
        "value_forget",
        "history_set",
        "log_append",
        "log_cut_tail",
        "log_delete",
        "index_forget",
        "lease_acquire",
        "lease_release",
    ):
        assert f"{name}.lua" in text
        assert (DOC.parent.parent / "lua" / f"{name}.lua").exists()
