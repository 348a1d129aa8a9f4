"""Drive the asyncio API through the sync conformance suites.

:func:`sync_view` wraps an ``AsyncStore`` so every call runs as a coroutine on one event
loop in a background thread and returns its result: the suites then prove the async API
with exactly the same tests as the sync one.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

import sessionstore
from sessionstore import aio


class Bridge:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        async def call() -> Any:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


_WRAPPED = (aio.AsyncStore, aio.AsyncSession, aio.AsyncEventLog, aio.AsyncSessionWriter)


class SyncView:
    """A synchronous face over one object of :mod:`sessionstore.aio`."""

    def __init__(self, target: Any, bridge: Bridge) -> None:
        self._target = target
        self._bridge = bridge

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, _WRAPPED):
            return SyncView(value, self._bridge)
        if inspect.isasyncgen(value):
            return self._iterate(value)
        return value

    def _iterate(self, agen: Any) -> Iterator[Any]:
        while True:
            try:
                yield self._bridge.run(agen.__anext__)
            except StopAsyncIteration:
                return

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return self._wrap(attr)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._wrap(self._bridge.run(attr, *args, **kwargs))

        return call

    def __enter__(self) -> SyncView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SyncView({self._target!r})"


def sync_view(store: aio.AsyncStore, bridge: Bridge) -> SyncView:
    return SyncView(store, bridge)


class Stores:
    """Opens stores through the sync API (``api="sync"``) or through the async one driven
    synchronously (``"async"``), and closes them all with :meth:`close`."""

    def __init__(self, api: str) -> None:
        self._bridge = Bridge() if api == "async" else None
        self._opened: list[Any] = []

    def open(self, url: str, namespace: str, **options: Any) -> Any:
        if self._bridge is None:
            store: Any = sessionstore.connect(url, namespace, **options)
        else:
            opened = self._bridge.run(aio.connect, url, namespace, **options)
            store = sync_view(opened, self._bridge)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()
        if self._bridge is not None:
            self._bridge.stop()
