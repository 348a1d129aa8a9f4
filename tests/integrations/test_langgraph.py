"""SessionStoreSaver (sessionstore.integrations.langgraph) beyond LangGraph's conformance
suite (``test_langgraph_conformance.py``): real graphs (against LangGraph's InMemorySaver
as the control), values kept as the serde made them, the stores it is built on, and the
ownership of a thread (one chain: a second runner is refused, a time travel from a
checkpoint named branches off; a deleted thread stays deleted), on every backend and
across processes (two runners at once, a runner killed mid-run and resumed by another).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import operator
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from conftest import BACKENDS, url_for  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.errors import EmptyInputError  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

import sessionstore  # noqa: E402
from sessionstore import (  # noqa: E402
    InvalidArgumentError,
    SeqConflictError,
    SessionExistsError,
    SessionStoreError,
    aio,
)
from sessionstore.integrations.langgraph import (  # noqa: E402
    SessionStoreSaver,
    ThreadConflictError,
    ThreadDeletedError,
    session_id,
)
from sessionstore.integrations.langgraph.layout import THREAD_ID_BYTES  # noqa: E402


class Steps(TypedDict):
    log: Annotated[list[str], operator.add]
    raw: bytes


def first(state: Steps) -> dict[str, Any]:
    return {"log": ["first"], "raw": b"\x00\xff" + bytes(range(8))}


def second(state: Steps) -> dict[str, Any]:
    return {"log": ["second"]}


def steps_graph(**nodes: Any) -> StateGraph:
    """START -> first -> second -> END, with ``nodes`` replacing those of the same name."""
    builder = StateGraph(Steps)
    builder.add_node("first", nodes.get("first", first))
    builder.add_node("second", nodes.get("second", second))
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder


def thread(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def checkpoint(**metadata: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A new checkpoint, its metadata (``metadata`` added) and its new versions, as
    ``put`` takes them."""
    made = {
        "v": 1,
        "id": str(uuid6(clock_seq=-1)),
        "ts": "2024-06-10T12:00:00+00:00",
        "channel_values": {},
        "channel_versions": {},
        "versions_seen": {},
        "updated_channels": None,
    }
    return made, {"source": "loop", "step": 0, "parents": {}, **metadata}, {}


def put(saver: SessionStoreSaver, thread_id: str, parent: str | None, **metadata: Any) -> str:
    """Put a checkpoint continuing from ``parent``; its id."""
    config = thread(thread_id)
    config["configurable"]["checkpoint_ns"] = ""
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent
    made, md, versions = checkpoint(**metadata)
    return saver.put(config, made, md, versions)["configurable"]["checkpoint_id"]


def put_named(saver: SessionStoreSaver, thread_id: str, parent: str, named: str, how: str) -> str:
    """Put a checkpoint continuing from ``parent`` in a run whose caller named the
    checkpoint ``named``, as LangGraph passes it (``how``): the ``checkpoint_id`` of the
    caller's config, kept in the run's metadata, or the parent's checkpoint in the
    ``checkpoint_map`` of a subgraph checkpoint's config; its id."""
    config: dict[str, Any] = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": parent},
    }
    if how == "checkpoint_id":
        config["metadata"] = {"thread_id": thread_id, "checkpoint_id": named}
    else:
        config["configurable"]["checkpoint_map"] = {"": named, "sub": str(uuid6(clock_seq=-1))}
        config["metadata"] = {"checkpoint_ns": "sub", "checkpoint_id": "the subgraph's"}
    made, md, versions = checkpoint()
    return saver.put(config, made, md, versions)["configurable"]["checkpoint_id"]


