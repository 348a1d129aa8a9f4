"""One reading of the integers the library stores in Redis: Python's
:func:`~sessionstore.redis.stored_numbers.stored_int` and the Lua functions'
``stored_integer`` (``lua/_number.lua``, run here on a real redis-server) agree on every
text, and a meta hash whose ``next_seq`` only ``int()`` would read (``1_0``) is damaged
for every reader and writer alike."""

from __future__ import annotations

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore import CorruptLogError, SessionEvent, SessionHeader
from sessionstore.keys import log_keys
from sessionstore.redis.library import lua_dir
from sessionstore.redis.stored_numbers import stored_int

#: Texts near the rule's edges: what int() or tonumber() take and the other refuses.
EDGES = [
    "10", "-10", "0", "-0", "010", "1_0", " 10", "10 ", "+10", "0x0A", "1e1", "1.0", "",
    "-", "\u0661\u0660", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "-9223372036854775809", "99999999999999999999", "inf", "nan",
]  # fmt: skip


def _lua_reading(client: redis.Redis, texts: list[str]) -> list[int | None]:
    helper = (lua_dir() / "_number.lua").read_text()
    script = helper + (
        "\nlocal out = {}\n"
        "for i = 1, #ARGV do\n"
        "  local n = stored_integer(ARGV[i])\n"
        "  out[i] = n and string.format('%d', n) or false\n"
        "end\n"
        "return out\n"
    )
    return [None if n is None else int(n) for n in client.eval(script, 0, *texts)]


@pytest.fixture(scope="module")
def client(redis_server):
    found = redis.Redis(port=redis_server.port)
    yield found
    found.close()


def _python_reading(texts: list[str]) -> list[int | None]:
    # Lua numbers are doubles: the server side only ever compares numbers far inside 2**53.
    return [stored_int(t) for t in texts]


def _agree(lua: list[int | None], python: list[int | None]) -> None:
    for seen_by_lua, seen_by_python in zip(lua, python, strict=True):
        assert (seen_by_lua is None) == (seen_by_python is None)
        if seen_by_python is not None and abs(seen_by_python) < 2**53:
            assert seen_by_lua == seen_by_python


def test_python_and_lua_read_the_edge_texts_alike(client):
    _agree(_lua_reading(client, EDGES), _python_reading(EDGES))
    assert _python_reading(["10", "1_0", " 10", "0x0A", "1e1"]) == [10, None, None, None, None]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.sampled_from("0123456789-_ +.ex\u0661"), max_size=22), min_size=1))
def test_python_and_lua_read_any_text_alike(client, texts):
    _agree(_lua_reading(client, texts), _python_reading(texts))


def test_a_next_seq_only_int_would_read_is_damage_everywhere(redis_server, namespace):
    with sessionstore.connect(redis_server.url, namespace=namespace) as store:
        log = store.events
        log.create(SessionHeader(id="s", cwd="/x"))
        log.append("s", [SessionEvent(seq=i, type="note", time=i, data={}) for i in range(10)])
        meta, _ = log_keys(namespace, "s")
        admin = redis.Redis(port=redis_server.port)
        try:
            admin.hset(meta, "next_seq", "1_0")
            before = admin.hgetall(meta)
            with pytest.raises(CorruptLogError, match="next_seq"):
                log.info("s")
            with pytest.raises(CorruptLogError, match="next_seq"):
                log.append("s", [SessionEvent(seq=10, type="note", time=10, data={})])
            assert admin.hgetall(meta) == before
        finally:
            admin.close()
