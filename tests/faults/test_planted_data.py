"""Bounded server work against data a tenant planted in its own keys.

The least-privilege user of a namespace may ``HSET`` its own keys, so it can fill a
value's seq hash (the writer-slot records of :mod:`sessionstore.redis.writerslots`) with
any number of records, of any size, and call the library's functions with arguments of
its own; it can fill a history with versions and a log with entries alike. None of that
may make a function's work grow with what is stored: a value write's trim looks at a
fixed sample whatever its bound argument, a record is measured before it is parsed,
arguments past their sizes are refused, a history write removes at most
``HISTORY_DROP_MAX`` versions, a torn tail is cut at most 1,000 entries a call, a delete
unlinks. Measured on a real redis-server by the server's own accounting of each call
(``INFO commandstats``), with an admin's ``PING`` answered meanwhile. With
``SESSIONSTORE_SOAK=1`` the histories hold a million planted versions.
"""

from __future__ import annotations

import os
import re
import threading
import time

import pytest
import redis
from support.redis_helpers import namespace_snapshot

import sessionstore
from sessionstore import CorruptDataError, CorruptLogError, InvalidArgumentError
from sessionstore.keys import ValueKey, history_keys, seq_key
from sessionstore.redis.library import install, script
from sessionstore.redis.valueformat import (
    ANY,
    forget_args,
    forget_keys,
    history_set_args,
    history_set_keys,
    plain_keys,
    swap_args,
)

T0 = 1_718_000_000_000
#: Records planted in one seq hash: the unbounded loop took about 1.3 s of server time
#: for each 200,000 of them, on every write.
PLANTED = 200_000
#: Server time a call may take here (ms): its own work is microseconds; this leaves
#: room for a loaded test machine, far below what walking the planted records costs.
BOUND_MS = 50
#: Versions planted in one history: a million with SESSIONSTORE_SOAK=1, else enough to
#: be well past what one call may remove (HISTORY_DROP_MAX of lua/_history.lua).
PLANTED_VERSIONS = 1_000_000 if os.environ.get("SESSIONSTORE_SOAK") else 5_000
#: The most versions one history write removes (lua/_history.lua).
HISTORY_DROP_MAX = 1_000


@pytest.fixture
def client(redis_server):
    found = redis.Redis(port=redis_server.port)
    install(found)
    yield found
    found.close()


def _plant(client: redis.Redis, name: str, count: int, record: bytes) -> None:
    pipe = client.pipeline(transaction=False)
    for start in range(0, count, 10_000):
        pipe.hset(name, mapping={f"planted-{i}": record for i in range(start, start + 10_000)})
    pipe.execute()


def _fcall_usec(client: redis.Redis, function: str, keys: list[str], args: list) -> float:
    """The server time (us) of one FCALL, from INFO commandstats."""
    client.config_resetstat()
    client.execute_command("FCALL", function, len(keys), *keys, *args)
    stats = client.info("commandstats")["cmdstat_fcall"]
    assert stats["calls"] == 1
    return float(stats["usec"])


@pytest.mark.parametrize("call", ["value_swap", "value_forget"])
def test_a_planted_seq_hash_costs_a_write_nothing(client, namespace, call):
    key = ValueKey(namespace, "PLANT", "s", "e", "1h", "backtest")
    seq = seq_key(key)
    # Records the library could have written, and would keep (far-off deadlines).
    _plant(client, seq, PLANTED, b"1:9999999999:1000")
    client.hset(plain_keys(key)[0], mapping={"v": b"\x01", "w": str(T0)})
    pings: list[float] = []
    done = threading.Event()

    def ping() -> None:
        admin = redis.Redis(port=client.connection_pool.connection_kwargs["port"])
        while not done.is_set():
            started = time.monotonic()
            admin.ping()
            pings.append(time.monotonic() - started)
        admin.close()

    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        for number in range(1, 6):
            mark = (f"new-slot-{number}", 1)
            if call == "value_swap":
                keys, args = plain_keys(key), swap_args(ANY, b"\x02", T0, mark, 1000)
            else:
                keys, args = forget_keys(key), forget_args(mark, 1000)
                client.hset(plain_keys(key)[0], mapping={"v": b"\x01", "w": str(T0)})
            args[3] = "0"  # the trim bound, as a hostile caller passes it
            usec = _fcall_usec(client, script(call).function, keys, args)
            assert usec < BOUND_MS * 1000, f"{call} took {usec / 1000:.1f} ms of server time"
    finally:
        done.set()
        pinger.join()
    assert client.hlen(seq) >= PLANTED  # kept: their deadlines are far off
    assert pings and max(pings) < 1.0


