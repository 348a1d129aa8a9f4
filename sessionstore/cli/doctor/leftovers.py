"""What the round trip of ``sessionstore doctor`` leaves on Redis, removed (see
:class:`~.round_trip.RedisScratch`).

The store's deletes leave a key's namespace index entry to the listings, which remove it
only once it is :data:`~sessionstore.keys.GRACE_MS` old, and its ``seq`` hash to expire
(see :mod:`sessionstore.keys`): each run of doctor would add entries that ``sessionstore
top`` counts for a while. The probe's names are its own (a fresh
:func:`~sessionstore.results.probe_name`): no other client writes them, so they can go at
once.
"""

from __future__ import annotations

import contextlib

from ... import keys
from ...errors import SessionNotFoundError
from ...redis import scripts
from ...redis.boundary import ErrorBoundary
from ...redis.client import SyncClient
from ...redis.firstuse import Topology
from ...redis.options import parse_options
from ...store import Store
from ...when import now_ms


def remove_leftovers(url: str, store: Store, probe: str, parts: tuple[str, str, str]) -> None:
    """Delete the probe's log session ``probe`` and value (symbol ``probe``, strategy,
    exchange and frame ``parts``, mode backtest), which a round trip that failed midway
    leaves; then remove their namespace index entries (``index_forget.lua``, as a listing
    removes those of deleted data, here without waiting) and the value's ``seq`` hash.
    Call it once the round trip's writes have returned: a resend of one of them would
    not be recognised without that hash. Raises what the store raises, having removed
    no entry."""
    store.session(probe, *parts).delete()
    with contextlib.suppress(SessionNotFoundError):
        store.events.delete(probe)
    key = keys.ValueKey(store.namespace, probe, *parts, "backtest")
    sessions_index, values_index = keys.index_keys(store.namespace)
    entries = {
        sessions_index: [keys.session_member(probe)],
        values_index: [keys.value_member(key, history=False), keys.value_member(key, history=True)],
    }
    _forget(url, entries, keys.seq_key(key))


def _forget(url: str, entries: dict[str, list[str]], seq: str) -> None:
    """Remove ``entries`` (index key -> members) and the ``seq`` hash."""
    options = parse_options(url, None, None)
    boundary = ErrorBoundary(options.display_url, options.timeout)
    handle = SyncClient(options, Topology(options.cluster), boundary)
    try:
        client = handle.get()
        for index, members in entries.items():
            with boundary("index_forget.lua", index):
                scripts.run(client, "index_forget", [index], [now_ms(), *members])
        with boundary("UNLINK", seq):
            client.unlink(seq)
    finally:
        handle.close()
