"""A password in a URL never shows: not in ``mask_url``, ``repr(store)``, ``store.url``,
the text of a ``SessionStoreError`` (a URL refused by ``connect``, a server that cannot be
reached), a warning or a log record, whatever characters it holds, raw or
percent-encoded, and whether it sits in the user info or in a secret query parameter.

The URLs are generated. A secret counts as shown when any five consecutive characters
of it (all of it when shorter, from three characters on), raw or percent-encoded, appear
in the output but not in the output for the same URL with a placeholder secret (so text
the URL shares with the secret by chance is not a finding).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.redis_server import free_port

import sessionstore
from sessionstore import SessionStoreError
from sessionstore.urls import is_secret_param, mask_url

#: The ASCII characters that end or split a URL part, and a few more that tools trip on.
NASTY = "#?/@:[]%& \t\n\r\\=;+,~*!$'\"<>{}|^`\x00\x7f"
PLACEHOLDER = "\ue000\ue001\ue002\ue003\ue004\ue005"
WINDOW = 5

_secrets = st.text(
    st.sampled_from(NASTY) | st.characters(exclude_categories=["Cs"]), min_size=1, max_size=16
)


def _forms(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}


def _shown(secret: str, text: str, reference: str) -> list[str]:
    """The pieces of ``secret`` found in ``text`` that ``reference`` does not explain."""
    found = []
    for form in _forms(secret):
        if len(form) < 3:
            continue
        size = min(WINDOW, len(form))
        for start in range(len(form) - size + 1):
            piece = form[start : start + size]
            if piece in text and piece not in reference:
                found.append(piece)
    return found


# --- URLs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A URL with a hole for the secret."""

    build: Callable[[str], str]
    label: str

    def __call__(self, secret: str) -> str:
        return self.build(secret)


def _redis_shape(
    draw: st.DrawFn, scheme: str, port: int, in_query: bool, names: list[str]
) -> Shape:
    user = draw(st.sampled_from(["", "user", "app-1"]))
    db = draw(st.sampled_from(["", "/0", "/3"]))
    params = draw(
        st.lists(
            st.sampled_from(["durability=none", "cluster=no", "client_name=w1", "db=0"]),
            max_size=2,
            unique=True,
        )
    )
    fragment = draw(st.sampled_from(["", "#frag"]))
    if scheme == "unix":
        # No server listens there: the first call fails without reaching one.
        address = "/nonexistent-sessionstore-dir/redis.sock"
        db = ""
    else:
        host = draw(st.sampled_from(["127.0.0.1", "localhost", "[::1]"]))
        address = f"{host}:{port}" if draw(st.booleans()) or port else host
    if in_query:
        name = draw(st.sampled_from(names))

        def build(secret: str) -> str:
            tail = "&".join([f"{name}={secret}", *params])
            return f"{scheme}://{user}@{address}{db}?{tail}{fragment}".replace("://@", "://")

        return Shape(build, f"{scheme} ?{name}=")

    def build(secret: str) -> str:
        query = "?" + "&".join(params) if params else ""
        return f"{scheme}://{user}:{secret}@{address}{db}{query}{fragment}"

    return Shape(build, f"{scheme} userinfo")


#: Secret parameters for a store that is never called (redis-py would refuse some).
ANY_SECRET_PARAMS = ["password", "ssl_password", "token", "api_secret", "PassWord", "access_token"]
REDIS = ["redis", "rediss", "unix"]


@st.composite
def shapes(
    draw: st.DrawFn,
    port: int = 0,
    schemes: tuple[str, ...] = (*REDIS, "sqlite", "file", "memory", "dummy"),
    names: tuple[str, ...] = tuple(ANY_SECRET_PARAMS),
) -> Shape:
    scheme = draw(st.sampled_from(schemes))
    in_query = draw(st.booleans())
    if scheme in REDIS:
        return _redis_shape(draw, scheme, port, in_query, list(names))
    if in_query:
        name = draw(st.sampled_from(["password", "token", "secret"]))
        path = {"sqlite": "/nowhere/x.db", "file": "/nowhere/dir"}.get(scheme, "")
        return Shape(lambda secret: f"{scheme}://{path}?{name}={secret}", f"{scheme} ?{name}=")
    host = draw(st.sampled_from(["localhost", "host"]))
    path = {"sqlite": "/x.db", "file": "/nowhere/dir"}.get(scheme, "")
    return Shape(lambda secret: f"{scheme}://me:{secret}@{host}{path}", f"{scheme} userinfo")


