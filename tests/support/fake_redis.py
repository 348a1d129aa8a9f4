"""A fakeredis server for the fast tier of the conformance suites.

:class:`FakeRedisServer` runs fakeredis's own TCP server (``fakeredis.TcpFakeServer``) in
a child process on a free port, so the library reaches it by a plain ``redis://`` URL
exactly as it reaches a real server (nothing in ``sessionstore`` knows it is a fake), and
the emulation does not compete with the tests for this process's GIL. It needs
``fakeredis[lua]`` (the ``[test]`` extra); without it the tier is skipped.

Redis embeds ``cmsgpack`` in its Lua; fakeredis does not, so the child loads
``support/lua/cmsgpack.lua`` (a pure-Lua ``cmsgpack.unpack``) through fakeredis's public
``lua_modules`` option before it serves.

fakeredis is an emulation: the real ``redis-server`` backends stay in the suites and are
the proof. :data:`GAPS` names what fakeredis lacks; :func:`skip_gaps` skips the tests that
need it, each with its reason.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType

import pytest

LUA_DIR = Path(__file__).with_name("lua")
#: The Redis version fakeredis emulates.
VERSION = (7, 4)

#: What fakeredis lacks, by test name (without the parametrisation): the fakeredis
#: backend skips these tests with the reason given.
GAPS: dict[str, str] = {
    "test_a_torn_final_batch_is_dropped_and_cut_off": (
        "no XSETID, which log_cut_tail.lua needs to lower a stream's last id after cutting"
        " a torn tail"
    ),
    "test_an_append_cuts_a_torn_tail_off_before_writing": (
        "no XSETID, which log_append.lua needs to lower a stream's last id after cutting"
        " a torn tail"
    ),
}


def available() -> str | None:
    """None when ``fakeredis[lua]`` is importable, else what is missing."""
    for module in ("fakeredis", "lupa"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'fakeredis[lua]')"
    return None


class FakeRedisServer:
    """``fakeredis.TcpFakeServer`` on 127.0.0.1 in a child process, on a port the OS picks.

    Every store opened on :attr:`url` shares its data, as on a real server. The URL
    carries ``durability=none``: fakeredis keeps nothing on disk (and has no ``CONFIG`` or
    ``INFO`` to ask)."""

    def __init__(self) -> None:
        missing = available()
        if missing is not None:
            reason = f"the fakeredis tier cannot run: {missing}"
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?durability=none"

    def __enter__(self) -> FakeRedisServer:
        # LUA_PATH is read once, when fakeredis creates the server's Lua runtime; Redis
        # runs Lua 5.1.
        env = {**os.environ, "LUA_PATH": f"{LUA_DIR}/?.lua;;", "FAKEREDIS_LUA_VERSION": "5.1"}
        self._process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.strip().isdigit():
            self.__exit__(None, None, None)
            raise RuntimeError(f"the fakeredis server did not start (it printed {line!r})")
        self.port = int(line)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            for pipe in (self._process.stdin, self._process.stdout):
                if pipe is not None:
                    pipe.close()
            self._process = None


def skip_gaps(request: pytest.FixtureRequest) -> None:
    """Skip the current test if it needs what fakeredis lacks (see :data:`GAPS`)."""
    reason = GAPS.get(request.node.originalname)
    if reason is not None:
        pytest.skip(f"fakeredis: {reason}")


def _serve() -> None:
    """The child: print the port once ready, then serve until killed or until its stdin
    closes (the test process is gone)."""
    import threading

    import fakeredis

    server = fakeredis.TcpFakeServer(("127.0.0.1", 0), server_version=VERSION)
    # Replies go out as they are ready (TCP_NODELAY, as redis-server does): otherwise
    # Nagle's algorithm holds each reply after the first of a pipeline until the client
    # acknowledges the first, some 40 ms a pipeline.
    server.RequestHandlerClass = type(
        "NoDelayHandler", (server.RequestHandlerClass,), {"disable_nagle_algorithm": True}
    )
    # fakeredis creates one Lua runtime per server, at its first script, with the
    # modules of the connection that ran it: this one, before any client connects.
    primer = fakeredis.FakeRedis(
        server=server.fake_server, version=VERSION, lua_modules={"cmsgpack"}
    )
    if primer.eval("return type(cmsgpack) == 'table' and 1 or 0", 0) != 1:
        raise SystemExit(f"fakeredis could not load cmsgpack from {LUA_DIR}")
    primer.close()
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    _serve()