def stepped_put(saver: SessionStoreSaver, parent: str) -> tuple[Any, dict[str, Any]]:
    """The flow of a put on thread "t" continuing from ``parent``, to be driven step by
    step (each step the call it makes: ``saver._call`` makes it), and its checkpoint."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": parent}}
    made, md, versions = checkpoint()
    _, flow = saver._put(config, made, md, versions)
    return flow, made


def next_append(saver: SessionStoreSaver, flow: Any, call: Any) -> Any:
    """Make the calls of ``flow`` from ``call`` on, up to the first append; that append
    (not made)."""
    while call.name != "append":
        call = flow.send(saver._call(call))
    return call


def finish(saver: SessionStoreSaver, flow: Any, call: Any) -> None:
    """Make the calls of ``flow`` from ``call`` on, to its end."""
    with contextlib.suppress(StopIteration):
        while True:
            call = flow.send(saver._call(call))


def assert_one_chain(saver: SessionStoreSaver, thread_id: str) -> None:
    """No two checkpoints of the thread continue from the same one."""
    parents = [
        t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        for t in saver.list(thread(thread_id))
    ]
    assert len(parents) == len(set(parents)), parents


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return url_for(request.param, request, tmp_path)


@pytest.fixture
def saver(url: str) -> Iterator[SessionStoreSaver]:
    with SessionStoreSaver(url, namespace=f"t-lg-{uuid.uuid4().hex[:8]}") as made:
        yield made


@pytest.fixture
def savers(url: str) -> Iterator[tuple[SessionStoreSaver, SessionStoreSaver]]:
    """Two savers on one namespace, each with stores of its own (as two processes have),
    but on ``memory://`` (private to its store), where they share one store."""
    namespace = f"t-lg-{uuid.uuid4().hex[:8]}"
    if url.startswith("memory:"):
        with sessionstore.connect(url, namespace) as store:
            yield SessionStoreSaver(store), SessionStoreSaver(store)
        return
    with (
        SessionStoreSaver(url, namespace=namespace) as one,
        SessionStoreSaver(url, namespace=namespace) as two,
    ):
        yield one, two


# --- graphs -------------------------------------------------------------------------


def test_a_graph_runs_resumes_and_keeps_bytes_as_made(saver: SessionStoreSaver) -> None:
    graph = steps_graph().compile(checkpointer=saver)
    done = graph.invoke({"log": ["in"]}, thread("t"))
    assert done == {"log": ["in", "first", "second"], "raw": b"\x00\xff" + bytes(range(8))}
    again = graph.invoke({"log": ["more"]}, thread("t"))
    assert again["log"] == ["in", "first", "second", "more", "first", "second"]
    assert [s.metadata["step"] for s in graph.get_state_history(thread("t"))] == [
        6,
        5,
        4,
        3,
        2,
        1,
        0,
        -1,
    ]


def test_the_async_methods_see_what_the_sync_ones_wrote(saver: SessionStoreSaver) -> None:
    graph = steps_graph().compile(checkpointer=saver)
    graph.invoke({"log": ["sync"]}, thread("t"))
    done = asyncio.run(graph.ainvoke({"log": ["async"]}, thread("t")))
    assert done["log"] == ["sync", "first", "second", "async", "first", "second"]
    assert graph.get_state(thread("t")).values == done


def test_an_interrupt_is_resumed_and_a_replay_branches_off(saver: SessionStoreSaver) -> None:
    def ask(state: Steps) -> dict[str, Any]:
        return {"log": [f"answer:{interrupt('ok?')}"]}

    graph = steps_graph(second=ask).compile(checkpointer=saver)
    paused = graph.invoke({"log": []}, thread("t"))
    assert paused["__interrupt__"][0].value == "ok?"
    assert graph.invoke(Command(resume="yes"), thread("t"))["log"] == ["first", "answer:yes"]
    # Time travel: replay from before the question, and update an earlier state.
    before = next(s for s in graph.get_state_history(thread("t")) if s.next == ("second",))
    graph.invoke(None, before.config)
    assert graph.invoke(Command(resume="no"), thread("t"))["log"] == ["first", "answer:no"]
    patched = graph.update_state(before.config, {"log": ["patched"]}, as_node="first")
    graph.invoke(None, patched)
    done = graph.invoke(Command(resume="again"), thread("t"))
    assert done["log"] == ["first", "patched", "answer:again"]


def asking_subgraph(ask: Callable[[Steps], dict[str, Any]], checkpointer: Any = None) -> Any:
    """A subgraph of one node, ``ask`` (which interrupts), compiled with ``checkpointer``."""
    inner = StateGraph(Steps)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)
    return inner.compile(checkpointer=checkpointer)


def recorder(graph: Any, config: Any) -> tuple[list[Any], Callable[[Any], None]]:
    """What the calls of a run noted return, and ``note(returned)``: what a call
    returned (interrupts by their values) with the history's (source, step, next)."""
    seen: list[Any] = []

    def note(returned: Any) -> None:
        if isinstance(returned, dict) and "__interrupt__" in returned:
            returned = {**returned, "__interrupt__": [i.value for i in returned["__interrupt__"]]}
        history = [
            (s.metadata["source"], s.metadata["step"], s.next)
            for s in graph.get_state_history(config)
        ]
        seen.append((returned, history))

    return seen, note


