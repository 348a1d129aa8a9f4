"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``,
installed from PyPI with the ``[test]`` extra) on SessionStoreSaver, on every backend
(memory, files, SQLite, Redis, Redis Cluster) and behind Redis Sentinel.

The suite detects which capabilities a saver implements (the base five: put, put_writes,
get_tuple, list, delete_thread; the extended three: delete_for_runs, copy_thread,
prune), runs each one's tests on a fresh saver and reports a level. Each backend's test
passes only when the report is FULL with every capability detected and passed, and
prints the report. The suite drives the async methods; it runs a second time with the
async methods made the sync ones run in a worker thread, so that the sync methods meet
the same suite.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from conftest import BACKENDS, url_for  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402
from langgraph.checkpoint.conformance.report import CapabilityReport  # noqa: E402
from support.redis_sentinel import SentinelSetup  # noqa: E402

from sessionstore.integrations.langgraph import SessionStoreSaver  # noqa: E402


class SyncDriven(SessionStoreSaver):
    """A SessionStoreSaver whose async methods run its sync ones in a worker thread:
    the conformance suite, which awaits, then tests the sync methods."""

    async def aget_tuple(self, config: Any) -> Any:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: Any, **options: Any) -> AsyncIterator[Any]:
        for item in await asyncio.to_thread(lambda: list(self.list(config, **options))):
            yield item

    async def aput(self, *args: Any) -> Any:
        return await asyncio.to_thread(self.put, *args)

    async def aput_writes(self, *args: Any, **options: Any) -> None:
        await asyncio.to_thread(self.put_writes, *args, **options)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source: str, target: str) -> None:
        await asyncio.to_thread(self.copy_thread, source, target)

    async def aprune(self, thread_ids: Sequence[str], **options: Any) -> None:
        await asyncio.to_thread(self.prune, thread_ids, **options)


def conformance(kind: type[SessionStoreSaver], url: str, backend: str) -> CapabilityReport:
    """The suite's report on savers of ``kind`` on ``url`` (of ``backend``), each
    capability's tests on a saver of its own, in a namespace of the run's own."""
    namespace = f"t-lg-{uuid.uuid4().hex[:8]}"

    @checkpointer_test(name=f"{kind.__name__} on {backend}")
    async def saver() -> AsyncIterator[SessionStoreSaver]:
        made = kind(url, namespace=namespace)
        try:
            yield made
        finally:
            await made.aclose()

    report = asyncio.run(validate(saver))
    report.print_report()
    return report


def assert_full(report: CapabilityReport) -> None:
    failures = [f for result in report.results.values() for f in result.failures]
    assert not failures, "\n".join(failures)
    assert {name for name, r in report.results.items() if r.detected} == {
        c.value for c in ALL_CAPABILITIES
    }
    assert all(r.passed is True and r.tests_passed > 0 for r in report.results.values())
    assert report.conformance_level() == "FULL"


#: Every backend, and a primary with two replicas behind three Redis Sentinels.
SAVER_BACKENDS = [*BACKENDS, "sentinel"]


@pytest.fixture(scope="module")
def sentinel() -> Iterator[SentinelSetup]:
    with SentinelSetup() as started:
        yield started


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sentinel":
        return request.getfixturevalue("sentinel").url
    return url_for(request.param, request, tmp_path)


@pytest.mark.parametrize("url", SAVER_BACKENDS, indirect=True)
def test_the_conformance_suite_reports_full_on_the_async_methods(
    url: str, request: pytest.FixtureRequest
) -> None:
    assert_full(conformance(SessionStoreSaver, url, request.node.callspec.id))


@pytest.mark.parametrize("url", SAVER_BACKENDS, indirect=True)
def test_the_conformance_suite_reports_full_on_the_sync_methods(
    url: str, request: pytest.FixtureRequest
) -> None:
    assert_full(conformance(SyncDriven, url, request.node.callspec.id))