def _embed(secret: str, encoded: bool) -> str:
    return quote(secret, safe="") if encoded else secret


# --- what a user can see ---------------------------------------------------------------------


@contextmanager
def _captured() -> Iterator[list[str]]:
    """Every warning and log record (any logger, any level) emitted inside, as text."""
    texts: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            texts.append(self.format(record))
            if record.exc_info and record.exc_info[1] is not None:
                texts.append(str(record.exc_info[1]))

    root = logging.getLogger()
    handler, level = Keep(logging.DEBUG), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield texts
        texts.extend(str(w.message) for w in caught)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _visible(url: str, first_call: bool, timeout: float | None = None) -> str:
    """All the text a user could see of ``url``: masked, as a store, in errors, warnings
    and logs; with ``first_call`` also the error of a first call on the store."""
    seen = [mask_url(url)]
    with _captured() as logged:
        try:
            store = sessionstore.connect(url, "ns", timeout=timeout)
        except SessionStoreError as exc:
            seen.append(str(exc))
        else:
            seen += [repr(store), store.url]
            try:
                if first_call:
                    store.session("A", "s", "e", "1h").get_data(0)
            except SessionStoreError as exc:
                seen.append(str(exc))
            finally:
                store.close()
    return "\n".join(seen + logged)


def _check(shape: Shape, secret: str, encoded: bool, *, first_call: bool, **kw: float) -> None:
    if shape.label.endswith("=") and not encoded:
        # A raw "&" in a query value starts the next parameter: only its encoding is a value.
        assume("&" not in secret)
    url = shape(_embed(secret, encoded))
    reference = _visible(shape(PLACEHOLDER), first_call, **kw) + "\n" + shape("") + "***"
    # A secret made only of text the URL holds anyway cannot be told apart from it.
    assume(not _shown(secret, reference + "\n" + shape(PLACEHOLDER), ""))
    text = _visible(url, first_call, **kw)
    assert not _shown(secret, text, reference), (shape.label, url, text)


# --- the tests ---------------------------------------------------------------------------------

_FAST = settings(max_examples=300, deadline=None)


@_FAST
@given(shapes(), _secrets, st.booleans())
def test_no_url_secret_shows_in_masks_reprs_errors_warnings_or_logs(shape, secret, encoded):
    # Without I/O: connect (which opens no Redis connection), repr, url, connect's errors,
    # and a first call on the stores that need no server.
    _check(shape, secret, encoded, first_call=shape.label.startswith("memory"))


@pytest.fixture(scope="module")
def closed_port() -> int:
    return free_port()


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), secret=_secrets, encoded=st.booleans())
def test_no_url_secret_shows_when_the_server_cannot_be_reached(closed_port, data, secret, encoded):
    # Only parameters redis-py takes for every scheme: the call must reach the socket.
    shape = data.draw(shapes(port=closed_port, schemes=tuple(REDIS), names=("password",)))
    _check(shape, secret, encoded, first_call=True, timeout=0.2)


