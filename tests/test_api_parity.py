"""The async API mirrors the sync API: same names, same parameters, I/O as coroutines."""

from __future__ import annotations

import asyncio
import inspect
import socket
from pathlib import Path

import pytest

import sessionstore
from sessionstore import aio
from sessionstore.errors import SessionStoreError

PAIRS = [
    (sessionstore.Store, aio.AsyncStore),
    (sessionstore.Session, aio.AsyncSession),
    (sessionstore.EventLog, aio.AsyncEventLog),
    (sessionstore.SessionWriter, aio.AsyncSessionWriter),
]

#: Methods that do no I/O stay plain calls in the async API.
NO_IO = {"session", "emit", "dispose"}
#: Plain calls in the async API whose result is awaited, or entered with ``async with``,
#: to do their I/O (as ``aio.connect`` is a plain call).
OPENERS = {"writer"}


def public(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }


def parameters(fn: object) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_same_public_names(sync, async_):
    assert sorted(public(sync)) == sorted(public(async_))


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_same_parameters_and_io_methods_are_coroutines(sync, async_):
    for name, member in public(sync).items():
        twin = public(async_)[name]
        if isinstance(member, property):
            assert isinstance(twin, property), name
            continue
        assert parameters(member) == parameters(twin), name
        is_async = inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin)
        assert is_async == (name not in NO_IO | OPENERS), name


def test_the_async_writer_is_opened_by_await_or_async_with(tmp_path):
    header = sessionstore.SessionHeader(id="w")

    async def scenario() -> list[int]:
        async with aio.connect((tmp_path / "s").as_uri()) as store:
            opening = store.events.writer(header)  # a plain call: nothing done yet
            assert inspect.isawaitable(opening) and hasattr(opening, "__aenter__")
            assert await store.events.list() == []
            async with opening as writer:
                writer.emit("note")
            writer = await store.events.writer(header)
            writer.emit("note")
            await writer.close()
            with pytest.raises(sessionstore.InvalidArgumentError):
                store.events.writer("w")  # checked at the call, not at the await
            return [e.seq for e in (await store.events.load("w")).events]

    assert asyncio.run(scenario()) == [0, 1]


def test_dispose_is_a_plain_call_in_both_apis(tmp_path):
    """No I/O: the async handle is disposed by the call itself, which returns None."""

    async def scenario() -> None:
        async with aio.connect((tmp_path / "d").as_uri()) as store:
            handle = store.session("S", "st", "ex", "1h")
            assert handle.dispose() is None
            with pytest.raises(sessionstore.SessionDisposedError):
                await handle.get_data(0)

    assert not inspect.iscoroutinefunction(aio.AsyncSession.dispose)
    asyncio.run(scenario())


def test_connect_has_the_same_parameters():
    assert parameters(sessionstore.connect) == parameters(aio.connect)


def test_async_context_managers_mirror_sync_ones():
    assert hasattr(sessionstore.Store, "__enter__") and hasattr(aio.AsyncStore, "__aenter__")
    assert hasattr(sessionstore.SessionWriter, "__enter__")
    assert hasattr(aio.AsyncSessionWriter, "__aenter__")


@pytest.mark.parametrize(("sync", "async_"), PAIRS[:3], ids=[s.__name__ for s, _ in PAIRS[:3]])
def test_sync_and_async_objects_travel_alike(sync, async_):
    """Both twins pickle (as their store's URL, namespace and options), by one
    implementation."""
    assert sync.__reduce__ is async_.__reduce__
    assert sync.__reduce__ is not object.__reduce__


# Down to the backends ------------------------------------------------------------------------

from sessionstore.contracts import EventBackend, ValueBackend  # noqa: E402
from sessionstore.keys import ValueKey  # noqa: E402
from sessionstore.redis import open_redis  # noqa: E402
from sessionstore.redis.events import AsyncRedisEvents, RedisEvents  # noqa: E402
from sessionstore.redis.values import AsyncRedisValues, RedisValues  # noqa: E402

BACKEND_PAIRS = [
    (ValueBackend, RedisValues, AsyncRedisValues),
    (EventBackend, RedisEvents, AsyncRedisEvents),
]
#: Contract methods only the sync API calls (a cached read answers without I/O).
SYNC_ONLY = {"cached_read"}
BACKEND_IDS = ["values", "events"]


def contract_methods(contract: type) -> list[str]:
    return [
        name
        for name, member in inspect.getmembers(contract, inspect.isfunction)
        if not name.startswith("_")
    ]


@pytest.mark.parametrize(("contract", "sync", "async_"), BACKEND_PAIRS, ids=BACKEND_IDS)
def test_redis_backends_have_the_contracts_parameters(contract, sync, async_):
    for name in contract_methods(contract):
        assert parameters(getattr(sync, name)) == parameters(getattr(contract, name)), name
        if name not in SYNC_ONLY:
            assert parameters(getattr(async_, name)) == parameters(getattr(contract, name)), name