def test_a_planted_record_past_its_size_is_refused_naming_the_key(client, namespace, redis_server):
    key = ValueKey(namespace, "BIG", "s", "e", "1h", "backtest")
    with sessionstore.connect(redis_server.url, namespace) as store:
        session = store.session("BIG", "s", "e", "1h")
        session.set_data(1, T0)
        slot = client.hkeys(seq_key(key))[0]
        client.hset(seq_key(key), slot, b"1" * (8 << 20))
        before = client.hgetall(plain_keys(key)[0])
        with pytest.raises(CorruptDataError) as refused:
            session.set_data(2, T0)
        assert seq_key(key) in str(refused.value)
        assert client.hgetall(plain_keys(key)[0]) == before


@pytest.mark.parametrize(
    "position, value",
    [(0, "s" * 65), (0, ""), (1, "1" * 20), (1, "1x"), (2, "9" * 13), (3, "1e3")],
)
def test_arguments_past_their_sizes_are_refused_before_anything_is_stored(
    client, namespace, position, value
):
    key = ValueKey(namespace, "ARG", "s", "e", "1h", "backtest")
    args = swap_args(ANY, b"\x02", T0, ("slot", 1), 1000)
    args[position] = value
    with pytest.raises(redis.exceptions.ResponseError, match="^INVALID"):
        client.execute_command("FCALL", script("value_swap").function, 2, *plain_keys(key), *args)
    assert client.exists(*plain_keys(key)) == 0


def test_a_forget_that_removes_nothing_records_nothing(client, namespace):
    key = ValueKey(namespace, "NONE", "s", "e", "1h", "backtest")
    for number in range(1, 50):
        reply = client.execute_command(
            "FCALL",
            script("value_forget").function,
            4,
            *forget_keys(key),
            *forget_args((f"slot-{number}", 1), 1000),
        )
        assert reply == 0
    assert client.exists(seq_key(key)) == 0


def test_a_long_history_is_inspected_in_a_page_a_call(client, namespace, redis_server):
    """20,000 versions (planted: a tenant may write its history keys) are read by
    ``records()`` in 20 calls of at most 1,000 versions each, not one call a version."""
    key = ValueKey(namespace, "LONG", "s", "e", "1h", "backtest")
    at, values = history_keys(key)
    pipe = client.pipeline(transaction=False)
    for start in range(0, 20_000, 5_000):
        whens = range(T0 + start, T0 + start + 5_000)
        pipe.zadd(at, {str(w): w for w in whens})
        pipe.hset(values, mapping={str(w): b"\x01" for w in whens})
    pipe.execute()
    with sessionstore.connect(redis_server.url, namespace) as store:
        session = store.session("LONG", "s", "e", "1h", history=True)
        session.get_data(T0)  # connected, the library checked
        client.config_resetstat()
        found = session.records()
        calls = client.info("commandstats")["cmdstat_fcall_ro"]["calls"]
    assert [r.when for r in found.versions] == list(range(T0, T0 + 20_000))
    assert calls <= 21


