"""Every Python block of README.md and of docs/*.md runs as written, twice in a row, each
run in a fresh process, as a reader would run them again on the same store.

The blocks share one namespace and run top to bottom as one script, as a reader's
session would; the Dask block is a script of its own (its workers are new processes that
import it), run the same way. The Redis URL the README shows is pointed at the test
suite's own server (never at a Redis the tests did not start).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
DOCS = sorted((README.parent / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SHOWN_URL = "redis://localhost:6379/0"
SHOWN_NAMESPACE = 'namespace="run-42"'


def python_blocks(document: Path = README) -> list[str]:
    return BLOCK.findall(document.read_text())


def is_dask(block: str) -> bool:
    return "LocalCluster" in block


def run_twice(program: str, url: str, tmp_path: Path, name: str) -> None:
    """Run ``program`` as the script ``name``, with the README's URL and namespace made
    the test's, twice, each time in a fresh process; both runs must succeed."""
    namespace = f"t-readme-{uuid.uuid4().hex[:8]}"
    program = program.replace(SHOWN_URL, url).replace(SHOWN_NAMESPACE, f"namespace={namespace!r}")
    script = tmp_path / name
    script.write_text(program + "\nprint('readme ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "SESSIONSTORE_URL"}
    for attempt in ("first", "second"):
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"{attempt} run of {name}:\n{result.stderr}"
        assert "readme ok" in result.stdout


def test_the_readme_has_python_blocks_that_use_the_shown_url():
    blocks = python_blocks()
    assert len(blocks) >= 3
    assert SHOWN_URL in blocks[0]
    assert sum(map(is_dask, blocks)) == 1


def test_every_python_block_runs_as_written_twice(redis_server, tmp_path):
    program = "\n".join(b for b in python_blocks() if not is_dask(b)) + "\nstore.close()\n"
    run_twice(program, redis_server.url, tmp_path, "readme_blocks.py")


@pytest.mark.slow
def test_the_dask_block_runs_as_written_twice(redis_server, tmp_path):
    pytest.importorskip("distributed")
    (block,) = [b for b in python_blocks() if is_dask(b)]
    assert 'if __name__ == "__main__":' in block
    run_twice(block, redis_server.url, tmp_path, "readme_dask.py")


@pytest.mark.parametrize("document", DOCS, ids=[doc.name for doc in DOCS])
def test_every_python_block_of_the_docs_runs_as_written_twice(redis_server, tmp_path, document):
    """Each document's blocks run as one script, top to bottom, as its reader would."""
    blocks = python_blocks(document)
    if not blocks:
        pytest.skip(f"{document.name} has no Python block")
    run_twice("\n".join(blocks), redis_server.url, tmp_path, f"{document.stem}_blocks.py")
