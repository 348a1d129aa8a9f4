"""URL text that is safe to show, and checks of URL query parameters.

Every URL sessionstore prints, raises or logs goes through :func:`mask_url` first.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from .errors import InvalidArgumentError

_PASSWORD_PARAM = re.compile(r"(?i)((?:^|[?&])password=)[^&#]*")


def mask_url(url: str) -> str:
    """``url`` with every password replaced by ``***``: in the user-info part and in a
    ``?password=`` query parameter."""
    url = _PASSWORD_PARAM.sub(r"\1***", url)
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def reject_unknown_params(names: Iterable[str], known: Iterable[str], shown_url: str) -> None:
    """Raise :class:`InvalidArgumentError` for the first of ``names`` not in ``known``,
    naming it and suggesting the closest known one (``shown_url`` is already masked)."""
    allowed = sorted(set(known))
    for name in names:
        if name in allowed:
            continue
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f" (did you mean ?{close[0]}=?)" if close else ""
        raise InvalidArgumentError(
            f"unknown URL parameter ?{name[:40]}= in {shown_url!r}{hint}; "
            f"known: {', '.join(allowed) or 'none'}"
        )
