"""The Redis key layout: the single place where sessionstore builds a Redis key name.

Every key of a namespace starts with ``ss:<namespace>:``, so one ACL key pattern
(``~ss:<namespace>:*``) confines a user to one namespace. Each key part is written as
is, except that ``% : { } * ? [ ] \\``, whitespace and control characters are
percent-escaped (``a:b`` -> ``a%3Ab``); so parts can never collide, never open a
second hash tag and never act as glob characters in an ACL pattern or a ``--scan``.
The braces ``{...}`` are the Cluster hash tag: all keys of one value or one log
session live in one slot, so every script touches a single slot.

======================================================  ======  ===================================  ==============  ==================
key                                                     type    fields / members                     written by      TTL
======================================================  ======  ===================================  ==============  ==================
``ss:<ns>:val:{<sym>:<strategy>:<exch>:<frame>:<mode>}``  hash    ``v`` msgpack value, ``w`` when (ms)  value_swap.lua   the handle's ttl
                                                                                                      value_forget.lua when it has one,
                                                                                                                       else none
``ss:<ns>:hist:{<sym>:...:<mode>}:at``                   zset    member = score = when (ms)           history_*.lua   the handle's ttl,
                                                                                                      value_forget.lua same as ``:v``
                                                                                                      compute_put.lua
``ss:<ns>:hist:{<sym>:...:<mode>}:v``                    hash    ``<when>`` -> msgpack value, ``""``  history_*.lua   the handle's ttl,
                                                                 for a clear                          value_forget.lua same as ``:at``
                                                                                                      compute_put.lua
``ss:<ns>:seq:{<sym>:...:<mode>}``                       hash    field = a writer slot (random id),   value_*.lua,    at least until
                                                                 value = ``<n>:<s>:<window>``         history_*.lua   its latest
                                                                 (``...:<0|1>`` for a delete: what    compute_put.lua record's deadline
                                                                 it returned): the slot's latest                      (a write never
                                                                 applied call, the server time (s)                    shortens it)
                                                                 it was applied, its window (ms)
``ss:<ns>:cmp:{<sym>:...:<mode>}:<when>``                string  the token of the caller computing    compute_lease   the lease (5 s),
                                                                 the version at ``<when>``            .lua            renewed while fn
                                                                 (``get_or_compute``)                 compute_put.lua runs; deleted by
                                                                                                                      its holder
``ss:<ns>:log:{<session id>}:meta``                     hash    ``id version created_at cwd          log_append.lua, ``ttl_ms`` when
                                                                 parent_id fork_seq`` (absent = None),  log_delete.lua  set, same as
                                                                 ``next_seq``, ``last_time``,                          ``:events``; else
                                                                 ``entries`` (stream entries),                         none
                                                                 ``bytes`` (their events text),
                                                                 ``bytes_to`` (the seq counted to),
                                                                 ``ttl_ms`` (absent = no ttl),
                                                                 ``expires_at`` (server ms, with ttl)
``ss:<ns>:log:{<session id>}:events``                   stream  one entry per append (<= 1000        log_*.lua       same as ``:meta``
                                                                 events), id ``<last seq>-<count>``;
                                                                 field ``events``: JSON array of the
                                                                 events, one per line (an old entry
                                                                 ``<seq>-1``: fields ``seq type time
                                                                 data id``)
``ss:<ns>:log:{<session id>}:digests``                  hash    the 8-byte digests of the newest     log_append.lua  same as ``:meta``
                                                                 65,536 events: field ``<b>`` holds
                                                                 slots ``64b .. 64b+63`` (slot =
                                                                 seq % 65536), 512 bytes
``ss:<ns>:log:{<session id>}:lease``                    hash    ``owner`` = the live writer's        lease_*.lua     the writer's lease
                                                                 token, ``epoch`` = its lease's                       (10 s), renewed
                                                                 epoch                                                between 3/10 and
                                                                                                                      1/3 of it
``ss:<ns>:log:{<session id>}:epoch``                    string  the newest lease's epoch (an int;    lease_*.lua,    that of ``:meta``
                                                                 negated once released): the fence    log_append.lua  as a writer's
                                                                 of writers' appends                                  append leaves it;
                                                                                                                      none before
``ss:<ns>:mark``                                        string  a random token: which database a     tracking.py     none
                                                                 ``?cache=yes`` reader caches from    (``SET NX``)
``ss:<ns>:idx:{<ns>}:sessions``                         zset    member = escaped session id,         index_add.lua   none
                                                                 score = writer's clock (ms) when it  before the
                                                                 was added or last refreshed          creating append;
                                                                                                      index_forget.lua
``ss:<ns>:idx:{<ns>}:values``                           zset    member = a value's key name without  index_add.lua   none
                                                                 ``ss:<ns>:`` (``val:{...}`` or        before each
                                                                 ``hist:{...}:at``), score as above    write that
                                                                                                      stores a value
                                                                                                      (value_swap.lua
                                                                                                      itself on one
                                                                                                      server);
                                                                                                      index_forget.lua
======================================================  ======  ===================================  ==============  ==================

TTL: no key expires unless a ttl was asked for. A write through a value handle opened
with ``ttl`` sets the key's expiry to that ttl from now with ``PEXPIRE``, inside its
script (``value_swap.lua``, ``history_set.lua``: on both keys of a
history). A write without a ttl leaves a key's expiry as it was. A log session created
with a ttl keeps it in ``ttl_ms`` of its meta hash, and every ``log_append.lua`` that
writes ends with ``PEXPIRE`` of the meta hash, the stream and the digest hash by
``ttl_ms``: the three keys always carry the same expiry and vanish together.

Exactly once: every value write (set, clear, compare-and-set, delete; plain and history)
carries a writer slot and a number: each value backend keeps a pool of slots (a random
id and a counter that only grows); a call takes a free slot, numbers itself with the
slot's next count, and gives the slot back only when it ended with a known outcome, so a
slot is used by one call at a time and one whose call's outcome is unknown is never used
again. redis-py's automatic resend of the call after a lost reply or a timeout carries
the same slot and number, and the resend window of its own client: at least twice as
long as one call of that client can keep resending
(``sessionstore.redis.options.resend_window_ms`` of its timeout). Its script first reads
its slot's field of the value's ``seq`` hash: a number at or above its own means the
call was applied before (it, or a later call of the same slot, which starts only once it
ended) and it returns that outcome without writing; else it writes and sets the field to
its number, the server's ``TIME`` (s) and the call's window (ms): the record's deadline
is ``(<s> + 1) * 1000 + <window>``. The shared Lua of ``lua/_seq.lua`` does both. So a
value
remembers one field per slot that wrote it, however often each slot writes: a hot key
written by one process from one thread holds one field. When a write adds a field and
the hash holds more than ``SEQ_FIELDS``, it drops the fields past their deadline (only
then: the hash holds at most ``SEQ_FIELDS`` fields plus one per slot that wrote the
value within its window). The hash's expiry is raised to twice the writing call's window whenever
it is below that window, never lowered: each record is kept for its own client's window,
whatever the timeouts of the other clients writing the value. Deletes and ttl expiry of
the data leave the ``seq`` hash alone, so a resend is recognised however many other
writes, deletes or expiries landed in between. Versions before this layout kept one
token per write in an ``ss:<ns>:ops:{...}`` zset (scored with its deadline); the two
layouts never share a key, so during a rolling upgrade each client recognises its own
resends, and the old zsets expire by themselves within their windows. Neither name is
of a value's or a history's kind, so no pattern of a value or a history matches them.
``value_forget.lua`` removes the three data keys of one value, plain and history. Hashes
written by older versions may hold a field ``t`` (the tokens of that time): reads and
writes ignore it, and a clear removes it.

Fencing: every lease ``lease_acquire.lua`` gives a writer that did not hold it has an
epoch above the session's stored one and at least the server's ``TIME`` in ms (so above
every earlier epoch even once an ``epoch`` key is gone with its session); the ``epoch``
key keeps it when the lease expires or is released (negated then, so that
``lease_renew.lua`` never takes a released lease back). ``log_append.lua`` of a writer
reads the ``epoch`` key first: a newer epoch than the writer's refuses the append, also
after the writer that took the lease over released it; a writer's append that writes
gives the key the expiry of the session's other keys. ``log_delete.lua`` leaves it (a
few bytes; a lease taken after the delete still gets a larger epoch, by the ``TIME``
floor), as does a writer that closes without appending to a session with a ttl. ``next_seq`` is committed last by ``log_append.lua``: a
stream entry at or past it is a torn tail, never part of the log; ``log_append.lua`` and
``log_cut_tail.lua`` cut it off, ``log_delete.lua`` removes the three keys of a session.
An append that repeats stored events (a resend after a lost reply) is answered from the
``digests`` hash alone, never by reading the stream, whose entries a tenant may have
made of any size. Every script gets its keys in
``KEYS``, built here; the Lua never builds a key name.

The two ``idx`` sorted sets index the namespace, so listing never needs ``SCAN`` (which
a least-privilege user may not run, and whose cost grows with the whole keyspace).
Their hash tag is the namespace: on a Cluster both live in one slot. Every write that
can create data sends its index entry *first* (``index_add.lua``, score = the writer's
wall clock in ms; on a single server in the same round trip, on a Cluster as a call of
its own), except a plain value's write on a single server or Sentinel: ``value_swap.lua``
takes the index as a key of its own and touches the entry itself (``_index.lua``),
after its checks and before the data. Either way the server adds the entry when it is missing and refreshes it when its score
is older than half of ``GRACE_MS``, else writes nothing. So data without its index
entry never exists, also after the server lost its data (a restart without
persistence, a lagging replica promoted): no client trusts an entry it added before.
Deletes and expiry never touch the index: a listing skips an entry whose data is gone
and, once its score is older than ``GRACE_MS``, removes it with ``index_forget.lua``
(which re-checks the score atomically, so an entry a writer has just refreshed stays).
Clients' clocks must agree within ``GRACE_MS``. Stores written before the index existed are indexed once by
``sessionstore doctor --fix``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import NamedTuple
from urllib.parse import unquote

PREFIX = "ss"
VALUE_KIND = "val"
HISTORY_KIND = "hist"
LOG_KIND = "log"
INDEX_KIND = "idx"
SEQ_KIND = "seq"
#: How many fields a value's ``seq`` hash holds before a write drops those past their
#: deadline (see the module doc); the value scripts get it as an argument.
SEQ_FIELDS = 64
COMPUTE_KIND = "cmp"
MARK_KIND = "mark"
#: How old (ms, by the writer's clock) an index entry whose data is gone must be before a
#: listing removes it: far above any call's retry window, so an entry whose writer has
#: added it but not yet written its data is never removed under it.
GRACE_MS = 10 * 60 * 1000

_ESCAPED = re.compile(r"[%:{}*?\[\]\\\s\x00-\x1f\x7f]")


def escape(part: str) -> str:
    """Percent-escape the characters that carry meaning in a key name (see module doc)."""
    return _ESCAPED.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), part)


def unescape(part: str) -> str:
    """Invert :func:`escape`."""
    return unquote(part, errors="strict")


def namespace_prefix(namespace: str) -> str:
    """``ss:<namespace>:`` -- every key of the namespace starts with it."""
    return f"{PREFIX}:{escape(namespace)}:"


def namespace_pattern(namespace: str) -> str:
    """The ACL / SCAN pattern matching every key of ``namespace``."""
    return namespace_prefix(namespace) + "*"


class ValueKey(NamedTuple):
    """Identity of one session value: the namespace plus the five key parts (a named
    tuple: it is hashed on every call, to look up its cached Redis key names)."""

    namespace: str
    symbol: str
    strategy: str
    exchange: str
    frame: str
    mode: str

    @property
    def parts(self) -> tuple[str, str, str, str, str]:
        return (self.symbol, self.strategy, self.exchange, self.frame, self.mode)

    def label(self) -> str:
        """A human-readable name for messages: ``symbol/strategy/exchange/frame/mode``,
        each part as it is, or JSON-quoted when it is empty, holds a ``/`` or begins with
        ``"``, so two keys never share a label."""
        return label_of(self.parts)


