"""The session-value format on Redis, as pure functions shared by the sync and async
backends (:mod:`.values`): the keys and arguments of each value script, and the decoding
of its reply.

A plain value is a hash with the fields ``v`` (msgpack bytes) and ``w`` (its when, epoch
ms as integer text); a history is a zset of whens and a hash of when -> msgpack bytes
(``""`` for a recorded clear). Every writing script takes first the writer slot, its
number, the call's resend window and :data:`sessionstore.keys.SEQ_FIELDS` (see
``lua/_seq.lua`` and :mod:`sessionstore.keys`). Nothing here does I/O.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Literal, NamedTuple

from .. import keys
from ..contracts import Refused, Stored
from ..errors import CorruptDataError
from ..keys import ValueKey
from .index import Listing, Queue
from .stored_numbers import stored_int
from .writerslots import Mark

log = logging.getLogger("sessionstore")

FIELD_VALUE = b"v"
FIELD_WHEN = b"w"
#: How the history hash stores a recorded clear (msgpack never packs to zero bytes).
CLEARED = b""

# The arguments are built as bytes, as they go on the wire: redis-py passes bytes on as
# they are, and spends about 0.2 us on each str or int argument of every call.
_NO_TTL = b"0"
_NO_WHEN = b""


def _int(number: int) -> bytes:
    """An integer argument, as redis-py would send it."""
    return b"%d" % number


def _mark_args(mark: Mark, window_ms: int) -> list[Any]:
    """The ARGV every writing value script starts with (see ``lua/_seq.lua``): the slot,
    its number, the call's resend window and :data:`sessionstore.keys.SEQ_FIELDS`."""
    return [mark[0], b"%d" % mark[1], b"%d" % window_ms, b"%d" % keys.SEQ_FIELDS]


def plain_keys(key: ValueKey) -> list[str]:
    """KEYS of ``value_swap.lua``: the hash, the seq hash."""
    return [keys.value_key(key), keys.seq_key(key)]


class PlainNames(NamedTuple):
    """The names a plain value's read and write use: :func:`plain_keys`, the same as
    they are sent (bytes), and its entry in the values index (the index, the member)."""

    keys: tuple[str, str]
    sent: tuple[bytes, bytes]
    values_index: str
    member: str


@functools.lru_cache(maxsize=4096)
def plain_names(key: ValueKey) -> PlainNames:
    """:class:`PlainNames` of ``key``, built once per key (every call names them)."""
    names = keys.value_key(key), keys.seq_key(key)
    sent = names[0].encode(), names[1].encode()
    index = keys.index_keys(key.namespace)[1]
    return PlainNames(names, sent, index, keys.value_member(key, False))


def history_set_keys(key: ValueKey) -> list[str]:
    """KEYS of ``history_set.lua``: the versions zset, the values hash, the seq hash."""
    return [*keys.history_keys(key), keys.seq_key(key)]


def parse_when(name: str, raw: Any) -> int:
    """The when (epoch ms) stored as ``raw`` in ``name``: a 64-bit integer, else
    :class:`CorruptDataError` naming the key."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        when: int | None = raw if -(2**63) <= raw < 2**63 else None
    else:
        when = stored_int(raw)
    if when is None:
        raise CorruptDataError(name, f"it holds a malformed when {raw!r:.40}")
    return when


def decode_plain(name: str, reply: list[Any]) -> Stored | None:
    """``HMGET key v w`` -> the stored record (None when there is no ``v``)."""
    payload, when = reply
    if payload is None:
        return None
    return Stored(bytes(payload), parse_when(name, when))


def _ttl_arg(ttl_ms: int | None) -> bytes:
    """A script's retention argument: ``"0"`` for none."""
    return _NO_TTL if ttl_ms is None else b"%d" % ttl_ms


#: What :func:`swap_args` takes as ``expected`` for a write that compares nothing.
ANY = object()


def swap_args(
    expected: Stored | None | object,
    payload: bytes | None,
    when: int,
    mark: Mark,
    window_ms: int,
    ttl_ms: int | None = None,
) -> list[Any]:
    """ARGV of ``value_swap.lua``: write ``payload`` if the record is ``expected``
    (None: no record; :data:`ANY`: whatever it is); ``mark`` from
    :meth:`.writerslots.WriterSlots.take`, one per call."""
    head = _mark_args(mark, window_ms)
    head.append(_NO_TTL if ttl_ms is None else b"%d" % ttl_ms)
    new = [CLEARED, _NO_WHEN] if payload is None else [payload, b"%d" % when]
    if expected is ANY:
        return [*head, b"-", *new]
    if isinstance(expected, Stored):
        return [*head, b"1", *new, expected.payload, b"%d" % expected.when]
    return [*head, b"0", *new]


def decode_status(reply: Any) -> bool:
    """``"OK"`` -> True, ``"CONFLICT"`` -> False."""
    return bytes(reply) == b"OK"


def decode_swap(name: str, reply: Any) -> Literal[True] | Refused:
    """``value_swap.lua``'s reply: ``"OK"`` -> True, ``{"CONFLICT", v, w}`` -> the record
    found."""
    if isinstance(reply, list):
        return Refused(decode_plain(name, reply[1:]))
    return True


