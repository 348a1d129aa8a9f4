"""The OpenAI Agents SDK's own session tests, run on SessionStoreSession on every backend.

Opt in with ``SESSIONSTORE_SDK_TESTS=1`` (it needs PyPI)::

    SESSIONSTORE_SDK_TESTS=1 python3 -m pytest tests/integrations/test_sdk_suite.py

The SDK's tests are not in its wheel: this fetches the source distribution of the
installed ``openai-agents`` version (``pip download --no-deps --no-binary :all:``) into a
temp dir, takes ``tests/memory/test_session.py`` and ``tests/memory/test_session_limit.py``
from it (with ``tests/test_responses.py``, the one helper module they import), and runs
them in a child pytest under ``sdk_session_plugin`` (which makes their ``SQLiteSession`` a
SessionStoreSession on the backend's URL and skips, by name and with the reason, the tests
about ``SQLiteSession``'s own internals). Nothing of the SDK is kept in this repository.

Each backend's test passes when no SDK test failed or errored, every skipped test was
skipped as ``SQLiteSession``-specific, and some tests passed; it prints how many ran,
passed and were skipped.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

if os.environ.get("SESSIONSTORE_SDK_TESTS") != "1":
    pytest.skip(
        "the SDK's own session tests need the SDK's sdist from PyPI: "
        "set SESSIONSTORE_SDK_TESTS=1 to run them",
        allow_module_level=True,
    )

pytest.importorskip("agents")

from conftest import BACKENDS, url_for  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: What is taken from the sdist (paths inside ``openai_agents-<version>/``).
TAKEN = (
    "tests/__init__.py",
    "tests/test_responses.py",
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
)
RUN = ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")
#: The skip reason the plugin gives every test it leaves out.
NOT_APPLICABLE = "SQLiteSession-specific: "
#: The property the plugin records on each test: SessionStoreSessions made.
MADE = "sessionstore_sessions"


@pytest.fixture(scope="module")
def sdk_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dir holding the SDK's session tests, from the sdist of the installed version."""
    version = importlib.metadata.version("openai-agents")
    download = tmp_path_factory.mktemp("sdk-sdist")
    fetched = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--quiet",
            f"openai-agents=={version}",
            "-d",
            str(download),
        ],
        capture_output=True,
        text=True,
    )
    sdists = sorted(download.glob("openai_agents-*.tar.gz"))
    if fetched.returncode != 0 or not sdists:
        pytest.skip(
            f"could not download the sdist of openai-agents {version}: "
            f"{(fetched.stderr or fetched.stdout).strip()[-500:]}"
        )
    tests = tmp_path_factory.mktemp("sdk-tests")
    prefix = f"openai_agents-{version}/"
    with tarfile.open(sdists[0]) as sdist:
        members = [sdist.getmember(prefix + path) for path in TAKEN]
        for member in members:
            member.name = member.name[len(prefix) :]
        sdist.extractall(tests, members=members, filter="data")
    return tests


def outcomes(report: Path) -> tuple[dict[str, tuple[str, str]], int]:
    """test id -> (passed | skipped | failed | error, message) from a JUnit XML report, and
    how many SessionStoreSessions the tests made in all."""
    found = {}
    made = sum(
        int(p.get("value") or 0) for p in ET.parse(report).iter("property") if p.get("name") == MADE
    )
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = child.get("message") or ""
                break
        found[name] = (outcome, message)
    return found, made


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_sdk_session_tests_pass(
    backend: str, sdk_tests: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    report = tmp_path / "report.xml"
    env = {
        **os.environ,
        "SESSIONSTORE_SDK_URL": url_for(backend, request, tmp_path),
        # The sdist's ``tests`` package first: the SDK's tests import ``tests.…``.
        "PYTHONPATH": os.pathsep.join([str(sdk_tests), str(ROOT), str(HERE)]),
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "OPENAI_API_KEY": "not-used-by-scripted-models",
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            os.devnull,
            "--rootdir",
            str(sdk_tests),
            "-p",
            "sdk_session_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={report}",
            *RUN,
        ],
        cwd=sdk_tests,
        env=env,
        capture_output=True,
        text=True,
    )
    assert report.exists(), run.stdout + run.stderr
    found, made = outcomes(report)
    broken = {
        name: message
        for name, (outcome, message) in found.items()
        if outcome in ("failed", "error")
    }
    odd_skips = {
        name: message
        for name, (outcome, message) in found.items()
        if outcome == "skipped" and not message.startswith(NOT_APPLICABLE)
    }
    passed = sum(outcome == "passed" for outcome, _ in found.values())
    skipped = sum(outcome == "skipped" for outcome, _ in found.values())
    print(
        f"\n{backend}: {len(found)} SDK tests, {passed} passed, {skipped} skipped "
        f"(SQLiteSession-specific), {len(broken)} failed; {made} SessionStoreSessions made"
    )
    assert not broken, run.stdout[-5000:]
    assert not odd_skips
    assert passed > 0
    assert made > 0  # the tests' SQLiteSession was ours
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
