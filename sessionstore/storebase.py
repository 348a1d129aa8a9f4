"""What the sync API (:mod:`sessionstore.store`) and the async API (:mod:`sessionstore.aio`)
share, written once (as httpx's ``BaseClient`` is): how a store, a value handle and an
event log are built, checked, pickled and reopened, and the arguments their operations
turn into flows. Each API subclasses these and keeps only what differs: whether a flow
is run by :func:`~sessionstore.flows.run` or awaited through
:func:`~sessionstore.flows.arun`. No I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from . import telemetry, value_flows
from .arguments import check_ttl
from .connection import ConnectArgs, Opened, open_store, travel_args
from .contracts import Backends
from .defaults import compute_times
from .errors import SessionStoreError
from .eventlog import check_header, check_lease, check_session_id, check_window
from .flows import Flow
from .models import SessionHeader
from .session_state import SessionState, session_state
from .store_state import Lifecycle, PendingSessions
from .writer_buffer import WriterContext

_Backend = TypeVar("_Backend")
_Session = TypeVar("_Session")
_Events = TypeVar("_Events")
_Store = TypeVar("_Store", bound="StoreBase[Any, Any]")


class SessionBase(Generic[_Backend]):
    """A handle on one session value (see :class:`sessionstore.Session`), on the
    ``backend`` of its API."""

    def __init__(
        self,
        backend: _Backend,
        state: SessionState,
        lifecycle: Lifecycle,
        owner: StoreBase[Any, Any] | None = None,
    ) -> None:
        self._backend = backend
        self._state = state
        self._lifecycle = lifecycle
        self._owner = owner

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its store, its key, mode, history and retention options and
        whether it was disposed (a disposed handle arrives disposed)."""
        if self._owner is None:
            raise SessionStoreError("this session handle has no store to travel with")
        return (_session_of, (self._owner, self._state))

    def _compute(
        self, when: Any, fn: Callable[[], Any], timeout: float | None, lease: float
    ) -> Flow[Any]:
        """The flow of ``get_or_compute``: ``timeout`` defaults to the store's."""
        wait, held = compute_times(self._owner and self._owner._args, timeout, lease)
        return value_flows.get_or_compute(self._state, self._lifecycle, when, fn, wait, held)

    def dispose(self) -> None:
        """Release the handle; later use raises ``SessionDisposedError``. Data stays. A
        plain call (no I/O) in both APIs: not awaited in :mod:`sessionstore.aio`."""
        self._state.disposed = True


class EventLogBase(Generic[_Backend]):
    """The event logs of a store (see :class:`sessionstore.EventLog`), on the
    ``backend`` of its API; its writers share the store's ``drain`` (a
    :class:`~sessionstore.drain.Drain` or an :class:`~sessionstore.drain.AsyncDrain`)."""

    def __init__(
        self,
        backend: _Backend,
        lifecycle: Lifecycle,
        drain: Any,
        ttl_ms: int | None = None,
        owner: StoreBase[Any, Any] | None = None,
    ) -> None:
        self._backend = backend
        self._lifecycle = lifecycle
        self._drain = drain
        self._pending = PendingSessions()
        self._ttl_ms = ttl_ms
        self._owner = owner

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as its store's ``events``. Sessions created here but not yet appended
        to (nothing stored) and open writers stay behind."""
        if self._owner is None:
            raise SessionStoreError("this event log has no store to travel with")
        return (getattr, (self._owner, "events"))

    def _located(self, header: SessionHeader | str) -> str:
        """The checked id of the session ``locate`` looks for."""
        self._lifecycle.check_open()
        return check_session_id(header.id if isinstance(header, SessionHeader) else header)

    def _retention(self, ttl: float | None) -> int | None:
        """The retention (ms) of a session created with ``ttl``: the store's without one."""
        return self._ttl_ms if ttl is None else check_ttl(ttl)

    def _writer_args(
        self, header: SessionHeader, window: float, ttl: float | None, lease: float
    ) -> tuple[WriterContext, int | None, int]:
        """The arguments of ``writer``, checked (before any I/O): the writer's context,
        its session's retention and its lease, in ms."""
        self._lifecycle.check_open()
        check_header(header)
        check_window(window)
        ttl_ms = self._retention(ttl)
        lease_ms = check_lease(lease)
        context = WriterContext(self._backend, self._pending, self._lifecycle, self._drain)
        return context, ttl_ms, lease_ms


