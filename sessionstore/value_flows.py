"""The operations on session values (:class:`sessionstore.Session` and its async twin),
each written once as a flow (see :mod:`sessionstore.flows`).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from typing import Any

from .arguments import check_ttl
from .backoff import LOST_RACE, Backoff
from .contracts import Refused, Stored, ValueBackend
from .errors import (
    ComputeTimeoutError,
    ConcurrentModificationError,
    CorruptDataError,
    InvalidArgumentError,
)
from .flows import Apply, Call, Flow, Hold, Sleep
from .results import ValueRecords, ValueRef, value_refs
from .session_state import SessionState
from .store_state import Lifecycle
from .when import MAX_ABS_EPOCH_MS, to_epoch_ms

#: How many races in a row ``update`` loses before it gives up (it backs off and
#: re-reads after each but the last; see :class:`ConcurrentModificationError`).
UPDATE_ATTEMPTS = 1000
#: How long (s) a ``get_or_compute`` lease lasts past its last renewal: renewed every
#: third of it while ``fn`` runs, it ends this long after its holder died.
COMPUTE_LEASE = 5.0
#: How many history versions an inspection (``records()``) reads in one call.
HISTORY_PAGE = 1000
#: How often a ``get_or_compute`` waiter looks again: soon at first, then every 0.1 s at
#: most, jittered so that waiters do not come together.
COMPUTE_POLL = Backoff(base=0.002, cap=0.1, jitter=True)


def ready(state: SessionState, lifecycle: Lifecycle) -> Flow[SessionState]:
    state.check_alive()
    lifecycle.check_open()
    if not state.initialised:
        yield Call(ValueBackend.prepare, state.key)
        state.initialised = True
    return state


def prepared(state: SessionState, lifecycle: Lifecycle) -> bool:
    """The checks of :func:`ready`, and whether it has nothing more to do (the handle is
    prepared): the flows of every call skip it then (one generator less a call)."""
    state.check_alive()
    lifecycle.check_open()
    return state.initialised


def _read(state: SessionState, ms: int) -> Call:
    if state.history:
        return Call(ValueBackend.read_as_of, state.key, ms)
    return Call(ValueBackend.read, state.key)


def get_data(state: SessionState, lifecycle: Lifecycle, when: Any) -> Flow[Any]:
    ms = to_epoch_ms(when)
    if not prepared(state, lifecycle):
        yield from ready(state, lifecycle)
    found = yield _read(state, ms)
    state.remember(found)
    return state.visible(found, ms)


def checked(state: SessionState, lifecycle: Lifecycle, when: Any) -> int:
    """The checks of a call on a plain handle already prepared: ``when`` as epoch ms."""
    ms = to_epoch_ms(when)
    state.check_alive()
    lifecycle.check_open()
    return ms


def get_cached(state: SessionState, lifecycle: Lifecycle, found: Stored | None, when: Any) -> Any:
    """:func:`get_data` of a handle already prepared, given the record a value cache holds
    (no I/O): the same checks, the same look-ahead."""
    return seen(state, found, checked(state, lifecycle, when))


def get_plain(state: SessionState, lifecycle: Lifecycle, when: Any, backend: ValueBackend) -> Any:
    """:func:`get_data` of a plain handle already prepared, run without the flow machinery
    on a blocking backend (for a caller that records no telemetry): the same checks, the
    same read, the same look-ahead. The async API does the same around its awaited read
    (:func:`checked`, :func:`seen`)."""
    ms = checked(state, lifecycle, when)
    return seen(state, backend.read(state.key), ms)


def seen(state: SessionState, found: Stored | None, ms: int) -> Any:
    """What a read of a plain handle that found the record ``found`` gives at ``ms``
    (the look-ahead), the record noted as the last one seen."""
    state.remember(found)
    return state.visible(found, ms)


def set_plain(
    state: SessionState, lifecycle: Lifecycle, value: Any, when: Any, backend: ValueBackend
) -> None:
    """:func:`set_data` of a plain handle already prepared, run without the flow machinery
    (as :func:`get_plain`): the same checks, the same write. The async API does the same
    around its awaited write (:func:`plain_write`, :func:`written`)."""
    payload, ms = plain_write(state, lifecycle, value, when)
    backend.write(state.key, payload, ms, ttl_ms=state.ttl_ms)
    written(state, payload, ms)


def plain_write(
    state: SessionState, lifecycle: Lifecycle, value: Any, when: Any
) -> tuple[bytes | None, int]:
    """The checks and the encoding of :func:`set_plain`, before its write: the payload
    (None clears) and ``when`` as epoch ms; the last record seen is forgotten."""
    ms = checked(state, lifecycle, when)
    payload = state.encode(value)
    state.forget()
    return payload, ms


def written(state: SessionState, payload: bytes | None, ms: int) -> None:
    """Note the record a plain write of ``payload`` at ``ms`` left as the last one seen."""
    state.remember(_written(payload, ms))


def _written(payload: bytes | None, ms: int) -> Stored | None:
    """The record a plain write of ``payload`` at ``ms`` leaves (None: a clear)."""
    return Stored(payload, ms) if payload is not None else None


def set_data(state: SessionState, lifecycle: Lifecycle, value: Any, when: Any) -> Flow[None]:
    ms = to_epoch_ms(when)
    if not prepared(state, lifecycle):
        yield from ready(state, lifecycle)
    payload = state.encode(value)
    ttl_ms = state.ttl_ms
    if state.history:
        yield Call(
            ValueBackend.write_version, state.key, payload, ms, state.max_versions, ttl_ms=ttl_ms
        )
    else:
        state.forget()
        yield Call(ValueBackend.write, state.key, payload, ms, ttl_ms=ttl_ms)
        state.remember(_written(payload, ms))


def _history_only(state: SessionState, operation: str) -> None:
    if not state.history:
        raise InvalidArgumentError(
            f"{operation} of {state.key.label()}: it needs a history handle"
            " (store.session(..., history=True))"
        )


def put(state: SessionState, lifecycle: Lifecycle, value: Any, when: Any) -> Flow[None]:
    """Record ``value`` as the version at exactly ``when`` of a history value; no other
    version is discarded (see :meth:`ValueBackend.put_version`)."""
    ms = to_epoch_ms(when)
    _history_only(state, "put")
    if not prepared(state, lifecycle):
        yield from ready(state, lifecycle)
    payload = state.encode(value)
    yield Call(
        ValueBackend.put_version, state.key, payload, ms, state.max_versions, ttl_ms=state.ttl_ms
    )


def get_or_compute(
    state: SessionState,
    lifecycle: Lifecycle,
    when: Any,
    fn: Callable[[], Any],
    timeout: float,
    lease: float,
) -> Flow[Any]:
    """The version at exactly ``when``, computed by ``fn()`` and stored when there is
    none, by one caller at a time among every thread and process of the store.

    A caller that finds no version takes the compute lease of (value, ``when``) and, once
    it holds it, looks again (a holder may have just put it and let go), then runs ``fn``
    while renewing the lease every third of ``lease`` seconds, and stores the result by
    :meth:`ValueBackend.put_computed`, fenced by its lease: a version another caller
    stored meanwhile (its lease lapsed while ``fn`` ran, or its process was paused) is
    returned instead, and while another caller holds the lease it goes back to waiting
    with the result it has (stored only if it takes the lease again). Every other
    caller looks again, sooner at first (:data:`COMPUTE_POLL`), until the version is
    there, or the lease is free (its holder failed, raised or died: then one of them
    takes it and computes), or ``timeout`` seconds have passed since it began waiting:
    :class:`ComputeTimeoutError`. So every caller returns the version stored at
    ``when``, the same for all.
    """
    if not callable(fn):
        raise InvalidArgumentError(f"get_or_compute needs a callable fn, not {fn!r:.60}")
    ms = to_epoch_ms(when)
    _history_only(state, "get_or_compute")
    yield from ready(state, lifecycle)
    deadline = time.monotonic() + timeout
    token = secrets.token_hex(16)
    lease_ms = max(1, round(lease * 1000))
    take = Call(ValueBackend.acquire_compute_lease, state.key, ms, token, lease_ms)
    renew = Call(ValueBackend.renew_compute_lease, state.key, ms, token, lease_ms)
    computed: list[bytes | None] = []  # what fn gave, once it ran
    looks = 0
    while True:
        found = yield Call(ValueBackend.read_as_of, state.key, ms)
        if found is not None and found.when == ms:
            return state.stored_value(found.payload)
        if (yield take):
            stored = yield from _compute(state, ms, fn, token, renew, lease, computed)
            if stored is not None:
                return state.stored_value(stored.payload)
            # Another caller took the lease after ours lapsed: wait for its version.
            deadline, looks = time.monotonic() + timeout, 0
        left = deadline - time.monotonic()
        if left <= 0:
            raise ComputeTimeoutError(state.key.label(), ms, timeout)
        yield Sleep(min(left, COMPUTE_POLL.delay(looks)))
        looks += 1


def _compute(
    state: SessionState,
    ms: int,
    fn: Callable[[], Any],
    token: str,
    renew: Call,
    lease: float,
    computed: list[bytes | None],
) -> Flow[Stored | None]:
    """:func:`get_or_compute` of the caller holding the lease: the version stored at
    ``ms`` (found, or the one it put), or None when another caller holds the lease by
    the time it puts (nothing written). Runs ``fn`` unless ``computed`` holds its
    result already; gives the lease up in the end (the put does when it writes).
    """
    release = Call(ValueBackend.release_compute_lease, state.key, ms, token)
    try:
        found = yield Call(ValueBackend.read_as_of, state.key, ms)
        if found is None or found.when != ms:
            if not computed:
                computed.append(state.encode((yield Hold(fn, renew, lease / 3))))
            args = (state.key, computed[0], ms, state.max_versions, token)
            put = yield Call(ValueBackend.put_computed, *args, ttl_ms=state.ttl_ms)
            if put is True:
                return Stored(computed[0], ms)
            if put is False:
                return None
            found = put
    except GeneratorExit:
        raise  # closed early: it cannot yield, so the lease expires
    except BaseException:
        with contextlib.suppress(Exception):  # it expires (or ends with the process)
            yield release
        raise
    with contextlib.suppress(Exception):
        yield release
    return found


def update(
    state: SessionState, lifecycle: Lifecycle, fn: Callable[[Any], Any], when: Any
) -> Flow[Any]:
    """Read-modify-write by compare-and-swap, retried until a swap is accepted.

    Fairness against a writer that updates in a tight loop: a refused plain swap returns
    the record it found under the backend's lock, the freshest start there is, so the
    next attempt goes at once with it. When that loses too, the flow backs off (growing,
    jittered: :data:`~sessionstore.backoff.LOST_RACE`) and then re-reads: after the sleep the
    record the refusal returned is stale, and a swap with it could only lose again. Reads
    take no write lock, so they do not queue behind the fast writer. Gives up with
    :class:`ConcurrentModificationError` once it has lost ``UPDATE_ATTEMPTS`` races in
    a row (after ``UPDATE_ATTEMPTS - 1`` back-offs).
    """
    if not callable(fn):
        raise InvalidArgumentError(f"update needs a callable fn, not {fn!r:.60}")
    ms = to_epoch_ms(when)
    if not prepared(state, lifecycle):
        yield from ready(state, lifecycle)
    ttl_ms = state.ttl_ms
    # A plain handle starts from the record it saw last, if any: a refused swap returns
    # the record found, so a stale guess costs no extra round trip and is no lost race.
    recalled = state.recall()
    found = recalled[0] if recalled is not None else (yield _read(state, ms))
    lost = 0
    at_once = False
    while True:
        payload = state.encode((yield Apply(fn, state.visible(found, ms))))
        if state.history:
            args = (state.key, found, payload, ms, state.max_versions)
            done = yield Call(ValueBackend.swap_version, *args, ttl_ms=ttl_ms)
        else:
            state.forget()
            done = yield Call(ValueBackend.swap, state.key, found, payload, ms, ttl_ms=ttl_ms)
        if done is True:
            if not state.history:
                state.remember(_written(payload, ms))
            return state.stored_value(payload)
        if isinstance(done, Refused) and not at_once:
            found, at_once = done.current, True
            continue
        lost += 1
        if lost == UPDATE_ATTEMPTS:
            raise ConcurrentModificationError(
                f"update of {state.key.label()} lost {UPDATE_ATTEMPTS} races in a row"
            )
        yield Sleep(LOST_RACE.delay(lost))
        found, at_once = (yield _read(state, ms)), False


def set_value_retention(state: SessionState, lifecycle: Lifecycle, ttl: object) -> Flow[bool]:
    ttl_ms = check_ttl(ttl)
    yield from ready(state, lifecycle)
    found: bool = yield Call(ValueBackend.set_retention, state.key, ttl_ms)
    return found


def delete_value(state: SessionState, lifecycle: Lifecycle) -> Flow[bool]:
    yield from ready(state, lifecycle)
    state.forget()
    removed = yield Call(ValueBackend.forget, state.key)
    state.remember(None)
    return bool(removed)


def list_values(lifecycle: Lifecycle, namespace: str) -> Flow[list[ValueRef]]:
    """Every stored session value of ``namespace`` (plain and history) that has not
    expired, sorted; reads only."""
    lifecycle.check_open()
    found = yield Call(ValueBackend.scan, namespace)
    return value_refs(found)


def value_records(state: SessionState, lifecycle: Lifecycle) -> Flow[ValueRecords]:
    """What is stored under the handle's key, plain record and history versions alike
    (whatever the handle's mode), with the times they were stored for, by reads only:
    nothing is prepared or written and nothing is filtered by time."""
    state.check_alive()
    lifecycle.check_open()
    versions: list[Stored] = []
    at = MAX_ABS_EPOCH_MS
    while at >= -MAX_ABS_EPOCH_MS:
        page = yield Call(ValueBackend.read_versions, state.key, at, HISTORY_PAGE)
        for version in page:
            if version.when > at:
                # Every step must go back in time, or a damaged history would never end.
                raise CorruptDataError(
                    state.key.label(), f"a read as of {at} gave a version of {version.when}"
                )
            versions.append(version)
            at = version.when - 1
        if not page:
            break
    plain = yield Call(ValueBackend.read, state.key)
    plain_expiry = (yield Call(ValueBackend.expiry, state.key, False)) if plain else None
    history_expiry = (yield Call(ValueBackend.expiry, state.key, True)) if versions else None
    label = state.key.label()
    return ValueRecords(plain, versions[::-1], label, plain_expiry, history_expiry)
