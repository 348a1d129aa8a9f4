"""LangGraph's own graph tests that take a checkpointer fixture, run with
SessionStoreSaver as that checkpointer, on memory, files, SQLite and Redis.

Opt in with ``SESSIONSTORE_LANGGRAPH_TESTS=1`` (it needs PyPI)::

    SESSIONSTORE_LANGGRAPH_TESTS=1 python3 -m pytest tests/integrations/test_langgraph_suite.py

The tests are not in LangGraph's wheel: this fetches the source distribution of the
installed ``langgraph`` version (``pip download --no-deps --no-binary :all:``) into a temp
dir, takes the test modules of :data:`RUN` from it (with the helper module they import),
and runs them in a child pytest under ``langgraph_suite_plugin``, which gives them the
fixtures they take from LangGraph's own conftest (``sync_checkpointer``,
``async_checkpointer``, ``durability``) with a SessionStoreSaver on the backend's URL.
Nothing of LangGraph is kept in this repository.

Each backend's test passes when every test ran passed (the saver's ownership rule
refuses none of their branches: replays, forks and resumes from a checkpoint named, a
subgraph's included); it prints how many ran, passed and failed. (On langgraph 1.2.24:
138 ran, 138 passed, on every backend.)
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("SESSIONSTORE_LANGGRAPH_TESTS") != "1":
    pytest.skip(
        "LangGraph's own graph tests need its sdist from PyPI: "
        "set SESSIONSTORE_LANGGRAPH_TESTS=1 to run them",
        allow_module_level=True,
    )

pytest.importorskip("langgraph")

from conftest import url_for  # noqa: E402
from support.sdist import fetch_tests, outcomes  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: LangGraph's test modules whose every test takes a checkpointer fixture (and nothing
#: of LangGraph's conftest but the fixtures the plugin gives): time travel, interrupts
#: and their resume, subgraph persistence.
RUN = (
    "tests/test_time_travel.py",
    "tests/test_interruption.py",
    "tests/test_interrupt_state.py",
    "tests/test_strict_resume.py",
    "tests/test_subgraph_persistence.py",
)
TAKEN = ("tests/__init__.py", "tests/any_str.py", *RUN)
SUITE_BACKENDS = ["memory", "file", "sqlite", "redis"]


@pytest.fixture(scope="module")
def langgraph_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dir holding LangGraph's tests of :data:`TAKEN`, from the installed version's sdist."""
    version = importlib.metadata.version("langgraph")
    into = tmp_path_factory.mktemp("langgraph")
    return fetch_tests("langgraph", version, f"langgraph-{version}", TAKEN, into)


@pytest.mark.parametrize("backend", SUITE_BACKENDS)
def test_langgraphs_own_graph_tests_pass(
    backend: str, langgraph_tests: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    report = tmp_path / "report.xml"
    env = {
        **os.environ,
        "SESSIONSTORE_LANGGRAPH_URL": url_for(backend, request, tmp_path),
        # The sdist's ``tests`` package first: LangGraph's tests import ``tests.…``.
        "PYTHONPATH": os.pathsep.join([str(langgraph_tests), str(ROOT), str(HERE)]),
    }
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(langgraph_tests)]
        + ["-p", "langgraph_suite_plugin", "-p", "no:cacheprovider", "-q", "-n", "0"]
        + [f"--junitxml={report}", *(str(langgraph_tests / path) for path in RUN)],
        capture_output=True,
        text=True,
        env=env,
        cwd=langgraph_tests,
    )
    found = outcomes(report) if report.exists() else {}
    failed = {name: message for name, (outcome, message) in found.items() if outcome != "passed"}
    passed = len(found) - len(failed)
    print(f"{backend}: {len(found)} of LangGraph's tests ran, {passed} passed, {len(failed)} not")
    assert not failed, "\n".join(f"{n}: {m[:300]}" for n, m in failed.items())
    assert passed > 0, run.stdout[-3000:] + run.stderr[-3000:]
