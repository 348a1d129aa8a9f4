"""The Redis-level steps (sessionstore.redis.scripts, .values, .durability, .boundary,
.failover) as state machines, driven without I/O.

Each test plays an operation's generator (:data:`sessionstore.drive.Steps`) against a
script, as ``tests/test_flows.py`` does for the API flows: every step it yields must be
the next one scripted -- a :class:`~sessionstore.redis.scripts.Send` of exactly the
scripted commands to the scripted server, a back-off ``Pause``, a refresh of a cluster's
slot map, the slot map learning a ``MOVED``, the close of a connection of its own -- and
gets the scripted replies back, or the scripted error thrown in where it yielded (what a
lost reply or a dropped connection does to a real call). Nothing connects and nothing
sleeps: the clients are redis-py objects that are never used, the cluster a stand-in.
The real-server tests (``tests/test_redis_*.py``, ``tests/test_cluster*.py``) prove the
wiring; these reach every edge in microseconds.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import (
    AskError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from test_flows import ANY, Matches

from sessionstore import keys
from sessionstore.contracts import EventBatch, Refused, Stored
from sessionstore.drive import Pause, adrive, drive
from sessionstore.errors import (
    LibraryMissingError,
    NotReplicatedError,
    StoreUnavailableError,
)
from sessionstore.eventlog import event_text
from sessionstore.keys import ValueKey
from sessionstore.models import SessionEvent
from sessionstore.redis import failover, scripts
from sessionstore.redis.boundary import ErrorBoundary, demoted
from sessionstore.redis.compat import learn_moved_slot
from sessionstore.redis.durability import (
    REPLICAS,
    Acks,
    Durability,
    DurabilityChoice,
    check_acks,
)
from sessionstore.redis.failover import FailoverWatch
from sessionstore.redis.library import library, script
from sessionstore.redis.logops import LogOps
from sessionstore.redis.retry import RETRIES, retry_delay
from sessionstore.redis.values import ValueOps

URL = "redis://127.0.0.1:1/0"
KEY = ValueKey("ns", "BTCUSDT", "steps", "binance", "1h", "backtest")
WHEN = 1_700_000_000_000
SERVER = "the Redis server"
NODE_A, NODE_B, NEW_NODE = ("127.0.0.1", 7000), ("127.0.0.1", 7001), ("127.0.0.1", 7009)


def on_node(address: tuple[str, int]) -> str:
    return f"the Redis Cluster node {address[0]}:{address[1]}"


# The script ------------------------------------------------------------------------------


class Expect:
    """One scripted step: what the operation must yield (``check``), and the reply sent
    back or the error thrown in."""

    def __init__(
        self, what: str, check: Callable[[Any], bool], reply: Any = None, error: Any = None
    ) -> None:
        self.what = what
        self.check = check
        self.reply = reply
        self.error = error

    def __repr__(self) -> str:
        return self.what


def wire(command: Any) -> list[Any]:
    """A command's arguments as redis-py sends them (a str or an int as its bytes), the
    verb as it is given: a call may build an argument as either."""

    def sent(arg: Any) -> Any:
        if isinstance(arg, str):
            return arg.encode()
        if isinstance(arg, int) and not isinstance(arg, bool):
            return b"%d" % arg
        return arg

    return [command[0], *(sent(arg) for arg in command[1:])]


def send(*commands: list[Any], where: str = SERVER, reply: Any = None, error: Any = None) -> Expect:
    """A :class:`~sessionstore.redis.scripts.Send` of ``commands`` to ``where`` (compared
    as they are sent: :func:`wire`); ``reply`` is the list of replies (an error reply in
    its place)."""

    def check(step: Any) -> bool:
        return (
            isinstance(step, scripts.Send)
            and step.where == where
            and [wire(command) for command in step.commands] == [wire(c) for c in commands]
        )

    return Expect(f"Send({where}: {list(commands)})", check, reply, error)


def pause(seconds: float) -> Expect:
    return Expect(
        f"Pause({seconds})", lambda step: isinstance(step, Pause) and step.seconds == seconds
    )


def refresh(client: Any, error: Any = None) -> Expect:
    """The refresh of a cluster client's slot map."""
    return Expect(
        "refresh the slot map",
        lambda step: step == client.nodes_manager.initialize,
        error=error,
    )


