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
``ss:<ns>:val:{<sym>:<strategy>:<exch>:<frame>:<mode>}``  hash    ``v`` msgpack value, ``w`` when (ms)  HSET, HDEL,      the handle's ttl
                                                                  ``t`` swap tokens (see below)         MULTI/EXEC       when it has one,
                                                                                                        with PEXPIRE,    else none
                                                                                                        value_swap.lua
                                                                                                        value_forget.lua
``ss:<ns>:hist:{<sym>:...:<mode>}:at``                   zset    member = score = when (ms)           history_*.lua   the handle's ttl,
                                                                                                      value_forget.lua same as ``:v``
``ss:<ns>:hist:{<sym>:...:<mode>}:v``                    hash    ``<when>`` -> msgpack value, ``""``  history_*.lua   the handle's ttl,
                                                                 for a clear; ``t`` swap tokens       value_forget.lua same as ``:at``
``ss:<ns>:log:{<session id>}:meta``                     hash    ``id version created_at cwd          log_append.lua, ``ttl_ms`` when
                                                                 parent_id fork_seq`` (absent = None),  log_delete.lua  set, same as
                                                                 ``next_seq``, ``last_time``,                          ``:events``; else
                                                                 ``ttl_ms`` (absent = no ttl)                          none
``ss:<ns>:log:{<session id>}:events``                   stream  entry id ``<seq>-1``; fields ``seq``   log_*.lua       same as ``:meta``
                                                                 ``type`` ``time`` ``data`` (JSON)
                                                                 and ``id`` when the event has one
======================================================  ======  ===================================  ==============  ==================

TTL: no key expires unless a ttl was asked for. A write through a value handle opened
with ``ttl`` sets the key's expiry to that ttl from now with ``PEXPIRE``: a plain write
sends its ``HSET``/``HDEL`` and ``PEXPIRE`` in one ``MULTI``/``EXEC``; ``value_swap.lua``
and ``history_set.lua`` call ``PEXPIRE`` themselves, on both keys of a history. A write
without a ttl leaves a key's expiry as it was. A log session created with a ttl keeps it
in ``ttl_ms`` of its meta hash, and every ``log_append.lua`` that writes ends with
``PEXPIRE`` of the meta hash and the stream by ``ttl_ms``: the two keys always carry the
same expiry and vanish together.

``t`` holds the tokens of the latest swaps (``value_swap.lua``, ``history_set.lua`` with
an expected version), newest first, space separated, at most 8: each call carries a
random token and stores it with its write, so the same call sent again after a lost
reply finds its token and is reported applied, not conflicting, even when another
client wrote in between: plain writes (``HSET v w``, ``HDEL v w``) and uncompared
``history_set.lua`` calls keep them. Reads never look at ``t``. A cleared value whose
key ever saw a swap keeps its hash with ``t`` alone: a value hash without ``v`` holds
no value (listing skips it). ``value_forget.lua`` removes the three keys of
one value, plain and history.

``next_seq`` is committed last by ``log_append.lua``: a stream entry at or past it is
a torn tail, never part of the log; ``log_append.lua`` and ``log_cut_tail.lua`` cut it
off, ``log_delete.lua`` removes both keys of a session. Every script gets its keys in
``KEYS``, built here; the Lua never builds a key name.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple
from urllib.parse import unquote

PREFIX = "ss"
VALUE_KIND = "val"
HISTORY_KIND = "hist"
LOG_KIND = "log"

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
        """A human-readable name for messages: ``symbol/strategy/exchange/frame/mode``."""
        return "/".join(self.parts)


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


def log_meta_pattern(namespace: str) -> str:
    """SCAN pattern for every session's meta hash in ``namespace``."""
    return f"{namespace_prefix(namespace)}{LOG_KIND}:*:meta"


def stream_id(seq: int) -> str:
    """The stream entry id of event ``seq``."""
    return f"{seq}-1"
