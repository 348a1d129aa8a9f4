"""Retention of LangGraph threads: the saver's ``ttl`` covers all of a thread, every
write moves its expiry (and every read, when asked), a lapsed thread is gone; how an
operator sees and deletes threads with the CLI."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

import redis  # noqa: E402
from conftest import url_for  # noqa: E402
from test_cli import cli  # noqa: E402

import sessionstore  # noqa: E402
from integrations.test_langgraph import put, thread  # noqa: E402
from sessionstore import InvalidArgumentError, keys  # noqa: E402
from sessionstore.integrations.langgraph import (  # noqa: E402
    SessionStoreSaver,
    ThreadDeletedError,
    session_id,
)

#: The backends whose retention differs: the local ones remove an expired log on a
#: prune, Redis by itself.
RETAINING = ["memory", "file", "sqlite", "redis"]


@pytest.fixture(params=RETAINING)
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[sessionstore.Store]:
    url = url_for(request.param, request, tmp_path)
    with sessionstore.connect(url, f"t-lg-{uuid.uuid4().hex[:8]}") as opened:
        yield opened


def expires_at(store: sessionstore.Store, thread_id: str) -> int:
    found = store.events.info(session_id(thread_id)).expires_at
    assert found is not None
    return found


def test_a_thread_past_its_ttl_is_gone(store: sessionstore.Store) -> None:
    saver = SessionStoreSaver(store, ttl=0.15)
    root = put(saver, "t", None)
    saver.put_writes(
        {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": root}},
        [("log", ["pending"])],
        "task-1",
    )
    time.sleep(0.35)
    assert saver.get_tuple(thread("t")) is None
    assert list(saver.list(None)) == []
    assert store.events.list() == []  # nothing of it is listed any more


def test_a_lapsed_thread_written_again_is_a_new_log_with_the_ttl(
    store: sessionstore.Store,
) -> None:
    """A thread past its ttl, not yet removed (the local stores remove it at a prune),
    is written again by another saver: a new log (another header), with the ttl; a
    saver that knew the lapsed log, with no ttl of its own, is refused when it writes
    from it, even where the new log has grown to the seq it expects."""
    knowing = SessionStoreSaver(store)
    lapsing = SessionStoreSaver(store, ttl=0.15)
    root = put(lapsing, "t", None)
    known = put(knowing, "t", root)
    lapsed = store.events.info(session_id("t")).header
    time.sleep(0.35)
    again = put(lapsing, "t", None)
    put(lapsing, "t", again)
    found = store.events.info(session_id("t"))
    assert found.header != lapsed and found.next_seq == 2
    assert found.expires_at is not None
    with pytest.raises(ThreadDeletedError):
        put(knowing, "t", known)
    latest = lapsing.get_tuple(thread("t"))
    assert latest is not None and latest.checkpoint["id"] != known


def test_a_thread_past_its_expiry_is_gone_for_every_saver_whatever_its_own_ttl(
    store: sessionstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The expiry stored with a thread counts, not the ttl of the saver reading it: one
    that another saver (or an operator's ``sessions expire``) set lapses for every saver,
    one that read the thread before included (within ``EXPIRY_FRESH`` of its last read
    of the expiry), and a write after it starts afresh."""
    from sessionstore.integrations.langgraph import access

    monkeypatch.setattr(access, "EXPIRY_FRESH", 0.3)
    creator = SessionStoreSaver(store, ttl=0.2)
    others = [SessionStoreSaver(store), SessionStoreSaver(store, ttl=3600)]
    put(creator, "made", None)
    put(others[0], "expired", None)
    for saver in others:
        assert saver.get_tuple(thread("made")) is not None
        assert saver.get_tuple(thread("expired")) is not None
    store.events.set_ttl(session_id("expired"), 0.2)  # as `sessions expire --ttl` does
    time.sleep(0.45)
    # "expired" first: a read of "made" past its known expiry would prune both.
    for saver in [*others, creator]:  # the creator last: its own ttl would prune
        assert saver.get_tuple(thread("expired")) is None
        assert saver.get_tuple(thread("made")) is None
        assert list(saver.list(None)) == []
    assert store.events.list() == []
    again = put(others[1], "expired", None)
    assert creator.get_tuple(thread("expired")).checkpoint["id"] == again