def learn(client: Any, moved: tuple[str, int]) -> Expect:
    """The slot map learning the node a ``MOVED`` named."""

    def check(step: Any) -> bool:
        return (
            isinstance(step, functools.partial)
            and step.func is learn_moved_slot
            and step.args[0] is client
            and (step.args[1].host, step.args[1].port) == moved
        )

    return Expect(f"learn MOVED to {moved}", check)


def close_of(client: Any, address: tuple[str, int]) -> Expect:
    """The close of the connection of its own made for a node the slot map lacks."""
    made = client.made
    return Expect(
        f"close the connection to {address}",
        lambda step: address in made and step == made[address].close,
    )


def shown(step: Any) -> str:
    """A step as a failure names it (a Send with its commands, long arguments cut)."""
    if isinstance(step, scripts.Send):
        cut = [[repr(arg)[:60] for arg in command] for command in step.commands]
        return f"Send({step.where}: {cut})"
    return repr(step)


def play(steps: Generator[Any, Any, Any], script_: list[Expect], asynchronous: bool = False) -> Any:
    """Drive ``steps`` through ``script_`` (see the module doc) with the drivers of every
    operation (:func:`~sessionstore.drive.drive`, or ``adrive`` on an event loop), each
    step answered as scripted; returns what the operation returned, or raises what it
    raised, once the whole script was played."""
    played: list[Expect] = []

    def answer(step: Any) -> Callable[[], Any]:
        assert len(played) < len(script_), f"unscripted step {shown(step)} after {played}"
        expected = script_[len(played)]
        assert expected.check(step), f"step {len(played)}: {shown(step)} is not {expected!r}"
        played.append(expected)

        def outcome() -> Any:
            if expected.error is not None:
                raise expected.error
            return expected.reply

        async def awaited() -> Any:
            return outcome()

        return awaited if asynchronous else outcome

    try:
        result = asyncio.run(adrive(steps, answer)) if asynchronous else drive(steps, answer)
    except AssertionError:
        raise
    except BaseException:
        assert len(played) == len(script_), f"raised before {script_[len(played) :]}"
        raise
    assert len(played) == len(script_), f"ended before {script_[len(played) :]}"
    return result


#: The tests that run on both drivers.
DRIVERS = pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])


# The clients ------------------------------------------------------------------------------


def plain_client(asynchronous: bool = False) -> Any:
    """A redis-py client (``redis.asyncio`` with ``asynchronous``) of a server that does
    not exist: never used, so never connects."""
    return redis.asyncio.Redis(port=1) if asynchronous else redis.Redis(port=1)


class FakeNodes:
    """What the scripts use of a cluster client's ``nodes_manager``."""

    default_node = None

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def initialize(self) -> None:
        raise AssertionError("a step is yielded, never run, in these tests")

    def create_redis_connections(self, nodes: list[Any]) -> None:
        for node in nodes:
            node.redis_connection = plain_client()
            self.cluster.made[(node.host, node.port)] = node.redis_connection


