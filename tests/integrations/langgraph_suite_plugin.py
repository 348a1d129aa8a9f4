"""A pytest plugin for LangGraph's own graph tests (run by ``test_langgraph_suite.py``):
the fixtures those tests take from LangGraph's conftest, with ``SessionStoreSaver`` on
``$SESSIONSTORE_LANGGRAPH_URL`` as their checkpointer, a namespace of its own per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from sessionstore.integrations.langgraph import SessionStoreSaver

URL = os.environ["SESSIONSTORE_LANGGRAPH_URL"]


def _namespace() -> str:
    return f"lg-suite-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sync", "async", "exit"])
def durability(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sync_checkpointer() -> Iterator[SessionStoreSaver]:
    with SessionStoreSaver(URL, namespace=_namespace()) as saver:
        yield saver


@pytest.fixture
async def async_checkpointer() -> AsyncIterator[SessionStoreSaver]:
    async with SessionStoreSaver(URL, namespace=_namespace()) as saver:
        yield saver
