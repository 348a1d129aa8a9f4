"""The namespace-index check of ``sessionstore doctor`` (Redis)."""

from __future__ import annotations

from ...errors import AccessDeniedError, SessionStoreError
from .check import Check


def index_check(url: str, namespace: str, fix: bool) -> Check:
    """Data of the namespace missing from its index (stores written before it existed):
    FAIL with the remedy; with ``fix``, index it. Both need SCAN (an admin)."""
    from ...redis.index import audit, rebuild

    try:
        if fix:
            added = rebuild(url, namespace)
            return Check(
                "index",
                "OK",
                f"indexed {added.sessions} session(s) and {added.values} value(s) that "
                f"the index of namespace {namespace!r} lacked",
            )
        missing = audit(url, namespace)
    except AccessDeniedError:
        return Check(
            "index",
            "WARN",
            "this user may not SCAN, so the namespace index cannot be audited: an admin "
            "can (`sessionstore doctor`)",
        )
    except SessionStoreError as exc:
        return Check("index", "FAIL", f"{type(exc).__name__}: {exc}")
    if missing.total:
        return Check(
            "index",
            "FAIL",
            f"{missing.sessions} session(s) and {missing.values} value(s) of namespace "
            f"{namespace!r} are stored but not indexed (written before the index existed), "
            "so listings miss them: run `sessionstore doctor --fix` once as an admin",
        )
    return Check("index", "OK", f"every session and value of {namespace!r} is indexed")