class _Cluster:
    """What the scripts use of a cluster client: a client that knows ``nodes`` and
    serves every key from ``owner``, built without I/O."""

    def __init__(self, nodes: list[tuple[str, int]], owner: tuple[str, int]) -> None:
        self.known = {address: self.new_node(address) for address in nodes}
        self.owner = owner
        self.nodes_manager = FakeNodes(self)
        #: The connections of its own a step made for a node the map lacks.
        self.made: dict[tuple[str, int], Any] = {}

    def new_node(self, address: tuple[str, int]) -> Any:
        node = redis.cluster.ClusterNode(*address, redis.cluster.PRIMARY)
        node.redis_connection = plain_client()
        return node

    def get_node_from_key(self, key: Any, replica: bool = False) -> Any:
        return self.known[self.owner]

    def get_node(self, host: Any = None, port: Any = None, node_name: Any = None) -> Any:
        return self.known.get((host, port))

    def get_redis_connection(self, node: Any) -> Any:
        return node.redis_connection

    def close(self) -> None:
        return None


class FakeCluster(_Cluster, redis.cluster.RedisCluster):  # type: ignore[misc]
    """A sync ``RedisCluster`` (as :func:`~sessionstore.redis.pools.is_cluster` asks)."""


class FakeAsyncCluster(_Cluster, redis.asyncio.cluster.RedisCluster):  # type: ignore[misc]
    """A ``redis.asyncio`` ``RedisCluster``: its nodes are sent batches directly."""

    def new_node(self, address: tuple[str, int]) -> Any:
        return redis.asyncio.cluster.ClusterNode(*address, redis.cluster.PRIMARY)


def fake_cluster(
    nodes: list[tuple[str, int]], owner: tuple[str, int], asynchronous: bool = False
) -> Any:
    return (FakeAsyncCluster if asynchronous else FakeCluster)(nodes, owner)


# What the calls look like -----------------------------------------------------------------


def fcall(name: str, keys_: list[str], args: list[Any]) -> list[Any]:
    found = script(name)
    verb = "FCALL_RO" if found.read_only else "FCALL"
    return [verb, found.function, len(keys_), *keys_, *args]


def evalsha(name: str, keys_: list[str], args: list[Any]) -> list[Any]:
    return ["EVALSHA", script(name).sha, len(keys_), *keys_, *args]


FUNCTION_LOAD = ["FUNCTION", "LOAD", library().source]
MISSING = ResponseError("Function not found")
NAMES = [keys.value_key(KEY), keys.seq_key(KEY)]
INDEX_ENTRY = fcall(
    "index_add", [keys.index_keys(KEY.namespace)[1]], [ANY, ANY, keys.value_member(KEY, False)]
)


def swap_call(slot: Any, number: int, payload: bytes = b"\x01") -> list[Any]:
    """The ``value_swap.lua`` call of a plain write of ``payload`` at WHEN, by ``slot``
    numbered ``number`` (the writer-slot token every send of the call carries), as a
    cluster sends it (its index entry apart)."""
    window = Matches(lambda text: int(text) > 0, "window")
    head = [slot, str(number), window, str(keys.SEQ_FIELDS), "0", "-"]
    return fcall("value_swap", NAMES, [*head, payload, str(WHEN)])


def with_entry(call: list[Any]) -> list[Any]:
    """A ``value_swap.lua`` call as a single server gets it: taking its index entry
    (the index key after its own, ``index_add.lua``'s ARGV after its own)."""
    verb, function, count, *rest = call
    entry_keys, entry_args = INDEX_ENTRY[3:4], INDEX_ENTRY[4:]
    return [verb, function, count + 1, *rest[:count], *entry_keys, *rest[count:], *entry_args]


def a_slot() -> Matches:
    """Any writer slot; remembers the one it matched (``.seen``)."""
    seen: list[str] = []

    def check(slot: Any) -> bool:
        seen.append(slot)
        return isinstance(slot, str | bytes) and len(slot) == 16

    found = Matches(check, "a slot")
    found.seen = seen  # type: ignore[attr-defined]
    return found


def ops(replicas: int = 0) -> ValueOps:
    durability = None
    if replicas:
        durability = DurabilityChoice(Durability(REPLICAS, replicas), sentinel=False)
    return ValueOps(ErrorBoundary(URL, 0.5), durability)


def history_args() -> list[Any]:
    return [str(WHEN)]