def label_of(parts: Sequence[str]) -> str:
    """The label of a value key's five parts (see :meth:`ValueKey.label`)."""
    return "/".join(map(_label_part, parts))


def _label_part(part: str) -> str:
    if part and "/" not in part and not part.startswith('"'):
        return part
    return json.dumps(part, ensure_ascii=False)


def _tag(key: ValueKey) -> str:
    return "{" + ":".join(escape(part) for part in key.parts) + "}"


@functools.lru_cache(maxsize=4096)
def value_key(key: ValueKey) -> str:
    """The hash holding one plain session value and its ``when``."""
    return f"{namespace_prefix(key.namespace)}{VALUE_KIND}:{_tag(key)}"


@functools.lru_cache(maxsize=4096)
def history_keys(key: ValueKey) -> tuple[str, str]:
    """(versions zset, values hash) of one as-of-history session value."""
    base = f"{namespace_prefix(key.namespace)}{HISTORY_KIND}:{_tag(key)}"
    return f"{base}:at", f"{base}:v"


@functools.lru_cache(maxsize=4096)
def seq_key(key: ValueKey) -> str:
    """The hash of the latest applied write of each writer slot that wrote one value,
    plain and history, each kept until its own client's resend window has passed (see
    the module doc)."""
    return f"{namespace_prefix(key.namespace)}{SEQ_KIND}:{_tag(key)}"