def test_a_replay_against_a_planted_big_entry_never_reads_it(client, namespace, redis_server):
    """An entry of a log holding 48 MB (planted: the stream is the tenant's own key) is
    never read by an append that repeats stored events or conflicts with them: the
    function compares the events' digests (a few bytes each, kept apart from the
    stream), so either answer costs what the call brings. Reading the entry cost 40 ms
    of server time for 16 MB and 182 ms for 48 MB, every other client waiting."""
    from sessionstore import SeqConflictError, SessionEvent, SessionHeader
    from sessionstore.keys import log_keys

    events = [SessionEvent(seq=i, type="note", time=T0 + i, data={"i": i}) for i in range(2)]
    other = [SessionEvent(seq=1, type="note", time=T0 + 1, data={"i": "other"})]
    with sessionstore.connect(redis_server.url, namespace) as store:
        store.events.create(SessionHeader(id="s"))
        store.events.append("s", events)
        _, stream = log_keys(namespace, "s")
        [(entry_id, _)] = client.xrange(stream)
        client.delete(stream)
        planted = b"[" + b",\n" * (24 << 20) + b"]"
        client.xadd(stream, {"events": planted}, id=entry_id)
        client.config_resetstat()
        assert store.events.append("s", events) == 2
        assert store.events.append("s", events[1:]) == 2
        with pytest.raises(SeqConflictError):
            store.events.append("s", other)
        stats = client.info("commandstats")["cmdstat_fcall"]
    assert stats["calls"] == 3
    assert stats["usec"] / stats["calls"] < BOUND_MS * 1000 / 10


@pytest.mark.parametrize("name", ["lease_acquire", "compute_lease"])
def test_a_token_past_its_size_is_refused_before_it_is_stored(client, namespace, name):
    keys_ = [f"ss:{namespace}:lease:{{x}}", f"ss:{namespace}:epoch:{{x}}"]
    token = "t" * (8 << 20)
    args = [token, "1000"] if name == "lease_acquire" else ["take", token, "1000"]
    keys_ = keys_ if name == "lease_acquire" else keys_[:1]
    with pytest.raises(redis.exceptions.ResponseError, match="^INVALID"):
        client.execute_command("FCALL", script(name).function, len(keys_), *keys_, *args)
    assert client.exists(*keys_) == 0


def _plant_versions(client: redis.Redis, key: ValueKey, whens: range) -> None:
    at, values = history_keys(key)
    pipe = client.pipeline(transaction=False)
    for start in range(whens.start, whens.stop, 10_000):
        part = range(start, min(start + 10_000, whens.stop))
        pipe.zadd(at, {str(w): w for w in part})
        pipe.hset(values, mapping={str(w): b"\x01" for w in part})
    pipe.execute()


def test_a_write_before_planted_later_versions_is_refused_naming_the_key(
    client, namespace, redis_server
):
    """A history write drops the versions after its time; past HISTORY_DROP_MAX of them
    (planted: the tenant may write its history keys) it is refused, in microseconds of
    server time and before anything is written, with an error naming the history."""
    key = ValueKey(namespace, "LATER", "s", "e", "1h", "backtest")
    at, _ = history_keys(key)
    _plant_versions(client, key, range(T0 + 1, T0 + 1 + PLANTED_VERSIONS))
    with sessionstore.connect(redis_server.url, namespace) as store:
        session = store.session("LATER", "s", "e", "1h", history=True)
        with pytest.raises(InvalidArgumentError) as refused:
            session.set_data(1, T0)
    assert at in str(refused.value) and "later versions" in str(refused.value)
    assert client.zcard(at) == PLANTED_VERSIONS and client.zscore(at, str(T0)) is None
    args = history_set_args(b"\x02", T0, None, None, False, ("slot", 1), 1000)
    client.config_resetstat()
    with pytest.raises(redis.exceptions.ResponseError, match="^INVALID"):
        client.execute_command(
            "FCALL", script("history_set").function, 3, *history_set_keys(key), *args
        )
    usec = client.info("commandstats")["cmdstat_fcall"]["usec"]
    assert usec < BOUND_MS * 1000, f"the refusal took {usec / 1000:.1f} ms of server time"
    # A put keeps the later versions: written at once.
    put = history_set_args(b"\x02", T0, None, None, "put", ("slot", 2), 1000)
    usec = _fcall_usec(client, script("history_set").function, history_set_keys(key), put)
    assert usec < BOUND_MS * 1000 and client.zcard(at) == PLANTED_VERSIONS + 1


