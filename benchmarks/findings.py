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
survives a JSON round trip unchanged (the contract: NaN, tuples, sets, datetimes, UUIDs,
plain enums and the like are refused, not silently changed). For plain data it makes no
round trip: one `orjson.dumps` per event and one pass of `sessionstore/jsondata.py`
`plain` over the batch's data prove it (msgpack with `strict_types`, which packs exactly
dicts, lists, strs, ints, floats, bools and None and refuses every other type, and a
search of the packed doubles for NaN or infinity); anything else (a tuple, an enum, a
subclass, a NaN) gets the round trip as before, which gives every verdict and message.
Measured per event of a 100-event batch with the network left out, fastest of 15 runs
on this machine under load: the workload's events 0.72-0.76 us in all (1.08 with the
round trip), a 300-byte agent event 1.02-1.13 us (1.59), against 0.27-0.44 us for the
baselines' one `orjson.dumps` per event; of that the check is 0.15 us for the workload's
events and 0.35-0.42 us for the 300-byte one (row "Event data check": the round trip
took 1.15 us), the checks of the event and harness fields 0.25-0.35 us."""

_FACADE = """\
Every API call goes through the flow driver (`sessionstore/flows.py` `run`, 0.8 us: one
generator, one `Call`, one `StopIteration`), the argument checks, the error boundary and
the key-name cache; in a hot loop with the network stubbed out that is 2-5 us per call
over raw redis-py, and 5-10 us in the real ping-pong."""

_MODEL = """\
`load` returns checked `SessionEvent` objects (a pydantic dataclass with slots, one
object for the garbage collector). A stream entry's JSON array is parsed and checked in
one pass by msgspec into a strict struct of the event's exact shape (types, 64-bit
ranges, no missing or extra field, `data` an object; `sessionstore/models.py`
`stored_events`), the seqs compared with their places, then the events built without
pydantic; text msgspec might read otherwise than orjson (a run of 19 digits, a raised
recursion limit) goes to orjson. Measured per event on a 10k-event log with the network
and the collector left out: `orjson.loads` into dicts (all the baseline does) 0.9-1.0
us; msgspec's checked parse 0.55-0.6 us, building the events about 0.3 us (0.45 before
each event was built from one `msgspec.structs.astuple` of its struct instead of four
attribute passes: 135 against 216 ns in a hot loop of 1000 events), the digit scan 0.17
us: about 1.05 us in all, against 1.8 us for the orjson parse and column checks it
replaced and 2.4 us for pydantic's `validate_json`. What remains over the baseline is
one Python object built per event, the price of returning typed events."""

_GC = """\
Each event is an object the collector tracks. After a 10k-event load the oldest
generation holds 16.3k more objects for ours (the 10k events and the 6.3k containers in
their data) and 7.2k for the peer, whose items are plain dicts (a dict holding only
scalars is not tracked); the model events made it 37.5k. With openai-agents imported
the process tracks about 172k objects and a full collection of that heap costs 120-170
ms here; Python runs one once a quarter of the heap (about 43k objects) has moved to
the oldest generation since the last. A read now builds each batch of events (256
and more) with collection deferred (`sessionstore/gcdefer.py`: the first generation's
threshold set to 0 for the batch, one batch at a time, a collector the application
switched off left alone), so the objects it builds start one collection when it ends
instead of dozens while it runs, and no full collection during the load. Where those
collections land then is whatever runs next, so the rows of reads collect before every
block (see Method): each side pays for what it starts itself. Measured alone (one
process, 6 loads each, interleaved with the baseline, collected before each pair),
Redis load of 10k events 12.9 -> 12.2 ms, of 100k 321 -> 226 ms against 257-273 ms for
the baseline. An application with a large heap gains more still by calling
`gc.freeze()` once its start-up is done."""

#: Shown above the entries: what has landed, and what the entries describe.
LANDED = """\
Landed since the first measurements (each row's entry below describes what remains):
stored events parsed and checked in one msgspec pass into the event's exact shape (Redis
load 10k 0.64 -> 0.73-0.78, 100k 0.71 -> 0.83-0.87 in three full runs); the OpenAI Agents
adapter reads records whose data values stay JSON text (get_items through a new session
object 0.40 -> 1.40-1.48, the same object again 0.92 -> 6.1-6.5); a single script call
sent alone instead of in a pipeline of one; open writers renew their leases due together
in one round trip (Redis, 10k open writers against 1k: 1.95 -> 0.98-1.28 per writer); the
lossless-JSON check of a batch parses only the data;
one event type through the stack (`SessionEvent`, with the canonical JSON of each event
beside it in the batch a backend receives; no private pydantic attribute is written), each
stored event parsed once on every backend; the Redis stream holds one entry per append (at
most 1000 events) with its events as one JSON array (see "The Redis stream layout"
below); an event is a slotted pydantic dataclass, one object for the garbage collector
instead of three, and a Redis read decodes each entry on its own and checks seqs and
data on the events built (Redis load 10k 0.58 -> 0.77, 100k 0.35 -> 0.73, peak memory
1.71 -> 0.92 of the baseline in runs of this round); `update` is one round trip when
nobody else wrote; the lossless-JSON check is one round trip per batch; JSONL appends
keep their logs open; SQLite appends move `next_seq` with one guarded `UPDATE` and
insert with multi-row `INSERT`s, and its lease transactions neither wait for the disk
nor sleep in the busy handler; the benchmark runs each side first equally often in every
repetition; the async API no longer waits twice a call (its redis-py pool never blocks:
the store's fair queue already bounds its calls) and reads and writes a plain value
without the flow machinery when no telemetry is recorded (async get_data 0.72 -> 0.83-0.84,
set_data 0.60 -> 0.68-0.74, append of 1 event 0.70 -> 0.76-0.77 in two runs of the group
each, before and after); reads build each batch of events with garbage collection deferred
(Redis load of 100k events 0.87 -> 1.5 in a run of the group, 321 -> 226 ms measured
alone), and their rows collect before every block. The Redis baselines are the same
script called raw (appends) and the fastest raw read of the same layout (loads)."""

#: The measured stream layouts (``python -m benchmarks.layouts``), shown after the entries.
LAYOUTS = """\
`python -m benchmarks.layouts` measures each candidate raw (redis-py, orjson and a
minimal script doing the same `XADD`s and `HSET`, no library code), in events per second,
two runs on the benchmark machine, thousands of events per second (append: 1 or 100
events per call; load: 10k events appended 1000 at a time, or 1 at a time):

| Layout | append 1 | append 100 | load, by 1000 | load, by 1 |
| --- | ---: | ---: | ---: | ---: |
| per-field entries (the first layout) | 7.6 / 7.1 | 112 / 87 | 317 / 282 | 295 / 272 |
| one JSON field per event | 6.8 / 8.4 | 100 / 136 | 425 / 520 | 429 / 368 |
| one entry per batch (kept) | 7.8 / 6.3 | 160 / 116 | 1,180 / 1,157 | 484 / 418 |

One entry per batch reads a log written in batches 3.7x faster than per-field entries
(one bulk string per append instead of four fields per event), and no slower when every
append is one event; appends cost the same for one event and less for a batch (one
`XADD`). What operators rely on is kept: `redis-cli --raw XRANGE` shows each event's seq,
type and data, one per line (`docs/operations.md`); an entry's id is `<seq of its last
event>-<number of events>`, so `XRANGE <seq>-0 +` starts at the entry holding a seq and
`read_from(seq)` stays exact; entries hold at most 1000 events, so `iter_events` and
limited reads fetch at most 2000 events more than they return; the seq check, the replay
comparison (event by event, across entries of either layout) and the torn-tail cut stay
in `log_append.lua`; logs written per field still load and take appends (tested in
`tests/test_redis_backend.py`)."""

_COMMIT_GAP = """\
On this machine a durable SQLite commit (WAL, `synchronous=FULL`, as both savers commit)
costs what the process did before it, not only its own write: `python -m
benchmarks.fsync_gap` commits one row at a time with a given amount of work between
commits: over three runs the median commit took 44-51 us with none or 20 us of work,
171-215 us after 100 to 500 us, and 47-183 us after 50 us, the edge (the virtual disk's
flush is slower when it is not kept busy)."""

_JSON_TEXT = """\
The baseline writes each text into its event's text as it is (`orjson.Fragment`: no
parse, no check); ours checks each with one parse, as the contract says (a JSON object,
no NaN or Infinity, 64-bit integers, valid Unicode, the nesting limit), then proves the
text canonical by writing the parsed object back and comparing (so the same data is
stored as the same bytes whichever way it came). Measured per event, `encode_batch` of
the workload's events with the network left out: for a 100-event batch 1.04 us with
their data as text against 0.76 us as Python objects; of it the parse of the batch's
texts (msgspec, one array) 0.27 us, the writing back and comparison 0.11 us, the event's
text with its data as a fragment 0.11 us (all the baseline does), the checks of the
event and its harness fields the rest. For a single event, 3.3 us against 2.0 us. The
0.9 target leaves ours about 0.24 us an event over the baseline at 100 events per call,
less than the one parse the contract asks for; for events as small as the workload's,
text is no cheaper to append than Python data (the parse builds the objects the Python
path is given). A validating parse that builds nothing (none of msgspec, orjson or the
standard library offers one) would take the parse's object building away."""

_ASYNC = """\
Both sides make one command a call on one event loop, through redis-py's asyncio
client; what ours adds is its own layers: a place among the store's `max_connections`
calls (its fair queue: taken and given back without waiting when one is free), the
client of the running loop, the error boundary and the backend's operation. Measured
with `get_data` alone (4,000 calls, three times): 84-85 us a call against 59-61 us for
the baseline while ours also went through redis-py's `BlockingConnectionPool` (a
condition and a timeout a call: the baseline on that pool took 69-72 us); with that pool
replaced by one that never waits (`AsyncSlotPool`: the fair queue already bounds the
calls) 75 us, and without the flow machinery for a plain handle when no telemetry is
recorded (as the sync API) 71-72 us. cProfile puts what is left in those layers (about
3 us of our own frames a call) and in one more turn of the event loop every few calls."""

FINDINGS: dict[str, str] = {
    "Redis event log: append 1 event per call": f"""\
{_FACADE}

Both sides run `lua/log_append.lua` (the same server time); the difference is all client
side: the facade above and `encode_batch` for one event, 2.2-2.4 us on this machine under
load (checks of the event, the lossless check, the harness fields, the batch built)
against one `orjson.dumps` (0.3 us) for the baseline.

{_ENCODE}""",
    "Redis event log: append 100 events per call": f"""\
Both sides run `lua/log_append.lua` with the same entry (one `XADD` of the batch's JSON
array), yet not in the same server time: in `INFO commandstats` `FCALL log_append` took
7-25 us a call more than `EVALSHA` of the same script (69-100 against 59-93 us, its
`XADD` 9-11 against 7-8 us), for reasons not yet traced. On the client `encode_batch`
costs 0.72-0.76 us per event for a 100-event batch, against one `orjson.dumps` per event
(0.27-0.3 us) for the baseline, which checks nothing; the facade adds its cost per call
(see "Redis event log: append 1 event per call").

{_ENCODE}""",
    "Redis event log: append 1 JSONText event per call": f"""\
{_FACADE}

{_JSON_TEXT}""",
    "Redis event log: append 100 JSONText events per call": f"""\
{_JSON_TEXT}""",
    "Redis event log: load 10k events": f"""\
The baseline returns the dicts `orjson.loads` makes of each entry (1 us per event); ours
returns validated events:

{_MODEL}""",
    "Redis event log: load 100k events": f"""\
As for 10k events, and the garbage collector weighed more: 100k events leave 163k tracked
objects (375k when events were `BaseModel`s), and each full collection walked
everything loaded so far, several times a load, until reads deferred collection while
they build a batch:

{_GC}

{_MODEL}""",
    "Redis event log: load 100k events: peak memory": """\
A whole read asks for the entries holding the next 10k events (`WINDOW`) and decodes them
entry by entry, so the parsed records and the reply in flight stay small; the peak is
the events themselves, one slotted object each beside the data the baseline's dicts
hold (1.7x the baseline when events were `BaseModel`s).""",
    "Redis event log: iter_events(batch=1000) over 100k: peak memory": """\
`iter_events` reads the entries that can hold its next 1000 events (ids up to their last
seq plus 1000: entries hold at most 1000 events), so one reply holds at most 3000 events
and is handed out before the next is read.""",
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
Most of the gap is the exactly-once write on the server: `FCALL` of `value_swap` costs
9.4 us per call by `INFO commandstats` in this scenario against 0.45 us for the
baseline's `HSET` (the writer slot's record measured, read and written, `TIME`, `PTTL`,
the index entry's `ZSCORE`, the value; see "What exactly once costs" in
`docs/operations.md`, and `python -m benchmarks.value_write_cost`: a function doing
nothing but that `HSET` already costs several times the `HSET`, and the record
bookkeeping is most of the rest). On a single server the index entry is checked in the
same call (one function call a write); a cluster sends `index_add` apart. On the client
the call carries 17 arguments that redis-py encodes one by one, and:

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
    "Async API (Redis): get_data": f"""\
{_ASYNC}""",
    "Async API (Redis): set_data": f"""\
{_ASYNC}

On top of it the write is the exactly-once `FCALL` of `value_swap` (about 6 us of server
time against 0.2 us for the baseline's `HSET`, see "Redis values: set_data") and its
13 arguments to encode, where the baseline sends 5.""",
    "Async API (Redis): append 1 event per call": f"""\
{_ASYNC}

The event's checks and encoding are the sync row's (see "Redis event log: append 1 event
per call"): about 2 us for one event against one `orjson.dumps` for the baseline.""",
    "Async API (Redis): append 100 events per call": """\
The same work as the sync row, on the event loop: `encode_batch` checks and encodes every
event (0.76 us an event for this workload against 0.27-0.3 us for the baseline's one
`orjson.dumps`, see "Redis event log: append 100 events per call").""",
    "Async API (Redis): load 10k events": """\
The same work as the sync row (see "Redis event log: load 10k events"): ours returns
checked `SessionEvent` objects, the baseline the dicts `orjson.loads` makes. Timed on
its own (one load of the 10k events at a time, three times) the async `load` took 11-13
ms, as the sync one (10.6-14.8 ms): the async API adds nothing measurable to a read this
size; within the group's run the ratio moved between 0.72 and 0.87 from run to run.""",
    "vs openai-agents: append 1 event per call": """\
The peer spends several round trips per `add_items` (WATCH, two TYPE checks, MULTI/EXEC and
its asyncio pipeline bookkeeping); ours is one `EVALSHA`. What remains of ours is
described for "Redis event log: append 1 event per call".""",
    "vs openai-agents: append 100 events per call": f"""\
The peer's `RPUSH` of 100 JSON strings against our one `XADD` of the batch's JSON array:
the server costs are now alike, and what separates the two is the client side.

{_ENCODE}""",
    "vs openai-agents: load 10k events": f"""\
The peer's `get_items` is one `LRANGE` and a stdlib `json.loads` per item; ours returns
10k checked `SessionEvent` objects, which the collector tracks, where the peer's plain
dicts of scalars are not tracked. The same protocol on both sides, our
`SessionStoreSession.get_items`, which reads records instead of events, is 1.4x the
peer (row "get_items of 10k items, a new session object"); the gap here is the
collector:

{_GC}

{_MODEL}""",
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
A new session object reads the log as records (`EventLog.read_records_from`,
`sessionstore/records.py`): msgspec parses and checks each stored event's fields as a
read of events does but keeps each value of its data as its JSON text, in structs the
garbage collector does not track; the adapter parses every value once (one
`orjson.loads` of them all, which finds damage inside them as an event read does),
keeps each item's stored text for later reads and returns the items it parsed. No
`SessionEvent` is built and nothing is serialised again. Before, it built 10k events,
the collector's passes over them and the SDK's heap came with them, and it dumped each
item to keep its text: 0.40x the peer, now 1.4x.""",
    "openai-agents Session: get_items of 10k items, the same object again": """\
The object keeps the items it has read as JSON text: a `get_items` reads from the last
event it knows (one XRANGE, checking that event is still there) and decodes the items it
returns from that text (one `orjson.loads` of the texts joined).""",
    "SQLite event log: append 1 event per call": f"""\
{_COMMIT_GAP} The baseline commits back to back; ours does its checks and encoding
between commits, so on this disk each of its commits is also the slower kind.

The time is the COMMIT (fsync of the WAL). Ours writes one page more per commit than the
raw insert (3.1 WAL pages per commit against 2.1): `next_seq` in the session row, which
is how a lost last row is detected. An append to a session this backend has seen is one
guarded `UPDATE`, the torn-tail `DELETE` and the `INSERT` in one transaction; the SQL
statements take about 27 us of a commit of 230-330 us.""",
    "SQLite event log: append 100 events per call": f"""\
Multi-row `INSERT`s of up to 64 rows replace `executemany`; what is left is the commit and
`encode_batch`. This row passed (0.88-0.92) when the one-core issue was filed; the drop
came with the append-time checks of the harness fields and of events built without
validation (`encode_batch` 1.70 us per event before them, 2.26 us after, 2.19 us now,
measured side by side on one machine), which later contracts require:

{_ENCODE}""",
    "Open writers (SQLite): open 10,000 writers, emit 1 event to each, flush all (per writer)": """\
Every writer takes, renews and releases its lease in a transaction of its own. Those
commit without waiting for the disk (a lease means nothing once its process is gone,
and a power loss ends every process), and the threads of one process queue on an
in-process lock for the write lock instead of sleeping in SQLite's busy handler (1 to
100 ms a time) while the drain thread renews leases: in runs of this scenario alone 10k
writers cost 1.0-1.4x per writer what 1k do, against 3.3x before (open 4.6 ms per writer
at 10k, now 0.3-0.5 ms). What grows is the flush, which waits for the one drain thread's
appends, each its own durable commit (an fsync), so the single repetition of the full
run moves with whatever else uses the disk.""",
    "Open writers (Redis): open 10,000 writers, emit 1 event to each, flush all (per writer)": """\
A writer renews its lease between three tenths and a third of it, on a grid of a
thirtieth of the lease, so the writers of a process come due together, and the sync
drain renews up to 500 of them in one pipeline of `lease_renew.lua` calls (a writer
busy flushing, or all of them when that call fails, is served alone). Each renewing
in a round trip of its own made the total grow with the square of the writers open: a
10k run outlasts the renewal interval where a 1k run does not, and 14-25k extra calls
cost 254-295 us of drain CPU per writer (1.95x per writer at 10k, now 0.98-1.28x; the
run with leases too long to renew was 0.95-1.07x either way). What still grows is the
collector's few full passes over a larger heap and the renewals that fall due within
the longer run (31 us of CPU per writer).""",
    "JSONL event log: iter_events(batch=1000) of 100k events": """\
A fresh store validates the log once whichever way it reads; `iter_events` then reads
each batch of 1000 from the nearest indexed line, parsing each line once.""",
    "JSONL event log: follow picks up 1 new event, 100k-event log": """\
A caught-up `follow` asks the backend for the events past the last one it handed out: the
backend parses only the bytes appended since its last look (the log's state is
remembered), so a poll costs the same on a 100k-event log as on a 1k-event one.""",
    "JSONL event log: append 1 event per call": """\
The fsync of a file behaves as the commit of "SQLite event log: append 1 event per call":
it costs what the process did before it on this disk, and the baseline's write and
fsync come back to back (its rate moved from 7.7k to 21k a second between the previous
report's run and this one, ours from 6.2k to 8.9k).

An append to a log this backend keeps open is lock, `stat` of the path (to notice a
replaced file), write, fsync, `fstat`, unlock: the lock, `stat`, `fstat` and unlock add
about 10 us to the baseline's write and fsync (each is how a moved, replaced or
rewritten log is noticed), and the `encode_batch` of one event 2.7 us; the CPU ours
spends in all is about 17 us a call more than the baseline's.""",
    "JSONL event log: append 100 events per call": f"""\
With the fsync stubbed out, one 100-event call costs ours about 4x the baseline's CPU,
which only serialises and writes: the lines themselves are the events' canonical texts
with `batch_end` spliced in (no second serialisation), and the offset index kept for
reads is worked out from the texts' lengths (2.4 us a batch, 14 us when every line
written was searched for), so what remains is the backend's lock and checks and
`encode_batch`:

{_ENCODE}""",
    "LangGraph checkpointers: SQLite: put + put_writes + get_tuple per step, "
    "1,000-step thread": f"""\
{_COMMIT_GAP}

A step of ours is three store calls: `put` and `put_writes` append to the thread as the
saver last read it, naming the log's header (the store refuses the append if the log
moved on or was made again, and the saver then reads it and tries again), and
`get_tuple` reads the log from the last event it knows (on memory, files and SQLite also
the log's expiry, at most once a second: a thread lapsed by whatever saver's ttl is gone
for all): 9 SQL statements and two durable commits, as `SqliteSaver`'s two. Until the
appends named the header each `put` and `put_writes` read the thread first (five calls,
11 statements), and each step copied the thread's tables (O(checkpoints): 22 us a fold
at 1,000 checkpoints, 4 us since they are immutable maps). Measured apart from this
group, 1,000 steps over three runs each: ours at 0.57-0.63x `SqliteSaver`'s rate before
both, 0.72-0.76x after. What remains is the Python of both layers, not SQL. The SQL of
one append run alone from a raw connection (`BEGIN IMMEDIATE`, the `next_seq` update,
the insert, `COMMIT`) costs what `SqliteSaver`'s insert and commit cost: 220 against 216
us a durable commit, 119 us of CPU each; 36 against 30 us without fsync. With the
commits made non-durable on both sides, a step of a 1,000-step thread takes about 330 us
of CPU of ours against 150 of theirs; timed inside that loop, the store's calls alone
(two appends at 72-77 us, one `read_from` at 39-40) take more than `SqliteSaver`'s whole
step, and the saver adds about 57 us to `put` (the event built and chained, the thread
folded, the ownership checks, the flow), 24 to `put_writes` and 24 to `get_tuple`. Timed
in a loop of their own, the same calls cost about a third less (an append 52 us, a
`read_from` 19): the step's calls share the caches with LangGraph's own objects. No
single part is above 10 us. Between its two commits ours still works past the 50 us
where a commit slows down.""",
    "LangGraph checkpointers: SQLite: 3-node graph run, 1,000 steps": """\
Each graph step writes and reads the thread as the step row's calls do, and pays the
same price for its commits (see "LangGraph checkpointers: SQLite: put + put_writes +
get_tuple per step"); LangGraph's own work in the step is the same on both sides.""",
    "LangGraph checkpointers: SQLite: list of 1,000 checkpoints": """\
Timed on its own (best of 7 lists of the same 1,000 checkpoints) ours lists at about
0.9x `SqliteSaver`'s rate: both read every checkpoint; ours reads the thread's log and
folds it (the latest write of each checkpoint wins), theirs selects rows. Within the
group's run the ratio swings with the machine's load (0.48 to 0.91 in four runs).""",
    "Telemetry (memory): a call mix, every metric recorded by the OpenTelemetry SDK": """\
What recording adds is the OpenTelemetry SDK's own work: the group runs each mode once
more with the least any instrumentation does with the same providers (a span started,
made current and ended, the clock read twice, one histogram record), and
`sessionstore.telemetry`'s bookkeeping above that floor measured 0.0 us with metrics and
about 0.3 us with every span on a `memory://` `get_data` (its settings line gives both
for this run). The SDK's parts: `Histogram.record` 2.2 us (3.2 with a sampled span
current: the exemplar), a span from start to end 13.6 us, and the garbage it leaves
about 5 us a call with every span. So 10% holds for calls of about 0.1 ms with metrics,
0.25 ms with 1 trace in 100 sampled and 0.5 ms with every span (docs/observability.md):
never on `memory://`, where one histogram record is most of a call.""",
}

#: The telemetry rows whose finding is the first one's (the SDK's own work, as measured
#: there): said once, pointed to.
_OTEL_AGAIN = """\
OpenTelemetry's own work, as the row "Telemetry (memory): a call mix, every metric
recorded by the OpenTelemetry SDK" says; this run's floor is in the settings line."""
FINDINGS.update(
    {
        f"Telemetry ({backend}): a call mix, {mode}": _OTEL_AGAIN
        for backend in ("memory", "SQLite", "Redis")
        for mode in (
            "every metric recorded by the OpenTelemetry SDK",
            "metrics and 1 trace in 100 recorded by the SDK",
            "every metric and span recorded by the SDK",
        )
        if (backend, mode) != ("memory", "every metric recorded by the OpenTelemetry SDK")
    }
)
