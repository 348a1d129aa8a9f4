"""Every header field is checked where a header enters a store (``create``, ``writer``,
and through them ``fork`` and the openai-agents adapter), however the header object was
built: ``SessionHeader.model_construct(...)`` skips pydantic's validation, and a field
the backend could not load back must not be stored. So every session a store accepts
loads, lists and reads back on its own backend."""

from __future__ import annotations

import asyncio

import pytest
from conftest import url_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionstore
import sessionstore.aio
from sessionstore import SessionHeader
from sessionstore.errors import InvalidArgumentError, UnsupportedVersionError

BACKENDS = ["memory", "file", "sqlite", "redis"]

BAD_FIELDS = [
    ("created_at", "abc"),
    ("created_at", 2**70),
    ("created_at", -(2**70)),
    ("created_at", 1.5),
    ("created_at", True),
    ("created_at", None),
    ("fork_seq", -1),
    ("fork_seq", 2**64),
    ("fork_seq", 1.0),
    ("fork_seq", False),
    ("cwd", 123),
    ("cwd", b"/tmp"),
    ("cwd", "\ud800"),
    ("parent_id", 7),
    ("parent_id", ["a"]),
    ("version", True),
    ("version", 1.0),
]


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path) -> str:
    return url_for(request.param, request, tmp_path)


def _nothing_stored(url: str, namespace: str) -> None:
    with sessionstore.connect(url, namespace) as store:
        assert store.events.list() == []
        with pytest.raises(sessionstore.SessionNotFoundError):
            store.events.load("s1")


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS, ids=lambda v: repr(v)[:20])
def test_a_constructed_header_with_a_bad_field_is_refused_naming_it(url, namespace, field, value):
    header = SessionHeader.model_construct(id="s1", **{field: value})
    with sessionstore.connect(url, namespace) as store:
        with pytest.raises(InvalidArgumentError, match=field):
            store.events.create(header)
        with pytest.raises(InvalidArgumentError, match=field):
            store.events.writer(header)
        with pytest.raises(sessionstore.SessionNotFoundError):
            store.events.append("s1", [{"seq": 0, "type": "t", "time": 1}])
    _nothing_stored(url, namespace)

    async def async_entry() -> None:
        store = sessionstore.aio.connect(url, namespace)
        async with store:
            with pytest.raises(InvalidArgumentError, match=field):
                await store.events.create(header)
            with pytest.raises(InvalidArgumentError, match=field):
                store.events.writer(header)

    asyncio.run(async_entry())
    _nothing_stored(url, namespace)


def test_a_copy_updated_with_a_bad_field_is_refused(url, namespace):
    header = SessionHeader(id="s1").model_copy(update={"created_at": "yesterday"})
    with (
        sessionstore.connect(url, namespace) as store,
        pytest.raises(InvalidArgumentError, match="created_at"),
    ):
        store.events.create(header)


def test_another_format_version_stays_an_unsupported_version(url, namespace):
    with sessionstore.connect(url, namespace) as store:
        for version in (2, 0, "1"):
            with pytest.raises(UnsupportedVersionError):
                store.events.create(SessionHeader.model_construct(id="s1", version=version))


_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
)
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "created_at": _ANY | st.integers(min_value=-(2**63), max_value=2**63),
        "version": _ANY | st.just(1),
        "cwd": _ANY,
        "parent_id": _ANY,
        "fork_seq": _ANY | st.integers(min_value=-1, max_value=2**63),
    },
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_header_a_store_accepts_loads_back(backend, request, tmp_path_factory):
    """Headers built without validation, with any value in any field: each is refused
    with a typed error, or stored and then loaded, listed and read back unchanged."""
    url = url_for(backend, request, tmp_path_factory.mktemp("headers"))
    counter = iter(range(10**6))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(fields=_FIELDS)
    def check(fields):
        session_id = f"s{next(counter)}"
        header = SessionHeader.model_construct(id=session_id, **fields)
        with sessionstore.connect(url, "headers") as store:
            try:
                store.events.create(header)
            except (InvalidArgumentError, UnsupportedVersionError):
                with pytest.raises(sessionstore.SessionNotFoundError):
                    store.events.load(session_id)
                return
            store.events.append(session_id, [{"seq": 0, "type": "t", "time": 1}])
            loaded = store.events.load(session_id)
            assert loaded.header == header
            assert store.events.info(session_id).header == header
            assert header in store.events.list()

    check()
