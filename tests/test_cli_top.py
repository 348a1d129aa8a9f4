"""``sessionstore top`` in a pseudo-terminal, against a real redis-server under a load
the test makes, as the namespace's least-privilege user: what it counts is what the
load stored (counts, never timings); on SQLite through the public API."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionEvent, SessionHeader
from sessionstore.cli import app
from sessionstore.cli.top_sample import LocalSampler, Snapshot, ValueState, compare

#: How long top may take to print a refresh before the test fails (not a speed bound).
PATIENCE = 30.0
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """``sessionstore top ...`` with a pseudo-terminal of 40 x 160 as its stdout."""

    def __init__(self, *args: str) -> None:
        import fcntl
        import struct
        import termios

        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONSTORE_", "COL"))}
        env.update(TERM="xterm-256color", LINES="40", COLUMNS="160")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sessionstore", "top", *args],
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            env=env,
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, done: Callable[[bytes], bool]) -> bytes:
        """Read until ``done(all output so far)`` or the end of the output."""
        deadline = time.monotonic() + PATIENCE
        while not done(self.seen):
            left = deadline - time.monotonic()
            assert left > 0, f"top printed no more within {PATIENCE} s: {self.seen[-2000:]!r}"
            if not select.select([self.master], [], [], left)[0]:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the process closed its terminal
                chunk = b""
            if not chunk:
                break
            self.seen += chunk
        return self.seen

    def drain(self) -> bytes:
        """Read what the terminal holds now, without waiting."""
        while select.select([self.master], [], [], 0)[0]:
            chunk = os.read(self.master, 65536)
            if not chunk:
                break
            self.seen += chunk
        return self.seen

    def lines(self) -> list[str]:
        return [line for line in self.seen.decode().splitlines() if line.strip()]

    def close(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        self.read_until(lambda seen: False)
        code = self.process.wait(PATIENCE)
        os.close(self.master)
        assert self.process.stderr is not None
        self.stderr = self.process.stderr.read().decode()
        return code


def seed(store: sessionstore.Store) -> tuple[Any, Any]:
    """Sessions ``a`` and ``b`` with one event each, a writer holding ``w``'s lease and a
    value written once (so top knows the writer slot before the load starts)."""
    for session_id in ("a", "b"):
        store.events.create(SessionHeader(id=session_id))
        store.events.append(session_id, [SessionEvent(seq=0, type="start", time=1)])
    writer = store.events.writer(SessionHeader(id="w"), window=0)
    writer.emit("start", time=1)
    writer.flush()
    value = store.session("BTCUSDT", "top", "binance", "1h")
    value.set_data(0, 1)
    return writer, value


def load(store: sessionstore.Store, writer: Any, value: Any, rounds: int) -> dict[str, int]:
    """Per round: one event appended to ``a``, two emitted by the writer of ``w``, one
    value write; paced so that several refreshes fall inside. Returns what was stored."""
    for n in range(1, rounds + 1):
        store.events.append("a", [SessionEvent(seq=n, type="tick", time=1)])
        writer.emit("tick", time=1)
        writer.emit("tick", time=1)
        writer.flush()
        value.set_data(n, 1 + n)
        time.sleep(0.01)
    return {"a": rounds, "w": 2 * rounds, "b": 0, "values": rounds}


def test_json_counts_exactly_what_a_load_stored_as_the_least_privilege_user(acl_url, namespace):
    rounds = 20
    with sessionstore.connect(acl_url, namespace) as store:
        writer, value = seed(store)
        top = Terminal("--url", acl_url, "-n", namespace, "--interval", "0.1", "--json")
        try:
            top.read_until(lambda seen: seen.count(b"\n") >= 1)
            stored = load(store, writer, value, rounds)
            # Of what top printed by now, the refresh after the next one compares a
            # snapshot taken after the load.
            printed = top.drain().count(b"\n")
            top.read_until(lambda seen: seen.count(b"\n") >= printed + 2)
        finally:
            code = top.close()
            writer.close()
    assert code == 0, top.stderr
    refreshes = [json.loads(line) for line in top.lines()]
    assert len(refreshes) >= 3
    for refresh in refreshes:
        assert refresh["namespace"] == namespace
        assert refresh["sessions"]["total"] == refresh["sessions"]["sampled"] == 3
        assert refresh["values"]["total"] == refresh["values"]["sampled"] == 1
        assert refresh["events"] == sum(row["events"] for row in refresh["sessions"]["rows"])
        assert refresh["leases"] == 1  # w's writer
        assert refresh["server"]["clients"] >= 2  # this test's store and top
        assert refresh["bytes"] > 0
    for session_id in ("a", "b", "w"):
        counted = sum(
            row["events"]
            for refresh in refreshes
            for row in refresh["sessions"]["rows"]
            if row["id"] == session_id
        )
        assert counted == stored[session_id], session_id
    assert sum(refresh["value_writes"] for refresh in refreshes) == stored["values"]
    assert sum(refresh["events"] for refresh in refreshes) == 3 * rounds
    busiest = max(refreshes, key=lambda refresh: refresh["events"])
    assert busiest["events_per_s"] == pytest.approx(busiest["events"] / busiest["seconds"], 1e-3)


def test_the_screen_redraws_in_a_terminal_with_rates_leases_and_what_was_sampled(
    acl_url, namespace
):
    with sessionstore.connect(acl_url, namespace) as store:
        writer, value = seed(store)
        loading = threading.Thread(target=load, args=(store, writer, value, 15))
        loading.start()
        top = Terminal("--url", acl_url, "-n", namespace, "--interval", "0.1", "--iterations", "3")
        try:
            top.read_until(lambda seen: False)
            code = top.close()
        finally:
            loading.join()
            writer.close()
    assert code == 0, top.stderr
    screen = ANSI.sub("", top.seen.decode())
    assert "\x1b[" in top.seen.decode()  # drawn in place, not one frame after another
    assert f"namespace '{namespace}'" in screen
    assert "sampled: 3 of 3 sessions, 1 of 1 value" in screen
    assert "leases held 1" in screen
    assert "clients connected" in screen
    assert re.search(r"events [0-9.,]+/s · value writes [0-9.,]+/s", screen)
    assert re.search(r"\bw\s+[0-9.,]+\s+\d+\s+held\b", screen)
    assert "BTCUSDT/top/binance/1h/backtest" in screen


def test_sqlite_sessions_are_counted_from_the_public_api(tmp_path):
    url = f"sqlite:///{tmp_path / 'top.db'}"
    with sessionstore.connect(url, "ns") as store:
        store.events.create(SessionHeader(id="a"))
        store.events.append("a", [SessionEvent(seq=0, type="x", time=1)])
        sampler = LocalSampler(url, "ns", 10)
        try:
            before = sampler.sample()
            store.events.append("a", [SessionEvent(seq=n, type="x", time=1) for n in (1, 2, 3)])
            refresh = compare(before, sampler.sample())
        finally:
            sampler.close()
    assert refresh.events == 3
    assert refresh.value_writes is None  # not observed on SQLite: said, never guessed
    (row,) = refresh.sessions
    assert (row.id, row.events, row.next_seq) == ("a", 3, 4)
    assert row.size is not None and row.size > 0
    result = CliRunner().invoke(
        app, ["top", "--url", url, "-n", "ns", "--once", "--json", "--interval", "0.05"]
    )
    assert result.exit_code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["value_writes"] is None


def test_a_memory_store_is_refused_with_one_line():
    result = CliRunner().invoke(app, ["top", "--url", "memory://", "--once"])
    assert result.exit_code == 2
    assert "lives inside the one process that opened it" in result.stderr


def _values(at: float, **records: dict[str, str]) -> Snapshot:
    """A snapshot holding only values, each with its writer slots' records."""
    found = {label: ValueState(False, slots, None) for label, slots in records.items()}
    return Snapshot(at, 0, {}, found, len(found))


def test_value_writes_of_a_known_slot_are_its_numbers_difference():
    before = _values(0, x={"s1": "10:100:5000"}, y={"s1": "12:100:5000"})
    after = _values(1, x={"s1": "15:101:5000"}, y={"s1": "19:101:5000"})
    refresh = compare(before, after)
    assert refresh.value_writes == 7  # the slot's largest number went from 12 to 19
    assert [(rate.key, rate.writes) for rate in refresh.values] == [("x", 1), ("y", 1)]


def test_a_slot_seen_first_counts_one_write_per_value_it_changed():
    before = _values(0, x={}, y={"s1": "3:100:5000"})
    after = _values(1, x={"s2": "900:101:5000"}, y={"s1": "3:100:5000", "s2": "901:101:5000"})
    assert compare(before, after).value_writes == 2  # not 901: its earlier writes are unseen


def test_a_value_sampled_for_the_first_time_counts_no_write_of_its_own():
    before = _values(0, x={"s1": "3:100:5000"})
    after = _values(1, x={"s1": "3:100:5000"}, z={"s9": "50:90:5000"})
    refresh = compare(before, after)
    assert refresh.value_writes == 0
    assert {rate.key: rate.writes for rate in refresh.values} == {"x": 0, "z": 0}