def compute_lease_key(key: ValueKey, when: int) -> str:
    """The lease of ``get_or_compute`` on the version of one history value at ``when``
    (same hash tag as the value's keys)."""
    return f"{namespace_prefix(key.namespace)}{COMPUTE_KIND}:{_tag(key)}:{when}"


def mark_key(namespace: str) -> str:
    """The token of the database a ``?cache=yes`` reader of ``namespace`` caches from
    (:mod:`sessionstore.redis.tracking`): a string set once (``SET NX``), never changed;
    another token, or none, means the database is another one (``SWAPDB``) or was
    emptied."""
    return f"{namespace_prefix(namespace)}{MARK_KIND}"


def value_pattern(namespace: str) -> str:
    """SCAN pattern for the plain value hashes of ``namespace``."""
    return f"{namespace_prefix(namespace)}{VALUE_KIND}:*"


def history_pattern(namespace: str) -> str:
    """SCAN pattern for the versions zsets of the history values of ``namespace``."""
    return f"{namespace_prefix(namespace)}{HISTORY_KIND}:*:at"


def _parse_tagged(name: str, head: str, tail: str, namespace: str) -> ValueKey | None:
    if not (name.startswith(head) and name.endswith(tail)):
        return None
    parts = name[len(head) : len(name) - len(tail)].split(":")
    if len(parts) != 5:
        return None
    try:
        return ValueKey(namespace, *(unescape(part) for part in parts))
    except UnicodeDecodeError:
        return None


