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
from support.sdist import fetch_tests  # noqa: E402
from support.sdist import outcomes as case_outcomes  # noqa: E402

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
    into = tmp_path_factory.mktemp("sdk-sdist")
    return fetch_tests("openai-agents", version, f"openai_agents-{version}", TAKEN, into)


def outcomes(report: Path) -> tuple[dict[str, tuple[str, str]], int]:
    """test id -> (passed | skipped | failed | error, message) from a JUnit XML report, and
    how many SessionStoreSessions the tests made in all."""
    made = sum(
        int(p.get("value") or 0) for p in ET.parse(report).iter("property") if p.get("name") == MADE
    )
    return case_outcomes(report), made


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