# Calling a script ------------------------------------------------------------------------


def test_a_script_is_called_as_its_function_read_only_ones_with_fcall_ro():
    client = plain_client()
    names = keys.history_keys(KEY)
    call = fcall("history_get", names, history_args())
    assert call[0] == "FCALL_RO"
    steps = scripts.run_steps(client, "history_get", names, history_args())
    assert play(steps, [send(call, reply=[[b"1", b"x"]])]) == [b"1", b"x"]


@pytest.mark.parametrize(
    "loaded",
    [library().name.encode(), ResponseError("Library 'x' already exists")],
    ids=["loaded", "loaded-meanwhile"],
)
@DRIVERS
def test_a_missing_library_is_loaded_there_and_the_call_sent_once_more(loaded, asynchronous):
    client = plain_client(asynchronous)
    call = fcall("history_get", keys.history_keys(KEY), history_args())
    steps = scripts.run_steps(client, "history_get", keys.history_keys(KEY), history_args())
    reply = play(
        steps,
        [
            send(call, reply=[MISSING]),
            send(FUNCTION_LOAD, reply=[loaded]),
            send(call, reply=[b"OK"]),
        ],
        asynchronous,
    )
    assert reply == b"OK"


def test_a_user_refused_function_load_gets_library_missing_error_and_nothing_more():
    client = plain_client()
    call = fcall("history_get", keys.history_keys(KEY), history_args())
    steps = scripts.run_steps(client, "history_get", keys.history_keys(KEY), history_args())
    refused = NoPermissionError("NOPERM this user has no permissions to run 'function|load'")
    with pytest.raises(LibraryMissingError, match="sessionstore doctor --fix"):
        play(steps, [send(call, reply=[MISSING]), send(FUNCTION_LOAD, reply=[refused])])


def test_a_function_lost_again_after_loading_raises_may_or_may_not_have_been_applied():
    """The second ``Function not found`` is raised as it is; the value operation's
    boundary makes it ``StoreUnavailableError`` (an earlier send may have been applied),
    and the writer slot is never lent again."""
    mine = ops()
    slot = a_slot()
    with pytest.raises(StoreUnavailableError, match="may or may not have been applied"):
        play(
            mine.write(plain_client(), KEY, b"\x01", WHEN, None),
            [
                send(with_entry(swap_call(slot, 1)), reply=[MISSING]),
                send(FUNCTION_LOAD, reply=[b"loaded"]),
                send(with_entry(swap_call(slot, 1)), reply=[MISSING]),
            ],
        )
    assert mine._slots.free == []


def test_a_server_without_functions_gets_evalsha_and_the_client_keeps_to_it():
    client = plain_client()
    names = keys.history_keys(KEY)
    unknown = ResponseError("unknown command 'FCALL_RO', with args beginning with: ")
    steps = scripts.run_steps(client, "history_get", names, history_args())
    play(
        steps,
        [
            send(fcall("history_get", names, history_args()), reply=[unknown]),
            send(evalsha("history_get", names, history_args()), reply=[None]),
        ],
    )
    assert scripts.uses_evalsha(client)
    again = scripts.run_steps(client, "history_get", names, history_args())
    play(again, [send(evalsha("history_get", names, history_args()), reply=[None])])
    assert scripts.call_command(client, "history_get", names, history_args())[0] == "EVALSHA"
    assert not scripts.uses_evalsha(plain_client())


