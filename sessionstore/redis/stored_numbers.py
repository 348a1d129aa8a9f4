"""The one reading of an integer stored in Redis by the library (a meta hash's
``next_seq``, ``last_time``, ``ttl_ms``, a version's ``when``, an event's ``time``): ASCII
decimal digits with an optional leading ``-``, within 64 bits. The Lua functions read
them with ``stored_integer`` (``lua/_number.lua``) under the same rule, so Python and
the server always agree on what a stored number is; ``int`` would also take ``1_0``,
`` 10`` or ``١٠``, and Lua's ``tonumber`` ``0x0A`` or ``1e1``.
"""

from __future__ import annotations

import re

_INTEGER = re.compile(rb"-?[0-9]{1,19}")
_BOUND = 2**63


def stored_int(raw: object) -> int | None:
    """``raw`` (bytes or str, as a reply holds it) as an int, or None when it is not an
    integer stored as the library stores one (or lies outside [-2**63, 2**63))."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if not isinstance(raw, bytes) or _INTEGER.fullmatch(raw) is None:
        return None
    found = int(raw)
    return found if -_BOUND <= found < _BOUND else None