def decode_page(name: str, reply: list[Any]) -> list[Stored]:
    """``history_page.lua``'s reply -> its versions, newest first (payload None for a
    clear). A version whose value is missing raises :class:`CorruptDataError`."""
    page = []
    for at in range(0, len(reply), 2):
        when, payload = parse_when(name, reply[at]), reply[at + 1]
        if payload is None:
            raise CorruptDataError(name, f"it lacks the value of its version at {when}")
        payload = bytes(payload)
        page.append(Stored(payload if payload != CLEARED else None, when))
    return page


def decode_version(name: str, reply: list[Any], asked: int) -> Stored | None:
    """``history_get.lua``'s reply to a read as of ``asked`` -> the version in force
    (payload None for a clear). A version whose member (its when) is later than
    ``asked`` (a member that differs from its score) raises :class:`CorruptDataError`."""
    if not reply:
        return None
    if len(reply) != 2:
        raise CorruptDataError(name, f"it lacks the value of its version at {reply[0]!r:.40}")
    payload = bytes(reply[1])
    when = parse_when(name, reply[0])
    if when > asked:
        raise CorruptDataError(name, f"its version {when} is filed at or before {asked}")
    return Stored(payload if payload != CLEARED else None, when)


def _version_args(
    payload: bytes | None,
    when: int,
    max_versions: int | None,
    mark: Mark,
    window_ms: int,
    ttl_ms: int | None,
) -> list[Any]:
    """ARGV[1] to ARGV[8] of ``history_set.lua`` and ``compute_put.lua``."""
    return [
        *_mark_args(mark, window_ms),
        _ttl_arg(ttl_ms),
        _int(when),
        CLEARED if payload is None else payload,
        _int(max_versions or 0),
    ]


def compute_put_keys(key: ValueKey, when: int) -> list[str]:
    """KEYS of ``compute_put.lua``: those of ``history_set.lua``, then the compute lease
    of the version at ``when`` (the same hash tag: one Cluster slot)."""
    return [*history_set_keys(key), keys.compute_lease_key(key, when)]


def compute_put_args(
    payload: bytes | None,
    when: int,
    max_versions: int | None,
    token: str,
    mark: Mark,
    window_ms: int,
    ttl_ms: int | None = None,
) -> list[Any]:
    """ARGV of ``compute_put.lua``; ``mark`` as for :func:`history_set_args`."""
    return [*_version_args(payload, when, max_versions, mark, window_ms, ttl_ms), token]


def decode_compute_put(reply: Any, when: int) -> Stored | bool:
    """``compute_put.lua``'s reply: ``"OK"`` -> True, ``"BUSY"`` -> False,
    ``{"FOUND", v}`` -> the version found at ``when``."""
    if isinstance(reply, list):
        payload = bytes(reply[1])
        return Stored(payload if payload != CLEARED else None, when)
    return bytes(reply) == b"OK"


def history_set_args(
    payload: bytes | None,
    when: int,
    max_versions: int | None,
    expected: Stored | None,
    compare: bool | Literal["put"],
    mark: Mark,
    window_ms: int,
    ttl_ms: int | None = None,
) -> list[Any]:
    """ARGV of ``history_set.lua``; ``mark`` from :meth:`.writerslots.WriterSlots.take`,
    one per call. ``compare="put"`` records the version at exactly ``when`` and keeps the
    later ones (``expected`` is not looked at)."""
    args = _version_args(payload, when, max_versions, mark, window_ms, ttl_ms)
    if compare == "put":
        return [*args, b"put"]
    if not compare:
        return [*args, b"0"]
    if expected is None:
        return [*args, b"1", b"0"]
    old = CLEARED if expected.payload is None else expected.payload
    return [*args, b"1", b"1", _int(expected.when), old]


def forget_keys(key: ValueKey) -> list[str]:
    """KEYS of ``value_forget.lua``: the plain hash, the two history keys, the seq hash."""
    return [keys.value_key(key), *keys.history_keys(key), keys.seq_key(key)]


def forget_args(mark: Mark, window_ms: int) -> list[Any]:
    """ARGV of ``value_forget.lua``; ``mark`` from :meth:`.writerslots.WriterSlots.take`, one
    per call."""
    return _mark_args(mark, window_ms)


def scan_queue(namespace: str) -> Queue:
    """How ``scan`` checks a values index entry: ``HGET key w`` of a plain value (None
    for a hash left without a value), ``EXISTS`` of a history's versions zset or of a
    name that is not a value's."""
    prefix = keys.namespace_prefix(namespace)

    def queue(pipe: Any, member: str) -> None:
        parsed = keys.value_of_member(member, namespace)
        if parsed is not None and not parsed[1]:
            pipe.hget(prefix + member, FIELD_WHEN)
        else:
            pipe.exists(prefix + member)

    return queue


def decode_scan(namespace: str, listing: Listing) -> list[tuple[ValueKey, bool]]:
    """``scan``'s result from a listing of the values index; entries that are not a
    value's, or whose key holds the wrong type, are skipped and logged."""
    found: list[tuple[ValueKey, bool]] = []
    for member, reply in listing.found:
        parsed = keys.value_of_member(member, namespace)
        if parsed is None or isinstance(reply, Exception):
            log.warning(
                "list_values skipped the index entry %r of namespace %r: %s",
                member,
                namespace,
                reply if isinstance(reply, Exception) else "not the name of a value",
            )
            continue
        found.append(parsed)
    return found


def plain_expected_is_possible(expected: Stored | None) -> bool:
    """Whether a plain record can be ``expected``: a plain record never stores a clear."""
    return expected is None or expected.payload is not None
