"""Folders a file store did not make are not trusted.

On a shared disk another user can create a store's folders before the store does (the
namespace folder, a value's folder, the logs folder) and keep writing in them. The store
makes every folder its user's own with mode 0700, so a folder below its root that is
owned by another user, or writable by its group or by others, is refused with
:class:`~sessionstore.errors.UnsafePathError` naming the path, its owner and its mode,
and nothing is read from or written into it. These tests run as root and hand folders to
another uid with ``chown``, as an attacker's own would be.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

import sessionstore
from sessionstore import UnsafePathError
from sessionstore.backends.files import FileValues
from sessionstore.backends.fsutil import encode_name
from sessionstore.keys import ValueKey

T0 = 1_718_000_000_000
OTHER_UID = 54321

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="handing a folder to another uid needs root"
)


def _key_dir(root, namespace: str, mode: str = "backtest"):
    """The folder of the value ("BTC", "s", "e", "1h") of ``namespace``."""
    return FileValues(root).key_dir(ValueKey(namespace, "BTC", "s", "e", "1h", mode))


@pytest.mark.parametrize("how", ["world-writable", "another-owner"])
def test_a_namespace_folder_someone_else_made_is_refused(tmp_path, how):
    root = tmp_path / "store"
    victim = sessionstore.connect(root.as_uri(), namespace="victim")
    with victim:
        victim.session("BTC", "s", "e", "1h").set_data({"signal": "buy"}, T0)
    planted = root / encode_name("shared")
    planted.mkdir()
    if how == "world-writable":
        os.chmod(planted, 0o777)
    else:
        os.chown(planted, OTHER_UID, OTHER_UID)
    with sessionstore.connect(root.as_uri(), namespace="shared") as store:
        for call in (
            lambda: store.session("BTC", "s", "e", "1h").get_data(T0),
            lambda: store.session("BTC", "s", "e", "1h").set_data({"signal": "hold"}, T0),
            lambda: store.events.writer(sessionstore.SessionHeader(id="s")).close(),
        ):
            with pytest.raises(UnsafePathError) as refused:
                call()
            message = str(refused.value)
            assert os.fspath(planted) in message
            assert ("0777" in message) if how == "world-writable" else (str(OTHER_UID) in message)
    assert sorted(os.listdir(planted)) == []  # nothing was made inside it
    with sessionstore.connect(root.as_uri(), namespace="victim") as store:
        assert store.session("BTC", "s", "e", "1h").get_data(T0) == {"signal": "buy"}


def test_a_planted_record_in_a_value_folder_made_by_another_user_is_never_read(tmp_path):
    root = tmp_path / "store"
    # The attacker made the victim's folders first and left a record of its own there.
    with sessionstore.connect(root.as_uri(), namespace="victim") as attacker:
        attacker.session("BTC", "s", "e", "1h").set_data({"signal": "SELL EVERYTHING"}, T0)
    directory = _key_dir(root, "victim")
    for folder in (directory, *directory.parents):
        if folder == root:
            break
        os.chown(folder, OTHER_UID, OTHER_UID)
    with (
        sessionstore.connect(root.as_uri(), namespace="victim") as victim,
        pytest.raises(UnsafePathError),
    ):
        victim.session("BTC", "s", "e", "1h").get_data(T0)


def test_a_compute_lease_released_after_its_folder_was_swapped_touches_nothing_there(tmp_path):
    """The value's folder is swapped for another user's while ``fn`` runs: releasing the
    lease refuses that folder instead of locking or creating anything in it."""
    root = tmp_path / "store"
    store = sessionstore.connect(root.as_uri(), namespace="victim")
    session = store.session("BTC", "s", "e", "1h", history=True)
    target = _key_dir(root, "victim")
    started, swapped = threading.Event(), threading.Event()

    def fn() -> dict:
        started.set()
        assert swapped.wait(10)
        return {"signal": "buy"}

    errors: list[BaseException] = []

    def compute() -> None:
        try:
            session.get_or_compute(T0, fn, lease=5)
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    worker = threading.Thread(target=compute)
    worker.start()
    assert started.wait(10)
    os.rename(target, target.with_name(target.name + ".moved"))
    target.mkdir(mode=0o777)
    os.chmod(target, 0o777)
    os.chown(target, OTHER_UID, OTHER_UID)
    time.sleep(0.05)
    swapped.set()
    worker.join(30)
    store.close()
    assert errors and isinstance(errors[0], UnsafePathError)
    assert os.listdir(target) == []


def test_namespaces_skips_a_namespace_folder_another_user_made_with_a_warning(tmp_path, caplog):
    root = tmp_path / "store"
    with sessionstore.connect(root.as_uri(), namespace="victim") as store:
        store.session("BTC", "s", "e", "1h").set_data({"signal": "buy"}, T0)
    planted = root / encode_name("shared") / "values"
    planted.mkdir(parents=True)
    os.chown(planted.parent, OTHER_UID, OTHER_UID)
    with caplog.at_level(logging.WARNING, "sessionstore"):
        assert [usage.name for usage in sessionstore.namespaces(str(root))] == ["victim"]
    assert f"{planted.parent}" in caplog.text and str(OTHER_UID) in caplog.text