def test_a_trim_of_a_planted_history_removes_a_bounded_number_a_write(client, namespace):
    """A write through a handle keeping 3 versions of a history that holds many more
    (planted, or after the bound was lowered) removes at most HISTORY_DROP_MAX of the
    oldest per write: the history shrinks by as many each write, each in milliseconds."""
    key = ValueKey(namespace, "TRIM", "s", "e", "1h", "backtest")
    at, values = history_keys(key)
    _plant_versions(client, key, range(T0, T0 + PLANTED_VERSIONS))
    end = T0 + PLANTED_VERSIONS
    for number in (1, 2):
        args = history_set_args(b"\x02", end + number, 3, None, False, ("slot", number), 1000)
        usec = _fcall_usec(client, script("history_set").function, history_set_keys(key), args)
        assert usec < BOUND_MS * 1000, f"the trim took {usec / 1000:.1f} ms"
        left = PLANTED_VERSIONS + number - number * HISTORY_DROP_MAX
        assert client.zcard(at) == left and client.hlen(values) == left
    oldest = client.zrange(at, 0, 0)
    assert oldest == [str(T0 + 2 * HISTORY_DROP_MAX).encode()]


def test_a_forget_of_a_planted_big_history_costs_the_call_a_few_steps(client, namespace):
    """``value_forget`` unlinks the history's keys: the server frees a big one in the
    background, so a values hash of 100,000 planted fields costs the call microseconds (a
    DEL freed it in the call, answering nobody meanwhile)."""
    key = ValueKey(namespace, "FORGET", "s", "e", "1h", "backtest")
    _plant(client, history_keys(key)[1], 100_000, b"\x01")
    client.zadd(history_keys(key)[0], {str(T0): T0})
    args = forget_args(("slot", 1), 1000)
    usec = _fcall_usec(client, script("value_forget").function, forget_keys(key), args)
    # A DEL took about 75 ms here; the unlink takes microseconds.
    assert usec < 10_000, f"the forget took {usec / 1000:.1f} ms of server time"
    assert client.exists(*history_keys(key)) == 0


def _plant_tail(client: redis.Redis, stream: str, first: int, count: int) -> None:
    pipe = client.pipeline(transaction=False)
    for seq in range(first, first + count):
        pipe.xadd(stream, {"events": b'[{"seq":%d}]' % seq}, id=f"{seq}-1")
    pipe.execute()


def test_a_planted_torn_tail_is_cut_a_bounded_number_of_entries_a_call(
    client, namespace, redis_server
):
    """1,500 entries planted past ``next_seq``: an append refuses them as damage naming
    the stream (no append of the library leaves more than 1,000), nothing written; a
    load cuts them, at most 1,000 a call, and the log works again."""
    from sessionstore import CorruptLogError, SessionEvent, SessionHeader
    from sessionstore.keys import log_keys

    meta, stream = log_keys(namespace, "torn")
    note = [SessionEvent(seq=0, type="note", time=T0)]
    with sessionstore.connect(redis_server.url, namespace) as store:
        store.events.create(SessionHeader(id="torn"))
        store.events.append("torn", note)
        _plant_tail(client, stream, 1, 1_500)
        with pytest.raises(CorruptLogError) as refused:
            store.events.append("torn", [SessionEvent(seq=1, type="note", time=T0)])
        assert stream in str(refused.value)
        assert client.hget(meta, "next_seq") == b"1" and client.xlen(stream) == 1_501
        client.config_resetstat()
        assert [e.seq for e in store.events.load("torn").events] == [0]
        calls = client.info("commandstats")["cmdstat_fcall"]["calls"]
        assert client.xlen(stream) == 1 and calls == 2
        assert store.events.append("torn", [SessionEvent(seq=1, type="note", time=T0)]) == 2


#: A stored field or string planted with this many bytes: reading it into a function
#: took 100 ms to 1 s of server time (a meta hash's next_seq: about 0.4 s at 48 MB).
BIG_FIELD = 16 << 20


