"""The file store never follows a symbolic link it did not make (it makes none): a link
planted where a log, a value record, a folder or a lease file belongs is refused with
``UnsafePathError`` naming it, nothing is read or written through it, and a listing
leaves it out with a warning. Files the store creates are 0600, its folders 0700."""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

import pytest

import sessionstore
from sessionstore import SessionHeader, UnsafePathError
from sessionstore.backends.fsutil import encode_name

NS = "ns"
EVENT = {"seq": 0, "type": "t", "time": 1}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path):
    with sessionstore.connect(root.as_uri(), NS) as opened:
        yield opened


def _log(root: Path, session_id: str) -> Path:
    return root / encode_name(NS) / "logs" / (encode_name(session_id) + ".jsonl")


def _session(store):
    return store.session("BTC", strategy="s", exchange="x", frame="1h")


def _value_dir(root: Path, symbol: str = "BTC") -> Path:
    parts = (symbol, "s", "x", "1h", "backtest")
    return root.joinpath(encode_name(NS), "values", *map(encode_name, parts))


def test_a_dangling_link_at_a_log_path_is_refused_and_creates_nothing(store, root, tmp_path):
    store.events.create(SessionHeader(id="other"))
    store.events.append("other", [EVENT])
    target = tmp_path / "attacker.jsonl"
    _log(root, "victim").symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link") as caught:
        store.events.create(SessionHeader(id="victim"))
    assert caught.value.path == str(_log(root, "victim"))
    with pytest.raises(UnsafePathError):
        store.events.writer(SessionHeader(id="victim"))
    with pytest.raises(UnsafePathError):
        store.events.append("victim", [EVENT])
    assert not target.exists()
    for call in (store.events.load, store.events.info, store.events.delete):
        with pytest.raises(UnsafePathError):
            call("victim")
    assert [h.id for h in store.events.list()] == ["other"]
    assert [i.header.id for i in store.events.list_info()] == ["other"]
    assert store.events.prune() == 0
    assert _log(root, "victim").is_symlink()


def test_a_link_to_an_existing_file_is_never_written_through(store, root, tmp_path):
    target = tmp_path / "attacker.jsonl"
    target.write_bytes(b"")
    _log(root, "s1").parent.mkdir(parents=True)
    _log(root, "s1").symlink_to(target)
    with pytest.raises(UnsafePathError):
        store.events.create(SessionHeader(id="s1"))
    with pytest.raises(UnsafePathError):
        store.events.append("s1", [EVENT])
    with pytest.raises(UnsafePathError):
        store.events.writer(SessionHeader(id="s1"))
    assert target.read_bytes() == b""


def test_a_linked_logs_or_namespace_folder_is_refused(store, root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir()
    (root / encode_name(NS)).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        store.events.create(SessionHeader(id="s1"))
    with pytest.raises(UnsafePathError):
        store.events.list()
    with pytest.raises(UnsafePathError):
        _session(store).set_data({"a": 1}, 1)
    assert list(elsewhere.iterdir()) == []


def test_a_linked_value_folder_is_refused_for_every_value_call(store, root, tmp_path):
    _session(store).set_data({"mine": 1}, 1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    symbol_dir = _value_dir(root, "ETH").parents[3]
    symbol_dir.parent.mkdir(parents=True, exist_ok=True)
    symbol_dir.symlink_to(elsewhere, target_is_directory=True)
    victim = store.session("ETH", strategy="s", exchange="x", frame="1h")
    history = store.session("ETH", strategy="s", exchange="x", frame="1h", history=True)
    for call in (
        lambda: victim.set_data({"v": 1}, 1),
        lambda: victim.get_data(1),
        lambda: victim.update(lambda v: {"v": 2}, 1),
        lambda: victim.delete(),
        lambda: history.set_data({"v": 1}, 1),
        lambda: history.get_data(1),
    ):
        with pytest.raises(UnsafePathError, match=r"symbolic link") as caught:
            call()
        assert caught.value.path == str(symbol_dir)
    assert list(elsewhere.rglob("*")) == []
    assert [ref.symbol for ref in store.list_values()] == ["BTC"]


def test_a_linked_value_record_or_lock_file_is_refused(store, root, tmp_path):
    session = _session(store)
    session.set_data({"mine": 1}, 1)
    record = _value_dir(root) / "value.msgpack"
    stolen = tmp_path / "stolen.msgpack"
    record.rename(stolen)
    record.symlink_to(stolen)
    with pytest.raises(UnsafePathError) as caught:
        session.get_data(1)
    assert caught.value.path == str(record)
    with pytest.warns(RuntimeWarning, match="symbolic link"):
        assert store.list_values() == []
    lock = _value_dir(root) / ".lock"
    lock.unlink()
    lock.symlink_to(tmp_path / "lock-elsewhere")
    with pytest.raises(UnsafePathError):
        session.set_data({"mine": 2}, 2)
    assert not (tmp_path / "lock-elsewhere").exists()


def test_a_linked_lease_file_is_refused_and_creates_nothing(store, root, tmp_path):
    leases = root / encode_name(NS) / "leases"
    leases.mkdir(parents=True)
    target = tmp_path / "lease-elsewhere"
    (leases / (encode_name("s1") + ".lock")).symlink_to(target)
    with pytest.raises(UnsafePathError):
        store.events.writer(SessionHeader(id="s1"))
    assert not target.exists()


def test_a_fifo_where_a_log_belongs_never_blocks(store, root, caplog):
    _log(root, "s1").parent.mkdir(parents=True)
    os.mkfifo(_log(root, "s1"))
    done = threading.Event()

    def calls() -> None:
        with pytest.raises(UnsafePathError, match="not a regular file"):
            store.events.load("s1")
        with caplog.at_level(logging.WARNING, "sessionstore"):
            assert store.events.list() == []
        done.set()

    worker = threading.Thread(target=calls, daemon=True)
    worker.start()
    worker.join(30)
    assert done.is_set()


def test_files_are_created_0600_and_folders_0700(store, root):
    old = os.umask(0)
    try:
        _session(store).set_data({"a": 1}, 1)
        store.session("H", strategy="s", exchange="x", frame="1h", history=True).set_data(1, 1)
        store.events.create(SessionHeader(id="s1"))
        store.events.append("s1", [EVENT])
        with store.events.writer(SessionHeader(id="s2")) as writer:
            writer.emit("t", {})
    finally:
        os.umask(old)
    seen = {"file": 0, "dir": 0}
    for path in [root, *root.rglob("*")]:
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            seen["dir"] += 1
            assert stat.S_IMODE(mode) == 0o700, path
        else:
            seen["file"] += 1
            assert stat.S_IMODE(mode) == 0o600, path
    assert seen["file"] >= 6 and seen["dir"] >= 10