def test_noscript_loads_the_script_and_sends_evalsha_once_more_then_raises():
    client = plain_client()
    names = keys.history_keys(KEY)
    scripts._EVALSHA_CLIENTS.add(client)
    call = evalsha("history_get", names, history_args())
    load = ["SCRIPT", "LOAD", script("history_get").source]
    noscript = NoScriptError("No matching script. Please use EVAL.")
    steps = scripts.run_steps(client, "history_get", names, history_args())
    played = [send(call, reply=[noscript]), send(load, reply=[script("history_get").sha])]
    assert play(steps, [*played, send(call, reply=[b"found"])]) == b"found"
    steps = scripts.run_steps(client, "history_get", names, history_args())
    with pytest.raises(NoScriptError):
        play(steps, [*played, send(call, reply=[noscript])])
    boundary = ErrorBoundary(URL, 0.5)
    translated = boundary.translate(noscript, "history_get.lua", names[0])
    assert isinstance(translated, StoreUnavailableError)
    assert "may or may not have been applied" in str(translated)


def test_a_plain_write_takes_its_index_entry_in_its_own_call_and_its_refusal_is_raised():
    mine = ops()
    slot = a_slot()
    play(
        mine.write(plain_client(), KEY, b"\x01", WHEN, None),
        [send(with_entry(swap_call(slot, 1)), reply=[b"OK"])],
    )
    # No entry is trusted: the next write sends it again (the server leaves it as it is
    # while it is young).
    play(
        mine.write(plain_client(), KEY, b"\x02", WHEN, None),
        [send(with_entry(swap_call(slot.seen[0], 2, b"\x02")), reply=[b"OK"])],
    )
    full = ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
    other = ops()
    with pytest.raises(StoreUnavailableError, match="out of memory"):
        play(
            other.write(plain_client(), KEY, b"\x01", WHEN, None),
            [send(with_entry(swap_call(a_slot(), 1)), reply=[full])],
        )


def test_a_clear_creates_nothing_so_it_sends_no_index_entry():
    slot = a_slot()
    call = fcall("value_swap", NAMES, [slot, "1", ANY, str(keys.SEQ_FIELDS), "0", "-", b"", ""])
    play(ops().write(plain_client(), KEY, None, WHEN, None), [send(call, reply=[b"OK"])])


def test_a_refused_swap_decodes_the_record_the_script_found():
    expected = Stored(b"\x01", WHEN)
    slot = a_slot()
    window = Matches(lambda text: int(text) > 0, "window")
    head = [slot, "1", window, str(keys.SEQ_FIELDS), "0", "1", b"\x02", str(WHEN)]
    call = with_entry(fcall("value_swap", NAMES, [*head, b"\x01", str(WHEN)]))
    found = play(
        ops().swap(plain_client(), KEY, expected, b"\x02", WHEN, None),
        [send(call, reply=[[b"CONFLICT", b"\x03", str(WHEN).encode()]])],
    )
    assert found == Refused(Stored(b"\x03", WHEN))


# One writer slot and number per call, on every send of it ------------------------------


@DRIVERS
def test_every_send_of_one_write_carries_its_slot_and_number_and_the_next_call_counts_up(
    asynchronous,
):
    """A lost reply on a cluster node (the connection dropped after the send): a pause,
    a refresh of the slot map, then the same call again, token included; a library
    missing there: loaded, then the same call again. The call's outcome is known, so its
    slot serves the next call, numbered one up."""
    cluster = fake_cluster([NODE_A], NODE_A, asynchronous)
    mine = ops()
    slot = a_slot()
    call = swap_call(slot, 1)
    where = on_node(NODE_A)
    play(
        mine.write(cluster, KEY, b"\x01", WHEN, None),
        [
            send(INDEX_ENTRY, where=where, reply=[1]),
            send(call, where=where, error=RedisConnectionError("Connection closed by server.")),
            pause(retry_delay(1)),
            refresh(cluster),
            send(call, where=where, reply=[MISSING]),
            send(FUNCTION_LOAD, where=where, reply=[b"loaded"]),
            send(call, where=where, reply=[b"OK"]),
        ],
        asynchronous,
    )
    assert len(set(slot.seen)) == 1
    play(
        mine.write(cluster, KEY, b"\x02", WHEN, None),
        [
            send(INDEX_ENTRY, where=where, reply=[0]),
            send(swap_call(slot.seen[0], 2, b"\x02"), where=where, reply=[b"OK"]),
        ],
        asynchronous,
    )


