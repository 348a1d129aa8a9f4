"""Every Python block of README.md runs as written, top to bottom, in one process.

The blocks share one namespace, as a reader's session would; the Redis URL the README
shows is pointed at the test suite's own server (never at a Redis the tests did not start).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SHOWN_URL = "redis://localhost:6379/0"


def python_blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def test_the_readme_has_python_blocks_that_use_the_shown_url():
    blocks = python_blocks()
    assert len(blocks) >= 3
    assert SHOWN_URL in blocks[0]


def test_every_python_block_runs_as_written(redis_server, tmp_path):
    namespace = f"t-readme-{uuid.uuid4().hex[:8]}"
    program = "\n".join(python_blocks()).replace(SHOWN_URL, redis_server.url)
    program = program.replace('namespace="run-42"', f"namespace={namespace!r}")
    program += "\nstore.close()\nprint('readme ok')\n"
    env = {k: v for k, v in os.environ.items() if k != "SESSIONSTORE_URL"}
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "readme ok" in result.stdout
