"""Figures of the fault suite: what the tests did, collected for ``docs/reliability.md``.

Each fault test calls :func:`record` with what it did (kills survived, acknowledged events
checked, faults injected, inputs tried, events lost) for one part and backend. The counts
of this pytest process (one *run*) are merged into ``build/reliability.json`` as they come,
under a file lock, so a run that stops half way still leaves what it did, and several
people running the suite in one checkout do not lose each other's runs. The last
:data:`KEEP_RUNS` runs are kept. ``tests/faults/report.py`` turns the file into the figures
table of ``docs/reliability.md``.

Every module that records uses the session fixture :func:`figures_run`, which counts the
failed tests of these modules and marks the run ``finished`` with that count at the end of
the session: ``report.py`` leaves out a run that failed or did not finish.

Set ``SESSIONSTORE_FIGURES=/some/file.json`` to write elsewhere.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import CI, SOAK

ROOT = Path(__file__).resolve().parents[2]
KEEP_RUNS = 50

#: The parts of the fault suite, in the order of docs/reliability.md.
PARTS = {
    "writer_killed": "1. writer killed mid-stream (SIGKILL)",
    "server_killed": "2. Redis server killed (SIGKILL), restarted",
    "lost_reply": "3. reply lost after the server applied the call",
    "unavailable": "4. server unavailable (refused, killed, hung)",
    "torn_and_corrupt": "5. torn tails and corruption",
    "memory_pressure": "6. Redis out of memory (noeviction)",
    "linearizable_values": "7. value histories under lost replies and kills, linearizable",
}

#: The test modules whose outcome decides whether a run's figures count.
MODULES = (
    *(f"test_{part}.py" for part in PARTS),
    "test_cluster_faults.py",
    "test_mixed_clients.py",
)

#: The counters every part may report (others are kept too, as extras).
COUNTERS = ("kills", "acked_events", "faults", "inputs", "lost")

_lock = threading.Lock()
_run: dict[str, Any] = {
    "id": uuid.uuid4().hex[:12],
    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "host": socket.gethostname(),
    "mode": "soak" if SOAK else ("ci" if CI else "normal"),
    "parts": {},
}


def path() -> Path:
    """Where the figures are written."""
    override = os.environ.get("SESSIONSTORE_FIGURES")
    return Path(override) if override else ROOT / "build" / "reliability.json"


def record(part: str, backend: str, **counts: float) -> None:
    """Add ``counts`` to this run's figures of ``part`` on ``backend`` and save them;
    a name starting with ``max_`` keeps the largest value instead."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}")
    with _lock:
        bucket = _run["parts"].setdefault(part, {}).setdefault(backend, {})
        for name, value in counts.items():
            if name.startswith("max_"):
                bucket[name] = max(bucket.get(name, value), value)
            else:
                bucket[name] = bucket.get(name, 0) + int(value)
        _run["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        _save(json.loads(json.dumps(_run)))


def _save(run: dict[str, Any]) -> None:
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(target.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            stored = json.loads(target.read_text())
            runs = [r for r in stored.get("runs", []) if r.get("id") != run["id"]]
        except (FileNotFoundError, ValueError, AttributeError):
            runs = []
        runs = (runs + [run])[-KEEP_RUNS:]
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".reliability.", suffix=".tmp")
        with os.fdopen(fd, "w") as file:
            json.dump({"runs": runs}, file, indent=1, sort_keys=True)
        os.replace(temp, target)
    finally:
        os.close(lock)


def load(source: Path | None = None) -> list[dict[str, Any]]:
    """Every run stored, oldest first."""
    try:
        return list(json.loads((source or path()).read_text()).get("runs", []))
    except FileNotFoundError:
        return []


class _Outcomes:
    """A pytest plugin counting the failed tests (any phase) of :data:`MODULES`."""

    def __init__(self) -> None:
        self.failed = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0].replace("\\", "/").rsplit("/", 1)[-1]
        if report.failed and module in MODULES:
            self.failed += 1


_outcomes: _Outcomes | None = None


@pytest.fixture(scope="session")
def figures_run(request: pytest.FixtureRequest) -> Any:
    """Counts this run's failures and, at the end of the session, marks the run finished
    with that count (see the module docstring)."""
    global _outcomes
    if _outcomes is None:
        _outcomes = _Outcomes()
        request.config.pluginmanager.register(_outcomes, "sessionstore-fault-figures")
    yield
    with _lock:
        _run["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        _run["failed"] = _outcomes.failed
        if _run["parts"]:
            _save(json.loads(json.dumps(_run)))
