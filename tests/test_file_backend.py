"""The file backend for session values (``file://``): layout, record format, atomic
replacement, compare-and-set across processes, safe names and leftover temp files."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sessionstore
from sessionstore import AccessDeniedError, StoreUnavailableError
from sessionstore.backends.files import FileValues
from sessionstore.backends.fsutil import MAX_NAME_BYTES, TEMP_MAX_AGE, encode_name, temp_name
from sessionstore.contracts import Refused, Stored
from sessionstore.keys import ValueKey

TRICKY_PARTS = [
    "../../etc",
    "..",
    ".",
    "",
    "a:b",
    "{x}",
    "a/b",
    "/abs",
    "%2E%2E",
    "%",
    "~",
    "BTC\x00USDT",
    "line\nbreak",
    "tab\there",
    " ",
    "ünïcødé",
    "日本語",
    "emoji😀",
    "\u202e",
    "x" * 1000,
    "é" * 1000,
]


def store_url(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def key(symbol: str = "BTCUSDT", mode: str = "backtest", namespace: str = "ns") -> ValueKey:
    return ValueKey(namespace, symbol, "strat", "binance", "1h", mode)


# --- names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("BTCUSDT", "BTCUSDT"),
        ("llm-momentum_v2", "llm-momentum_v2"),
        ("ünï", "ünï"),
        (".", "%2E"),
        ("..", "%2E%2E"),
        ("a/b", "a%2Fb"),
        ("50%", "50%25"),
        ("", "%"),
        ("€", "%E2%82%AC"),
    ],
)
def test_encode_name_keeps_safe_characters_and_escapes_the_rest(text: str, name: str) -> None:
    assert encode_name(text) == name


@given(st.text(max_size=400))
def test_encode_name_is_always_a_single_safe_file_name(text: str) -> None:
    name = encode_name(text)
    assert name not in ("", ".", "..")
    assert "/" not in name and "\x00" not in name
    assert len(name.encode()) <= MAX_NAME_BYTES


@given(st.lists(st.text(max_size=300), unique=True, max_size=20))
def test_encode_name_never_maps_two_texts_to_one_name(texts: list[str]) -> None:
    assert len({encode_name(text) for text in texts}) == len(texts)


def test_long_texts_with_a_common_prefix_get_distinct_short_names() -> None:
    first, second = "a" * 999 + "1", "a" * 999 + "2"
    assert encode_name(first) != encode_name(second)
    assert encode_name(first).startswith("a" * 40)


# --- layout and record format -------------------------------------------------------


def test_value_is_one_msgpack_record_with_its_full_key(tmp_path: Path) -> None:
    with sessionstore.connect(store_url(tmp_path), namespace="run-1") as store:
        store.session("BTCUSDT", "strat", "binance", "1h").set_data({"signal": "buy"}, 1234)
    [record_file] = [p for p in files_under(tmp_path) if p.name == "value.msgpack"]
    expected_dir = tmp_path / "store" / "run-1" / "values" / "BTCUSDT" / "strat" / "binance"
    assert record_file == expected_dir / "1h" / "backtest" / "value.msgpack"
    record = msgpack.unpackb(record_file.read_bytes())
    assert record == {
        "key": {
            "namespace": "run-1",
            "symbol": "BTCUSDT",
            "strategy": "strat",
            "exchange": "binance",
            "frame": "1h",
            "mode": "backtest",
        },
        "when": 1234,
        "payload": msgpack.packb({"signal": "buy"}),
    }


def test_clearing_removes_the_record_file(tmp_path: Path) -> None:
    with sessionstore.connect(store_url(tmp_path)) as store:
        session = store.session("BTCUSDT", "strat", "binance", "1h")
        session.set_data(1, 10)
        [record_file] = [p for p in files_under(tmp_path) if p.name == "value.msgpack"]
        session.set_data(None, 20)
        assert not record_file.exists()
        assert session.get_data(30) is None
        session.set_data(None, 40)  # clearing an absent value is fine


def test_writes_leave_no_temp_files(tmp_path: Path) -> None:
    with sessionstore.connect(store_url(tmp_path)) as store:
        plain = store.session("BTCUSDT", "strat", "binance", "1h")
        versioned = store.session("ETHUSDT", "strat", "binance", "1h", history=True)
        for when in range(20):
            plain.set_data(when, when)
            plain.update(lambda value: value + 1, when)
            versioned.set_data(when, when)
            versioned.update(lambda value: value + 1, when)
    names = {p.name for p in files_under(tmp_path)}
    assert names == {"value.msgpack", "history.msgpack", ".lock"}


def test_every_read_sees_writes_of_another_store(tmp_path: Path) -> None:
    with (
        sessionstore.connect(store_url(tmp_path)) as writer,
        sessionstore.connect(store_url(tmp_path)) as reader,
    ):
        written = writer.session("BTCUSDT", "strat", "binance", "1h")
        read = reader.session("BTCUSDT", "strat", "binance", "1h")
        assert read.get_data(100) is None
        written.set_data("first", 10)
        assert read.get_data(100) == "first"
        written.set_data("second", 20)
        assert read.get_data(100) == "second"


def test_namespaces_are_isolated_in_separate_folders(tmp_path: Path) -> None:
    with (
        sessionstore.connect(store_url(tmp_path), namespace="a") as first,
        sessionstore.connect(store_url(tmp_path), namespace="b") as second,
    ):
        first.session("BTCUSDT", "s", "e", "1h").set_data("from a", 1)
        assert second.session("BTCUSDT", "s", "e", "1h").get_data(1) is None
    records = [p for p in files_under(tmp_path) if p.name == "value.msgpack"]
    assert [p.relative_to(tmp_path / "store").parts[0] for p in records] == ["a"]


def test_history_file_holds_sorted_versions_and_clears(tmp_path: Path) -> None:
    values = FileValues(tmp_path)
    k = key()
    values.write_version(k, b"3", 30, None)
    values.write_version(k, b"1", 10, None)  # drops the version at 30
    values.write_version(k, None, 20, None)
    values.write_version(k, b"4", 40, 2)
    [history] = [p for p in files_under(tmp_path) if p.name == "history.msgpack"]
    record = msgpack.unpackb(history.read_bytes())
    assert record["versions"] == [[20, None], [40, b"4"]]
    assert values.read_as_of(k, 19) is None
    assert values.read_as_of(k, 39) == Stored(None, 20)
    assert values.read_as_of(k, 40) == Stored(b"4", 40)
    assert values.read(k) is None  # history and plain records are separate


def test_swap_compares_the_stored_record(tmp_path: Path) -> None:
    values = FileValues(tmp_path)
    k = key()
    assert values.swap(k, None, b"a", 1) is True
    assert values.swap(k, None, b"b", 2) == Refused(Stored(b"a", 1))
    assert values.swap(k, Stored(b"a", 2), b"b", 2) == Refused(Stored(b"a", 1))
    assert values.read(k) == Stored(b"a", 1)
    assert values.swap(k, Stored(b"a", 1), None, 3)
    assert values.read(k) is None
    assert values.swap_version(k, None, b"h", 5, None)
    assert not values.swap_version(k, None, b"i", 6, None)
    assert values.swap_version(k, Stored(b"h", 5), b"i", 6, None)
    assert values.read_as_of(k, 10) == Stored(b"i", 6)


# --- hostile key parts --------------------------------------------------------------


def test_hostile_key_parts_stay_under_the_root_and_never_collide(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with sessionstore.connect(root.as_uri(), namespace="../../ns") as store:
        sessions = {}
        for index, part in enumerate(TRICKY_PARTS):
            for position in range(4):
                parts = ["sym", "strat", "exch", "frame"]
                parts[position] = part
                session = store.session(*parts, mode="live")
                session.set_data({"index": index, "position": position}, 5)
                sessions[(index, position)] = session
        for (index, position), session in sessions.items():
            assert session.get_data(5) == {"index": index, "position": position}
    assert [p.name for p in tmp_path.iterdir()] == ["store"]
    for path in root.rglob("*"):
        assert path.resolve().is_relative_to(root.resolve())
        assert len(path.name.encode()) <= 255
    records = [p for p in files_under(root) if p.name == "value.msgpack"]
    assert len(records) == len(TRICKY_PARTS) * 4


def test_a_record_stored_under_another_key_reads_as_absent_with_a_warning(
    tmp_path: Path,
) -> None:
    values = FileValues(tmp_path)
    mine, other = key("MINE"), key("OTHER")
    values.write(mine, b"mine", 1)
    values.write(other, b"other", 1)
    mine_file = values.key_dir(mine) / "value.msgpack"
    (values.key_dir(other) / "value.msgpack").write_bytes(mine_file.read_bytes())
    with pytest.warns(RuntimeWarning, match="holds the record of"):
        assert values.read(other) is None
    assert values.read(mine) == Stored(b"mine", 1)
    with pytest.warns(RuntimeWarning, match="holds the record of"):
        assert values.swap(other, None, b"fresh", 2)
    assert values.read(other) == Stored(b"fresh", 2)


def test_an_unreadable_record_reads_as_absent_with_a_warning(tmp_path: Path) -> None:
    values = FileValues(tmp_path)
    k = key()
    values.write(k, b"payload", 1)
    record_file = values.key_dir(k) / "value.msgpack"
    record_file.write_bytes(record_file.read_bytes()[:-3])
    with pytest.warns(RuntimeWarning, match="not a msgpack record"):
        assert values.read(k) is None


# --- leftover temp files --------------------------------------------------------------


def _crash_while_writing(url: str) -> None:
    """Die between writing the temp file and renaming it, as a killed writer would."""

    def die(*args: object, **kwargs: object) -> None:
        os._exit(3)

    os.replace = die  # type: ignore[assignment]
    with sessionstore.connect(url) as store:
        store.session("BTCUSDT", "strat", "binance", "1h").set_data("lost", 1)


def test_prepare_removes_temp_files_of_dead_writers_and_old_ones(tmp_path: Path) -> None:
    url = store_url(tmp_path)
    child = multiprocessing.get_context("spawn").Process(target=_crash_while_writing, args=(url,))
    child.start()
    child.join()
    assert child.exitcode == 3
    directory = FileValues(tmp_path / "store").key_dir(key(namespace="default"))
    [crashed] = [p for p in directory.iterdir() if p.name.startswith(".tmp.")]
    assert f".tmp.{child.pid}." in crashed.name

    live_young = directory / temp_name("value.msgpack")
    live_old = directory / temp_name("history.msgpack")
    unrelated = directory / "notes.txt"
    for path in (live_young, live_old, unrelated):
        path.write_bytes(b"x")
    hours_ago = time.time() - TEMP_MAX_AGE - 60
    os.utime(live_old, (hours_ago, hours_ago))

    with sessionstore.connect(url) as store:
        session = store.session("BTCUSDT", "strat", "binance", "1h")
        assert session.get_data(10) is None  # first use prepares the key
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [".lock", live_young.name, "notes.txt"]
    )


# --- concurrency ------------------------------------------------------------------------


def _increment(url: str, count: int, history: bool) -> None:
    with sessionstore.connect(url) as store:
        session = store.session("BTCUSDT", "strat", "binance", "1h", history=history)
        for _ in range(count):
            session.update(lambda value: (value or 0) + 1, 100)


@pytest.mark.slow
@pytest.mark.parametrize(("history", "count"), [(False, 500), (True, 100)])
def test_update_is_compare_and_set_across_processes(
    tmp_path: Path, history: bool, count: int
) -> None:
    url = store_url(tmp_path)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_increment, args=(url, count, history)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert [worker.exitcode for worker in workers] == [0] * 4
    with sessionstore.connect(url) as store:
        session = store.session("BTCUSDT", "strat", "binance", "1h", history=history)
        assert session.get_data(100) == 4 * count


def test_update_is_compare_and_set_across_threads(tmp_path: Path) -> None:
    url = store_url(tmp_path)
    threads = [threading.Thread(target=_increment, args=(url, 50, False)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with sessionstore.connect(url) as store:
        assert store.session("BTCUSDT", "strat", "binance", "1h").get_data(100) == 300


# --- errors -----------------------------------------------------------------------------


def test_an_unusable_root_is_store_unavailable_naming_the_path(tmp_path: Path) -> None:
    root = tmp_path / "not-a-folder"
    root.write_text("a regular file")
    with sessionstore.connect(root.as_uri()) as store:
        session = store.session("BTCUSDT", "strat", "binance", "1h")
        with pytest.raises(StoreUnavailableError, match="not-a-folder") as caught:
            session.set_data(1, 1)
    assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_refused_permission_is_access_denied(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with sessionstore.connect(root.as_uri()) as store:
        session = store.session("BTCUSDT", "strat", "binance", "1h")
        session.set_data(1, 1)
        values_dir = root / "default" / "values"
        values_dir.chmod(0o500)
        try:
            fresh = store.session("ETHUSDT", "strat", "binance", "1h")
            with pytest.raises(AccessDeniedError) as caught:
                fresh.set_data(1, 1)
        finally:
            values_dir.chmod(0o700)
    assert isinstance(caught.value.__cause__, PermissionError)


# --- listing namespaces -----------------------------------------------------------------


def _log_one(store: sessionstore.Store) -> None:
    store.events.create(sessionstore.SessionHeader(id="s1"))
    store.events.append("s1", [{"seq": 0, "type": "t", "time": 1}])


def test_namespaces_lists_a_namespace_whose_folder_name_is_shortened(tmp_path: Path) -> None:
    url = store_url(tmp_path)
    long_names = ["n" * 300, "é" * 150 + "/x", "logs only " + "z" * 300]
    for name in long_names[:2]:
        with sessionstore.connect(url, namespace=name) as store:
            store.session("BTC", "s", "e", "1h").set_data({"a": 1}, 1)
            _log_one(store)
    with sessionstore.connect(url, namespace=long_names[2]) as store:
        _log_one(store)
    with sessionstore.connect(url, namespace="short") as store:
        store.session("BTC", "s", "e", "1h").set_data({"a": 1}, 1)
    assert all(len(encode_name(name).encode()) <= MAX_NAME_BYTES for name in long_names)
    found = {usage.name: (usage.sessions, usage.values) for usage in sessionstore.namespaces(url)}
    assert found == {
        long_names[0]: (1, 1),
        long_names[1]: (1, 1),
        long_names[2]: (1, 0),
        "short": (0, 1),
    }


def _name_file(tmp_path: Path, name: str, *, values: bool) -> Path:
    """The ``.namespace`` file of the namespace ``name`` once it holds a value (or, not
    ``values``, a session)."""
    with sessionstore.connect(store_url(tmp_path), namespace=name) as store:
        if values:
            store.session("BTC", "s", "e", "1h").set_data({"a": 1}, 1)
        else:
            _log_one(store)
    found = tmp_path / "store" / encode_name(name) / ".namespace"
    assert found.read_bytes() == name.encode()
    return found


def test_a_shortened_namespace_folder_without_its_name_file_is_named_by_its_records(
    tmp_path: Path,
) -> None:
    """A folder made before the store wrote ``.namespace``: its values name it."""
    _name_file(tmp_path, "v" * 300, values=True).unlink()
    usages = sessionstore.namespaces(store_url(tmp_path))
    assert [(u.name, u.values) for u in usages] == [("v" * 300, 1)]


def test_a_shortened_namespace_folder_naming_another_namespace_is_not_listed(
    tmp_path: Path,
) -> None:
    # A name the folder's digest does not match.
    _name_file(tmp_path, "n" * 300, values=False).write_bytes(b"m" * 300)
    assert sessionstore.namespaces(store_url(tmp_path)) == []


def test_a_root_moved_away_and_made_again_is_the_one_used(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with sessionstore.connect(root.as_uri()) as store:
        session = store.session("BTCUSDT", "strat", "binance", "1h")
        session.set_data("old", 1)
        root.rename(tmp_path / "moved")
        assert session.get_data(1) is None
        session.set_data("new", 2)
        assert session.get_data(2) == "new"
    with sessionstore.connect((tmp_path / "moved").as_uri()) as store:
        assert store.session("BTCUSDT", "strat", "binance", "1h").get_data(2) == "old"
