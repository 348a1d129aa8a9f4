"""The defaults the synchronous and the async API share (``sessionstore.store`` and
``sessionstore.aio`` both take them from here)."""

from __future__ import annotations

from typing import Any

from .arguments import check_seconds

#: A writer's lease, in seconds, unless it names one.
DEFAULT_LEASE = 10.0
#: The namespace of a store opened without one.
DEFAULT_NAMESPACE = "default"
#: How far (s) behind the server a store's cache (``?cache=yes``) may answer a value read
#: (see :mod:`sessionstore.redis.tracking`).
CACHE_STALENESS_BOUND = 0.1
#: How long (s) a ``get_or_compute`` waiter waits when neither it nor ``connect`` named a
#: timeout.
DEFAULT_COMPUTE_TIMEOUT = 30.0


def compute_times(args: Any, timeout: object, lease: object) -> tuple[float, float]:
    """(wait, lease) seconds of a ``get_or_compute`` call, checked: ``timeout``, else the
    ``timeout`` of the connect arguments ``args`` (a ``ConnectArgs`` or None), else
    :data:`DEFAULT_COMPUTE_TIMEOUT`."""
    if timeout is None:
        connected = None if args is None else args.timeout
        timeout = DEFAULT_COMPUTE_TIMEOUT if connected is None else connected
    return check_seconds("timeout", timeout), check_seconds("lease", lease)
