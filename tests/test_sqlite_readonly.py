"""A SQLite store this process may not write still reads: listings, loads of sessions and
value reads work, and every write raises ``AccessDeniedError`` naming the file; the file
is left byte for byte as it was and no journal file is created beside it.

Read-only is made as the system enforces it: for another user, a 0444 file in a 0555
folder; for root (whom permissions do not stop), the file and its folder made immutable
(``chattr +i``) on a file system that supports it, else a read-only bind mount in a mount
namespace of a child process. A case the machine cannot make is skipped, saying why."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sessionstore
from sessionstore import AccessDeniedError, SessionEvent, SessionHeader
from sessionstore.cli.app import app

T0 = 1_718_000_000_000
NS = "ns"


def seed(url: str) -> None:
    with sessionstore.connect(url, NS) as store:
        for session_id in ("a", "b"):
            store.events.create(SessionHeader(id=session_id, created_at=1))
            store.events.append(
                session_id, [SessionEvent(seq=i, type="note", time=T0 + i) for i in range(3)]
            )
        store.session("P", "s", "e", "1h").set_data({"plain": 1}, T0)
        history = store.session("H", "s", "e", "1h", history=True)
        for i in range(2):
            history.set_data({"version": i}, T0 + i)


def reads_and_refused_writes(url: str) -> dict[str, object]:
    """Every read of a seeded store, and every write refused: what each gave."""
    found: dict[str, object] = {}
    with sessionstore.connect(url, NS) as store:
        found["list"] = sorted(h.id for h in store.events.list())
        found["list_info"] = sorted((i.header.id, i.next_seq) for i in store.events.list_info())
        found["load"] = [e.seq for e in store.events.load("a").events]
        found["info"] = store.events.info("b").next_seq
        found["read_from"] = [e.seq for e in store.events.read_from("b", 1)]
        found["values"] = [ref.symbol for ref in store.list_values()]
        found["plain"] = store.session("P", "s", "e", "1h").get_data(T0)
        found["history"] = store.session("H", "s", "e", "1h", history=True).get_data(T0)
        writes: dict[str, Callable[[], object]] = {
            "set_data": lambda: store.session("P", "s", "e", "1h").set_data(2, T0 + 1),
            "new value": lambda: store.session("N", "s", "e", "1h").set_data(2, T0),
            "append": lambda: store.events.append("a", [SessionEvent(seq=3, type="n", time=1)]),
            "create": lambda: (
                store.events.create(SessionHeader(id="c")),
                store.events.append("c", [SessionEvent(seq=0, type="n", time=1)]),
            ),
            "writer": lambda: store.events.writer(SessionHeader(id="a")),
            "delete": lambda: store.events.delete("b"),
            "clear": lambda: store.session("P", "s", "e", "1h").delete(),
        }
        for name, write in writes.items():
            try:
                write()
            except AccessDeniedError as exc:
                found[name] = "refused" if "s.db" in str(exc) else str(exc)
            else:
                found[name] = "written"
    for args in (["sessions", "list"], ["values", "get", "H", "s", "e", "1h"]):
        result = CliRunner().invoke(app, [*args, "--url", url, "-n", NS, "--json"])
        found[" ".join(args[:2])] = (result.exit_code, len(result.stdout.splitlines()))
    return found


EXPECTED = {
    "list": ["a", "b"],
    "list_info": [("a", 3), ("b", 3)],
    "load": [0, 1, 2],
    "info": 3,
    "read_from": [1, 2],
    "values": ["H", "P"],
    "plain": {"plain": 1},
    "history": {"version": 0},
    **dict.fromkeys(
        ["set_data", "new value", "append", "create", "writer", "delete", "clear"], "refused"
    ),
    "sessions list": (0, 2),
    "values get": (0, 1),
}


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder on a disk file system (``chattr`` does not work on tmpfs)."""
    made = Path(tempfile.mkdtemp(prefix="sessionstore-ro-", dir="/var/tmp"))
    yield made
    subprocess.run(["chattr", "-R", "-i", str(made)], capture_output=True, check=False)
    os.chmod(made, 0o700)
    shutil.rmtree(made, ignore_errors=True)


def _chattr(*paths: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return all(
        subprocess.run(["chattr", "+i", str(p)], capture_output=True, check=False).returncode == 0
        for p in paths
    )


def test_a_read_only_file_in_a_read_only_folder_reads_and_refuses_writes(folder: Path):
    db = folder / "s.db"
    url = f"sqlite:///{db}"
    seed(url)
    before = _digest(folder)
    assert list(before) == ["s.db"]
    if os.geteuid() != 0:
        db.chmod(0o444)
        folder.chmod(0o555)
    elif not _chattr(db, folder):
        pytest.skip(f"running as root and chattr +i does not work on {folder}")
    try:
        assert reads_and_refused_writes(url) == EXPECTED
    finally:
        subprocess.run(["chattr", "-i", str(folder), str(db)], capture_output=True, check=False)
        folder.chmod(0o700)
    assert _digest(folder) == before


_IN_NAMESPACE = """
import json, sys
sys.path[:0] = {paths!r}
from test_sqlite_readonly import reads_and_refused_writes
print(json.dumps(reads_and_refused_writes({url!r})))
"""


def test_a_database_on_a_read_only_mount_reads_and_refuses_writes(folder: Path):
    """Root on a read-only file system: a bind mount made read-only in a private mount
    namespace of a child process (nothing changes for any other process)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a read-only file system")
    db = folder / "s.db"
    url = f"sqlite:///{db}"
    seed(url)
    before = _digest(folder)
    here = str(Path(__file__).parent)
    script = _IN_NAMESPACE.format(paths=[here, *sys.path], url=url)
    shell = (
        f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder} "
        f'&& exec "$0" -c "$1"'
    )
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell, sys.executable, script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0 and "mount" in result.stderr and not result.stdout:
        pytest.skip(f"cannot mount read-only here: {result.stderr.strip()[:200]}")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    expected = json.loads(json.dumps(EXPECTED))
    assert found == expected
    assert _digest(folder) == before
