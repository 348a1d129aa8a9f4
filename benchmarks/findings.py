"""What profiling found behind each target, keyed by ``Result.key``.

``docs/benchmarks.md`` shows an entry only when its row fails in that run. The numbers
quoted were measured on the benchmark machine: client CPU with cProfile and
``time.process_time``, with the network call or the fsync stubbed out where it says so;
server time per call with ``INFO commandstats``; a "hot loop" is the same call repeated
with nothing else running in between, which is cheaper per call than the real ping-pong
(every call there starts with cold caches after waiting for the reply, so Python overhead
counts about twice).
"""

from __future__ import annotations

_ENCODE = """\
`sessionstore/eventlog.py` `encode_batch` validates every event and checks that its data
survives a JSON round trip unchanged (the contract: NaN, tuples, sets, datetimes and the
like are refused, not silently changed). For a batch that is one `orjson.dumps` and one
`orjson.loads` of the whole list and one comparison (about 0.45 us per event), then each
event's own text; with the rest of the validation and the `StoredEvent` it costs 0.8 us
per event for 100 events and 1.3 us for one. The baselines only serialise (0.1-0.3 us
per event). What the round trip guards against cannot be seen in orjson's output (a tuple
and a list, or NaN and None, write the same text), so the check stays."""

_FACADE = """\
Every API call goes through the flow driver (`sessionstore/flows.py` `run`, 0.8 us: one
generator, one `Call`, one `StopIteration`), the argument checks, the error boundary and
the key-name cache; in a hot loop with the network stubbed out that is 2-5 us per call
over raw redis-py, and 5-10 us in the real ping-pong."""

#: Shown above the entries: what has landed, and what the entries describe.
LANDED = """\
Landed since the first measurements (each row's entry below describes what remains):
`load` builds each `SessionEvent` in one pass from the raw XRANGE reply (no
`pairs_to_dict`, no intermediate `StoredEvent`, the model built without re-validation);
`log_append.lua` reads three meta fields with `HMGET`, lets the first `XADD` prove there
is no torn tail, and takes a batch's events as one MessagePack argument; `update` is one
round trip when nobody else wrote (a refused swap returns the record found, and a handle
starts from the record it saw last); the lossless-JSON check is one round trip per batch;
JSONL appends keep their logs open; SQLite appends move `next_seq` with one guarded
`UPDATE` and insert with multi-row `INSERT`s; the benchmark runs each side first equally
often in every repetition (the load rows were biased by up to a third). The
openai-agents targets for 100-event appends and for loads cannot be met with stream
storage (see their entries)."""

