"""What profiling found behind each missed target, keyed by ``Result.key``.

``docs/benchmarks.md`` shows an entry only when its row fails in that run. The numbers
quoted were measured on the benchmark machine with pyinstrument (client), ``INFO
commandstats`` (server time per call), ``strace -c`` and small prototypes of the fixes
applied by monkeypatching (never by editing the library); "fast pace" and "slow pace"
are the two speeds the shared machine alternates between (a raw Redis round trip of
about 50 us and about 130 us).
"""

from __future__ import annotations

_ENCODE = """\
`sessionstore/jsondata.py` `dump_lossless` walks every event's data in Python
(`_check`, building a JSON path string for every node, even when nothing is wrong) before
`orjson.dumps`: 3-7 us per event, 400 us for a 100-event batch, against 0.3 us for
`orjson.dumps` alone. Proposed fix: let orjson do the walk and check the round trip in C --
`text = orjson.dumps(data)` (TypeError/JSONEncodeError -> fall back to today's `_check`
only to build the error message), then accept when `orjson.loads(text) == data`, which
catches every silent loss orjson can make (NaN/inf written as null, tuples, enums, UUIDs,
dataclasses, datetimes) and otherwise fall back to `_check`; keep the depth limit by
catching orjson's own recursion error (it stops at 255 levels, `_MAX_DEPTH` is 250: align
the two). For a batch, one `orjson.loads` of `"[" + ",".join(texts) + "]"` compared with
the list of data dicts does the check in one call. In `sessionstore/eventlog.py`
`encode_batch`, the rest of the per-event cost is Python dispatch (`_as_event`,
`check_unicode`, the gap check) and `contracts.StoredEvent`, a frozen dataclass whose
`__init__` costs 0.6 us per event: a plain slotted class or a NamedTuple would do."""

_REDIS_APPEND_SERVER = """\
`lua/log_append.lua` costs 15-17 us of server time per one-event call against 7 us for the
minimal script (`INFO commandstats`), and 294 us against 227 us for 100 events: it reads
the whole meta hash (`HGETALL`, 8 fields, turned into a Lua table) where only `version`
and `next_seq` are needed once the session exists, probes for a torn tail (`XRANGE` +
`XLEN`), writes two fields at the end, and takes 6 values per event through an
`event_arg()` function call each. Calling the script directly with pre-built arguments
costs 58 us per call against 47 us for the minimal one at fast pace. Proposed fix: when no
header is given (`ARGV[6] == "-1"`), read `HMGET meta version next_seq` instead of
`HGETALL` (measured 15.0 -> 13.5 us); pass 4 values per event (the seq follows from the
first seq and the index; an empty id means none) and index `ARGV` inline."""

_REDIS_APPEND_CLIENT = """\
On the client, each call goes through `keys.log_keys` (a regex escape per call, 1 us),
`ErrorBoundary.__call__` (a `@contextmanager` generator, 1.1 us), `append_args` (1.2 us;
it re-checks the UTF-8 of type and id that `encode_batch` already checked),
`PendingSessions.get` (a lock, 0.4 us) and `encode_batch` (see below): 11 us in a hot loop,
measured with the network call stubbed out, but 30-40 us per call in the real ping-pong at
fast pace, because every call starts with cold caches after waiting for the reply, and the
cost grows with the code it runs. Proposed fix: memoize `keys.log_keys` / `keys.value_key`
(`functools.lru_cache`, the arguments are hashable), write `ErrorBoundary` as a class with
`__enter__`/`__exit__`, drop the second UTF-8 check in `redis/logformat.py` `append_args`."""

