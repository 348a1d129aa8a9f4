"""How a Redis call is sent again after a connection error or a timeout.

A call is sent at most ``RETRIES`` more times, on a new connection, waiting
:func:`retry_delay` before each. redis-py's own ``Retry`` (which the clients are built
with) follows the same schedule: ``ExponentialBackoff`` with :data:`BACKOFF`'s ``base``
and ``cap``, not jittered.
"""

from __future__ import annotations

from ..backoff import Backoff

#: How many times a call that met a connection error or a timeout is sent again.
RETRIES = 2
BACKOFF = Backoff(base=0.05, cap=0.5)


def retry_delay(failures: int) -> float:
    """Seconds to wait before repeating a call that failed ``failures`` times."""
    return BACKOFF.delay(failures)