@pytest.mark.parametrize(("contract", "sync", "async_"), BACKEND_PAIRS, ids=BACKEND_IDS)
def test_sync_and_async_redis_backends_run_one_implementation(contract, sync, async_):
    """Each Redis backend method that does I/O is one function shared by the sync and the
    async backend: only the client under it differs, so the two cannot drift apart."""
    no_io = {"prepare", "close", "locate", *SYNC_ONLY}
    io_methods = [name for name in contract_methods(contract) if name not in no_io]
    assert io_methods
    for name in io_methods:
        assert getattr(sync, name) is getattr(async_, name), name


def test_async_redis_backend_methods_return_awaitables_without_io():
    """Calling an async backend method only builds a coroutine: the I/O runs when it is
    awaited (the URL names a closed port and nothing is awaited here)."""
    backends = open_redis("redis://127.0.0.1:9/0?cluster=no", "parity")
    pair = backends.make_async()
    key = ValueKey("parity", "S", "st", "ex", "1h", "backtest")
    calls = [
        pair.values.read(key),
        pair.values.write(key, b"\x01", 0),
        pair.values.scan("parity"),
        pair.events.read("s"),
        pair.events.info("s"),
        pair.events.list(),
    ]
    for call in calls:
        assert inspect.isawaitable(call)
        call.close()
    backends.close()