@pytest.mark.parametrize(
    "lost",
    [RedisConnectionError("Connection reset by peer"), RedisTimeoutError("Timeout reading")],
    ids=["connection", "timeout"],
)
def test_a_write_whose_outcome_is_unknown_raises_and_its_slot_is_never_lent_again(lost):
    """On a single server redis-py resends the same command itself; what reaches the
    operation has failed every resend: unavailable, maybe applied, and the slot (whose
    copy may still arrive) is dropped, so the next call takes a fresh one."""
    mine = ops()
    first = a_slot()
    with pytest.raises(StoreUnavailableError, match="may or may not have been applied"):
        play(
            mine.write(plain_client(), KEY, None, WHEN, None),
            [send(fcall("value_swap", NAMES, [first, "1", *[ANY] * 6]), error=lost)],
        )
    fresh = a_slot()
    play(
        mine.write(plain_client(), KEY, None, WHEN, None),
        [send(fcall("value_swap", NAMES, [fresh, "1", *[ANY] * 6]), reply=[b"OK"])],
    )
    assert fresh.seen[0] != first.seen[0]


def test_a_delete_carries_its_token_and_answers_what_the_script_found():
    slot = a_slot()
    names = [keys.value_key(KEY), *keys.history_keys(KEY), keys.seq_key(KEY)]
    call = fcall("value_forget", names, [slot, "1", ANY, str(keys.SEQ_FIELDS)])
    assert play(ops().forget(plain_client(), KEY), [send(call, reply=[1])]) is True


# Cluster redirections ---------------------------------------------------------------------


def test_moved_sends_the_call_to_the_named_node_and_the_slot_map_learns_it():
    cluster = fake_cluster([NODE_A, NODE_B], NODE_A)
    call = fcall("history_get", keys.history_keys(KEY), history_args())
    steps = scripts.run_steps(cluster, "history_get", keys.history_keys(KEY), history_args())
    reply = play(
        steps,
        [
            send(call, where=on_node(NODE_A), reply=[MovedError("1234 127.0.0.1:7001")]),
            send(["ASKING"], call, where=on_node(NODE_B), reply=[b"OK", b"found"]),
            learn(cluster, NODE_B),
        ],
    )
    assert reply == b"found"


def test_ask_to_a_node_the_map_lacks_uses_a_connection_of_its_own_closed_after():
    """An ``ASK`` to a primary just added: a connection of its own, ``ASKING`` first, the
    connection closed after the call (and after a failed one too); the slot map does not
    learn an ``ASK``."""
    cluster = fake_cluster([NODE_A], NODE_A)
    call = fcall("history_get", keys.history_keys(KEY), history_args())
    steps = scripts.run_steps(cluster, "history_get", keys.history_keys(KEY), history_args())
    moving = on_node(NEW_NODE)
    reply = play(
        steps,
        [
            send(call, where=on_node(NODE_A), reply=[AskError("1234 127.0.0.1:7009")]),
            send(["ASKING"], call, where=moving, reply=[b"OK", b"found"]),
            close_of(cluster, NEW_NODE),
        ],
    )
    assert reply == b"found"
    fails = scripts.run_steps(cluster, "history_get", keys.history_keys(KEY), history_args())
    denied = NoPermissionError("NOPERM no permissions to access a key")
    with pytest.raises(NoPermissionError):
        play(
            fails,
            [
                send(call, where=on_node(NODE_A), reply=[AskError("1234 127.0.0.1:7009")]),
                send(["ASKING"], call, where=moving, reply=[b"OK", denied]),
                close_of(cluster, NEW_NODE),
            ],
        )


