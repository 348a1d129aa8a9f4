"""How a Redis call is sent again after a connection error or a timeout.

A call is sent at most ``RETRIES`` more times, on a new connection, waiting
:func:`retry_delay` before each: by redis-py's own ``Retry``, which the clients are
built with (given :class:`DriverBackoff`), and by the library's loops that resend
themselves (a script's ``WAIT`` on a cluster node, a redirection to an unknown node).
"""

from __future__ import annotations

from redis.backoff import AbstractBackoff

from .. import telemetry
from ..backoff import Backoff

#: How many times a call that met a connection error or a timeout is sent again.
RETRIES = 2
BACKOFF = Backoff(base=0.05, cap=0.5)


def retry_delay(failures: int) -> float:
    """Seconds to wait before repeating a call that failed ``failures`` times."""
    return BACKOFF.delay(failures)


class DriverBackoff(AbstractBackoff):
    """:data:`BACKOFF` in the form redis-py's ``Retry`` takes."""

    def compute(self, failures: int) -> float:
        # redis-py asks once before each resend: count it.
        telemetry.resent("connection_error")
        return BACKOFF.delay(failures)
