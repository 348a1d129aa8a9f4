"""``sessionstore acl``: which namespaces and URLs it takes, and what the printed line
grants (run through ``redis-cli`` as an operator would)."""

from __future__ import annotations

import shlex
import subprocess
import uuid

import pytest
import redis
from typer.testing import CliRunner

import sessionstore
from sessionstore import AccessDeniedError, SessionEvent, SessionHeader
from sessionstore.cli import app
from sessionstore.keys import namespace_prefix
from sessionstore.redis.acl import key_pattern
from sessionstore.redis.library import install

T0 = 1_718_000_000_000


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``sessionstore *args``, in this process (its output is a subprocess's)."""
    result = CliRunner().invoke(app, list(args))
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:7/99999999999999999999",
        "redis://127.0.0.1:7/2147483648",
        "redis+sentinel://127.0.0.1:7/service/99999999999999999999",
    ],
)
def test_a_database_out_of_range_in_the_url_path_is_refused_before_any_line(url):
    printed = cli("acl", "u", "--password", "p", "--url", url)
    assert printed.returncode == 2, printed.stdout
    assert printed.stdout == "" and "+select" not in printed.stderr
    (line,) = printed.stderr.splitlines()
    assert "the database in the path must be a whole number in [0, 2147483647]" in line


NAMESPACES = ["team a", "a*", "[ab]?", "x\\y", "it's", "tab\there", "a\u200eb", "  "]


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_namespace_the_library_takes_gets_its_escaped_key_prefix(namespace):
    printed = cli("acl", "u", "--password", "p", "-n", namespace)
    assert printed.returncode == 0, printed.stderr
    assert "b'" not in printed.stdout + printed.stderr
    pattern = key_pattern(namespace)
    assert pattern == namespace_prefix(namespace) + "*"
    if pattern.isprintable():
        assert shlex.quote(f"~{pattern}") in printed.stdout.split()
    else:  # bash's $'...': the line stays printable (the test below runs it)
        assert "$'~ss:" in printed.stdout and printed.stdout.rstrip("\n").isprintable()


def test_the_key_pattern_escapes_glob_characters_its_prefix_might_hold(monkeypatch):
    from sessionstore.redis import acl

    monkeypatch.setattr(acl, "namespace_prefix", lambda namespace: f"ss:{namespace}:")
    assert acl.key_pattern("a*b?[c]\\") == "ss:a\\*b\\?\\[c\\]\\\\:*"


def test_a_name_is_never_quoted_as_a_bytes_literal():
    refused = cli("acl", "u v\x1b", "-n", "team a")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        "error: invalid argument: user 'u v\\x1b' must not hold white space or control characters\n"
    )


def test_the_printed_line_confines_the_user_to_its_namespace_whatever_it_holds(redis_server):
    admin = redis.Redis(port=redis_server.port)
    install(admin)
    user = f"u-{uuid.uuid4().hex[:8]}"
    tag = uuid.uuid4().hex[:6]
    namespaces = [f"{tag} {name}" for name in NAMESPACES]
    url = f"redis://{user}:pw@127.0.0.1:{redis_server.port}/0?durability=none"
    try:
        for namespace in namespaces:
            printed = cli(
                "acl", user, "--password", "pw", "-n", namespace, "--url", redis_server.url
            )
            assert printed.returncode == 0, printed.stderr
            made = subprocess.run(
                ["bash", "-c", printed.stdout.strip()], capture_output=True, text=True, timeout=30
            )
            assert made.stdout.strip() == "OK", made.stderr
            (keys,) = admin.acl_getuser(user)["keys"]
            assert keys == f"~{namespace_prefix(namespace)}*"
            with sessionstore.connect(url, namespace) as store:
                store.session("A", "s", "e", "1h").set_data(1, T0)
                store.events.create(SessionHeader(id="s"))
                store.events.append("s", [SessionEvent(seq=0, type="t", time=T0)])
                assert [info.header.id for info in store.events.list_info()] == ["s"]
            others = [other for other in namespaces if other != namespace]
            for other in [*others, namespace + "x", namespace[:-1] or "x", tag]:
                with (
                    pytest.raises(AccessDeniedError),
                    sessionstore.connect(url, other) as store,
                ):
                    store.session("A", "s", "e", "1h").get_data(T0)
    finally:
        admin.acl_deluser(user)
        admin.close()