_LOAD = """\
Per event, ours spends 11.6 us against 3.5 us for XRANGE + `orjson.loads` into a dict.
Profile of `store.events.load`: `redis/logformat.py` `LogRead._decode` 39% (a dict
comprehension decoding every field name and value with `text()`, then `orjson.loads` of
the data only to validate it), `LogRead.take` 8%, the XRANGE calls 13% (the same for the
baseline), `eventlog.decode_events` 34% (a second `orjson.loads` of the same data, and
`SessionEvent.model_construct` at 3.2 us per event), `eventlog.closers` 4% (it walks the
whole log to find the open turn). Proposed fix: (1) `LogRead._decode`: take the fields by
their bytes names (`fields[b"type"]`, ...), compare the entry id with `b"%d-1" % expect`,
decode only type, data and id, and leave the JSON check to the one parse in (2);
(2) `decode_events`: parse the data once (raising `CorruptLogError` with the seq on bad
JSON) and build each event with `SessionEvent.model_construct(_FIELDS, ...)` where
`_FIELDS` is one shared set of the five field names, or with `object.__new__` plus the
`__dict__` / `__pydantic_fields_set__` / `__pydantic_extra__` / `__pydantic_private__`
attributes model_construct sets (1.3 us instead of 3.2 us); (3) decode each XRANGE chunk as
it arrives (or replace the `StoredEvent`s in the list in place) so the stored and the
decoded form of the whole log never coexist; (4) `closers`: scan backwards to the last
`turn/start` or `turn/end` and look only at that turn (the result is the same: a
`turn/start` resets all state). Prototypes: (1)-(3) raise the ratio from 0.31 to 0.55;
building the `SessionEvent`s in one pass straight from the XRANGE reply plus (4) gives
0.69-0.82. What remains is the price of returning pydantic models instead of dicts
(about 0.7 us per event) and of checking every entry's seq and id."""

#: Shown above the entries: what has been fixed since they were profiled, and what is next.
LANDED = """\
The entries below are the profile taken before these fixes, which have landed since (the
table above is measured with them): the lossless-JSON check is one orjson round trip (the
Python walk only runs to build an error message); key names are cached; the Redis error
guard is a plain class; `update` no longer sleeps before its first attempt; `load` parses
each event's JSON once, takes the stream fields by their bytes names, consumes the stored
list while decoding (peak memory 2.32x -> 1.12x) and `closers` looks at the final turn
only. Still open, by expected gain: `load` -- build the `SessionEvent`s in one pass from the
XRANGE reply (what remains is mostly pydantic model construction, about 2.7 us per event);
Redis `append` -- the leaner `log_append.lua` (HMGET instead of HGETALL, 4 values per
event) and a slotted `StoredEvent`; `update` in one process -- return the current record on
CONFLICT so that an update is one round trip in the common case; JSONL -- keep the path and
the descriptor between appends. The openai-agents targets for 100-event appends and for
loads cannot be met with stream storage (see their entries)."""

