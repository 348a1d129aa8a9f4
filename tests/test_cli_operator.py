"""What the CLI prints for an operator to paste or act on works as printed (in-process,
through typer's runner)."""

from __future__ import annotations

import shlex
from urllib.parse import urlsplit

import pytest
import redis
from typer.testing import CliRunner

from sessionstore.cli.app import app
from sessionstore.cli.demo import sessions_command

runner = CliRunner()


def run(*args: str):  # noqa: ANN201
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_acl_without_a_password_generates_one_and_the_line_creates_a_working_user(
    redis_server,
):
    first, second = run("acl", "gen-user", "-n", "t-gen"), run("acl", "gen-user", "-n", "t-gen")
    assert first.exit_code == 0 and "shown only here" in first.stderr
    words = shlex.split(first.stdout)
    (secret,) = [word[1:] for word in words if word.startswith(">")]
    assert len(secret) >= 40 and "<" not in secret
    assert secret not in second.stdout  # a new one each time
    admin = redis.Redis(port=redis_server.port)
    try:
        admin.execute_command(*words[1:])
        user = redis.Redis(port=redis_server.port, username="gen-user", password=secret)
        assert user.ping()
        user.close()
    finally:
        admin.execute_command("ACL", "DELUSER", "gen-user")
        admin.close()


def test_acl_with_a_password_uses_it_and_says_nothing_else():
    result = run("acl", "u", "--password", "given-secret", "--json")
    assert result.exit_code == 0 and result.stderr == ""
    assert '"generated_password": false' in result.stdout and ">given-secret" in result.stdout


def test_the_printed_sessions_command_never_holds_a_masked_password():
    secret_url = "redis://user:hunter2@db:6379/0"
    command = sessions_command(secret_url, "run-1")
    assert "hunter2" not in command and "***" not in command
    assert '--url "$SESSIONSTORE_URL"' in command
    plain_url = "redis://db:6379/0"
    assert shlex.split(sessions_command(plain_url, "run-1"))[-2:] == ["--url", plain_url]
    assert sessions_command(None, "run-1") == "sessionstore sessions list -n run-1"


def test_the_least_privilege_user_is_told_durability_aof_and_nothing_else(acl_url):
    plain_url = acl_url.replace("?durability=aof", "")
    result = run("sessions", "delete", "nothing-here", "--url", plain_url, "-n", "t-hint")
    assert result.exit_code == 2
    error, hint = result.stderr.splitlines()
    assert error.startswith("error: DurabilityError") and "durability='aof'" in error
    assert "?durability=aof" in hint and "durability=none" not in hint
    assert "make the server durable" not in hint
    assert urlsplit(acl_url).password not in result.stderr


def commands(group=None, path=()):  # noqa: ANN001, ANN201
    """Every command path of the CLI (``("sessions", "list")``...)."""
    import typer.main

    group = group or typer.main.get_command(app)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_help_wraps_to_the_terminal_and_labels_no_flag_with_a_type(width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    paths = list(commands())
    assert ("sessions", "list") in paths and ("acl",) in paths
    for path in [(), *paths]:
        result = runner.invoke(app, [*path, "--help"], terminal_width=width)
        assert result.exit_code == 0, path
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= width, (path, lines)
        assert "<bool>" not in result.stdout, path
