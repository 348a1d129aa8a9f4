"""Fault suite settings: fewer iterations under CI, more with SESSIONSTORE_SOAK=1."""

from __future__ import annotations

import os

SOAK = bool(os.environ.get("SESSIONSTORE_SOAK"))
CI = bool(os.environ.get("CI"))


def iterations(normal: int, ci: int, soak: int) -> int:
    """How many times a fault is injected in this run."""
    if SOAK:
        return soak
    return ci if CI else normal