def test_tryagain_pauses_refreshes_and_resends_until_the_retries_run_out():
    """``TRYAGAIN`` (a slot being migrated) and a node that dropped the connection: each
    time a back-off, a refresh of the slot map (one that fails is left to the next
    attempt) and the same call again; after ``RETRIES`` resends the last error is
    raised, and the boundary says the call may or may not have been applied."""
    cluster = fake_cluster([NODE_A], NODE_A)
    call = fcall("history_get", keys.history_keys(KEY), history_args())
    where = on_node(NODE_A)
    busy = TryAgainError("Multiple keys request during rehashing of slot")
    script_: list[Expect] = []
    for attempt in range(RETRIES):
        failing = RedisConnectionError("gone") if attempt else None
        script_ += [
            send(call, where=where, reply=[busy]),
            pause(retry_delay(attempt + 1)),
            refresh(cluster, error=failing),
        ]
    script_.append(send(call, where=where, reply=[busy]))
    steps = scripts.run_steps(cluster, "history_get", keys.history_keys(KEY), history_args())
    with pytest.raises(TryAgainError) as raised:
        play(steps, script_)
    translated = ErrorBoundary(URL, 0.5).translate(raised.value, "history_get.lua", "k")
    assert isinstance(translated, StoreUnavailableError)
    assert "may or may not have been applied" in str(translated)


# WAIT for replicas:N ---------------------------------------------------------------------


@DRIVERS
def test_replicas_n_waits_in_the_same_batch_and_too_few_acks_raise_applied(asynchronous):
    """``WAIT N`` follows the script on its connection. Fewer acknowledgements raise
    ``NotReplicatedError`` (applied on the primary: the outcome is known, so the slot
    serves the next call); N of them, none."""
    mine = ops(replicas=2)
    slot = a_slot()
    wait = ["WAIT", 2, ANY]
    client = plain_client(asynchronous)
    with pytest.raises(NotReplicatedError, match="only 1 of 2 replica"):
        play(
            mine.write(client, KEY, b"\x01", WHEN, None),
            [send(with_entry(swap_call(slot, 1)), wait, reply=[b"OK", 1])],
            asynchronous,
        )
    assert [entry[0] for entry in mine._slots.free] == [slot.seen[0]]
    play(
        mine.write(client, KEY, b"\x01", WHEN, None),
        [send(with_entry(swap_call(slot.seen[0], 2)), wait, reply=[b"OK", 2])],
        asynchronous,
    )


def test_on_a_cluster_the_index_entry_waits_on_its_node_before_the_data_is_written():
    cluster = fake_cluster([NODE_A], NODE_A)
    where = on_node(NODE_A)
    wait = ["WAIT", 1, ANY]
    mine = ops(replicas=1)
    with pytest.raises(NotReplicatedError, match="primary at 127.0.0.1:7000 but only 0 of 1"):
        play(
            mine.write(cluster, KEY, b"\x01", WHEN, None),
            [send(INDEX_ENTRY, wait, where=where, reply=[1, 0])],  # no script sent
        )
    slot = a_slot()
    play(
        mine.write(cluster, KEY, b"\x01", WHEN, None),
        [
            send(INDEX_ENTRY, wait, where=where, reply=[1, 1]),
            send(swap_call(slot, 2), wait, where=where, reply=[b"OK", 1]),
        ],
    )


def test_a_wait_refused_or_ended_by_a_failover_is_maybe_applied():
    demoted_reply = ResponseError("WAIT cannot be used with replica instances.")
    unblocked = ResponseError("UNBLOCKED force unblock from blocking operation")
    assert demoted(demoted_reply) and demoted(unblocked)
    assert not demoted(ResponseError("READONLY You can't write against a read only replica."))
    for reply in (demoted_reply, unblocked):
        with pytest.raises(StoreUnavailableError, match="no longer a primary"):
            play(
                ops(replicas=1).write(plain_client(), KEY, None, WHEN, None),
                [
                    send(
                        fcall("value_swap", NAMES, [*[ANY] * 8]),
                        ["WAIT", 1, ANY],
                        reply=[b"OK", reply],
                    )
                ],
            )


