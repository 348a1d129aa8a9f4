"""A folder of a file store swapped for a link while calls run is never followed.

Every call walks its folders from the store's root one descriptor at a time without
following a link, checks each on its descriptor and opens its files relative to the
last one, so there is no moment between a check and an open when a swap could send
a write elsewhere: an attacker who keeps swapping a value's or a session's folder for
a link to a folder of its own gets refusals (:class:`~sessionstore.UnsafePathError`),
and nothing ever lands in its folder. As root, the attacker and the victim are also
two real users (uids dropped in forked children) sharing a writable root.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sessionstore
from sessionstore import SessionHeader, SessionNotFoundError, UnsafePathError
from sessionstore.backends.fsutil import encode_name

T0 = 1_718_000_000_000
NS = "victim"
#: How long each attack runs, in seconds: long enough for thousands of swaps (a minute
#: each with ``SESSIONSTORE_SOAK`` set).
ATTACK = 60.0 if os.environ.get("SESSIONSTORE_SOAK") else 0.6
VICTIM_UID, ATTACKER_UID = 65533, 65534


def _value_dir(root: Path) -> Path:
    parts = ("BTC", "s", "e", "1h", "backtest")
    return root.joinpath(encode_name(NS), "values", *map(encode_name, parts))


def _logs_dir(root: Path) -> Path:
    return root / encode_name(NS) / "logs"


def _swap_until(target: Path, attacker: Path, stop: Callable[[], bool]) -> int:
    """Swap ``target`` for a link to ``attacker`` and drop the link again, as fast as
    possible, until ``stop()``; the folder found there is moved aside first (the victim
    makes a new one when it writes). Nothing is ever removed or renamed over, so every
    folder the victim holds stays where the attacker put it. How many times the link
    was in place."""
    swaps = 0
    for attempt in itertools.count():
        if stop():
            break
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, target.with_name(f"{target.name}.aside{attempt}"))
        try:
            os.symlink(attacker, target)
        except FileExistsError:
            continue  # the victim made the folder again meanwhile
        swaps += 1
        os.unlink(target)
    return swaps


def _value_calls(store: sessionstore.Store) -> Iterator[Callable[[], object]]:
    session = store.session("BTC", "s", "e", "1h")
    history = store.session("BTC", "s", "e", "1h", history=True)
    n = 0
    while True:
        n += 1
        yield lambda n=n: session.set_data({"n": n}, T0 + n)
        yield lambda n=n: session.get_data(T0 + n)
        yield lambda n=n: history.set_data({"n": n}, T0 + n)
        yield lambda n=n: history.get_data(T0 + n)


def _session_calls(store: sessionstore.Store) -> Iterator[Callable[[], object]]:
    n = 0
    while True:
        n += 1
        sid = f"s{n}"
        yield lambda sid=sid: store.events.create(SessionHeader(id=sid))
        yield lambda sid=sid: store.events.append(sid, [{"seq": 0, "type": "t", "time": 1}])
        yield lambda sid=sid: store.events.load(sid)
        yield store.events.list


def _attacked(
    store: sessionstore.Store, calls: Iterator[Callable[[], object]], until: float
) -> dict[str, int]:
    """Run ``calls`` until the time ``until``: how many succeeded, were refused, or
    found their session gone (moved aside with its folder); anything else raises."""
    seen = {"ok": 0, "refused": 0, "gone": 0}
    for call in calls:
        if time.monotonic() > until:
            return seen
        try:
            call()
        except UnsafePathError:
            seen["refused"] += 1
        except SessionNotFoundError:
            seen["gone"] += 1
        else:
            seen["ok"] += 1
    return seen


@pytest.mark.parametrize("target", ["value", "session"])
def test_a_folder_swapped_for_a_link_in_a_tight_loop_is_never_followed(tmp_path, target):
    root = tmp_path / "store"
    attacker = tmp_path / "attacker"
    attacker.mkdir(mode=0o700)  # the same user's: only the link itself gives it away
    with sessionstore.connect(root.as_uri(), namespace=NS) as store:
        session = store.session("BTC", "s", "e", "1h")
        session.set_data({"n": 0}, T0)
        store.events.create(SessionHeader(id="s0"))
        folder = _value_dir(root) if target == "value" else _logs_dir(root)
        calls = _value_calls(store) if target == "value" else _session_calls(store)
        until = time.monotonic() + ATTACK
        swaps: list[int] = []
        swapper = threading.Thread(
            target=lambda: swaps.append(
                _swap_until(folder, attacker, lambda: time.monotonic() > until)
            )
        )
        swapper.start()
        try:
            seen = _attacked(store, calls, until)
        finally:
            swapper.join(30)
    assert list(attacker.rglob("*")) == []
    assert swaps and swaps[0] > 0
    assert seen["ok"] > 0 and seen["refused"] > 0, seen


# --- two real users ---------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A folder every user may write in (no sticky bit), as a careless shared disk;
    outside pytest's own temp folder, which only root may enter."""
    made = Path(tempfile.mkdtemp(prefix="sessionstore-shared-"))
    root = made / "store"
    root.mkdir()
    for folder in (made, root):
        os.chmod(folder, 0o777)
    try:
        yield root
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _as_user(uid: int, work: Callable[[], object]) -> tuple[int, int]:
    """Fork a child that becomes ``uid`` (its group too) and runs ``work``, writing
    what it returns (or the error it raised) as JSON to a pipe; the child's pid and
    the pipe's read end, for :func:`_result`."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        status = 0
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.umask(0o022)
            outcome: object = {"result": work()}
        except BaseException:  # noqa: BLE001 - reported to the parent
            outcome, status = {"error": traceback.format_exc()}, 1
        with os.fdopen(write_end, "w") as out:
            json.dump(outcome, out)
        os._exit(status)
    os.close(write_end)
    return pid, read_end


def _result(child: tuple[int, int]) -> object:
    """What the child :func:`_as_user` forked returned, once it has ended."""
    pid, read_end = child
    with os.fdopen(read_end) as reader:
        text = reader.read()
    os.waitpid(pid, 0)
    outcome = json.loads(text)
    assert "error" not in outcome, outcome["error"]
    return outcome["result"]


@needs_root
def test_a_namespace_folder_another_user_made_first_is_refused(shared_root):
    url = shared_root.as_uri()

    def attacker() -> None:
        with sessionstore.connect(url, namespace=NS) as store:
            store.session("BTC", "s", "e", "1h").set_data({"signal": "SELL EVERYTHING"}, T0)
        os.chmod(shared_root / encode_name(NS), 0o777)

    def victim() -> list[str]:
        refused = []
        with sessionstore.connect(url, namespace=NS) as store:
            for call in (
                lambda: store.session("BTC", "s", "e", "1h").get_data(T0),
                lambda: store.session("BTC", "s", "e", "1h").set_data({"signal": "hold"}, T0),
                lambda: store.events.create(SessionHeader(id="s1")),
            ):
                try:
                    call()
                except UnsafePathError as exc:
                    refused.append(str(exc))
        return refused

    _result(_as_user(ATTACKER_UID, attacker))
    planted = shared_root / encode_name(NS)
    before = sorted(p.name for p in planted.rglob("*"))
    refused = _result(_as_user(VICTIM_UID, victim))
    assert isinstance(refused, list) and len(refused) == 3
    for message in refused:
        assert os.fspath(planted) in message
        assert f"owned by uid {ATTACKER_UID}, not {VICTIM_UID}" in message
        assert "0777" in message
    assert sorted(p.name for p in planted.rglob("*")) == before


@needs_root
def test_another_user_swapping_the_namespace_folder_never_gets_a_write(shared_root):
    """The root is writable by everyone, so the attacker can move the victim's own
    namespace folder aside and put a link to its world-writable folder in its place,
    again and again while the victim writes and reads."""
    url = shared_root.as_uri()
    attacker_dir = shared_root.parent / "attacker"
    target = shared_root / encode_name(NS)

    def victim_setup() -> None:
        with sessionstore.connect(url, namespace=NS) as store:
            store.session("BTC", "s", "e", "1h").set_data({"n": 0}, T0)

    _result(_as_user(VICTIM_UID, victim_setup))
    halfway = time.monotonic() + ATTACK / 2
    until = halfway + ATTACK / 2

    def attacker() -> int:
        attacker_dir.mkdir(mode=0o777)
        os.chmod(attacker_dir, 0o777)
        return _swap_until(target, attacker_dir, lambda: time.monotonic() > until)

    def victim() -> dict[str, int]:
        with sessionstore.connect(url, namespace=NS) as store:
            seen = _attacked(store, _value_calls(store), halfway)
            session_seen = _attacked(store, _session_calls(store), until)
        return {name: seen[name] + session_seen[name] for name in seen}

    attacking = _as_user(ATTACKER_UID, attacker)
    try:
        seen = _result(_as_user(VICTIM_UID, victim))
    finally:
        swaps = _result(attacking)  # ended before the shared folder is removed
    assert list(attacker_dir.rglob("*")) == []
    assert isinstance(swaps, int) and swaps > 0
    assert isinstance(seen, dict) and seen["ok"] > 0 and seen["refused"] > 0, seen