@pytest.mark.parametrize(
    "url",
    [
        # Raw characters that end the user info for a parser; the last "@" decides here.
        "redis://user:a@b#c?d/e:f[g%h i@127.0.0.1:6379/0",
        "redis://:s3cr3t/with/slashes@127.0.0.1:1/0",
        "redis://:x:12345/pw-part@127.0.0.1/0",
        "rediss://user:p%40ss%3Aw%2Fo%23rd@host:6380/0",
        "unix://:pw-of-unix@/run/redis.sock?db=0",
        # Unparseable: a bad port, an unbalanced bracket.
        "redis://user:pw-bad-port@host:port/0",
        "redis://user:pw-bracket@[::1/0",
        "redis://user:pw-unicode@ｈｏｓｔ:6379/0",
        # Secret parameters, however spelt.
        "redis://host/0?password=pw-param&db=0",
        "redis://host/0?ssl_password=pw-ssl",
        "redis://host/0?ssl_keyfile_password=pw-keyfile&ssl_keyfile=client.key",
        "redis://host/0?PASS%57ORD=pw-encoded-name",
        "redis://host/0?token=pw-with@at&db=0",
        "redis://host/0?password=pw-with#hash",
        "redis://host/0?password=pw-with&amp-lone",
        "sqlite:////tmp/x.db?password=pw-sqlite",
        # No "//" at all.
        "redis:user:pw-no-slashes@host",
    ],
)
def test_known_hard_cases_are_masked(url):
    masked = mask_url(url)
    for secret in ("a@b#c?d/e:f[g%h i", "s3cr3t/with/slashes", "x:12345/pw-part", "p%40ss"):
        assert secret not in masked
    assert "pw-" not in masked, masked
    assert "***" in masked


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:pw@host:6379/0", "redis://user:***@host:6379/0"),
        ("redis://user@host:6379/0", "redis://user@host:6379/0"),
        ("redis://host:6379/0?db=1&client_name=a", "redis://host:6379/0?db=1&client_name=a"),
        ("redis://:pw@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
        ("unix://:pw@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
        ("sqlite:////data/a@b.db", "sqlite:////data/a@b.db"),
        ("file:///data/user@host/dir", "file:///data/user@host/dir"),
        ("/data/plain/path", "/data/plain/path"),
        (
            "rediss://h/0?ssl_keyfile=k.key&ssl_password=pw&ssl_ca_certs=ca.crt",
            "rediss://h/0?ssl_keyfile=k.key&ssl_password=***&ssl_ca_certs=ca.crt",
        ),
        # A bad port: the whole user info goes, user name included.
        ("redis://user:pw@host:port/0", "redis://***@host:port/0"),
    ],
)
def test_only_secrets_are_masked(url, shown):
    assert mask_url(url) == shown


def test_secret_parameter_names():
    for name in ("password", "ssl_password", "ssl_keyfile_password", "token", "client_secret"):
        assert is_secret_param(name)
    for name in ("db", "ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "durability", "cluster"):
        assert not is_secret_param(name)


@pytest.mark.parametrize(
    ("template", "secret"),
    [
        # redis-py reads what follows the first ":" of these as a port, and says so.
        ("redis://:{}@127.0.0.1:{}/0", "a:bcdef/xyz"),
        ("redis://user:{}@127.0.0.1:{}/0", "pa/ssword"),
        ("redis://user:{}@127.0.0.1:{}/0", "pa[ssword"),
        ("redis://user:{}@127.0.0.1:{}/0?db=0", "pa?ss#word"),
    ],
)
def test_a_redis_url_with_raw_delimiters_in_its_password_shows_none_of_it(
    closed_port, template, secret
):
    text = _visible(template.format(secret, closed_port), first_call=True, timeout=0.2)
    reference = _visible(template.format(PLACEHOLDER, closed_port), first_call=True, timeout=0.2)
    assert not _shown(secret, text, reference), text


@settings(max_examples=100, deadline=None)
@given(shapes(), _secrets, st.sampled_from([bytes, bytearray, memoryview]))
def test_no_url_secret_shows_when_the_url_is_not_a_str(shape, secret, kind):
    """A URL handed over as bytes is refused by its type alone: its text never shows."""

    def refusal(url: str) -> str:
        with pytest.raises(sessionstore.InvalidArgumentError) as refused:
            sessionstore.connect(kind(url.encode("utf-8", "surrogatepass")), "ns")
        return str(refused.value)

    url = shape(_embed(secret, False))
    text = refusal(url)
    assert kind.__name__ in text
    assert not _shown(secret, text, refusal(shape(PLACEHOLDER))), (url, text)