def test_redis_locate_does_no_io():
    """``locate`` is documented to do no I/O: on a server that takes connections and
    never answers, sync and async, it answers and no connection was even attempted."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        silent = f"redis://127.0.0.1:{listener.getsockname()[1]}/0?durability=none"
        with sessionstore.connect(silent, "parity", timeout=2) as store:
            assert store.events.locate("s") is None
            assert connections_attempted(listener) == 0

        async def scenario() -> None:
            async with aio.connect(silent, "parity", timeout=2) as store:
                assert await store.events.locate("s") is None
                assert connections_attempted(listener) == 0

        asyncio.run(scenario())


def connections_attempted(listener: socket.socket) -> int:
    """How many connections wait to be accepted by the non-blocking ``listener``
    (accepted here, and closed)."""
    count = 0
    while True:
        try:
            accepted, _ = listener.accept()
        except BlockingIOError:
            return count
        accepted.close()
        count += 1


# The async contracts -------------------------------------------------------------------------

from sessionstore.aio import _async_backends  # noqa: E402
from sessionstore.connection import open_backends  # noqa: E402
from sessionstore.contracts import AsyncEventBackend, AsyncValueBackend  # noqa: E402

ASYNC_CONTRACTS = [(AsyncValueBackend, ValueBackend), (AsyncEventBackend, EventBackend)]
#: The async pairs: Redis's native one, and the local backends run in worker threads.
ASYNC_PAIRS = ["redis", "memory", "file", "sqlite", "dummy"]


def contract_properties(contract: type) -> list[str]:
    return [name for name, member in vars(contract).items() if isinstance(member, property)]


def async_contract_gaps(protocol: type, contract: type, backend: object) -> list[str]:
    """How ``backend`` falls short of ``protocol``: a method missing, parameters other
    than those of the sync ``contract``'s method, a method that is neither a coroutine
    function nor returns an awaitable, a property that is no bool. Methods that are not
    coroutine functions are called with None for every argument: they may only build an
    awaitable (closed here, never awaited)."""
    gaps = []
    for name in contract_methods(protocol):
        method = getattr(backend, name, None)
        if method is None:
            gaps.append(f"{name}: missing")
            continue
        wanted = parameters(getattr(contract, name))[1:]  # without self
        if parameters(method) != wanted:
            gaps.append(f"{name}: parameters {parameters(method)}, not {wanted}")
            continue
        if inspect.iscoroutinefunction(method):
            continue
        required = [p for p in parameters(method) if p[2] is inspect.Parameter.empty]
        result = method(*[None] * len(required))
        if not inspect.isawaitable(result):
            gaps.append(f"{name}: returns {result!r}, not an awaitable")
        elif inspect.iscoroutine(result):
            result.close()
    for name in contract_properties(protocol):
        if not isinstance(getattr(backend, name, None), bool):
            gaps.append(f"{name}: not a bool")
    return gaps


@pytest.fixture(params=ASYNC_PAIRS)
def async_pair(request, tmp_path):
    """The async pair of a backend, as the async API opens it (nothing is awaited, so
    the Redis URL names a closed port)."""
    urls = {
        "redis": "redis://127.0.0.1:9/0?cluster=no",
        "memory": "memory://",
        "file": (tmp_path / "s").as_uri(),
        "sqlite": f"sqlite:///{tmp_path / 's.db'}",
        "dummy": "dummy://",
    }
    backends = open_backends(urls[request.param], "parity", {})
    yield _async_backends(backends)
    backends.close()


@pytest.mark.parametrize(("protocol", "contract"), ASYNC_CONTRACTS, ids=BACKEND_IDS)
def test_async_contracts_are_the_sync_methods_as_coroutines(protocol, contract):
    methods = contract_methods(protocol)
    assert methods
    for name in methods:
        assert parameters(getattr(protocol, name)) == parameters(getattr(contract, name)), name
        assert inspect.iscoroutinefunction(getattr(protocol, name)), name
    assert set(contract_properties(protocol)) <= set(dir(contract))


def test_async_backends_meet_the_async_contracts(async_pair):
    values = async_contract_gaps(AsyncValueBackend, ValueBackend, async_pair.values)
    events = async_contract_gaps(AsyncEventBackend, EventBackend, async_pair.events)
    assert (values, events) == ([], [])


class _Altered:
    """``backend`` with the attribute ``name`` replaced by ``value``, or hidden (None)."""

    def __init__(self, backend: object, name: str, value: object) -> None:
        self._backend, self._name, self._value = backend, name, value

    def __getattr__(self, attr: str) -> object:
        if attr != self._name:
            return getattr(self._backend, attr)
        if self._value is None:
            raise AttributeError(attr)
        return self._value


async def _read_renamed(item):
    return None


def _write_sync(key, payload, when, *, ttl_ms=None):
    return None


@pytest.mark.parametrize(
    ("side", "name", "value", "gap"),
    [
        ("values", "swap", None, "swap: missing"),
        ("values", "read", _read_renamed, "read: parameters"),
        ("values", "write", _write_sync, "write: returns None, not an awaitable"),
        ("events", "list", None, "list: missing"),
        ("events", "renews_leases", None, "renews_leases: not a bool"),
    ],
    ids=["missing", "renamed", "not-awaitable", "missing-events", "no-property"],
)
def test_the_async_contract_check_finds_a_gap(side, name, value, gap):
    """The check above fails for a backend that lacks a method, renames a parameter or
    answers without an awaitable."""
    protocol, contract = ASYNC_CONTRACTS[BACKEND_IDS.index(side)]
    backends = open_backends("memory://", "parity", {})
    backend = getattr(_async_backends(backends), side)
    assert async_contract_gaps(protocol, contract, backend) == []
    gaps = async_contract_gaps(protocol, contract, _Altered(backend, name, value))
    assert len(gaps) == 1 and gaps[0].startswith(gap), gaps
    backends.close()


# --- the error claims of the README -----------------------------------------------------

#: The modules whose names users meet: their exceptions are the ones that escape.
PUBLIC_MODULES = [
    "sessionstore",
    "sessionstore.aio",
    "sessionstore.errors",
    "sessionstore.cli.demo",
    "sessionstore.integrations.openai_agents",
    "sessionstore.integrations.langgraph",
    "sessionstore.integrations.adk",
]


def test_every_public_exception_is_a_session_store_error():
    import importlib

    found = {}
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for attr, member in vars(module).items():
            if inspect.isclass(member) and issubclass(member, BaseException):
                found[f"{name}.{attr}"] = member
    assert "sessionstore.cli.demo.ForeignDataError" in found
    assert "sessionstore.cli.demo.SchedulerError" in found
    assert [name for name, cls in found.items() if not issubclass(cls, SessionStoreError)] == []


def test_every_backend_method_a_store_calls_is_declared_and_none_is_left_unimplemented():
    """``scan`` and ``forget`` are abstract (a backend without them cannot be built, so no
    call ends in ``NotImplementedError``), and ``cached_read`` is declared with its
    default."""
    assert {"scan", "forget"} <= ValueBackend.__abstractmethods__
    assert ValueBackend.cached_read(None, None) is None  # type: ignore[arg-type]
    package = Path(sessionstore.__file__).parent
    raising = [
        path.name
        for path in package.rglob("*.py")
        if "raise NotImplementedError" in path.read_text(encoding="utf-8")
    ]
    assert raising == []


def test_the_facades_call_only_what_the_contracts_declare():
    """Besides the flows (whose ``Call`` names a contract method), the facades reach their
    backends directly for a few calls: each is declared in the contract."""
    import ast

    package = Path(sessionstore.__file__).parent
    receivers = {"self._backend", "self._backends.values", "self._async.values"}
    receivers |= {"self._backends.events", "self._async.events"}
    called = set()
    for name in ("storebase.py", "store.py", "aio.py"):
        for node in ast.walk(ast.parse((package / name).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) in receivers:
                called.add(node.attr)
    declared = set(dir(ValueBackend)) | set(dir(EventBackend))
    assert {"cached_read", "locate"} <= called
    assert called - declared == set()