FINDINGS: dict[str, str] = {
    "Redis event log: append 1 event per call": f"""\
At fast pace the raw call costs 47 us and ours 87-100 us (ratio 0.5-0.6); at slow pace the
gap is about the same in microseconds on a longer round trip (ratio 0.75-0.81).

{_REDIS_APPEND_SERVER}

{_REDIS_APPEND_CLIENT}

For one event, `encode_batch` costs 3-5 us, 2 of them in `dump_lossless` (see the
100-event row). By the hot-loop figures these fixes take about 7 of the 11 us off the client
path and 1.5 us off the script (not measured end to end); what remains is the work the
script does beyond the minimal one (version and header check, torn-tail probe).""",
    "Redis event log: append 100 events per call": f"""\
With the network stubbed out, the client side of one 100-event call costs 603 us for ours
against 85 us for building the raw arguments; the server side 294 us against 227 us.

{_ENCODE}

Prototype of the `dump_lossless` fix alone: client side 603 -> 292 us per call, ratio
0.50 -> 0.57-0.64. The rest is `append_args` (46 us: six strings per event) and the
server-side cost above.

{_REDIS_APPEND_SERVER}""",
    "Redis event log: load 10k events": _LOAD,
    "Redis event log: load 100k events": _LOAD,
    "Redis event log: load 100k events: peak memory": """\
`SessionEvent.model_construct` (in `sessionstore/eventlog.py` `decode_events`) gives
every event its own `__pydantic_fields_set__` set: 728 bytes per event, about 69 MiB for
100k events, so one `SessionEvent` takes 1,493 bytes against 685 for a plain dict with the
same data (tracemalloc). And `EventLog.load` holds the whole list of `StoredEvent`s (with
each event's JSON text) until `decode_events` has built the whole list of
`SessionEvent`s. Proposed fix: items (2) and (3) of the load rows -- pass one shared set as
`_fields_set` (or set the attributes directly), and decode chunk by chunk or in place.
Prototype: peak 181.5 MiB -> 86.9 MiB, ratio 2.32 -> 1.11.""",
    "Redis event log: 4 processes appending 1 event per call to 4 sessions": """\
Two cores serve the four clients, the Redis server and whatever else runs on the machine.
When the machine runs at fast pace, one client process already keeps about one core busy:
ours spends 60-100 us of client CPU per one-event append (`time.process_time`) plus 15-17 us
in the server, so four processes can add at most the second core, and nothing at all when
other work takes it (in runs at lower load the ratio was 1.6-2.5). The library's share of
that ceiling is its per-call CPU cost: the fixes listed for "Redis event log: append 1
event per call" raise how many appends two cores can carry.""",
    "Redis values: get_data": """\
Ours adds about 15-20 us of client CPU per call to the raw 30 us (pyinstrument, and
`time.process_time` per call): `keys.value_key` rebuilds the key name on every call (five
regex escapes, 2.6 us), `ErrorBoundary` is a generator context manager (1.1 us),
`to_epoch_ms` checks `numbers.Integral` through the ABC machinery (0.6 us), plus the
`_client` property, `Stored` and the look-ahead decode. At fast pace (a round trip of
35-50 us) that is the whole gap. Proposed fix: compute the Redis key name once per
`SessionState` (or `functools.lru_cache` on `keys.value_key` / `history_keys`), a
`type(when) is int` fast path first in `sessionstore/when.py` `to_epoch_ms`, and a
class-based `ErrorBoundary` in `sessionstore/redis/client.py`. Prototype of the key cache:
0.69 -> 0.76 and 0.64 -> 0.78 for set_data in the same run.""",
    "Redis values: set_data": """\
Same causes as get_data, plus `codec.encode_value` packing and then unpacking the value
again to verify it (1.5 us more than `msgpack.packb`), and the `HSET` carrying a third
field (`t ""`, to forget swap tokens). Proposed fix: as for get_data; the verification
unpack could be skipped when the value holds only str/int/float/bool/None/list/dict with
str keys (the case it guards against is a dict keyed by a list or a tuple).""",
    "Redis values: update, 1 process": """\
`sessionstore/store.py` `Session.update` calls `time.sleep(backoff(attempt))` before every
attempt, the first included: `time.sleep(0.0)` is still a system call that gives up the
CPU, 78-80 us on this machine, 23% of the time of an update in the profile. And
`lua/value_swap.lua` now keeps idempotency tokens: 15 us of server time per call against
4.6 us for the previous version of the script (`INFO commandstats`), from two
`string.gmatch` passes over the token list and the string concatenation that rebuilds it.
Proposed fix: `if attempt: time.sleep(backoff(attempt))` (and the same for
`asyncio.sleep` in `sessionstore/aio.py`); in `value_swap.lua`, find the token with
`string.find(' ' .. tokens .. ' ', ' ' .. token .. ' ', 1, true)` and cut the kept list
with `string.find`/`string.sub` (measured 9 us). Prototype of the sleep fix plus the key
cache of get_data: 0.50 -> 0.90-0.92 (1 process), 0.96 -> 1.34-1.51 (4 processes). To
reach 1.2 in one process, make an update one round trip in the common case: have
`value_swap.lua` return the current record on CONFLICT, and let the `Session` handle
remember the last record it read or wrote, so that the first attempt needs no `HMGET`
and a retry needs no second read.""",
    "Redis values: update, 4 processes on the same value": """\
The same two causes as in one process: the `time.sleep(0.0)` before the first attempt and
the cost of the token bookkeeping in `value_swap.lua`, which also lengthens the window in
which another process's swap makes this one fail. The prototype of the sleep fix gives
1.34-1.51. See the 1-process row for the fixes.""",
    "vs openai-agents: append 1 event per call": """\
The peer spends about 600 us per `add_items` (WATCH, two TYPE checks, MULTI/EXEC, its
asyncio pipeline bookkeeping); ours misses 4x by the per-call overhead described for
"Redis event log: append 1 event per call". With the prototypes of those fixes the ratio
was 5.50 in a full run.""",
    "vs openai-agents: append 100 events per call": f"""\
The peer stores a conversation as a Redis list: one `RPUSH` of 100 JSON strings costs it
30-57 us of server time per call, where ours spends 294-312 us in `log_append.lua` adding
100 stream entries of five fields each (`INFO commandstats`). So even with no client-side
cost at all, ours could not be 2.5x faster on the server; the target needs the
client-side cost of a 100-event append below about 0.8 us per event.

{_ENCODE}

Prototype of the `dump_lossless` fix: 1.00 -> 1.17.""",
    "vs openai-agents: load 10k events": """\
The peer's `get_items` is one `LRANGE` and one `json.loads` per item: it reads at 300k
items/s, as fast as the raw XRANGE + orjson baseline of the load rows (286k/s). Being 2x
faster than that would mean beating the bare driver by 2x, which no reader of decoded
events from Redis can do; the target cannot be met as stated. Ours is 3.6x slower than it
for the reasons given for "Redis event log: load 10k events"; the prototypes of those
fixes give 0.76.""",
    "SQLite event log: append 1 event per call": """\
The time is the COMMIT (fsync of the WAL). Ours writes 3 pages per commit, 12.9 kB of
WAL, against 2 pages (8.6 kB) for the raw insert: besides the event row and its primary
key index, every append updates `next_seq` in `log_sessions` (measured by the WAL growth
over 200 appends), so each fsync writes 50% more and the WAL checkpoints (which also
fsync the database) come 1.5x as often; ours also runs 5 statements instead of 3. The
Python side is small. Proposed fix (`sessionstore/backends/sqlite_events.py`
`SqliteEvents.append`): derive the next seq from `SELECT max(seq) + 1 FROM log_events
WHERE namespace=? AND session_id=?` (an index probe) inside the same `BEGIN IMMEDIATE`
transaction, write `log_sessions` only when the session is created, and run the
`_cut_tail` DELETE only when `read` has found a tail -- in one SQLite transaction there is
no torn tail to cut.""",
    "SQLite event log: append 100 events per call": f"""\
A 100-event call costs ours 1,035-1,122 us of CPU against 439-528 us for the raw insert;
`encode_batch` is about half of ours' time in the profile (the rest is mostly the
commit).

{_ENCODE}

Prototype of the `dump_lossless` fix: ours' CPU per call 1,035-1,122 -> 798-873 us. What
remains of `encode_batch` is per-event overhead (about 3 us per event: the orjson round
trip check, `StoredEvent`, `_as_event`, `check_unicode`), which the batch-level check and a
plain `StoredEvent` would cut to about 1 us.""",
    "JSONL event log: append 1 event per call": """\
Without the fsync (stubbed out), ours costs 36-44 us of CPU per call against 2 us for the
raw write: `sessionstore/backends/jsonl.py` `JsonlEvents._path` rebuilds the path with
pathlib and `encode_name` on every call (17% of that time), every append opens, flocks,
fstats, stats (`_still_named`) and closes the file, `_catch_up` and `_append_locked`
rebuild the `_Seen` state with `dataclasses.replace` twice, and `encode_batch` runs the
slow `dump_lossless` (see the 100-event row). Proposed fix: cache the path (as a `str`,
joined with `os.path.join`) per session id next to `_seen`; build the new `_Seen` directly
instead of through `dataclasses.replace`; the `dump_lossless` fix; optionally keep the
last few logs' fds open between appends (still revalidated by the fstat/stat comparison
that `_still_named` does today) to save the open/close.""",
    "JSONL event log: append 100 events per call": f"""\
Ours spends 740 us of CPU per 100-event call against 218 us for the raw write of the same
bytes, and `encode_batch` is about 80% of ours' CPU time (0.18 of 0.22 s over 100 calls,
pyinstrument).

{_ENCODE}

Prototype of the `dump_lossless` fix: ours' CPU per call 740 -> 527-570 us, ratio
0.43-0.47 -> 0.54; the remaining per-event overhead of `encode_batch` (about 3 us per
event) is the rest. `event_lines` (one `orjson.dumps` of a dict with an `orjson.Fragment`
per event) does what the baseline does and is not the problem.""",
}