def _log_with_one_event(store, session_id: str) -> None:
    from sessionstore import SessionEvent, SessionHeader

    store.events.create(SessionHeader(id=session_id))
    store.events.append(session_id, [SessionEvent(seq=0, type="note", time=T0)])


def _meta(namespace: str, session_id: str) -> str:
    from sessionstore.keys import log_keys

    return log_keys(namespace, session_id)[0]


def _refusal(client: redis.Redis, function: str, keys: list[str], args: list) -> tuple[str, float]:
    """The error reply of one FCALL that must be refused, and its server time (us)."""
    client.config_resetstat()
    with pytest.raises(redis.ResponseError) as refused:
        client.execute_command("FCALL", script(function).function, len(keys), *keys, *args)
    stats = client.info("commandstats")["cmdstat_fcall"]
    return str(refused.value), float(stats["usec"])


def _append_call(namespace: str, session_id: str, header: bool) -> tuple[list[str], list]:
    from sessionstore import SessionEvent, SessionHeader
    from sessionstore.eventlog import encode_batch
    from sessionstore.keys import log_digest_key, log_keys
    from sessionstore.redis.logformat import append_args

    batch = encode_batch(session_id, [SessionEvent(seq=1, type="note", time=T0)])
    args = append_args(batch, SessionHeader(id=session_id, cwd="/work") if header else None)
    return [*log_keys(namespace, session_id), log_digest_key(namespace, session_id)], args


_META_FIELDS = ["next_seq", "entries", "bytes", "bytes_to", "ttl_ms", "version"]


@pytest.mark.parametrize(
    "field, header",
    [*((f, False) for f in _META_FIELDS), *((f, True) for f in _META_FIELDS)],
)
def test_a_planted_big_meta_field_is_measured_never_read(
    client, namespace, redis_server, field, header
):
    """A field of a session's meta hash planted with 16 MB (the tenant may HSET its own
    keys) is measured, never read: the append is refused as damage naming the key and
    the field, in microseconds of server time, and nothing is written. Without the
    header the append reads the fields it needs, with it every field the library
    writes there."""
    with sessionstore.connect(redis_server.url, namespace) as store:
        _log_with_one_event(store, "s")
    client.hset(_meta(namespace, "s"), field, b"9" * BIG_FIELD)
    before = namespace_snapshot(client, namespace)
    keys_, args = _append_call(namespace, "s", header)
    error, usec = _refusal(client, "log_append", keys_, args)
    assert error.startswith("CORRUPT") and _meta(namespace, "s") in error and field in error
    assert usec < BOUND_MS * 1000 / 10, f"{usec / 1000:.1f} ms of server time"
    assert namespace_snapshot(client, namespace) == before


def _planted_calls(namespace: str) -> dict[str, tuple[str, str, list[str], list]]:
    """Per case: (function, the key planted, the function's keys, its args)."""
    from sessionstore.keys import compute_lease_key, log_epoch_key, log_keys, log_lease_key

    lease, epoch = log_lease_key(namespace, "s"), log_epoch_key(namespace, "s")
    meta, stream = log_keys(namespace, "s")
    computing = compute_lease_key(ValueKey(namespace, "C", "s", "e", "1h", "backtest"), T0)
    token = "t" * 32
    return {
        "acquire-epoch": ("lease_acquire", epoch, [lease, epoch], [token, "60000"]),
        "acquire-owner": ("lease_acquire", lease, [lease, epoch], [token, "60000"]),
        "renew-owner": ("lease_renew", lease, [lease, epoch], [token, "1", "60000"]),
        "release-owner": ("lease_release", lease, [lease, epoch], [token]),
        "compute-lease": ("compute_lease", computing, [computing], ["take", token, "60000"]),
        "cut-tail-meta": ("log_cut_tail", meta, [meta, stream], ["1", "0-0", "1-1"]),
    }