FINDINGS: dict[str, str] = {
    "Redis event log: append 1 event per call": f"""\
{_FACADE}

On the server, `lua/log_append.lua` costs 6.4-7.2 us per one-event call against 4.1 us for
the minimal script (`INFO commandstats`): it reads `version` and `ttl_ms` besides
`next_seq` and checks them, checks the entry count (`XLEN`), writes `last_time` with
`next_seq`, and unpacks the MessagePack argument. Measured in one process: the bare
script call costs 2 us more than the raw one, the backend's `append` 5 us more, and the
public API 12 us more (of a 75-90 us round trip). The gap left is the facade above and
`encode_batch` for one event (1.3 us).""",
    "Redis event log: append 100 events per call": f"""\
Per 100-event call, the server spends 198-215 us in `log_append.lua` against 152-161 us for
the minimal script (the seq of each entry is formatted in Lua, the batch is unpacked from
MessagePack, and the meta hash and entry count are checked), and the client about 1 us
per event more than the baseline, most of it in `encode_batch`:

{_ENCODE}""",
    "Redis event log: load 10k events": """\
Without the garbage collector, ours decodes at 2.3 us per event against 1.9 us for XRANGE
plus `orjson.loads` into a dict. The difference is the contract's `SessionEvent`: a
pydantic model costs 0.4 us more to build than a dict (an object, its `__dict__` and
three slots, set by `sessionstore/models.py` `restored_event`, which already skips
`model_construct`'s 1.7 us), and checking each entry's id, seq field and field names
(damage must be refused, not returned) costs 0.25 us; taking the raw reply instead of
redis-py's dict per entry wins back 0.3 us of that. With the collector running, the
model's extra tracked object per event makes collections more frequent, which costs both
sides but ours more.""",
    "Redis event log: load 100k events": """\
As for 10k events: the `SessionEvent` objects the contract returns (0.4 us more per event
than a dict, and one more object for the garbage collector to track) against the checks
the baseline does not make.""",
    "Redis event log: load 100k events: peak memory": """\
Each `SessionEvent` shares one fields-set and the stored events are never held next to the
decoded ones, so the peak is the decoded list itself plus one XRANGE reply of 1000
entries.""",
    "Redis event log: iter_events(batch=1000) over 100k: peak memory": """\
`iter_events` reads one XRANGE chunk at a time and hands its events out before reading
the next, so the peak is one chunk of decoded events and its reply.""",
    "Redis event log: 4 processes appending 1 event per call to 4 sessions": """\
Two cores serve the four clients, the Redis server and whatever else runs on the machine.
One client process at fast pace already keeps most of a core busy, so four processes can
add at most the second core, and nothing at all when other work takes it.""",
    "Redis values: get_data": f"""\
{_FACADE}

For `get_data` that is 3.2 us per call in a hot loop against 0.8 us for HMGET
plus `msgpack.unpackb` (network stubbed out): the flow driver, `to_epoch_ms`, the
look-ahead check and the handle remembering the record for the next `update`.""",
    "Redis values: set_data": f"""\
{_FACADE}

For `set_data` that is 4.5 us per call in a hot loop: besides the flow driver,
`codec.encode_value` packs the value and unpacks it again to prove it round-trips (1.5 us
more than `msgpack.packb`).""",
    "Redis values: update, 1 process": """\
An update is one round trip when nobody else wrote (the handle starts from the record it
saw last; a refused swap returns the record found): twice as fast as WATCH, HMGET and
MULTI/EXEC.""",
    "Redis values: update, 4 processes on the same value": """\
A lost race costs one round trip (`value_swap.lua` returns the record it found), against
three for WATCH / HMGET / MULTI-EXEC.""",
    "vs openai-agents: append 1 event per call": """\
The peer spends several round trips per `add_items` (WATCH, two TYPE checks, MULTI/EXEC and
its asyncio pipeline bookkeeping); ours is one `EVALSHA`. What remains of ours is
described for "Redis event log: append 1 event per call".""",
    "vs openai-agents: append 100 events per call": f"""\
The peer stores a conversation as a Redis list: one `RPUSH` of 100 JSON strings costs it
30-57 us of server time per call, where ours spends about 200 us in `log_append.lua`
adding 100 stream entries of five fields each (`INFO commandstats`), which is what gives
every event its own id and lets `load` refuse damage. Even with no client-side cost at
all ours could not be 2.5x faster; the target is out of reach for stream storage.

{_ENCODE}""",
    "vs openai-agents: load 10k events": """\
The peer's `get_items` is one `LRANGE` and one `json.loads` per item: it reads as fast as
the raw XRANGE + orjson baseline of the load rows, or faster (a list entry is one string,
a stream entry five fields). Being 2x faster than that would mean beating the bare driver
by 2x, which no reader of decoded events from Redis can do; the target cannot be met as
stated.

Ours is also slower here than in the "Redis event log" load rows, because this group runs
with openai-agents imported: 170k objects tracked by the garbage collector, which its full
passes walk. A 10k-event load takes 132 ms with the collector on, 25 ms with it off and
27 ms after `gc.freeze()` (measured in one process). Ours allocates one tracked object
more per event than a plain dict (the model), so it meets those full passes more often.
An application with a large heap that loads long logs gains the same by calling
`gc.freeze()` once its start-up is done; the library does not switch the collector off
behind its caller's back.""",
    "openai-agents Session: add_items, 1 item per call": """\
`SessionStoreSession.add_items` is one `EVALSHA` of `log_append.lua` (the object keeps the
stored next seq from its last append); the peer's is WATCH, two TYPE checks and
MULTI/EXEC. What remains of ours is described for "Redis event log: append 1 event per
call".""",
    "openai-agents Session: add_items, 100 items per call": f"""\
The two come out about even: ours saves the peer's extra round trips (WATCH, two TYPE
checks, MULTI/EXEC) but spends about 200 us of server time adding 100 stream entries where
the peer's `RPUSH` of 100 strings takes 30-57 us (see "vs openai-agents: append 100 events
per call"), and the client builds 100 `SessionEvent` objects (1.2 us each, validated)
before `encode_batch`:

{_ENCODE}""",
    "openai-agents Session: get_items of 10k items, a new session object": """\
A new session object reads the whole log: XRANGE in chunks of 1000 entries of five fields
each, every entry decoded into a `SessionEvent`, against the peer's one `LRANGE` of 10k
strings and a `json.loads` of each (see "vs openai-agents: load 10k events": the same
reading cost, and the same garbage-collector passes over the SDK's heap). Then the items
are copied (`orjson` dumps and loads of the list, about 7 ms for 10k) so that a caller may
change them without changing what the object keeps. A stream entry costs more to read
than a list element; what the adapter gives instead is the next row: an object that has
read the log reads only the events appended since.""",
    "openai-agents Session: get_items of 10k items, the same object again": """\
The object keeps the items it has read: a `get_items` reads from the last event it knows
(one XRANGE, checking that event is still there) and copies the items it returns.""",
    "SQLite event log: append 1 event per call": """\
The time is the COMMIT (fsync of the WAL). Ours writes one page more per commit than the
raw insert: `next_seq` in the session row, which is how a lost last row is detected. An
append to a session this backend has seen is one guarded `UPDATE`, the torn-tail `DELETE`
and the `INSERT` in one transaction.""",
    "SQLite event log: append 100 events per call": f"""\
Multi-row `INSERT`s of up to 64 rows replace `executemany`; what is left is the commit and
`encode_batch`:

{_ENCODE}""",
    "JSONL event log: append 1 event per call": """\
An append to a log this backend keeps open is lock, `stat` of the path (to notice a
replaced file), write, fsync, `fstat`, unlock: two system calls more than the baseline's
write and fsync, and the `encode_batch` of one event (1.3 us).""",
    "JSONL event log: append 100 events per call": f"""\
With the fsync stubbed out, one 100-event call costs ours 136 us of CPU against about 35 us
for the baseline, which only serialises and writes. The backend itself takes about 40 us
(lock, the checks that notice another writer's bytes, building the lines); the rest is
`encode_batch`, a cost the baseline does not pay:

{_ENCODE}

Against the baseline's 2.8 us per event in all (the fsync shared by 100 events), 0.8 us
of validation alone puts the ratio near 0.75.""",
}
