"""The round trip of ``sessionstore doctor``: a probe value and a probe log session
written, read and deleted in the namespace, leaving nothing behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import sessionstore

from ...connection import REDIS_SCHEMES, file_root, scheme_of
from ...errors import DurabilityError, SessionStoreError, StoreUnavailableError
from ...models import SessionEvent, SessionHeader
from ...results import probe_name
from ...store import Store
from ..common import DURABILITY_HINT
from .check import Check

#: The key parts of the probe's value after its symbol (the probe's name).
PROBE_PARTS = ("doctor", "doctor", "doctor")


def round_trip(url: str, namespace: str, durability_failed: bool = False) -> Check:
    """Write, read and delete a probe value and a probe log session in the namespace: this
    exercises every permission (and, on Redis, every function of the library) the library
    needs. On a file store every file and folder the probe made is removed again, on
    Redis every key and namespace index entry (:class:`RedisScratch`). An
    event log refused for the durability the persistence check already failed
    (``durability_failed``) is named, not explained a second time."""
    probe = probe_name("doctor")
    started = time.perf_counter()
    values_work = False
    try:
        with (
            sessionstore.connect(url, namespace) as store,
            FileScratch(url, store, probe),
            RedisScratch(url, store, probe),
        ):
            session = store.session(probe, *PROBE_PARTS)
            session.set_data({"probe": True}, 0)
            session.update(lambda value: value, 0)
            history = store.session(probe, *PROBE_PARTS, history=True)
            history.set_data(1, 0)
            if session.get_data(0) != {"probe": True} or history.get_data(0) != 1:
                return Check("read/write", "FAIL", "a value written was not read back")
            session.delete()
            values_work = True
            store.events.create(SessionHeader(id=probe))
            store.events.append(probe, [SessionEvent(seq=0, type="doctor/probe", time=0)])
            store.events.load(probe)
            store.events.delete(probe)
    except DurabilityError as exc:
        if isinstance(exc, StoreUnavailableError):
            return Check("read/write", "FAIL", f"{type(exc).__name__}: {exc}")
        if durability_failed and values_work:
            return Check(
                "read/write",
                "FAIL",
                f"values, history and update work in namespace {namespace!r}; the event "
                "log refuses appends (DurabilityError: see persistence)",
            )
        hint = exc.hint or DURABILITY_HINT
        return Check("read/write", "FAIL", f"{type(exc).__name__}: {exc}; {hint}")
    except SessionStoreError as exc:
        return Check("read/write", "FAIL", f"{type(exc).__name__}: {exc}")
    elapsed = (time.perf_counter() - started) * 1000
    functions = ", through the library's Redis functions" if scheme_of(url) in REDIS_SCHEMES else ""
    return Check(
        "read/write",
        "OK",
        f"values, history, update and the event log work in namespace {namespace!r}"
        f"{functions} ({elapsed:.0f} ms)",
    )


class FileScratch:
    """On a file store, what the round trip of ``probe`` leaves is removed on leaving the
    block: the probe key's folder and log file (their names hold the probe's unique id),
    then every folder on the way to them that did not exist before (the namespace's,
    the store's own), each only while it is empty. Nothing on other stores."""

    def __init__(self, url: str, store: Store, probe: str) -> None:
        self.probe_paths: list[Path] = []
        self.new_dirs: list[Path] = []
        if scheme_of(url) not in ("", "file"):
            return
        from ...arguments import value_key
        from ...backends.files import FileValues

        key = value_key(store.namespace, probe, *PROBE_PARTS, "backtest")
        key_dir = FileValues(file_root(url)).key_dir(key)
        log = Path(store.events.locate(probe) or key_dir)
        self.probe_paths = [key_dir, log]
        for path in (key_dir, log.parent):
            while not path.exists() and path != path.parent:
                self.new_dirs.append(path)
                path = path.parent

    def __enter__(self) -> FileScratch:
        return self

    def __exit__(self, *exc: object) -> None:
        for path in self.probe_paths:
            if path.is_dir() and path in self.new_dirs:
                shutil.rmtree(path, ignore_errors=True)
            elif path.is_file() or path.is_symlink():
                path.unlink(missing_ok=True)
        for folder in sorted(set(self.new_dirs), key=lambda p: len(p.parts), reverse=True):
            # Not empty (written meanwhile by someone else), or gone already: kept.
            with contextlib.suppress(OSError):
                os.rmdir(folder)


class RedisScratch:
    """On Redis, what the round trip of ``probe`` leaves is removed on leaving the block
    (:func:`.leftovers.remove_leftovers`: the probe's index entries, which the store's
    deletes leave to later listings). Left to those listings when the store cannot be
    reached, or refuses. Nothing on other stores."""

    def __init__(self, url: str, store: Store, probe: str) -> None:
        self.url, self.store, self.probe = url, store, probe

    def __enter__(self) -> RedisScratch:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        if scheme_of(self.url) not in REDIS_SCHEMES or isinstance(exc, StoreUnavailableError):
            return
        # Imported here: importing the CLI loads no Redis driver.
        from .leftovers import remove_leftovers

        with contextlib.suppress(SessionStoreError):
            remove_leftovers(self.url, self.store, self.probe, PROBE_PARTS)