@pytest.mark.parametrize("case", list(_planted_calls("-")))
def test_a_planted_big_lease_epoch_or_token_is_measured_never_read(client, namespace, case):
    """A writer lease's hash, a session's epoch, a compute lease's holder or a meta hash's
    next_seq planted with 16 MB: each function measures before it reads, and refuses as
    damage naming the key, in microseconds of server time, writing nothing."""
    function, planted, keys_, args = _planted_calls(namespace)[case]
    if planted.endswith((":lease", ":meta")):
        client.hset(planted, mapping={"owner" if planted.endswith(":lease") else "next_seq": b"1"
                                      * BIG_FIELD, "epoch": "1"})  # fmt: skip
    else:
        client.set(planted, b"1" * BIG_FIELD)
    before = namespace_snapshot(client, namespace)
    error, usec = _refusal(client, function, keys_, args)
    assert error.startswith("CORRUPT") and planted in error
    assert usec < BOUND_MS * 1000 / 10, f"{usec / 1000:.1f} ms of server time"
    assert namespace_snapshot(client, namespace) == before


def test_a_planted_big_entry_past_next_seq_is_cut_without_a_function_reading_it(
    client, namespace, redis_server
):
    """An entry of 16 MB planted past ``next_seq`` (a torn tail by the layout's rule): the
    append's function sees the stream is longer than the meta hash counts (XLEN) and
    leaves the tail to the client, which reads its ids and has ``log_cut_tail`` delete
    them; no function reads the entry, and the append then lands."""
    from sessionstore import SessionEvent
    from sessionstore.keys import log_keys

    with sessionstore.connect(redis_server.url, namespace) as store:
        _log_with_one_event(store, "s")
        _, stream = log_keys(namespace, "s")
        client.xadd(stream, {"events": b"[" + b"9" * BIG_FIELD + b"]"}, id="5-1")
        client.config_resetstat()
        assert store.events.append("s", [SessionEvent(seq=1, type="note", time=T0)]) == 2
        stats = client.info("commandstats")
        assert [e.seq for e in store.events.load("s").events] == [0, 1]
    fcalls = stats["cmdstat_fcall"]
    # log_append (told of the tail), log_cut_tail, log_append again
    assert fcalls["calls"] == 3
    assert fcalls["usec_per_call"] < BOUND_MS * 1000 / 10
    assert client.xlen(stream) == 2


def test_a_compact_hash_is_measured_too_whatever_the_servers_settings(client, namespace):
    """A server configured to keep big fields in compact hashes (a larger
    ``hash-max-listpack-value``) still has every field measured before it is read."""
    from sessionstore.keys import log_epoch_key, log_lease_key

    lease, epoch = log_lease_key(namespace, "s"), log_epoch_key(namespace, "s")
    before = client.config_get("hash-max-listpack-value")["hash-max-listpack-value"]
    client.config_set("hash-max-listpack-value", str(64 << 20))
    try:
        client.hset(lease, mapping={"owner": b"o" * BIG_FIELD, "epoch": "1"})
        assert client.object("encoding", lease) == b"listpack"
        error, usec = _refusal(client, "lease_acquire", [lease, epoch], ["t" * 32, "60000"])
    finally:
        client.config_set("hash-max-listpack-value", before)
    assert error.startswith("CORRUPT") and lease in error
    assert usec < BOUND_MS * 1000 / 10, f"{usec / 1000:.1f} ms of server time"


def test_a_stream_left_without_its_meta_hash_is_cut_by_the_first_append(
    client, namespace, redis_server
):
    """A stream whose meta hash is gone (a first append torn by an older version, a
    delete interrupted) holds no committed event: the append that creates the session
    cuts it as a torn tail from seq 0 and lands."""
    from sessionstore import SessionEvent, SessionHeader
    from sessionstore.keys import log_keys

    meta, stream = log_keys(namespace, "orphan")
    client.xadd(stream, {"events": b'[{"seq":0}]'}, id="0-1")
    with sessionstore.connect(redis_server.url, namespace) as store:
        store.events.create(SessionHeader(id="orphan"))
        store.events.append("orphan", [SessionEvent(seq=0, type="note", time=T0)])
        assert [e.type for e in store.events.load("orphan").events] == ["note"]
    assert client.xlen(stream) == 1 and client.hget(meta, "next_seq") == b"1"


