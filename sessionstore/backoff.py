"""How long to wait before trying again: the one back-off of the package.

:class:`Backoff` ``(base, cap)`` waits ``min(cap, base * 2**failures)`` seconds after
``failures`` failures in a row; with ``jitter`` it waits a uniform draw in
``[0, that]`` instead, so that contenders that failed together do not try again
together. A delay is never negative and never exceeds ``cap``. How many times to try
is the caller's decision.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """A capped exponential back-off (seconds), jittered or not."""

    base: float
    cap: float
    jitter: bool = False

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` (>= 0) failures in a row."""
        longest = min(self.cap, self.base * 2**failures)
        return random.uniform(0, longest) if self.jitter else float(longest)


#: After losing a compare-and-set race (``update``, the OpenAI Agents session): short,
#: since the winner is done within a round trip, and jittered, since the losers would
#: otherwise meet again.
LOST_RACE = Backoff(base=0.0005, cap=0.02, jitter=True)
