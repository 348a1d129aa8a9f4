"""A library's own tests, taken from its source distribution on PyPI (they are not in
its wheel), and what a child pytest run of them reported."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest


def fetch_tests(
    project: str, version: str, folder: str, taken: tuple[str, ...], into: Path
) -> Path:
    """Download the sdist of ``project`` ``version`` (``pip download --no-deps
    --no-binary :all:``) and extract its files ``taken`` (paths inside its top folder
    ``folder``) into ``into``; skip the test when the download fails."""
    download = into / "sdist"
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        + ["--quiet", f"{project}=={version}", "-d", str(download)],
        capture_output=True,
        text=True,
    )
    sdists = sorted(download.glob("*.tar.gz"))
    if fetched.returncode != 0 or not sdists:
        pytest.skip(
            f"could not download the sdist of {project} {version}: "
            f"{(fetched.stderr or fetched.stdout).strip()[-500:]}"
        )
    tests = into / "tests"
    prefix = f"{folder}/"
    with tarfile.open(sdists[0]) as sdist:
        members = [sdist.getmember(prefix + path) for path in taken]
        for member in members:
            member.name = member.name[len(prefix) :]
        sdist.extractall(tests, members=members, filter="data")
    return tests


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | skipped | failed | error, message) from a JUnit XML report."""
    found = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = child.get("message") or ""
                break
        found[name] = (outcome, message)
    return found
