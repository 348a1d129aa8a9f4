"""``sessionstore demo`` refuses what it cannot run before it starts, and never prints an
address's password."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from sessionstore.cli import app, main
from sessionstore.cli.common import mask_address, mask_in
from sessionstore.cli.demo import data


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def demo(*args: str) -> Ran:
    env: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("SESSIONSTORE_")
    }
    with CliRunner().isolation(env=env) as (stdout, stderr, _):
        with pytest.raises(SystemExit) as exited:
            main(["demo", *args])
        sys.stdout.flush()
        sys.stderr.flush()
        return Ran(exited.value.code, stdout.getvalue().decode(), stderr.getvalue().decode())


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--workers", "99999999"),
        ("--workers", str(data.MAX_WORKERS + 1)),
        ("--symbols", "99999999999"),
        ("--symbols", str(data.MAX_SYMBOLS + 1)),
        ("--candles", "99999999999"),
        ("--candles", str(data.MAX_CANDLES + 1)),
    ],
)
def test_an_unreasonable_size_is_refused_up_front_in_one_line(option, value):
    # An empty --url fails a run at once: a size checked any later than the command
    # line would be reported as the URL instead, and no run ever starts.
    ran = demo(option, value, "--url", "")
    assert ran.returncode == 2, ran
    assert ran.stdout == ""
    (line,) = ran.stderr.splitlines()
    assert line.startswith(f"error: Invalid value for '{option}'") and "MemoryError" not in line


def test_the_bounds_are_in_the_help():
    help_text = CliRunner().invoke(app, ["demo", "--help"], env={"COLUMNS": "200"}).stdout
    assert f"at most {data.MAX_WORKERS}" in help_text
    assert f"at most {data.MAX_SYMBOLS}" in help_text and f"2 to {data.MAX_CANDLES}" in help_text


def test_the_default_worker_count_is_within_the_bound(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 100_000)
    assert data.default_workers() == data.MAX_WORKERS


def test_a_scheduler_address_is_printed_without_its_password(tmp_path):
    pytest.importorskip("distributed")
    ran = demo("--scheduler", "tcp://user:PWSECRET@127.0.0.1:1", "--url", (tmp_path / "s").as_uri())
    assert ran.returncode == 2, ran
    assert "PWSECRET" not in ran.stdout + ran.stderr
    assert "'tcp://user:***@127.0.0.1:1'" in ran.stderr


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("tcp://user:PWSECRET@host:8786", "tcp://user:***@host:8786"),
        ("user:PWSECRET@host:8786", "user:***@host:8786"),
        ("tcp://user@host:8786", "tcp://user@host:8786"),
        ("tcp://host:8786", "tcp://host:8786"),
        ("local", "local"),
    ],
)
def test_mask_address_hides_the_password_of_any_address(address, shown):
    assert mask_address(address) == shown


def test_a_message_quoting_the_address_is_masked_in_every_form_it_quotes():
    address = "tcp://user:PW%2FSECRET@host:1"
    said = mask_in(f"invalid address {address!r}, i.e. 'user:PW%2FSECRET@host:1'", address)
    assert "SECRET" not in said and "user:***@host:1" in said
    decoded = mask_in("cannot log in as user with password PW/SECRET", address)
    assert "SECRET" not in decoded


@pytest.mark.parametrize("password", ["pa\\ss", 'pa"ss', "pa\tss", "pa\u200ess"])
def test_a_password_a_message_escapes_is_never_shown(password):
    """repr and JSON escape a backslash, a quote or an unprintable character: the
    password so quoted is found as well."""
    address = f"tcp://u:{password}@127.0.0.1:1"
    for said in (f"invalid address {address.split('//')[1]!r}", json.dumps({"at": address})):
        shown = mask_in(said, address)
        assert "pa" not in shown.replace("password", ""), shown


def test_a_password_quoted_inside_a_longer_string_or_in_another_hex_case_is_never_shown():
    quoted = "tcp://u:pa'ss@127.0.0.1:8786"
    assert "pa" not in mask_in(repr('to "scheduler" at ' + quoted), quoted).replace("password", "")
    encoded = "tcp://u:p%2fss@127.0.0.1:8786"
    assert "2fss" not in mask_in("could not reach tcp://u:p%2Fss@127.0.0.1:8786", encoded).lower()