def test_a_header_field_stored_past_its_size_differs_from_any_header(
    client, namespace, redis_server
):
    """A header field longer than the library stores (written by an older version, or by
    hand) is measured, not read, and makes a header compared with it differ."""
    keys_, args = _append_call(namespace, "s", header=True)
    with sessionstore.connect(redis_server.url, namespace) as store:
        _log_with_one_event(store, "s")
    client.hset(_meta(namespace, "s"), "cwd", b"c" * BIG_FIELD)
    before = namespace_snapshot(client, namespace)
    client.config_resetstat()
    reply = client.execute_command("FCALL", script("log_append").function, 3, *keys_, *args)
    assert reply == [b"EXISTS"]
    assert client.info("commandstats")["cmdstat_fcall"]["usec"] < BOUND_MS * 1000 / 10
    assert namespace_snapshot(client, namespace) == before


def test_a_guarded_delete_never_reads_an_entry_and_refuses_what_it_cannot_tell(
    client, namespace, redis_server
):
    """A delete given the log's last event (``EventLog.delete(..., last=)``) compares
    that event's digest, never a stream entry: with 48 MB planted in the log's entry it
    reads no entry (the server counts no stream read among the commands the call ran),
    costs little server time beyond what freeing that entry costs (measured by an
    UNLINK of a twin of it, as the server frees such an entry at once), and deletes. A
    last event stored without a digest (by a client of an older version) cannot be told
    from another: the delete is refused and nothing is deleted; arguments past their
    sizes are refused as INVALID."""
    from sessionstore import SeqConflictError, SessionEvent, SessionHeader
    from sessionstore.eventlog import event_text
    from sessionstore.keys import log_digest_key, log_keys
    from sessionstore.redis.logformat import event_digests

    events = [SessionEvent(seq=i, type="note", time=T0 + i, data={"i": i}) for i in range(2)]
    keys_ = [*log_keys(namespace, "s"), log_digest_key(namespace, "s")]
    with sessionstore.connect(redis_server.url, namespace) as store:
        store.events.create(SessionHeader(id="s"))
        store.events.append("s", events)
        stream = keys_[1]
        [(entry_id, _)] = client.xrange(stream)
        client.delete(stream)
        planted = b"[" + b",\n" * (24 << 20) + b"]"
        client.xadd(stream, {"events": planted}, id=entry_id)
        digest = event_digests([event_text(events[1])])
        before = namespace_snapshot(client, namespace)
        function = script("log_delete").function
        for args in (["2", digest[:7]], ["2", digest + b"x"], ["x", digest], ["9" * 20, digest]):
            with pytest.raises(redis.ResponseError, match="INVALID"):
                client.execute_command("FCALL", function, 3, *keys_, *args)
        assert namespace_snapshot(client, namespace) == before

        client.hdel(keys_[2], "0")  # the block of seqs 0-63, as a client without digests
        with pytest.raises(SeqConflictError):
            store.events.delete("s", last=events[1])
        assert client.exists(*keys_[:2]) == 2

        store.events.append("s", [SessionEvent(seq=2, type="note", time=T0 + 2)])
        twin = stream + ":twin"
        client.xadd(twin, {"events": planted}, id=entry_id)
        client.config_resetstat()
        client.unlink(twin)
        freeing = client.info("commandstats")["cmdstat_unlink"]["usec"]
        client.config_resetstat()
        last = store.events.read_from("s", 2)[0]
        client.config_resetstat()
        store.events.delete("s", last=last)
        commands = client.info("commandstats")
    assert client.exists(*keys_) == 0
    stats = commands["cmdstat_fcall"]
    assert stats["calls"] == 1 and stats["usec"] < freeing + BOUND_MS * 1000
    assert not [name for name in commands if name.startswith(("cmdstat_xr", "cmdstat_xread"))]