def test_a_thread_restored_from_a_backup_under_its_old_header_is_read_anew(
    store: sessionstore.Store,
) -> None:
    """A log deleted and written again with the header it had (a restore from an
    archive), then grown back to the length a saver last read: that saver reads what is
    stored now, and its write made from what it had read is refused."""
    a, b = SessionStoreSaver(store), SessionStoreSaver(store)
    root = put(a, "t", None)
    backup = store.events.load(session_id("t"))
    stale = put(a, "t", root)
    assert a.get_tuple(thread("t")).checkpoint["id"] == stale
    store.events.delete(session_id("t"))  # restored: the same header, the first event
    store.events.create(backup.header)
    store.events.append(session_id("t"), backup.events[:1])
    other = put(b, "t", root)
    assert a.get_tuple(thread("t")).checkpoint["id"] == other
    with pytest.raises(ThreadDeletedError):
        put(a, "t", stale)
    assert [t.checkpoint["id"] for t in b.list(thread("t"))] == [other, root]


def test_a_run_whose_thread_lapses_under_it_never_brings_it_back(
    store: sessionstore.Store,
) -> None:
    """A node slower than the ttl: the thread expires while the run goes on, and its
    later writes raise ThreadDeletedError, leaving no log behind."""
    from langgraph.graph import END, START, StateGraph

    from integrations.test_langgraph import Steps

    saver = SessionStoreSaver(store, ttl=0.3)

    def slow(state: Steps) -> dict[str, Any]:
        time.sleep(0.8)
        return {"log": ["slow"]}

    builder = StateGraph(Steps)
    builder.add_node("fast", lambda state: {"log": ["fast"]})
    builder.add_node("slow", slow)
    builder.add_edge(START, "fast")
    builder.add_edge("fast", "slow")
    builder.add_edge("slow", END)
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(ThreadDeletedError):
        graph.invoke({"log": []}, thread("t"))
    store.events.prune()
    assert store.events.list() == []
    assert saver.get_tuple(thread("t")) is None


def test_every_write_moves_the_expiry_and_a_read_only_when_asked(
    store: sessionstore.Store,
) -> None:
    saver = SessionStoreSaver(store, ttl=60)
    reading = SessionStoreSaver(store, ttl=60, refresh_on_read=True)
    root = put(saver, "t", None)
    first = expires_at(store, "t")
    assert first > time.time() * 1000 + 50_000
    time.sleep(0.02)
    saver.put_writes(
        {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": root}},
        [("log", ["pending"])],
        "task-1",
    )
    written = expires_at(store, "t")
    assert written > first
    time.sleep(0.02)
    assert saver.get_tuple(thread("t")) is not None
    assert list(saver.list(thread("t")))
    assert expires_at(store, "t") == written
    time.sleep(0.02)
    assert reading.get_tuple(thread("t")) is not None
    assert expires_at(store, "t") > written


def test_a_thread_deleted_and_begun_again_keeps_the_ttl(store: sessionstore.Store) -> None:
    saver = SessionStoreSaver(store, ttl=60)
    put(saver, "t", None)
    saver.delete_thread("t")
    assert expires_at(store, "t") > time.time() * 1000
    put(saver, "t", None)
    saver.copy_thread("t", "copy")
    assert expires_at(store, "copy") > time.time() * 1000


def test_every_redis_key_of_a_thread_expires(request: pytest.FixtureRequest, tmp_path: Any) -> None:
    url = url_for("redis", request, tmp_path)
    namespace = f"t-lg-{uuid.uuid4().hex[:8]}"
    with SessionStoreSaver(url, namespace=namespace, ttl=60) as saver:
        root = put(saver, "t", None)
        put(saver, "t", root)
        saver.prune(["t"])
    meta, events = keys.log_keys(namespace, session_id("t"))
    client = redis.Redis.from_url(url)
    try:
        found = client.keys(meta.removesuffix(":meta") + "*")
        assert {meta.encode(), events.encode()} <= set(found)
        assert all(0 < client.pttl(key) <= 60_000 for key in found), found
    finally:
        client.close()


def test_a_bad_ttl_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="ttl"):
        SessionStoreSaver("memory://", ttl=0)


def test_threads_are_listed_with_their_size_and_expiry_and_deleted_by_the_cli(
    tmp_path: Any,
) -> None:
    url = (tmp_path / "store").as_uri()
    with SessionStoreSaver(url, namespace="graphs", ttl=3600) as saver:
        put(saver, "order-7", None)
        listed = cli("sessions", "list", "--url", url, "--namespace", "graphs", "--json")
        [row] = [json.loads(line) for line in listed.stdout.splitlines()]
        assert row["id"] == "langgraph:order-7"
        assert row["bytes"] > 0 and row["expires_at"] > time.time() * 1000
        gone = cli("sessions", "delete", "langgraph:order-7", "--url", url, "--namespace", "graphs")
        assert gone.returncode == 0, gone.stderr
        assert saver.get_tuple(thread("order-7")) is None