def parse_value_key(name: str, namespace: str) -> ValueKey | None:
    """Invert :func:`value_key`; None when ``name`` is not a value key of ``namespace``."""
    head = f"{namespace_prefix(namespace)}{VALUE_KIND}:{{"
    return _parse_tagged(name, head, "}", namespace)


def parse_history_key(name: str, namespace: str) -> ValueKey | None:
    """Invert the versions zset name of :func:`history_keys`; None when ``name`` is not
    one of ``namespace``."""
    head = f"{namespace_prefix(namespace)}{HISTORY_KIND}:{{"
    return _parse_tagged(name, head, "}:at", namespace)


@functools.lru_cache(maxsize=4096)
def log_keys(namespace: str, session_id: str) -> tuple[str, str]:
    """(meta hash, events stream) of one event-log session."""
    base = f"{namespace_prefix(namespace)}{LOG_KIND}:{{{escape(session_id)}}}"
    return f"{base}:meta", f"{base}:events"


def log_digest_key(namespace: str, session_id: str) -> str:
    """The digest hash of one event-log session: the digests of its newest events,
    which tell a repeated append from a conflicting one (see :mod:`.redis.logformat`)."""
    return f"{namespace_prefix(namespace)}{LOG_KIND}:{{{escape(session_id)}}}:digests"


