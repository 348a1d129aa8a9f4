"""``sessions tail --follow`` into a pipe: each event is written as it lands, not held in
a buffer until the pipe's reader gives up (a real process: its stdout is the point)."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time

import pytest

import sessionstore
from sessionstore import SessionEvent, SessionHeader

#: How long a line may take to come through before the test fails (not a speed bound:
#: a buffered line never comes at all while the process runs).
PATIENCE = 30.0


def read_line(process: subprocess.Popen[bytes], selector: selectors.BaseSelector) -> bytes:
    assert process.stdout is not None
    deadline = time.monotonic() + PATIENCE
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not selector.select(left):
            raise AssertionError(f"no complete line within {PATIENCE} s; got {line!r}")
        chunk = os.read(process.stdout.fileno(), 1)
        if not chunk:
            raise AssertionError(f"the follower ended; got {line!r}")
        line += chunk
    return line


@pytest.mark.parametrize("as_json", [False, True])
def test_tail_follow_writes_each_event_into_a_pipe_as_it_lands(tmp_path, as_json):
    url = str(tmp_path / "store")
    with sessionstore.connect(url, "ns") as store:
        store.events.create(SessionHeader(id="live"))
        store.events.append("live", [SessionEvent(seq=0, type="note", time=1)])
        args = ["sessions", "tail", "live", "--follow", "--interval", "0.02", "--url", url]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONSTORE_")}
        process = subprocess.Popen(
            [sys.executable, "-m", "sessionstore", *args, "-n", "ns", *(["--json"] * as_json)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        selector = selectors.DefaultSelector()
        assert process.stdout is not None
        selector.register(process.stdout, selectors.EVENT_READ)
        try:
            assert b"note" in read_line(process, selector)
            for seq in (1, 2):
                store.events.append("live", [SessionEvent(seq=seq, type=f"step{seq}", time=2)])
                assert f"step{seq}".encode() in read_line(process, selector)
        finally:
            process.kill()
            process.wait()
            selector.close()
