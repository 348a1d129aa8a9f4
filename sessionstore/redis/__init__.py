"""The Redis backend: session values in hashes, session event logs in Streams.

Key names come from :mod:`sessionstore.keys`; the Lua scripts live in ``lua/``.
``open_redis`` is what ``sessionstore.connect("redis://...")`` calls.
"""

from __future__ import annotations

from .backend import open_redis

__all__ = ["open_redis"]