def log_meta_pattern(namespace: str) -> str:
    """SCAN pattern for every session's meta hash in ``namespace``."""
    return f"{namespace_prefix(namespace)}{LOG_KIND}:*:meta"


@functools.lru_cache(maxsize=256)
def index_keys(namespace: str) -> tuple[str, str]:
    """(sessions index, values index) of ``namespace``: two zsets sharing one hash tag."""
    base = f"{namespace_prefix(namespace)}{INDEX_KIND}:{{{escape(namespace)}}}"
    return f"{base}:sessions", f"{base}:values"


def index_scan_pattern() -> str:
    """SCAN pattern matching the index keys of every namespace (and nothing of a value
    or a log: their kind part is never ``idx``)."""
    return f"{PREFIX}:*:{INDEX_KIND}:*"


def namespace_of_index_key(name: str) -> tuple[str, str] | None:
    """(namespace, ``"sessions"`` or ``"values"``) of a name :func:`index_keys` built;
    None for any other key name (another layout, a damaged or foreign key)."""
    parts = name.split(":")
    if len(parts) != 5 or parts[0] != PREFIX or parts[2] != INDEX_KIND:
        return None
    if parts[3] != f"{{{parts[1]}}}" or parts[4] not in ("sessions", "values"):
        return None
    try:
        namespace = unescape(parts[1])
    except UnicodeDecodeError:
        return None
    return (namespace, parts[4]) if escape(namespace) == parts[1] else None


def session_member(session_id: str) -> str:
    """A session's member in the sessions index."""
    return escape(session_id)


def session_of_member(member: str) -> str | None:
    """Invert :func:`session_member`; None for a member that is not one."""
    try:
        return unescape(member)
    except UnicodeDecodeError:
        return None


def value_member(key: ValueKey, history: bool) -> str:
    """A value's member in the values index: its key name (the versions zset of a
    history) without the namespace prefix."""
    name = history_keys(key)[0] if history else value_key(key)
    return name[len(namespace_prefix(key.namespace)) :]


def member_of_meta_key(name: str, namespace: str) -> str | None:
    """The sessions-index member of the session whose meta hash (:func:`log_keys`) is
    ``name``; None when ``name`` is not a meta hash of ``namespace``."""
    head, tail = f"{namespace_prefix(namespace)}{LOG_KIND}:{{", "}:meta"
    if len(name) < len(head) + len(tail) or not name.startswith(head):
        return None
    return name[len(head) : -len(tail)] if name.endswith(tail) else None


def member_of_value_name(name: str, namespace: str) -> str | None:
    """The values-index member of a value key or history versions zset ``name``
    (:func:`value_member`); None when ``name`` is not one of ``namespace``."""
    prefix = namespace_prefix(namespace)
    return name[len(prefix) :] if name.startswith(prefix) else None


def value_of_member(member: str, namespace: str) -> tuple[ValueKey, bool] | None:
    """Invert :func:`value_member`: (key, history); None for a member that is not one."""
    name = namespace_prefix(namespace) + member
    plain = parse_value_key(name, namespace)
    if plain is not None:
        return plain, False
    history = parse_history_key(name, namespace)
    return None if history is None else (history, True)


def stream_id(seq: int) -> str:
    """The id of a stream entry holding event ``seq`` alone."""
    return f"{seq}-1"


@functools.lru_cache(maxsize=4096)
def log_lease_key(namespace: str, session_id: str) -> str:
    """The lease of one event-log session's live writer (same hash tag as its log)."""
    return f"{namespace_prefix(namespace)}{LOG_KIND}:{{{escape(session_id)}}}:lease"


@functools.lru_cache(maxsize=4096)
def log_epoch_key(namespace: str, session_id: str) -> str:
    """The newest lease epoch of one event-log session, which fences its writers'
    appends (same hash tag as its log)."""
    return f"{namespace_prefix(namespace)}{LOG_KIND}:{{{escape(session_id)}}}:epoch"