def interrupting_subgraph_run(saver: Any) -> list[Any]:
    """A graph whose subgraph asks a question, run, resumed, run again, replayed from
    an earlier checkpoint and deleted, sync and async: what each call returned and the
    history's (source, step, next) after each."""

    inner = asking_subgraph(lambda state: {"log": ["sub:" + interrupt("q")]})
    graph = steps_graph(second=inner).compile(checkpointer=saver)
    config = thread("t")
    seen, note = recorder(graph, config)

    note(graph.invoke({"log": ["in"]}, config))
    note(graph.invoke(Command(resume="A"), config))
    note(graph.invoke({"log": ["again"]}, config))
    before = next(s for s in graph.get_state_history(config) if s.next == ("second",))
    note(graph.invoke(None, before.config))
    note(asyncio.run(graph.ainvoke(Command(resume="B"), config)))
    saver.delete_thread("t")
    note(asyncio.run(graph.ainvoke({"log": ["afresh"]}, config)))
    return seen


def durability_run(saver: Any) -> list[Any]:
    """The steps graph run with each of LangGraph's durability modes (checkpoints put
    at the end only, before each step goes on, or in the background), sync and async:
    what each call returned and the history's (source, step) after each."""
    graph = steps_graph().compile(checkpointer=saver)
    seen: list[Any] = []
    for durability in ("exit", "sync", "async", "exit"):
        done = graph.invoke({"log": [durability]}, thread("t"), durability=durability)
        history = [
            (s.metadata["source"], s.metadata["step"]) for s in graph.get_state_history(thread("t"))
        ]
        seen.append((done, history))
    seen.append(asyncio.run(graph.ainvoke({"log": ["async"]}, thread("t"), durability="exit")))
    return seen


def stateful_subgraph_run(saver: Any) -> list[Any]:
    """A graph whose subgraph keeps its own state across the parent's runs
    (``checkpointer=True``), run three times and replayed from an earlier checkpoint:
    what each call returned and the subgraph's log after each."""

    def count(state: Steps) -> dict[str, Any]:
        return {"log": [f"sub:{len(state['log'])}"]}

    inner = StateGraph(Steps)
    inner.add_node("count", count)
    inner.add_edge(START, "count")
    inner.add_edge("count", END)
    graph = steps_graph(second=inner.compile(checkpointer=True)).compile(checkpointer=saver)
    config = thread("t")
    seen = [graph.invoke({"log": [f"run {n}"]}, config)["log"] for n in range(3)]
    before = next(s for s in graph.get_state_history(config) if s.next == ("second",))
    seen.append(graph.invoke(None, before.config)["log"])
    return seen


def named_checkpoint_run(saver: Any) -> list[Any]:
    """Branches from a checkpoint named that LangGraph does not mark as branches: a
    resume from a checkpoint the thread has moved past, and a replay and a resume from
    a subgraph's checkpoint (its config names the parent's checkpoint in
    ``checkpoint_map``): what each call returned and the history's (source, step, next)
    after each."""

    inner = asking_subgraph(lambda state: {"log": [f"answer:{interrupt('ok?')}"]}, True)
    graph = steps_graph(second=inner).compile(checkpointer=saver)
    config = thread("t")
    seen, note = recorder(graph, config)

    note(graph.invoke({"log": ["in"]}, config))
    paused = graph.get_state(config, subgraphs=True)
    sub_config = paused.tasks[0].state.config  # type: ignore[union-attr]
    note(graph.invoke(Command(resume="yes"), config))
    note(graph.invoke(Command(resume="pinned"), paused.config))  # moved past
    note(graph.invoke(None, sub_config))
    note(graph.invoke(Command(resume="sub"), sub_config))
    return seen