def appended(replicas: int, reply: list[Any]) -> Expect:
    """The ``log_append.lua`` call of session ``s-1`` then its ``WAIT replicas``."""

    def check(step: Any) -> bool:
        commands = [wire(command) for command in step.commands]
        return (
            isinstance(step, scripts.Send)
            and len(commands) == 2
            and commands[0][:2] == wire(["FCALL", script("log_append").function])
            and commands[1][:2] == wire(["WAIT", replicas])
        )

    return Expect(f"log_append then WAIT {replicas}", check, reply)


@pytest.mark.parametrize("code", [b"OK", b"REPLAY"])
def test_an_append_waits_for_its_replicas_an_applied_replay_too(code):
    """``replicas:N``: an append (or its applied replay, sent again after an error) is
    followed by ``WAIT N``; too few acknowledgements raise ``NotReplicatedError`` naming
    the batch, which is applied; enough return the next seq."""
    durability = DurabilityChoice(Durability(REPLICAS, 1), sentinel=False)
    log = LogOps("ns", ErrorBoundary(URL, 0.5), durability)
    event = SessionEvent(seq=0, type="note", time=WHEN, data={})
    batch = EventBatch([event], [event_text(event)])
    with pytest.raises(NotReplicatedError, match="ending before seq 1 is applied .* only 0 of 1"):
        play(
            log.append(plain_client(), "s-1", batch, None, None, None),
            [appended(1, [[code, 1], 0])],
        )
    steps = log.append(plain_client(), "s-1", batch, None, None, None)
    assert play(steps, [appended(1, [[code, 1], 1])]) == 1


def test_an_append_s_acks_name_the_primary_that_waited():
    replicas = Durability(REPLICAS, 2)
    check_acks(replicas, 2, "s-1", 5, URL, 100)
    with pytest.raises(NotReplicatedError, match="at 127.0.0.1:7001 but only 1 of 2"):
        check_acks(replicas, Acks(1, "127.0.0.1:7001"), "s-1", 5, URL, 100)
    with pytest.raises(NotReplicatedError, match=f"at {URL} but only 0 of 2"):
        check_acks(replicas, 0, "s-1", 5, URL, 100)


# A Sentinel failover ---------------------------------------------------------------------


def test_a_fence_the_sentinels_never_lift_ends_after_their_failover_timeout(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(failover.time, "monotonic", lambda: now[0])
    watch = FailoverWatch([("127.0.0.1", 1)], "svc", {}, 1.0)
    watch._event("s1", "+try-failover", "master svc 127.0.0.1 7000")
    assert watch.fence() is not None
    now[0] += failover.DEFAULT_FENCE_S - 1
    assert watch.fence() is not None
    now[0] += 2
    assert watch.fence() is None
    # A second sentinel's event while the first's fence stands adds its own.
    watch._event("s2", "+elected-leader", "master svc 127.0.0.1 7000")
    assert watch.fence() is not None and "s2" in str(watch.fence())


def test_a_switch_already_announced_changes_no_generation_and_a_malformed_one_nothing():
    watch = FailoverWatch([("127.0.0.1", 1)], "svc", {}, 1.0)
    watch._event("s1", "+switch-master", "svc 127.0.0.1 7000 127.0.0.1 7001")
    stamp = watch.generation
    watch._event("s2", "+switch-master", "svc 127.0.0.1 7000 127.0.0.1 7001")
    assert watch.generation == stamp
    watch._event("s2", "+switch-master", "svc 127.0.0.1 7001 127.0.0.1 port")
    assert watch.generation == stamp and watch.address(("127.0.0.1", 7000)) == NODE_B
    # A sentinel that caught up reports the new primary: the switch is forgotten.
    assert watch.address(NODE_B) == NODE_B and watch.address(("10.0.0.1", 1)) == ("10.0.0.1", 1)
