"""A computer process paused past its compute lease (SIGSTOP) while another caller
computes, stores and returns its own result: once resumed (SIGCONT) the paused one
returns that stored version too and never replaces it, on every store processes share."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import url_for

import sessionstore

T0 = 1_718_000_000_000
KEY = ("BTCUSDT", "llm-momentum", "binance", "1h")
LEASE = 0.5

#: The paused computer: says when its fn runs, sleeps in it, prints what it returned.
COMPUTER = """
import json, sys, time
import sessionstore

url, namespace, key = sys.argv[1], sys.argv[2], sys.argv[3:7]
when, lease = int(sys.argv[7]), float(sys.argv[8])

def model():
    print("computing", flush=True)
    time.sleep(1.0)
    return {"by": "A"}

with sessionstore.connect(url, namespace) as store:
    history = store.session(*key, history=True)
    print(json.dumps(history.get_or_compute(when, model, lease=lease, timeout=30)), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["redis", "sqlite", "file"])
def test_a_computer_paused_past_its_lease_returns_the_version_another_stored(
    backend, request, tmp_path, namespace
):
    url = url_for(backend, request, tmp_path)
    args = [url, namespace, *KEY, str(T0), str(LEASE)]
    computer = subprocess.Popen(
        [sys.executable, "-c", COMPUTER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert computer.stdout is not None
        assert computer.stdout.readline().strip() == "computing"
        os.kill(computer.pid, signal.SIGSTOP)
        time.sleep(LEASE * 1.6)  # its lease lapses: nothing renews it
        calls = []

        def model() -> dict[str, str]:
            calls.append(1)
            return {"by": "B"}

        with sessionstore.connect(url, namespace) as store:
            history = store.session(*KEY, history=True)
            assert history.get_or_compute(T0, model, lease=LEASE, timeout=10) == {"by": "B"}
            assert calls == [1]
            os.kill(computer.pid, signal.SIGCONT)
            out, err = computer.communicate(timeout=30)
            assert computer.returncode == 0, err
            assert json.loads(out) == {"by": "B"}
            assert history.get_data(T0) == {"by": "B"}
            assert [r.when for r in history.records().versions] == [T0]
    finally:
        if computer.poll() is None:
            os.kill(computer.pid, signal.SIGCONT)
            computer.kill()
            computer.wait()