@pytest.mark.parametrize(
    "run",
    [interrupting_subgraph_run, durability_run, stateful_subgraph_run, named_checkpoint_run],
)
def test_graphs_run_as_on_langgraphs_in_memory_saver(saver: SessionStoreSaver, run: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    assert run(saver) == run(InMemorySaver())


# --- values and stores ------------------------------------------------------------------


def test_every_value_comes_back_as_the_serde_made_it(saver: SessionStoreSaver) -> None:
    values = {"bytes": b"\x00\x01\xfe\xff", "text": "é\u2028", "big": 2**63 - 1, "float": 0.1}
    made, md, _ = checkpoint()
    made["channel_values"] = values
    made["channel_versions"] = dict.fromkeys(values, 1)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    stored = saver.put(config, made, md, dict.fromkeys(values, 1))
    saver.put_writes(stored, [("bytes", b"\xff\x00"), ("none", None)], "task-1")
    found = saver.get_tuple(stored)
    assert found is not None
    assert found.checkpoint["channel_values"] == values
    assert found.pending_writes == [("task-1", "bytes", b"\xff\x00"), ("task-1", "none", None)]


def test_a_saver_on_a_store_given_leaves_it_open(url: str) -> None:
    namespace = f"t-lg-{uuid.uuid4().hex[:8]}"
    with sessionstore.connect(url, namespace) as store:
        with SessionStoreSaver(store) as saver:
            steps_graph().compile(checkpointer=saver).invoke({"log": []}, thread("t"))
            done = asyncio.run(steps_graph().compile(checkpointer=saver).ainvoke(None, thread("t")))
        assert done["log"] == ["first", "second"]
        assert [h.id for h in store.events.list()] == [session_id("t")]


def test_a_saver_on_an_async_store_serves_the_sync_methods_too(url: str) -> None:
    if url.startswith("memory:"):
        pytest.skip("a memory store is private to its connect: nothing to share")
    namespace = f"t-lg-{uuid.uuid4().hex[:8]}"
    store = aio.connect(url, namespace)
    saver = SessionStoreSaver(store)
    graph = steps_graph().compile(checkpointer=saver)
    graph.invoke({"log": ["sync"]}, thread("t"))
    done = asyncio.run(graph.ainvoke({"log": ["async"]}, thread("t")))
    assert done["log"] == ["sync", "first", "second", "async", "first", "second"]
    asyncio.run(store.close())


def test_a_saver_on_the_memory_store_of_the_environment_shares_it_sync_and_async(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SESSIONSTORE_URL", "memory://")
    with SessionStoreSaver() as saver:
        graph = steps_graph().compile(checkpointer=saver)
        graph.invoke({"log": ["sync"]}, thread("t"))
        done = asyncio.run(graph.ainvoke({"log": ["async"]}, thread("t")))
    assert done["log"] == ["sync", "first", "second", "async", "first", "second"]


def test_a_saver_takes_connect_options_with_a_url_only(url: str) -> None:
    with (
        sessionstore.connect(url, "t-lg-x") as store,
        pytest.raises(InvalidArgumentError, match="with a URL"),
    ):
        SessionStoreSaver(store, namespace="other")


def test_prune_refuses_an_unknown_strategy(saver: SessionStoreSaver) -> None:
    put(saver, "a", None)
    with pytest.raises(InvalidArgumentError, match="strategy"):
        saver.prune(["a"], strategy="keep_oldest")


def test_copy_adds_the_source_to_a_target_that_exists_or_was_deleted(
    saver: SessionStoreSaver,
) -> None:
    source = put(saver, "a", None)
    target = put(saver, "b", None)
    saver.copy_thread("a", "b")
    assert {t.checkpoint["id"] for t in saver.list(thread("b"))} == {source, target}
    saver.delete_thread("c")
    saver.copy_thread("a", "c")
    assert [t.checkpoint["id"] for t in saver.list(thread("c"))] == [source]
    saver.delete_thread("a")
    saver.copy_thread("a", "d")  # a deleted source has nothing to copy
    assert list(saver.list(thread("d"))) == []


def test_list_without_a_config_lists_every_thread_of_the_namespace(
    saver: SessionStoreSaver,
) -> None:
    ids = {put(saver, "a", None), put(saver, "b", None)}
    assert {t.checkpoint["id"] for t in saver.list(None)} == ids
    assert len(list(saver.list(None, limit=1))) == 1


def test_each_put_is_one_event_of_the_thread_log(saver: SessionStoreSaver, url: str) -> None:
    graph = steps_graph().compile(checkpointer=saver)
    graph.invoke({"log": []}, thread("t"))
    assert saver._sync is not None
    kinds = [e.type for e in saver._sync.events.read_from(session_id("t"), 0)]
    assert kinds.count("checkpoint") == 4  # input, start, first, second
    assert set(kinds) == {"checkpoint", "writes"}


# --- ownership of a thread ----------------------------------------------------------------


def test_a_checkpoint_put_late_never_replaces_a_newer_one(saver: SessionStoreSaver) -> None:
    older = str(uuid6(clock_seq=-1))
    newer = put(saver, "t", None)
    made, md, versions = checkpoint()
    made["id"] = older
    saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, made, md, versions)
    latest = saver.get_tuple(thread("t"))
    assert latest is not None and latest.checkpoint["id"] == newer


def test_a_second_runner_of_a_thread_is_refused_and_the_chain_stays_one(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    one, two = savers
    root = put(one, "t", None)
    assert two.get_tuple(thread("t")) is not None  # both runners read the same latest
    put(one, "t", root)
    with pytest.raises(ThreadConflictError) as refused:
        put(two, "t", root)
    assert isinstance(refused.value, SessionStoreError)
    assert (refused.value.parent, refused.value.thread_id) == (root, "t")
    assert len(list(two.list(thread("t")))) == 2
    assert_one_chain(two, "t")


def test_a_put_that_lost_the_race_is_checked_again_and_refused(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    """The put is driven step by step: the other runner goes on between its read and
    its append, which the store refuses at that seq; the put reads what landed and is
    refused."""
    one, two = savers
    root = put(one, "t", None)
    flow, _ = stepped_put(two, root)
    append = next_append(two, flow, next(flow))
    put(one, "t", root)
    with pytest.raises(SeqConflictError) as lost:
        two._call(append)
    with pytest.raises(ThreadConflictError):
        finish(two, flow, flow.throw(lost.value))
    assert_one_chain(two, "t")


def test_a_branch_on_purpose_is_accepted(saver: SessionStoreSaver) -> None:
    root = put(saver, "t", None)
    put(saver, "t", root)
    put(saver, "t", root, source="fork")
    put(saver, "t", root, source="update")
    assert len(list(saver.list(thread("t")))) == 4


@pytest.mark.parametrize("how", ["checkpoint_id", "checkpoint_map"])
def test_a_branch_from_a_checkpoint_named_is_accepted_and_checked_from_then_on(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], how: str
) -> None:
    """A run given an earlier checkpoint (time travel) starts a branch from it, wherever
    the thread went since; the branch goes on as one chain, and a runner that went on
    with it since is not forked by the time traveller's next checkpoint."""
    traveller, other = savers
    root = put(other, "t", None)
    head = put(other, "t", root)
    branch = put_named(traveller, "t", root, root, how)
    found = other.get_tuple(thread("t"))
    assert found is not None and found.checkpoint["id"] == branch
    on = put_named(traveller, "t", branch, root, how)  # the branch goes on
    put(other, "t", on)  # another runner goes on with the branch
    with pytest.raises(ThreadConflictError) as refused:  # the traveller is now stale
        put_named(traveller, "t", on, root, how)
    assert (refused.value.parent, refused.value.thread_id) == (on, "t")
    with pytest.raises(ThreadConflictError):  # as is a runner still on the old head
        put(other, "t", head)
    with pytest.raises(ThreadConflictError):  # and one that named another checkpoint
        put_named(other, "t", head, root, how)
    assert len(list(other.list(thread("t")))) == 5
    parents = [t.parent_config for t in other.list(thread("t"))]
    assert [p["configurable"]["checkpoint_id"] for p in parents if p] == [on, branch, root, root]


def test_a_runner_whose_view_is_stale_is_refused_while_one_resumes(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    """Two runners resume one paused thread from its latest checkpoint (no
    ``checkpoint_id`` given): the second resumes while the first is in the node that
    asked, so the first is refused at its next checkpoint and the chain stays one."""
    one, two = savers

    def ask(state: Steps) -> dict[str, Any]:
        return {"log": [f"answer:{interrupt('ok?')}"]}

    other = steps_graph(second=ask).compile(checkpointer=two)

    def ask_while_another_resumes(state: Steps) -> dict[str, Any]:
        answer = interrupt("ok?")
        # Another runner (another process) resumes the thread meanwhile; a thread of
        # its own, so that it is no subgraph of this run.
        runner = threading.Thread(target=other.invoke, args=(Command(resume="two"), thread("t")))
        runner.start()
        runner.join(30)
        return {"log": [f"answer:{answer}"]}

    graph = steps_graph(second=ask_while_another_resumes).compile(checkpointer=one)
    graph.invoke({"log": []}, thread("t"))
    with pytest.raises(ThreadConflictError):
        graph.invoke(Command(resume="one"), thread("t"))
    assert other.get_state(thread("t")).values["log"] == ["first", "answer:two"]
    assert_one_chain(two, "t")


def test_late_writes_never_bring_a_deleted_thread_back(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    running, admin = savers
    root = put(running, "t", None)
    admin.delete_thread("t")
    with pytest.raises(ThreadDeletedError) as refused:
        put(running, "t", root)
    assert refused.value.checkpoint_id == root
    stale = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": root}}
    with pytest.raises(ThreadDeletedError):
        running.put_writes(stale, [("log", ["late"])], "task-1")
    made, md, versions = checkpoint()
    made["id"] = root
    with pytest.raises(ThreadDeletedError):  # a late first checkpoint too
        running.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, made, md, {})
    assert admin.get_tuple(thread("t")) is None
    assert list(admin.list(None)) == []
    # A new run of the thread starts it afresh.
    fresh = put(running, "t", None)
    found = admin.get_tuple(thread("t"))
    assert found is not None and found.checkpoint["id"] == fresh


def test_a_saver_whose_create_of_a_new_thread_lost_the_race_writes_on(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    """Two runners start one new thread: the loser's create of its log (not written
    until its first events) is overtaken by the winner, who writes the log with its own
    header. The loser then writes to the log the winner wrote."""
    loser, winner = savers
    loser._run(loser._threads.create(session_id("t")))
    root = put(winner, "t", None)
    put(loser, "t", root)
    assert len(list(winner.list(thread("t")))) == 2
    assert_one_chain(winner, "t")


@pytest.mark.parametrize("known", [True, False], ids=["written from what it knew", "read first"])
def test_a_write_whose_log_was_deleted_after_it_read_it_is_refused(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], known: bool
) -> None:
    """The put is driven step by step (its flow yields each call it makes): the thread
    is deleted between its read (the put before it, or its own) and its append, which
    the store refuses although the log written anew ends at the seq it expected: the
    append names the header of the log it read. The put then reads the thread again
    and is refused."""
    running, admin = savers
    root = put(running, "t", None)
    if not known:
        running._threads.forget(session_id("t"))
    flow, made = stepped_put(running, root)
    first = next(flow)
    assert first.name == ("append" if known else "info")
    append = next_append(running, flow, first)
    assert append.args[1][0].seq == 1
    admin.delete_thread("t")  # the log anew: one "deleted" event, next seq 1
    with pytest.raises(SessionExistsError) as refused:
        running._call(append)
    with pytest.raises(ThreadDeletedError):
        finish(running, flow, flow.throw(refused.value))
    assert admin.get_tuple(thread("t")) is None
    assert [e.type for e in running._sync.events.read_from(session_id("t"), 0)] == ["deleted"]
    with pytest.raises(ThreadDeletedError):  # and its next write is refused
        put(running, "t", made["id"])
    assert admin.get_tuple(thread("t")) is None


def test_a_graph_whose_thread_is_deleted_mid_run_stops_with_the_typed_error(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    running, admin = savers

    def deleting(state: Steps) -> dict[str, Any]:
        admin.delete_thread("t")  # another process, as the graph runs
        return {"log": ["first"]}

    graph = steps_graph(first=deleting).compile(checkpointer=running)
    with pytest.raises(ThreadDeletedError):
        graph.invoke({"log": []}, thread("t"))
    assert admin.get_tuple(thread("t")) is None
    assert list(admin.list(None)) == []


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_run_deleted_mid_way_writes_nothing_more_in_any_durability(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], durability: str
) -> None:
    """With ``durability="async"`` LangGraph goes on running nodes after a ``put`` was
    refused, writing for checkpoints made after the deletion: those writes are refused
    too, and the thread holds nothing but its deletion."""
    running, admin = savers
    builder = StateGraph(Steps)
    names = [f"n{n}" for n in range(5)]

    def node(name: str) -> Callable[[Steps], dict[str, Any]]:
        def step(state: Steps) -> dict[str, Any]:
            if name == "n1":
                admin.delete_thread("t")  # another process, as the graph runs
            time.sleep(0.02)
            return {"log": [name]}

        return step

    for name, after in zip(names, [START, *names[:-1]], strict=True):
        builder.add_node(name, node(name))
        builder.add_edge(after, name)
    builder.add_edge(names[-1], END)
    graph = builder.compile(checkpointer=running)
    with pytest.raises(ThreadDeletedError):
        graph.invoke({"log": []}, thread("t"), durability=durability)
    time.sleep(0.2)  # what async durability still had under way
    assert admin.get_tuple(thread("t")) is None
    assert list(admin.list(None)) == []
    store = admin._sync
    assert store is not None
    assert [e.type for e in store.events.read_from(session_id("t"), 0)] == ["deleted"]


def test_a_run_that_saves_on_exit_never_brings_back_a_thread_deleted_as_it_ran(
    savers: tuple[SessionStoreSaver, SessionStoreSaver],
) -> None:
    running, admin = savers
    deletions = [admin.delete_thread]

    def deleting(state: Steps) -> dict[str, Any]:
        while deletions:
            deletions.pop()("t")  # another process, as the graph runs
        return {"log": ["first"]}

    graph = steps_graph(first=deleting).compile(checkpointer=running)
    with pytest.raises(ThreadDeletedError):
        graph.invoke({"log": []}, thread("t"), durability="exit")
    assert admin.get_tuple(thread("t")) is None
    # A run begun after the deletion starts the thread afresh.
    assert graph.invoke({"log": []}, thread("t"), durability="exit")["log"] == [
        "first",
        "second",
    ]


@pytest.mark.parametrize("durability", ["exit", "sync"])
def test_of_two_runs_starting_one_new_thread_the_second_to_save_is_refused(
    savers: tuple[SessionStoreSaver, SessionStoreSaver], durability: str
) -> None:
    late, early = savers
    other = steps_graph(first=lambda state: {"log": ["other"]}).compile(checkpointer=early)

    def racing(state: Steps) -> dict[str, Any]:
        # Another runner starts the same new thread and saves before this run does.
        other.invoke({"log": []}, thread("t"), durability=durability)
        return {"log": ["first"]}

    graph = steps_graph(first=racing).compile(checkpointer=late)
    if durability == "exit":
        with pytest.raises(ThreadConflictError) as caught:
            graph.invoke({"log": []}, thread("t"), durability=durability)
        assert caught.value.parent is None
    else:  # its first checkpoint was saved before the other run began: the other goes on
        with pytest.raises(ThreadConflictError):
            graph.invoke({"log": []}, thread("t"), durability=durability)
    assert_one_chain(early, "t")
    roots = [t for t in early.list(thread("t")) if t.parent_config is None]
    assert len(roots) == 1
    state = early.get_tuple(thread("t"))
    assert state is not None and "other" in state.checkpoint["channel_values"]["log"]


def test_a_run_that_never_saves_leaves_nothing_of_its_context_held(
    saver: SessionStoreSaver,
) -> None:
    class Context:
        pass

    graph = steps_graph().compile(checkpointer=saver)
    held = []
    for run in range(3):
        context = Context()
        held.append(weakref.ref(context))
        with pytest.raises(EmptyInputError):  # reads the new thread, then stops
            graph.invoke(None, thread(f"never-{run}"), context=context)
        del context
    gc.collect()
    assert [ref() for ref in held] == [None, None, None]


def test_a_put_without_a_parent_from_outside_a_run_is_checked_against_deletion_only(
    saver: SessionStoreSaver,
) -> None:
    first = put(saver, "t", None)
    second = put(saver, "t", None)  # as LangGraph's conformance suite puts them
    assert {t.checkpoint["id"] for t in saver.list(thread("t"))} == {first, second}


def test_a_thread_id_too_long_for_its_compaction_copy_is_refused_before_any_write(
    saver: SessionStoreSaver,
) -> None:
    longest = "x" * THREAD_ID_BYTES
    root = put(saver, longest, None)
    saver.prune([longest])
    assert saver.get_tuple(thread(longest)).checkpoint["id"] == root
    for too_long in ("x" * (THREAD_ID_BYTES + 1), "é" * (THREAD_ID_BYTES // 2 + 1)):
        with pytest.raises(InvalidArgumentError, match=f"longer than {THREAD_ID_BYTES} bytes"):
            put(saver, too_long, None)
        assert saver.get_tuple(thread(too_long)) is None
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == [longest]


def test_a_thread_an_older_version_stored_under_a_longer_id_is_read_and_deleted(
    saver: SessionStoreSaver,
) -> None:
    """Older versions took ids up to the store's own limit: such a thread is read,
    listed and deleted; only a compaction, which needs room for its copy, is refused."""
    older = "o" * (THREAD_ID_BYTES + 5)
    assert saver._sync is not None
    events = saver._sync.events
    root = put(saver, "short", None)
    stored, after = [], None
    for seq, parent in enumerate([None, "first"]):
        made, metadata, _ = checkpoint()
        made["id"] = "first" if parent is None else "second"
        data = {"ns": "", "id": made["id"], "parent": parent, "blobs": [], "after": after}
        data |= {"checkpoint": saver._codec.pack(made), "metadata": saver._codec.pack(metadata)}
        after = f"event-{seq}"
        stored.append(
            sessionstore.SessionEvent(seq=seq, type="checkpoint", time=1, data=data, id=after)
        )
    events.create(sessionstore.SessionHeader(id=session_id(older)))
    events.append(session_id(older), stored)
    assert saver.get_tuple(thread(older)).checkpoint["id"] == "second"
    assert {t.checkpoint["id"] for t in saver.list(None)} == {root, "first", "second"}
    with pytest.raises(InvalidArgumentError, match=f"longer than {THREAD_ID_BYTES} bytes"):
        saver.prune([older])
    assert [t.checkpoint["id"] for t in saver.list(thread(older))] == ["second", "first"]
    saver.delete_thread(older)
    assert saver.get_tuple(thread(older)) is None


def test_prune_and_delete_for_runs_never_create_a_thread(saver: SessionStoreSaver) -> None:
    saver.prune(["nowhere"])
    saver.delete_for_runs(["run-1"])
    assert list(saver.list(None)) == []


# --- across processes ---------------------------------------------------------------------


def slow_runner(url: str, namespace: str, ready: Any, start: Any, results: Any) -> None:
    """Run the steps graph on thread "t" once ``start`` is set (its first node taking
    long enough for the other runner to start meanwhile); report how it ended."""

    def slow(state: Steps) -> dict[str, Any]:
        time.sleep(2)
        return {"log": ["first"]}

    with SessionStoreSaver(url, namespace=namespace) as saver:
        graph = steps_graph(first=slow).compile(checkpointer=saver)
        ready.put("ready")
        start.wait(60)
        try:
            graph.invoke({"log": ["run"]}, thread("t"))
            results.put("done")
        except ThreadConflictError:
            results.put("refused")


@pytest.fixture(params=["file", "sqlite", "redis"])
def shared(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[str, str]:
    """A URL that processes share (every backend but memory's), and a namespace."""
    return url_for(request.param, request, tmp_path), f"t-lg-{uuid.uuid4().hex[:8]}"


@pytest.mark.slow
def test_two_processes_running_one_thread_at_once_leave_one_chain(
    shared: tuple[str, str],
) -> None:
    url, namespace = shared
    with SessionStoreSaver(url, namespace=namespace) as saver:
        steps_graph().compile(checkpointer=saver).invoke({"log": []}, thread("t"))
    context = multiprocessing.get_context("spawn")
    ready, start, results = context.Queue(), context.Event(), context.Queue()
    runners = [
        context.Process(target=slow_runner, args=(url, namespace, ready, start, results))
        for _ in range(2)
    ]
    for runner in runners:
        runner.start()
    assert [ready.get(timeout=60) for _ in runners] == ["ready", "ready"]
    start.set()
    for runner in runners:
        runner.join(60)
    assert sorted(results.get(timeout=5) for _ in runners) == ["done", "refused"]
    with SessionStoreSaver(url, namespace=namespace) as saver:
        assert_one_chain(saver, "t")
        state = saver.get_tuple(thread("t"))
        assert state is not None
        # The winner may have continued from the input checkpoint the other put first
        # (so it ran that input too): either way, one chain, each run's nodes once.
        log = state.checkpoint["channel_values"]["log"]
        assert log in (
            ["first", "second", "run", "first", "second"],
            ["first", "second", "run", "run", "first", "second"],
        )


def crashing_runner(url: str, namespace: str) -> None:
    """Run the steps graph on thread "t" and die (no clean-up at all) in its second
    node, once the checkpoint after the first is stored."""

    def crash(state: Steps) -> dict[str, Any]:
        os._exit(3)

    with SessionStoreSaver(url, namespace=namespace) as saver:
        graph = steps_graph(second=crash).compile(checkpointer=saver)
        graph.invoke({"log": ["run"]}, thread("t"), durability="sync")


@pytest.mark.slow
def test_a_run_whose_process_died_is_resumed_by_another(shared: tuple[str, str]) -> None:
    url, namespace = shared
    runner = multiprocessing.get_context("spawn").Process(
        target=crashing_runner, args=(url, namespace)
    )
    runner.start()
    runner.join(60)
    assert runner.exitcode == 3
    with SessionStoreSaver(url, namespace=namespace) as saver:
        graph = steps_graph().compile(checkpointer=saver)
        assert graph.get_state(thread("t")).next == ("second",)
        done = graph.invoke(None, thread("t"))
        assert done["log"] == ["run", "first", "second"]
        assert_one_chain(saver, "t")


def test_a_graphs_writes_from_its_threads_take_turns_instead_of_racing() -> None:
    """LangGraph writes a thread from several threads at once (its tasks'
    ``put_writes``, the ``put`` of the step before in the background): they wait for
    each other in the saver, so that none loses the race and writes again."""
    with SessionStoreSaver("memory://") as saver:
        lost: list[str] = []
        made = saver._call

        def call(step: Any) -> Any:
            try:
                return made(step)
            except SeqConflictError:
                lost.append(step.name)
                raise

        saver._call = call  # type: ignore[method-assign]
        graph = steps_graph().compile(checkpointer=saver)
        for run in range(40):
            graph.invoke({"log": [str(run)]}, thread("t"))

        async def arun() -> None:  # the async writes too, on one event loop
            for run in range(40):
                await graph.ainvoke({"log": [str(run)]}, thread("a"))

        asyncio.run(arun())
        assert lost == []
        assert len(list(saver.list(thread("t")))) == len(list(saver.list(thread("a")))) == 160