@pytest.mark.parametrize("count", ["-1", "0", "-99999999", "nan", "1e400", "1.5"])
def test_a_history_page_takes_at_most_its_page_whatever_the_count_asked(client, namespace, count):
    key = ValueKey(namespace, "PAGE", "s", "e", "1h", "backtest")
    at, values = history_keys(key)
    whens = range(T0, T0 + 3_000)
    client.zadd(at, {str(w): w for w in whens})
    client.hset(values, mapping={str(w): b"\x01" for w in whens})
    page = client.execute_command(
        "FCALL_RO", script("history_page").function, 2, at, values, T0 + 10_000, count
    )
    assert 2 <= len(page) <= 2 * 1_000


@pytest.mark.parametrize(
    "epoch", ["nan", "-nan", "inf", "1e308", "0x7fffffffffffffff", "  12", "1e18",
              "-9223372036854775808", "9007199254740992"]
)  # fmt: skip
def test_an_epoch_the_library_never_writes_is_refused_naming_its_key(
    client, namespace, redis_server, epoch
):
    """A writer lease's epoch planted as anything but the integer the library writes: the
    writer, a fenced append and a release are refused as damage naming the epoch key,
    never taken for another writer's lease (which locked the session's writers out)."""
    from sessionstore.keys import log_epoch_key

    planted = log_epoch_key(namespace, "s")
    header = sessionstore.SessionHeader(id="s", created_at=T0)
    with sessionstore.connect(redis_server.url, namespace) as store:
        store.events.create(header)
        client.set(planted, epoch)
        with pytest.raises(CorruptDataError, match=re.escape(planted)):
            store.events.writer(header)
        client.set(planted, "5")
        with store.events.writer(header) as writer:
            client.set(planted, epoch)
            writer.emit("note", {})
            with pytest.raises(CorruptDataError, match=re.escape(planted)):
                writer.flush()
            client.set(planted, "5")
        assert [e.type for e in store.events.load("s").events] == ["note"]


def test_a_read_of_a_stream_planted_with_entries_asks_for_a_bounded_count(
    client, namespace, redis_server
):
    """A tenant's stream holding 200,000 entries ids ``0-1`` to ``0-200000`` (one seq):
    a read asks for at most one entry more than its range has seqs, and refuses it."""
    from sessionstore.keys import log_keys

    with sessionstore.connect(redis_server.url, namespace) as store:
        store.events.create(sessionstore.SessionHeader(id="s"))
        store.events.append("s", [sessionstore.SessionEvent(seq=0, type="note", time=1, data={})])
        meta, stream = log_keys(namespace, "s")
        client.hset(meta, "next_seq", 2)
        pipe = client.pipeline(transaction=False)
        for start in range(2, 200_002, 10_000):
            for n in range(start, start + 10_000):
                pipe.execute_command("XADD", stream, f"0-{n}", "events", "[]")
        pipe.execute()
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
        try:
            with pytest.raises(CorruptLogError):
                store.events.load("s")
            ranges = [e["command"].split() for e in client.slowlog_get(128)
                      if e["command"].startswith(b"XRANGE")]  # fmt: skip
        finally:
            client.config_set("slowlog-log-slower-than", 10_000)
    assert ranges and all(r[-2] == b"COUNT" and int(r[-1]) <= 12_002 for r in ranges), ranges


def test_the_largest_epoch_taken_over_is_one_the_next_writer_can_write_with(
    client, namespace, redis_server
):
    """A released epoch just below the largest one accepted: the next lease takes one
    more, which its appends' fence still reads; none follows that one."""
    from sessionstore.keys import log_epoch_key

    header = sessionstore.SessionHeader(id="s", created_at=T0)
    with sessionstore.connect(redis_server.url, namespace) as store:
        store.events.create(header)
        client.set(log_epoch_key(namespace, "s"), str(-(2**53 - 2)))
        with store.events.writer(header) as writer:
            writer.emit("note", {})
        assert [e.type for e in store.events.load("s").events] == ["note"]
        assert int(client.get(log_epoch_key(namespace, "s"))) == -(2**53 - 1)
        # No lease can follow the largest epoch: refused as damage, nothing written.
        with pytest.raises(CorruptDataError, match="the largest epoch"):
            store.events.writer(header)
