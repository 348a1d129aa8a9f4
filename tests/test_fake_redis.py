"""The fakeredis tier's own support: the pure-Lua ``cmsgpack.unpack`` its server loads
decodes what the library's MessagePack packer sends as Redis's built-in cmsgpack does
(for the types the scripts receive): each case runs on fakeredis and on redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import msgpack
import pytest
import redis
from support.fake_redis import FakeRedisServer

_packb = msgpack.Packer(use_bin_type=True).pack
UNPACK = "return cmsgpack.unpack(ARGV[1])"


@pytest.fixture(scope="module")
def fake_client() -> Iterator[redis.Redis]:
    with FakeRedisServer() as server:
        connection = redis.Redis(port=server.port)
        yield connection
        connection.close()


@pytest.fixture(params=["fakeredis", "redis"])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    if request.param == "fakeredis":
        yield request.getfixturevalue("fake_client")
        return
    connection = redis.Redis(port=request.getfixturevalue("redis_server").port)
    yield connection
    connection.close()


@pytest.mark.parametrize(
    "value",
    [
        ["type", "1700000000000", '{"a":1}', ""],
        ["x" * 31, "y" * 32, "z" * 255, "w" * 256, "v" * 65_536],
        ["日本語", "\x00", "a\r\nb"],
        [str(i) for i in range(16)] + [str(i) for i in range(65_536)],
        [0, 127, 128, 255, 256, 65_535, 65_536, 2**32, 2**52],
        [-1, -32, -33, -128, -129, -32_769, -(2**31) - 1, -(2**52)],
    ],
    ids=["event", "str-lengths", "text", "array-lengths", "integers", "negative"],
)
def test_cmsgpack_unpack_decodes_arrays_as_redis_does(client, value):
    expected = [v.encode() if isinstance(v, str) else v for v in value]
    assert client.eval(UNPACK, 0, _packb(value)) == expected


def test_cmsgpack_unpack_decodes_nesting_and_every_top_level_value(client):
    assert client.eval(UNPACK, 0, _packb([["a", [1]], [True, False]])) == [[b"a", [1]], [1, None]]
    every = "return {cmsgpack.unpack(ARGV[1])}"
    assert client.eval(every, 0, _packb("a") + _packb(2)) == [b"a", 2]


def test_cmsgpack_unpack_refuses_binaries(client):
    with pytest.raises(redis.RedisError):
        client.eval(UNPACK, 0, _packb([b"\xff\x00"]))


def test_the_fake_cmsgpack_unpack_refuses_what_it_does_not_decode(fake_client):
    # fakeredis's TCP server sends a Lua error's message, stack trace and all, on one
    # RESP error line, which redis-py reads as an invalid response: an error either way.
    for bad in (_packb(1.5), _packb(b"bin"), _packb("abc")[:-1], b"\x92\x01"):
        with pytest.raises(redis.RedisError):
            fake_client.eval(UNPACK, 0, bad)
