"""One finding of ``sessionstore doctor``, and a check run so that whatever it raises is a
finding too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import SessionStoreError


@dataclass
class Check:
    name: str
    status: str  # "OK", "WARN" (usable, but read the advice) or "FAIL" (blocks use)
    detail: str


class Unreached(Check):
    """The FAIL of a server that could not be reached (or refused this user's login):
    every later check would only say it again, so none is run."""


def guarded_check(name: str, check: Callable[..., list[Check]], *args: Any) -> list[Check]:
    """``check(*args)``; an error it did not expect is one FAIL line (never a traceback)."""
    try:
        return check(*args)
    except SessionStoreError as exc:
        return [Check(name, "FAIL", f"{type(exc).__name__}: {exc}")]
    except Exception as exc:  # noqa: BLE001 - any URL gets lines, not a traceback
        return [Check(name, "FAIL", f"unexpected {type(exc).__name__}: {exc}")]
