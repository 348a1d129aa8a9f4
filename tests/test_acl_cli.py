"""``sessionstore acl``: which namespaces and URLs it takes, and what the printed line
grants (run through ``redis-cli`` as an operator would)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionstore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:7/99999999999999999999",
        "redis://127.0.0.1:7/2147483648",
        "redis+sentinel://127.0.0.1:7/service/99999999999999999999",
    ],
)
def test_a_database_out_of_range_in_the_url_path_is_refused_before_any_line(url):
    printed = cli("acl", "u", "--password", "p", "--url", url)
    assert printed.returncode == 2, printed.stdout
    assert printed.stdout == "" and "+select" not in printed.stderr
    (line,) = printed.stderr.splitlines()
    assert "the database in the path must be a whole number in [0, 2147483647]" in line
