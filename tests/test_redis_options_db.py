"""The database a Redis URL names is checked wherever it is written: ``?db=``, the path
of ``redis://host:port/<db>`` and of ``redis+sentinel://host/SERVICE/<db>``; a store
refuses a bad one before any I/O, with a message that never quotes a password."""

from __future__ import annotations

import pytest

import sessionstore
from sessionstore import InvalidArgumentError
from sessionstore.redis.acl import setuser_args
from sessionstore.redis.options import MAX_DB, parse_options

RANGE = f"must be a whole number in [0, {MAX_DB}]"


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/99999999999999999999",
        f"redis://127.0.0.1:1/{MAX_DB + 1}",
        "rediss://127.0.0.1:1/99999999999999999999",
        "redis://127.0.0.1:1/-1",
        "redis://127.0.0.1:1/zero",
        "redis://127.0.0.1:1/%31%32x",
        "redis+sentinel://127.0.0.1:1/service/99999999999999999999",
        "redis+sentinel://127.0.0.1:1/service/x",
    ],
)
def test_a_database_in_the_path_out_of_range_is_refused_like_db_param(url):
    with pytest.raises(InvalidArgumentError) as refused:
        parse_options(url, None, None)
    assert str(refused.value).startswith(f"the database in the path {RANGE}, not ")
    assert str(refused.value).endswith(f" in {url!r}")
    with pytest.raises(InvalidArgumentError):
        sessionstore.connect(url, "ns")


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0",
        f"redis://127.0.0.1:1/{MAX_DB}",
        "redis://127.0.0.1:1/",
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:1/000000000000000000007",
        "redis+sentinel://127.0.0.1:1/service/3",
        "redis+sentinel://127.0.0.1:1/service",
    ],
)
def test_a_database_in_range_or_none_is_taken(url):
    parse_options(url, None, None)


def test_a_db_param_with_leading_zeros_is_judged_by_its_value():
    with pytest.raises(InvalidArgumentError, match=r"\?db= must be a whole number"):
        parse_options("redis://127.0.0.1:1/0?db=0000000000009999999999999", None, None)
    assert parse_options("redis://127.0.0.1:1/0?db=0000000000000000000005", None, None)


def test_the_message_names_the_database_but_never_the_password():
    with pytest.raises(InvalidArgumentError) as shown:
        parse_options("redis://:pw-secret@127.0.0.1:1/99999999999999999999", None, None)
    assert "'99999999999999999999'" in str(shown.value) and "pw-secret" not in str(shown.value)
    # A password with a raw "/" reads as a path: none of it is quoted.
    with pytest.raises(InvalidArgumentError) as hidden:
        parse_options("redis://:12/pw-part@127.0.0.1/0", None, None)
    assert "pw-part" not in str(hidden.value) and "percent-encode" in str(hidden.value)


@pytest.mark.parametrize("db", [-1, MAX_DB + 1, 10**20, True, "1"])
def test_the_acl_line_grants_only_a_database_a_url_may_name(db):
    with pytest.raises(InvalidArgumentError, match=r"\[0, 2147483647\]"):
        setuser_args("u", "p", "ns", db)
