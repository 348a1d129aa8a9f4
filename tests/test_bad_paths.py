"""Paths no store can live at (a NUL byte, symbolic links that loop, a name or a path too
long, unknown URL parameters) are refused with ``InvalidArgumentError`` by ``connect``,
before anything is created; generated paths fail only with ``SessionStoreError``s."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import InvalidArgumentError, SessionEvent, SessionHeader, SessionStoreError

T0 = 1_718_000_000_000


def _tree(root: Path) -> set[str]:
    return {os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files}


def _use(store: sessionstore.Store) -> None:
    store.session("A", "s", "e", "1h").set_data(1, T0)
    store.events.create(SessionHeader(id="s-1"))
    store.events.append("s-1", [SessionEvent(seq=0, type="n", time=T0)])


def _refused_and_nothing_created(url: str, root: Path, match: str) -> InvalidArgumentError:
    before = _tree(root)
    with pytest.raises(InvalidArgumentError, match=match) as caught:
        sessionstore.connect(url, "ns")
    assert _tree(root) == before
    return caught.value


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    os.symlink(tmp_path / "a", tmp_path / "b")
    os.symlink(tmp_path / "b", tmp_path / "a")
    return tmp_path / "a"


# --- NUL bytes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_url",
    [
        lambda d: f"{d}/st\0re",
        lambda d: f"file://{d}/st%00re",
        lambda d: f"file://{d}/st\0re",
        lambda d: f"sqlite:///{d}/st\0re.db",
        lambda d: f"sqlite:///{d}/st\0re/x.db",
    ],
)
def test_a_nul_byte_in_a_path_is_refused_by_connect(tmp_path, make_url):
    _refused_and_nothing_created(make_url(tmp_path), tmp_path, "NUL byte")


# --- symbolic links that loop ------------------------------------------------------------


@pytest.mark.parametrize(
    "make_url",
    [
        lambda loop: str(loop),
        lambda loop: str(loop / "sub" / "dir"),
        lambda loop: loop.as_uri(),
        lambda loop: f"sqlite:///{loop}",
        lambda loop: f"sqlite:///{loop}/x.db",
    ],
)
def test_a_symlink_loop_is_refused_by_connect(tmp_path, loop, make_url):
    error = _refused_and_nothing_created(make_url(loop), tmp_path, "cannot be resolved")
    assert str(loop) in str(error)


def test_a_loop_made_after_connect_fails_the_first_call_with_a_store_error(tmp_path):
    files = sessionstore.connect(tmp_path / "f", "ns")
    sqlite = sessionstore.connect(f"sqlite:///{tmp_path}/s/x.db", "ns")
    for name in ("f", "s"):
        os.symlink(tmp_path / f"{name}2", tmp_path / name)
        os.symlink(tmp_path / name, tmp_path / f"{name}2")
    before = _tree(tmp_path)
    for store in (files, sqlite):
        with pytest.raises(SessionStoreError):
            _use(store)
        store.close()
    assert _tree(tmp_path) == before


# --- names and paths too long -----------------------------------------------------------


def test_a_name_longer_than_the_file_system_allows_is_refused_by_connect(tmp_path):
    name = "n" * 256
    for url in (
        str(tmp_path / name),
        f"sqlite:///{tmp_path}/{name}.db",
        f"file://{tmp_path}/é{name}",
    ):
        _refused_and_nothing_created(url, tmp_path, "longer than the file system allows")


def test_a_path_longer_than_the_system_limit_is_refused_by_connect(tmp_path):
    deep = "/".join(["d" * 100] * 50)
    for url in (f"{tmp_path}/{deep}", f"sqlite:///{tmp_path}/{deep}/x.db"):
        _refused_and_nothing_created(url, tmp_path, "longer than this system's limit")


def test_an_unknown_home_directory_is_refused_by_connect(tmp_path):
    _refused_and_nothing_created("~no-such-user-of-this-host/store", tmp_path, "cannot be")


# --- URL parameters ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["memory://?x=1", "dummy://?x", "file:///tmp/sessionstore-never?x=1", "sqlite:///never.db?x=1"],
)
def test_a_url_parameter_no_backend_reads_is_refused_and_named(tmp_path, url, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused_and_nothing_created(url, tmp_path, r"unknown URL parameter \?x=")
    assert not Path("/tmp/sessionstore-never").exists()


def test_a_misspelt_parameter_is_named_and_no_secret_is_shown(tmp_path):
    url = f"sqlite:///{tmp_path}/x.db?durabilty=none&password=hunter22"
    error = _refused_and_nothing_created(url, tmp_path, r"\?durabilty=")
    assert "hunter22" not in str(error)


def test_a_fragment_or_a_remote_host_in_a_file_url_is_refused(tmp_path):
    _refused_and_nothing_created(f"file://{tmp_path}/run#1", tmp_path, "fragment")
    error = _refused_and_nothing_created(
        f"file://me:hunter22@elsewhere{tmp_path}", tmp_path, "must be local"
    )
    assert "hunter22" not in str(error)


def test_the_readme_urls_still_open(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for url in ("memory://", "dummy://", (tmp_path / "f").as_uri(), "sqlite:///rel.db", "plain"):
        with sessionstore.connect(url, "ns") as store:
            _use(store)
    assert (tmp_path / "rel.db").is_file() and (tmp_path / "plain").is_dir()


# --- generated paths ------------------------------------------------------------------------

#: Characters a path is likely to trip on.
_NASTY = "\0/.%?#@: \t\n\\~*[]'\"é\u202e\U0001f600\ud800\udcff"
_SEGMENTS = st.one_of(
    st.sampled_from(["..", ".", "", "~", "%00", "%2F"]),
    st.text(st.sampled_from(_NASTY) | st.characters(), min_size=1, max_size=12),
    st.integers(200, 300).map(lambda n: "x" * n),
)
_COUNTER = itertools.count()


def _check_generated(tmp_path: Path, segments: list[str], make_url) -> None:
    # At most four segments: even "../../../.." stays in w/<n>.
    n = next(_COUNTER)
    base = tmp_path / "w" / f"{n}" / "a" / "b" / "c" / "d"
    base.mkdir(parents=True)
    url = make_url(f"{base}/{'/'.join(segments)}")
    try:
        store = sessionstore.connect(url, "ns")
    except InvalidArgumentError:
        return
    try:
        _use(store)
    except SessionStoreError:
        pass
    finally:
        store.close()
    assert os.listdir(tmp_path) == ["w"]
    assert all(name.isdigit() for name in os.listdir(tmp_path / "w"))


_GENERATED = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_GENERATED
@given(st.lists(_SEGMENTS, min_size=1, max_size=4))
def test_generated_file_paths_fail_only_with_store_errors(tmp_path, segments):
    _check_generated(tmp_path, segments, lambda path: path)


@_GENERATED
@given(st.lists(_SEGMENTS, min_size=1, max_size=4))
def test_generated_file_urls_fail_only_with_store_errors(tmp_path, segments):
    _check_generated(tmp_path, segments, lambda path: f"file://{path}")


@_GENERATED
@given(st.lists(_SEGMENTS, min_size=1, max_size=4))
def test_generated_sqlite_paths_fail_only_with_store_errors(tmp_path, segments):
    _check_generated(tmp_path, segments, lambda path: f"sqlite:///{path}")