class StoreBase(ABC, Generic[_Session, _Events]):
    """A connection to one backend, scoped to one namespace (see
    :class:`sessionstore.Store`). Each API builds its own handles and event log
    (:meth:`_handle`, :meth:`_start`)."""

    def __init__(
        self,
        backends: Backends,
        namespace: str,
        ttl_ms: int | None = None,
        *,
        args: ConnectArgs | None = None,
    ) -> None:
        self._backends = backends
        self.namespace = namespace
        self._lifecycle = Lifecycle()
        self._args = args
        self._scope = telemetry.scope_for(
            backends.display_url, namespace, args is not None and args.cache
        )
        self._scope.lifecycle = self._lifecycle
        telemetry.bind(self._scope, backends.values, backends.events)
        self.events: _Events = self._start(ttl_ms)

    @classmethod
    def _reopen(cls: type[_Store], args: ConnectArgs, closed: bool) -> _Store:
        """A store unpickled from ``args`` (see :meth:`__reduce__`). No I/O: a closed
        store arrives closed, its backends, which opened nothing yet, released."""
        opened = open_store(
            args.url, args.namespace, args.timeout, args.durability, args.ttl, args.cache
        )
        store = open_as(cls, opened)
        if closed:
            store._lifecycle.closed = True
            store._backends.close()
        return store

    def __reduce__(self) -> tuple[Any, ...]:
        """What travels: the resolved URL (with its password: the receiver must connect;
        a relative file or SQLite path made absolute), the namespace and the ``timeout``,
        ``durability`` and ``ttl`` given to ``connect``. Unpickling calls ``connect``
        again, which does no I/O: the receiving process connects on first use. A closed
        store arrives closed. A ``memory://`` store raises ``SessionStoreError``: its
        data cannot leave this process. A store arrives as the API's store it left as."""
        return (type(self)._reopen, (travel_args(self._args, "store"), self._lifecycle.closed))

    @property
    def url(self) -> str:
        """The store's URL with any password masked."""
        return self._backends.display_url

    def session(
        self,
        symbol: str,
        strategy: str,
        exchange: str,
        frame: str,
        *,
        mode: str = "backtest",
        history: bool = False,
        max_versions: int | None = None,
        ttl: float | None = None,
    ) -> _Session:
        """A handle on the value of (symbol, strategy, exchange, frame, mode). No I/O.

        ``ttl`` (seconds > 0): every write through the handle makes the value expire that
        long after it. A bad ``ttl`` raises ``InvalidArgumentError``.
        """
        self._lifecycle.check_open()
        parts = (symbol, strategy, exchange, frame)
        return self._handle(session_state(self.namespace, parts, mode, history, max_versions, ttl))

    @abstractmethod
    def _handle(self, state: SessionState) -> _Session:
        """The API's handle on the value ``state`` describes."""

    @abstractmethod
    def _start(self, ttl_ms: int | None) -> _Events:
        """Build what the API runs on, once, as the store is made: its view of the
        backends, the drain its writers share (``_drain``, which ``close`` stops) and its
        event log, creating sessions with ``ttl_ms``, which it returns."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, namespace={self.namespace!r})"


def _session_of(store: StoreBase[Any, Any], state: SessionState) -> Any:
    """A handle unpickled with its store (see :meth:`SessionBase.__reduce__`)."""
    return store._handle(state)


def open_as(cls: type[_Store], opened: Opened) -> _Store:
    """The API's store ``cls`` on what ``connect`` opened (see
    :func:`sessionstore.connect`). No I/O."""
    return cls(opened.backends, opened.args.namespace, opened.ttl_ms, args=opened.args)
