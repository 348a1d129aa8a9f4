"""URL text that is safe to show, and checks of URL query parameters.

Every URL sessionstore prints, raises or logs goes through :func:`mask_url` first.

What counts as a secret, and how it is found in any string, parseable or not:

- **the password of the user-info part.** The user info ends at the *last* ``@`` after
  ``://``, so a password holding raw ``@``, ``:``, ``/``, ``?``, ``#``, ``[``, ``%``,
  spaces or any other character is covered whole. When that ``@`` lies beyond the first
  ``/``, ``?`` or ``#`` (a raw one in the password, or an ``@`` in the path or query: the
  text cannot tell) or the URL does not parse (a bad port, an unbalanced ``[``), the whole
  user info is replaced, user name included. A bare user name (no ``:``) is not a secret.
- **query parameters named like a secret** (see :func:`is_secret_param`): their value, up to
  the next ``&name=``, is replaced; names are compared percent-decoded and case-insensitively.
- **query parameters sessionstore does not know** (any name not in :data:`SHOWN_PARAMS`): a
  mistyped ``?pasword=`` or ``?pw=`` carries a secret under a name no rule can foresee, so
  only the value of a known, non-secret parameter is ever shown; the name always is.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from urllib.parse import unquote_plus, urlsplit

from .errors import InvalidArgumentError

MASK = "***"

#: A parameter whose decoded, lower-cased name contains one of these carries a secret.
_SECRET_WORDS = re.compile(r"pass|pwd|secret|token|credential|auth|api_?key|private_?key")
#: The query parameters whose value may be shown: those some store reads that carry no
#: secret (sessionstore's own, redis-py's connection options, the sentinels' user name).
SHOWN_PARAMS = frozenset(
    {"durability", "cluster", "max_connections", "cache", "sentinel_username", "username"}
    | {"db", "client_name", "lib_name", "lib_version", "encoding", "encoding_errors", "protocol"}
    | {"socket_timeout", "socket_connect_timeout", "socket_keepalive", "socket_read_size"}
    | {"health_check_interval", "retry_on_timeout", "retry_on_error", "legacy_responses"}
    | {"ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path"}
    | {"ssl_ca_data", "ssl_ciphers", "ssl_check_hostname", "ssl_min_version"}
    | {"ssl_include_verify_flags", "ssl_exclude_verify_flags"}
    | {"ssl_validate_ocsp", "ssl_validate_ocsp_stapled"}
)
#: ``scheme:`` at the start of a string (RFC 3986 scheme characters).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
#: The end of a parameter value: the next ``&`` that starts a ``name=``.
_NEXT_PARAM = re.compile(r"&(?=[^&=#]*=)")


def is_secret_param(name: str) -> bool:
    """Whether the query parameter ``name`` (as written in the URL) carries a secret:
    its decoded name contains ``pass``, ``pwd``, ``secret``, ``token``, ``credential``,
    ``auth``, ``apikey`` or ``private_key`` (``ssl_password`` and ``ssl_keyfile_password``
    included; ``ssl_keyfile`` and ``ssl_certfile`` are paths, not secrets)."""
    return _SECRET_WORDS.search(unquote_plus(name).lower()) is not None


def _hidden(name: str) -> bool:
    """Whether the value of the query parameter ``name`` (as written) must be masked."""
    return is_secret_param(name) or unquote_plus(name) not in SHOWN_PARAMS


def mask_url(url: str) -> str:
    """``url`` with every secret replaced by ``***`` (see the module docstring).

    Never raises, whatever ``url`` holds; a string that is no URL comes back unchanged
    unless it has something shaped like user info or a secret parameter.
    """
    head, rest = _split_authority(url)
    if rest is None:
        return _mask_query(url)
    at = rest.rfind("@")
    if at < 0 or rest.startswith("/"):
        # No user info, or an empty authority (sqlite:///a@b.db, unix:///tmp/a@b.sock).
        return head + _mask_query(rest)
    userinfo, after = rest[:at], rest[at + 1 :]
    user, colon, _ = userinfo.partition(":")
    if at < _first_of(rest, "/?#"):
        if not colon:
            # A bare user name: no secret in it.
            return head + userinfo + "@" + _mask_query(after)
        if _parses(url):
            return f"{head}{user}:{MASK}@{_mask_query(after)}"
        return f"{head}{MASK}@{_mask_query(after)}"
    # The last "@" lies past the authority: in a password, or in the path or query. Hide
    # all before it, and when it sits in a secret parameter's value, the rest of that too.
    last = max(userinfo.rfind("?"), userinfo.rfind("&"))
    name, equals, _ = userinfo[last + 1 :].partition("=")
    if last >= 0 and equals and _hidden(name):
        following = _NEXT_PARAM.search(after)
        tail = "" if following is None else "&" + _mask_params(after[following.end() :])
        return f"{head}{MASK}@{MASK}{tail}"
    return f"{head}{MASK}@{_mask_query(after)}"


def _split_authority(url: str) -> tuple[str, str | None]:
    """(``scheme://`` or ``scheme:``, what follows it); None when the string has no
    scheme, or a scheme without ``//`` and no ``@`` after it."""
    head, sep, rest = url.partition("://")
    if sep:
        return head + sep, rest
    match = _SCHEME.match(url)
    if match and "@" in url[match.end() :]:
        return match.group(), url[match.end() :]
    return url, None


def _first_of(text: str, chars: str) -> int:
    """The index of the first of ``chars`` in ``text``, or ``len(text)``."""
    found = [index for index in (text.find(char) for char in chars) if index >= 0]
    return min(found, default=len(text))


def _parses(url: str) -> bool:
    """Whether ``urlsplit`` reads ``url`` and its port (a bad port raises only there)."""
    try:
        _ = urlsplit(url).port
    except ValueError:
        return False
    return True


def _mask_query(text: str) -> str:
    """``text`` (what follows the user info) with the secret and unknown parameters of
    its query (after the first ``?``) masked."""
    head, sep, query = text.partition("?")
    return head + sep + _mask_params(query) if sep else text


def _mask_params(query: str) -> str:
    """``query`` with the value of every secret or unknown parameter masked, up to the
    next ``&name=`` (a raw ``#``, ``@`` or lone ``&`` in it included)."""
    return "&".join(
        f"{name}={MASK}" if equals and _hidden(name) else item
        for item in _params(query)
        for name, equals, _ in [item.partition("=")]
    )


def _params(query: str) -> list[str]:
    """The ``name=value`` items of ``query``, split at each ``&`` that starts a ``name=``."""
    return _NEXT_PARAM.split(query)


def query_names(url: str) -> list[str]:
    """The decoded names of the query parameters of ``url`` (after the first ``?``), in
    the order given; empty items are skipped."""
    _, sep, query = url.partition("?")
    if not sep:
        return []
    return [unquote_plus(item.partition("=")[0]) for item in _params(query) if item]


def reject_unknown_params(names: Iterable[str], known: Iterable[str], shown_url: str) -> None:
    """Raise :class:`InvalidArgumentError` for the first of ``names`` not in ``known``,
    naming it and suggesting the closest known one (``shown_url`` is already masked).

    A name is only shown when it is one of the parameters of ``shown_url`` too: a name
    the caller read from the raw URL may hold a piece of a password (a raw ``?`` in the
    user info), and is then reported without it.
    """
    allowed = sorted(set(known))
    visible = set(query_names(shown_url))
    for name in names:
        if name in allowed:
            continue
        accepted = f"known: {', '.join(allowed)}" if allowed else "this URL takes no parameters"
        if name not in visible:
            raise InvalidArgumentError(f"unknown URL parameter in {shown_url!r}; {accepted}")
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f" (did you mean ?{close[0]}=?)" if close else ""
        raise InvalidArgumentError(
            f"unknown URL parameter ?{name[:40]}= in {shown_url!r}{hint}; {accepted}"
        )


def invalid_url(url: str, exc: Exception) -> InvalidArgumentError:
    """The error for a URL a parser refused with ``exc``.

    A parser's message may quote part of a password (a password with a raw ``:`` or ``/``
    reads as a port or a path), so when ``url`` holds anything secret its message and its
    traceback are left out; otherwise ``exc`` is quoted and chained.
    """
    shown = mask_url(url)
    if shown != url:
        error = InvalidArgumentError(
            f"invalid URL {shown!r}: it cannot be parsed (percent-encode @ : / ? # [ ] % "
            "and spaces in the user info)"
        )
        error.__suppress_context__ = True
        return error
    error = InvalidArgumentError(f"invalid URL {shown!r}: {str(exc)[:200]}")
    error.__cause__ = exc
    return error
