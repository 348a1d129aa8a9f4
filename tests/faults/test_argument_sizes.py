"""Arguments of every size a caller may send to the library's functions: each is
stored only within its documented maximum, and one past it is refused (``INVALID``)
before anything is written, in bounded server time.

The least-privilege user may call the functions with arguments of its own (its client
is not the library's): Hypothesis draws the size of one argument at a time (around the
limits, and far past them), and the call either succeeds, with the argument within its
documented size, or is refused with the namespace exactly as it was.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.redis_helpers import namespace_snapshot

from sessionstore import SessionEvent, SessionHeader
from sessionstore.eventlog import encode_batch
from sessionstore.keys import (
    ValueKey,
    compute_lease_key,
    log_digest_key,
    log_epoch_key,
    log_keys,
    log_lease_key,
)
from sessionstore.redis import valueformat as layout
from sessionstore.redis.library import install, script
from sessionstore.redis.logformat import FIELD_BYTES, append_args

T0 = 1_718_000_000_000
#: lua/_limits.lua: the longest token a function stores.
TOKEN_BYTES = 64
#: lua/_index.lua: the longest index entry.
INDEX_MEMBER_BYTES = 256 * 1024
#: Server time one call may take (us): its own work is microseconds, plus what it copies.
BOUND_US = 20_000

#: Sizes around each limit, small ones, and far past the limits.
SIZES = st.one_of(
    st.integers(0, 80),
    st.sampled_from([TOKEN_BYTES - 1, TOKEN_BYTES, TOKEN_BYTES + 1]),
    st.sampled_from([FIELD_BYTES - 1, FIELD_BYTES, FIELD_BYTES + 1, 1 << 20]),
    st.sampled_from([INDEX_MEMBER_BYTES, INDEX_MEMBER_BYTES + 1]),
)


@pytest.fixture(scope="module")
def client(redis_server):
    found = redis.Redis(port=redis_server.port)
    install(found)
    yield found
    found.close()


def _session_call(namespace: str, field: str, size: int) -> tuple[str, list[str], list[Any], bool]:
    """(function, keys, args, whether valid) of one call with one argument of ``size``."""
    sid = f"s{time.monotonic_ns()}"
    lease, epoch = log_lease_key(namespace, sid), log_epoch_key(namespace, sid)
    token = "t" * size
    if field == "lease owner":
        return "lease_acquire", [lease, epoch], [token, "60000"], 1 <= size <= TOKEN_BYTES
    if field == "renewed owner":
        return "lease_renew", [lease, epoch], [token, "1", "60000"], 1 <= size <= TOKEN_BYTES
    if field == "renewed epoch":
        return "lease_renew", [lease, epoch], ["t", "1" * size, "60000"], 1 <= size <= 19
    if field == "compute token":
        key = compute_lease_key(ValueKey(namespace, sid, "s", "e", "1h", "backtest"), T0)
        return "compute_lease", [key], ["take", token, "60000"], 1 <= size <= TOKEN_BYTES
    if field == "index entry":
        index = f"ss:{namespace}:idx:{{{namespace}}}:sessions"
        return "index_add", [index], [str(T0), str(T0), "m" * size], size <= INDEX_MEMBER_BYTES
    if field == "writer slot":
        key = ValueKey(namespace, sid, "s", "e", "1h", "backtest")
        args = layout.swap_args(layout.ANY, b"\x01", T0, (token, 1), 1000)
        return "value_swap", layout.plain_keys(key), args, 1 <= size <= TOKEN_BYTES
    batch = encode_batch(sid, [SessionEvent(seq=0, type="note", time=T0)])
    args: list[Any] = append_args(batch, SessionHeader(id=sid))
    if field == "header field":
        args[args.index(sid) + 1 : args.index(sid) + 1] = ["cwd", "c" * size]
        args[4] = str(int(args[4]) + 1)
        valid = size <= FIELD_BYTES
    else:  # the digests
        at = args.index(str(T0)) + 1
        args[at] = b"d" * size
        valid = size == 8
    keys_ = [*log_keys(namespace, sid), log_digest_key(namespace, sid)]
    return "log_append", keys_, args, valid


FIELDS = [
    "lease owner",
    "renewed owner",
    "renewed epoch",
    "compute token",
    "writer slot",
    "index entry",
    "header field",
    "digests",
]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(field=st.sampled_from(FIELDS), size=SIZES)
def test_an_argument_is_stored_within_its_size_or_refused_with_nothing_written(
    client, namespace, field, size
):
    function, keys_, args, valid = _session_call(namespace, field, size)
    before = namespace_snapshot(client, namespace)
    client.config_resetstat()
    try:
        client.execute_command("FCALL", script(function).function, len(keys_), *keys_, *args)
    except redis.ResponseError as refused:
        assert not valid, f"{field} of {size} bytes refused: {refused}"
        assert str(refused).startswith("INVALID"), str(refused)
        assert namespace_snapshot(client, namespace) == before
    else:
        assert valid, f"{field} of {size} bytes was accepted"
    usec = client.info("commandstats")["cmdstat_fcall"]["usec"]
    assert usec < BOUND_US + size / 10, f"{field} of {size} bytes: {usec} us of server time"


@pytest.mark.parametrize("counts", [["2", "0"], ["1", "-1"], ["1001"], ["1", "1e3"], ["01x"]])
def test_an_entry_count_outside_its_range_is_refused_before_anything_is_written(
    client, namespace, counts
):
    """Each stream entry of an append holds 1 to 1,000 events: a count outside that (a
    caller's own FCALL) is refused before the first entry is added."""
    sid = f"n{time.monotonic_ns()}"
    batch = encode_batch(sid, [SessionEvent(seq=0, type="note", time=T0)])
    args: list[Any] = append_args(batch, SessionHeader(id=sid))
    entries = [part for count in counts for part in (count, b'[{"seq":0}]')]
    args[-3:-1] = entries
    keys_ = [*log_keys(namespace, sid), log_digest_key(namespace, sid)]
    before = namespace_snapshot(client, namespace)
    with pytest.raises(redis.ResponseError, match="INVALID"):
        client.execute_command("FCALL", script("log_append").function, 3, *keys_, *args)
    assert namespace_snapshot(client, namespace) == before
