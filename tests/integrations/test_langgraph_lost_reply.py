"""LangGraph threads when Redis's reply to a write is lost (``tests/support/tcp_proxy.py``
executes the request and swallows its reply, closing the client's connection): each
``put`` and ``put_writes`` is applied exactly once, or raises the store's indeterminate
:class:`~sessionstore.StoreUnavailableError` when every resend lost its reply too; a
retry of the step then leaves one chain."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from faults import test_lost_reply as lost_reply  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402
from support.tcp_proxy import TcpProxy  # noqa: E402

from integrations.test_langgraph import (  # noqa: E402
    assert_one_chain,
    checkpoint,
    put,
    steps_graph,
    thread,
)
from integrations.test_langgraph_compaction import Done, drive  # noqa: E402
from sessionstore import StoreUnavailableError  # noqa: E402
from sessionstore.integrations.langgraph import SessionStoreSaver, session_id  # noqa: E402
from sessionstore.integrations.langgraph.retention import prune  # noqa: E402
from sessionstore.redis.retry import RETRIES  # noqa: E402

#: The fault suite's redis-server (its functions installed, so that a lost reply is never
#: a "Function not found") and the proxy in front of it; its reading of a lost reply.
server, proxy, applied = lost_reply.server, lost_reply.proxy, lost_reply.applied
#: A short timeout: a lost reply shows up as a closed connection at once anyway.
TIMEOUT = 1.0
#: The request that carries an append: a function call.
WRITE = "FCALL"


@pytest.fixture
def savers(
    server: RedisServer, proxy: TcpProxy
) -> Iterator[tuple[SessionStoreSaver, SessionStoreSaver]]:
    """A saver through the proxy and one on the same namespace around it."""
    namespace = f"t-lg-{uuid.uuid4().hex[:8]}"
    with (
        SessionStoreSaver(proxy.url, namespace=namespace, timeout=TIMEOUT) as through,
        SessionStoreSaver(server.url, namespace=namespace) as direct,
    ):
        yield through, direct


def on(checkpoint_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}


def stored_types(saver: SessionStoreSaver) -> list[str]:
    assert saver._sync is not None
    return [e.type for e in saver._sync.events.read_from(session_id("t"), 0)]


def test_a_put_and_a_put_writes_whose_reply_was_lost_are_applied_once(
    proxy: TcpProxy, savers: tuple[SessionStoreSaver, SessionStoreSaver]
) -> None:
    through, direct = savers
    parent = put(through, "t", None)
    for step in range(4):
        proxy.drop_replies(WRITE)
        parent = put(through, "t", parent)
        assert proxy.pending_drops() == 0 and applied(proxy.dropped_replies[-1])
        proxy.drop_replies(WRITE)
        through.put_writes(on(parent), [("log", [f"w{step}"])], f"task-{step}")
        assert proxy.pending_drops() == 0 and applied(proxy.dropped_replies[-1])
    assert stored_types(direct) == ["checkpoint"] + ["checkpoint", "writes"] * 4
    listed = list(direct.list(thread("t")))
    assert len(listed) == 5
    assert [t.pending_writes for t in listed[:4]] == [
        [(f"task-{step}", "log", [f"w{step}"])] for step in (3, 2, 1, 0)
    ]
    assert_one_chain(direct, "t")


def test_a_write_whose_every_resend_lost_its_reply_raises_and_its_retry_leaves_one_chain(
    proxy: TcpProxy, savers: tuple[SessionStoreSaver, SessionStoreSaver]
) -> None:
    through, direct = savers
    root = put(through, "t", None)
    made, metadata, versions = checkpoint()
    proxy.drop_replies(WRITE, count=RETRIES + 1)
    with pytest.raises(StoreUnavailableError, match="may or may not have been applied"):
        through.put(on(root), made, metadata, versions)
    assert all(applied(reply) for reply in proxy.dropped_replies)
    through.put(on(root), made, metadata, versions)  # the step's retry: the same put
    proxy.drop_replies(WRITE, count=RETRIES + 1)
    with pytest.raises(StoreUnavailableError):
        through.put_writes(on(made["id"]), [("log", ["once"])], "task-1")
    through.put_writes(on(made["id"]), [("log", ["once"])], "task-1")
    assert [t.checkpoint["id"] for t in direct.list(thread("t"))] == [made["id"], root]
    found = direct.get_tuple(thread("t"))
    assert found is not None and found.pending_writes == [("task-1", "log", ["once"])]
    assert_one_chain(direct, "t")
    put(through, "t", made["id"])  # and the thread goes on from it


def test_a_graph_whose_writes_lose_their_replies_runs_as_without(
    proxy: TcpProxy, savers: tuple[SessionStoreSaver, SessionStoreSaver]
) -> None:
    through, direct = savers
    expected = (
        steps_graph().compile(checkpointer=InMemorySaver()).invoke({"log": ["in"]}, thread("t"))
    )
    graph = steps_graph().compile(checkpointer=through)
    for skip in (0, 2, 2, 2):  # four lost replies, each resent (and answered) by the store
        proxy.drop_replies(WRITE, skip=skip)
    assert graph.invoke({"log": ["in"]}, thread("t"), durability="sync") == expected
    assert proxy.dropped == 4
    assert sorted(stored_types(direct)) == ["checkpoint"] * 4 + ["writes"] * 3
    assert [s.metadata["step"] for s in graph.get_state_history(thread("t"))] == [2, 1, 0, -1]
    assert_one_chain(direct, "t")


def test_a_graph_run_whose_write_outcome_is_unknown_is_retried_into_one_chain(
    proxy: TcpProxy, savers: tuple[SessionStoreSaver, SessionStoreSaver]
) -> None:
    """With ``durability="exit"`` a run writes once, at its end: every resend of that
    write loses its reply. The runner sees from the thread whether it landed, and runs
    again only if not."""
    through, direct = savers
    memory = steps_graph().compile(checkpointer=InMemorySaver())
    memory.invoke({"log": ["one"]}, thread("t"))
    expected = memory.invoke({"log": ["two"]}, thread("t"))
    graph = steps_graph().compile(checkpointer=through)
    before = graph.invoke({"log": ["one"]}, thread("t"), durability="exit")
    proxy.drop_replies(WRITE, count=RETRIES + 1)
    with pytest.raises(StoreUnavailableError):
        graph.invoke({"log": ["two"]}, thread("t"), durability="exit")
    seen = graph.get_state(thread("t")).values
    assert seen in (before, expected)  # all of the run, or nothing of it
    if seen == before:
        graph.invoke({"log": ["two"]}, thread("t"), durability="exit")
    assert graph.get_state(thread("t")).values == expected
    assert_one_chain(direct, "t")


def test_a_compaction_whose_delete_lost_its_reply_writes_the_thread_anew_at_once(
    proxy: TcpProxy, savers: tuple[SessionStoreSaver, SessionStoreSaver]
) -> None:
    """The reply to the compaction's delete of the log is lost and the resend finds no
    log: the compaction tells by its copy that it deleted the log itself, and writes it
    anew at once (the thread is not left to a recovery 15 s later)."""
    through, direct = savers
    ids = [put(through, "t", None)]
    for _ in range(3):
        ids.append(put(through, "t", ids[-1]))
    main = session_id("t")
    flow = prune(through._threads, through._codec, ["t"], "keep_latest")
    held = drive(flow, through._call, lambda s: s.name == "delete" and s.args == (main,))
    proxy.drop_replies(WRITE)
    assert isinstance(drive(flow, through._call, lambda s: False, held), Done)
    assert proxy.pending_drops() == 0 and applied(proxy.dropped_replies[-1])
    assert direct._sync is not None
    assert [h.id for h in direct._sync.events.list()] == [main]  # the copy deleted
    assert not direct._run(direct._threads.read("t")).sealed
    assert [t.checkpoint["id"] for t in direct.list(thread("t"))] == [ids[-1]]
    put(direct, "t", ids[-1])  # writes go on at once
    assert_one_chain(direct, "t")
