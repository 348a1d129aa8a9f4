"""A small threaded TCP proxy on 127.0.0.1 in front of a real server, for fault injection.

It forwards bytes both ways and understands just enough of RESP (the Redis protocol) to
pair each request with its reply, so that it can be told to lose replies::

    with TcpProxy(upstream_port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        proxy.drop_replies("EVALSHA")      # the next EVALSHA runs, its reply is lost
        ...
        assert proxy.dropped == 1

Losing a reply means: the request is forwarded and executed by the server, the proxy
reads the server's whole reply, swallows it and closes the client's connection (and its
own connection to the server). The client sees the connection drop after sending, which
is exactly what a crash of the network or of a middlebox between send and reply does.

:meth:`TcpProxy.stall` makes the proxy stop forwarding (connections are accepted, nothing
is answered): a hung server or a network partition, as the client sees it. Given a
command name, it stalls only the connections that sent one (``stall("SUBSCRIBE")``: a
subscriber's path is cut while the others still flow).

:meth:`TcpProxy.hold_requests` delays a request instead: the next request of a command is
kept by the proxy (its connection forwards nothing more) until released, then sent to
the server, whatever the client did meanwhile (a client that timed out and resent on a
new connection): a late copy of a request, as a queueing middlebox delivers one.

Only 127.0.0.1 is ever used. Every thread is a daemon, and :meth:`close` ends them all.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field

_CHUNK = 65536


class Incomplete(Exception):
    """The buffer does not hold a whole RESP value yet."""


def _line_end(buf: bytes | bytearray, pos: int) -> int:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    return end


def resp_value_end(buf: bytes | bytearray, pos: int = 0) -> int:
    """The offset just past the RESP2/RESP3 value starting at ``pos``; raises
    :class:`Incomplete` when the buffer holds only part of it."""
    if pos >= len(buf):
        raise Incomplete
    kind = buf[pos : pos + 1]
    end = _line_end(buf, pos)
    head = bytes(buf[pos + 1 : end])
    after = end + 2
    if kind in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return after
    if kind in (b"$", b"!", b"="):
        size = int(head)
        if size < 0:  # RESP2 null bulk string
            return after
        if len(buf) < after + size + 2:
            raise Incomplete
        return after + size + 2
    if kind in (b"*", b"~", b">", b"%", b"|"):
        count = int(head)
        if count < 0:  # RESP2 null array
            return after
        if kind in (b"%", b"|"):
            count *= 2
        for _ in range(count):
            after = resp_value_end(buf, after)
        return after
    # An inline command (plain text line): only requests can be inline.
    return after


def command_name(buf: bytes | bytearray, pos: int, end: int) -> str:
    """The upper-cased command name of the request ``buf[pos:end]``."""
    if buf[pos : pos + 1] == b"*":
        first = _line_end(buf, pos) + 2  # past "*<n>\r\n"
        if buf[first : first + 1] == b"$":
            size_end = _line_end(buf, first)
            size = int(buf[first + 1 : size_end])
            return bytes(buf[size_end + 2 : size_end + 2 + size]).decode("latin-1").upper()
    return bytes(buf[pos:end]).split(maxsplit=1)[0].decode("latin-1").upper()


@dataclass
class _Plan:
    """What to do to the replies of the next requests named ``command``."""

    command: str
    remaining: int
    skip: int = 0
    before_close: Callable[[], None] | None = None


@dataclass
class _Hold:
    """A request named ``command`` to keep until ``release`` is set (or ``longest`` s)."""

    command: str
    release: threading.Event
    longest: float
    #: Set once the held request was sent to the server and its reply read.
    delivered: threading.Event = field(default_factory=threading.Event)
    #: The server's reply to the held request (what nobody receives).
    reply: bytes | None = None
    taken: bool = False
    #: How many such requests to forward before the one kept.
    skip: int = 0


@dataclass
class _Link:
    """One client connection and the proxy's own connection to the server."""

    client: socket.socket
    server: socket.socket
    #: The 1-based numbers of the requests whose reply is to be lost, with their hooks.
    doomed: dict[int, Callable[[], None] | None] = field(default_factory=dict)
    requests: int = 0
    #: How many replies the server sent on this connection (a held request's is awaited).
    replies: int = 0
    replied: threading.Condition = field(default_factory=threading.Condition)
    #: The held request's number and plan, while its reply is awaited.
    holding: tuple[int, _Hold] | None = None
    #: The names of the commands sent on this connection so far.
    names: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.server):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with suppress(OSError):
                sock.close()


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``upstream_port`` (see the module docstring)."""

    def __init__(self, upstream_port: int, *, host: str = "127.0.0.1") -> None:
        if host != "127.0.0.1":
            raise ValueError("the test proxy only ever listens on 127.0.0.1")
        self.upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._plans: list[_Plan] = []
        self._links: list[_Link] = []
        self._stalled = threading.Event()
        self._stall_only: str | None = None
        self._holds: list[_Hold] = []
        self._closed = threading.Event()
        #: How many replies were lost on purpose, and their raw bytes, in order.
        self.dropped = 0
        self.dropped_replies: list[bytes] = []
        #: What the ``before_close`` hooks raised.
        self.hook_errors: list[BaseException] = []
        #: Set each time a reply is dropped (cleared by :meth:`drop_replies`).
        self.reply_dropped = threading.Event()
        self.connections = 0
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    # --- what to do -----------------------------------------------------------------------

    def drop_replies(
        self,
        command: str,
        count: int = 1,
        *,
        skip: int = 0,
        before_close: Callable[[], None] | None = None,
    ) -> None:
        """Lose the server's replies to the next ``count`` requests named ``command``
        (executed by the server all the same), closing the client connection each time;
        the first ``skip`` such requests are answered normally. ``before_close`` runs
        (in the proxy's thread) once a reply is swallowed, before the client's
        connection is closed: the moment between a lost reply and the client's retry."""
        with self._lock:
            self._plans.append(_Plan(command.upper(), count, skip, before_close))
            self.reply_dropped.clear()

    def hold_requests(self, command: str, *, skip: int = 0, longest: float = 60.0) -> _Hold:
        """Keep the next request named ``command`` (see the module doc), past the first
        ``skip`` of them, until the returned plan's ``release`` is set, or ``longest``
        seconds passed; then send it to the server and read its reply (kept in the plan's
        ``reply``, forwarded to no one whose connection ended), and set the plan's
        ``delivered``."""
        plan = _Hold(command.upper(), threading.Event(), longest, skip=skip)
        with self._lock:
            self._holds.append(plan)
        return plan

    def _held(self, name: str) -> _Hold | None:
        with self._lock:
            for plan in self._holds:
                if plan.command == name and not plan.taken and plan.skip > 0:
                    plan.skip -= 1
                    return None
                if plan.command == name and not plan.taken:
                    plan.taken = True
                    self._holds.remove(plan)
                    return plan
        return None

    def pending_drops(self) -> int:
        with self._lock:
            return sum(plan.remaining for plan in self._plans)

    def cancel(self) -> None:
        """Forget every pending :meth:`drop_replies`."""
        with self._lock:
            self._plans.clear()

    def stall(self, command: str | None = None) -> None:
        """Stop forwarding, both ways, on every connection (with ``command``: on every
        connection that has sent such a request, now or later): nothing is answered."""
        self._stall_only = None if command is None else command.upper()
        self._stalled.set()

    def resume(self) -> None:
        """Forward again; the connections that stalled are closed (their requests may
        or may not have reached the server, as after a real partition)."""
        with self._lock:
            links = [link for link in self._links if self._stalls(link)]
        for link in links:
            link.close()
        self._stalled.clear()

    def _stalls(self, link: _Link) -> bool:
        only = self._stall_only
        return only is None or only in link.names

    def close(self) -> None:
        self._closed.set()
        with suppress(OSError):
            self._listener.close()
        with self._lock:
            links, self._links = list(self._links), []
        for link in links:
            link.close()
        self._acceptor.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the pumps ------------------------------------------------------------------------

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()  # the server is down: the client sees its connection drop
                continue
            server.settimeout(None)
            client.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, server)
            with self._lock:
                self._links = [k for k in self._links if not k.closed] + [link]
                self.connections += 1
            for target, name in ((self._requests, "up"), (self._replies, "down")):
                threading.Thread(
                    target=target, args=(link,), name=f"tcp-proxy-{name}", daemon=True
                ).start()

    def _doom(self, name: str) -> _Plan | None:
        """The plan that loses the reply to this request (named ``name``), if any."""
        with self._lock:
            for plan in self._plans:
                if plan.command == name and plan.skip > 0:
                    plan.skip -= 1
                    return None
                if plan.command == name and plan.remaining > 0:
                    plan.remaining -= 1
                    if plan.remaining == 0:
                        self._plans.remove(plan)
                    return plan
        return None

    def _wait_while_stalled(self, link: _Link) -> bool:
        while self._stalled.is_set() and self._stalls(link):
            if link.closed or self._closed.is_set():
                return False
            time.sleep(0.02)
        return not link.closed

    def _requests(self, link: _Link) -> None:
        """Client to server, one whole request at a time, noting which replies to lose."""
        buf = bytearray()
        try:
            while True:
                data = _recv(link.client)
                if not data:
                    break
                if not self._wait_while_stalled(link):
                    break
                buf += data
                out = bytearray()
                while True:
                    try:
                        end = resp_value_end(buf)
                    except Incomplete:
                        break
                    link.requests += 1
                    name = command_name(buf, 0, end)
                    link.names.add(name)
                    plan = self._doom(name)
                    if plan is not None:
                        with link.lock:
                            link.doomed[link.requests] = plan.before_close
                    held = self._held(name)
                    if held is not None:
                        if out:
                            link.server.sendall(out)
                            out = bytearray()
                        self._deliver_late(link, bytes(buf[:end]), held)
                    else:
                        out += buf[:end]
                    del buf[:end]
                if out:
                    link.server.sendall(out)
        except OSError:
            pass
        link.close()

    def _deliver_late(self, link: _Link, request: bytes, plan: _Hold) -> None:
        """Keep ``request`` until released, then send it and wait for its reply."""
        deadline = time.monotonic() + plan.longest
        while not plan.release.wait(0.02):
            if self._closed.is_set() or time.monotonic() > deadline:
                break
        number = link.requests
        with link.replied:
            link.holding = (number, plan)
        link.server.sendall(request)
        with link.replied:
            link.replied.wait_for(lambda: link.replies >= number or link.closed, timeout=10)
        plan.delivered.set()

    def _replies(self, link: _Link) -> None:
        """Server to client, one whole reply at a time, losing the doomed one."""
        buf = bytearray()
        replies = 0
        try:
            while True:
                data = _recv(link.server)
                if not data:
                    break
                if not self._wait_while_stalled(link):
                    break
                buf += data
                out = bytearray()
                while True:
                    try:
                        end = resp_value_end(buf)
                    except Incomplete:
                        break
                    reply = bytes(buf[:end])
                    del buf[:end]
                    if reply.startswith(b">"):  # a RESP3 push: not a reply to a request
                        out += reply
                        continue
                    replies += 1
                    with link.replied:
                        link.replies = replies
                        holding = link.holding
                        if holding is not None and holding[0] == replies:
                            holding[1].reply = reply
                        link.replied.notify_all()
                    with link.lock:
                        doomed = replies in link.doomed
                        hook = link.doomed.get(replies)
                    if doomed:
                        if out:
                            link.client.sendall(out)
                        with self._lock:
                            self.dropped += 1
                            self.dropped_replies.append(reply)
                        if hook is not None:
                            try:
                                hook()
                            except BaseException as exc:  # noqa: BLE001 - for the test
                                self.hook_errors.append(exc)
                        self.reply_dropped.set()
                        link.close()
                        return
                    out += reply
                if out:
                    link.client.sendall(out)
        except OSError:
            pass
        link.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(_CHUNK)
    except OSError:
        return b""


def iter_values(buf: bytes) -> Iterator[bytes]:
    """Each whole RESP value in ``buf``, in order (for tests of the proxy itself)."""
    pos = 0
    while pos < len(buf):
        end = resp_value_end(buf, pos)
        yield buf[pos:end]
        pos = end
