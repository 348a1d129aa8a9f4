"""A write-behind writer whose background append was applied but whose outcome it never
learnt (every reply lost, or the server killed before replying), with more events
emitted meanwhile: its ``flush`` and ``close`` succeed and the stored log holds every
emitted event exactly once, in order -- through a lost reply, across a restart of the
server and across a failover to its replica, sync and async.

``tests/support/tcp_proxy.py`` sits between the writer and a real redis-server and loses
the replies of the writer's background append (and of redis-py's resends of it), so the
append raises :class:`StoreUnavailableError` although the server applied it. The writer
must recognise that batch as written, never send it again as part of a larger batch (which
the store can only refuse with :class:`SeqConflictError`).
"""

from __future__ import annotations

import functools
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from support.async_bridge import Stores
from support.redis_server import RedisServer
from support.tcp_proxy import TcpProxy

import sessionstore
from sessionstore import SessionBusyError, SessionEvent, SessionHeader, keys
from sessionstore.redis.retry import RETRIES

from .test_linearizable_values import _preload

#: A short timeout: a lost reply shows up as a closed connection at once anyway.
TIMEOUT = 1.0
SESSION = "unknown-outcome"
#: Long enough that no lease renewal (a script call too) runs during a test.
LEASE = 120.0
#: Seconds to wait for something that must happen.
PATIENCE = 30.0


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(durable=True) as own:
        yield own


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy(server.port) as own:
        yield own


@pytest.fixture(params=["sync", "async"])
def connect(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """Opens a store through the sync API, or the async one driven synchronously."""
    stores = Stores(request.param)
    yield functools.partial(stores.open, timeout=TIMEOUT)
    stores.close()


def wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not check():
        assert time.monotonic() < deadline, "what the test waits for never happened"
        time.sleep(0.01)


def emit(writer: Any, count: int, tag: str) -> list[SessionEvent]:
    return [writer.emit("note", {"tag": tag, "n": n}) for n in range(count)]


def stored_as_emitted(server: RedisServer, namespace: str, emitted: list[SessionEvent]) -> None:
    """The log, read around the proxy, is exactly the emitted events, in order."""
    with sessionstore.connect(server.url, namespace) as direct:
        stored = direct.events.read_from(SESSION, 0)
    assert [(e.seq, e.type, e.time, e.data) for e in stored] == [
        (e.seq, e.type, e.time, e.data) for e in emitted
    ], "an event was lost, written twice or out of order"


def started(
    server: RedisServer, proxy: TcpProxy, connect: Callable[..., Any]
) -> tuple[str, Any, list[SessionEvent]]:
    """A writer through the proxy (every script already in the server's cache, so that
    no lost reply is a ``NOSCRIPT`` one) with its first events durable: its namespace,
    the writer and the events emitted."""
    _preload(server)
    namespace = f"unknown-{uuid.uuid4().hex[:10]}"
    store = connect(proxy.url, namespace)
    writer = store.events.writer(SessionHeader(id=SESSION), window=0.01, lease=LEASE)
    emitted = emit(writer, 3, "before")
    writer.flush()
    return namespace, writer, emitted


def failed_in_background(writer: Any) -> bool:
    """The writer's background append raised (its batch stays queued)."""
    return writer._buffer.error is not None


def test_a_writer_whose_append_reply_was_lost_stores_every_event_once(server, proxy, connect):
    namespace, writer, emitted = started(server, proxy, connect)
    # The background append of the next events is applied, and the reply of its first
    # send and of each of redis-py's resends is lost: the writer cannot know it landed.
    proxy.drop_replies("FCALL", count=RETRIES + 1)
    emitted += emit(writer, 4, "lost")
    assert proxy.reply_dropped.wait(PATIENCE)
    emitted += emit(writer, 5, "meanwhile")
    wait_until(lambda: failed_in_background(writer))
    assert proxy.dropped == RETRIES + 1
    assert all(not reply.startswith(b"-") for reply in proxy.dropped_replies)
    emitted += emit(writer, 2, "after")
    writer.flush()
    emitted += emit(writer, 1, "last")
    writer.close()
    stored_as_emitted(server, namespace, emitted)


def test_a_writer_whose_append_outcome_a_server_restart_hid_stores_every_event_once(
    server, proxy, connect
):
    namespace, writer, emitted = started(server, proxy, connect)
    # The server applies the append (durably: AOF, fsync always), then is SIGKILLed
    # before its reply reaches the writer; redis-py's resends find no server.
    proxy.drop_replies("FCALL", before_close=server.kill)
    emitted += emit(writer, 4, "applied")
    assert proxy.reply_dropped.wait(PATIENCE)
    emitted += emit(writer, 5, "meanwhile")
    wait_until(lambda: failed_in_background(writer))
    assert not proxy.hook_errors
    server.start()  # the same port and data: the applied batch is there, its scripts not
    emitted += emit(writer, 2, "after")
    writer.flush()
    emitted += emit(writer, 1, "last")
    writer.close()
    stored_as_emitted(server, namespace, emitted)


def test_a_writer_whose_append_outcome_a_failover_hid_stores_every_event_once(
    server, proxy, connect
):
    """The primary applies the append, its replica receives it, and the primary dies
    before replying; the replica is promoted and the writer's address now leads to it
    (the proxy: a virtual IP or a DNS name moving over)."""
    primary = redis.Redis(port=server.port)
    primary.config_set("repl-diskless-sync-delay", 0)  # the replica syncs at once
    primary.close()
    with RedisServer("--replicaof", "127.0.0.1", str(server.port), durable=False) as replica:
        client = redis.Redis(port=replica.port)
        wait_until(lambda: client.info("replication")["master_link_status"] == "up")
        namespace, writer, emitted = started(server, proxy, connect)
        meta = keys.log_keys(namespace, SESSION)[0]

        def replicated_then_killed() -> None:
            deadline = time.monotonic() + PATIENCE
            while client.hget(meta, "next_seq") != b"7" and time.monotonic() < deadline:
                time.sleep(0.005)
            server.kill()

        proxy.drop_replies("FCALL", before_close=replicated_then_killed)
        emitted += emit(writer, 4, "applied")
        assert proxy.reply_dropped.wait(PATIENCE)
        emitted += emit(writer, 5, "meanwhile")
        wait_until(lambda: failed_in_background(writer))
        assert not proxy.hook_errors and client.hget(meta, "next_seq") == b"7"
        client.replicaof("NO", "ONE")
        proxy.upstream = ("127.0.0.1", replica.port)
        emitted += emit(writer, 2, "after")
        writer.flush()
        emitted += emit(writer, 1, "last")
        writer.close()
        client.close()
        stored_as_emitted(replica, namespace, emitted)


def test_a_writer_fenced_after_an_unknown_outcome_says_that_batch_may_be_stored(
    server, proxy, connect
):
    """Its lease taken over after an append whose outcome it could not know, the writer
    refuses to write, and says that batch may be stored (it was: the reply was lost),
    and that what it queued after it is not."""
    namespace, writer, emitted = started(server, proxy, connect)
    proxy.drop_replies("FCALL", count=RETRIES + 1)
    emitted += emit(writer, 4, "lost")
    wait_until(lambda: failed_in_background(writer))
    # Taken over while the writer is paused by the failure (an emit resumes its drain,
    # which would append the batch again and what follows it).
    admin = redis.Redis(port=server.port)
    admin.delete(keys.log_lease_key(namespace, SESSION))  # as if it expired
    admin.close()
    with sessionstore.connect(server.url, namespace) as direct:
        header = direct.events.info(SESSION).header
        direct.events.writer(header).close()  # takes the lease over
    emit(writer, 2, "never")
    with pytest.raises(SessionBusyError) as caught:
        writer.flush()
    # The batch whose reply was lost holds what was queued when the drain sent it: all
    # four events, or fewer when the machine is slow (the window is 10 ms).
    said = re.search(
        r"its events 3 to (\d+), whose append's outcome was unknown, may be stored;"
        r" the (\d+) after them are not",
        str(caught.value),
    )
    assert said is not None, str(caught.value)
    last, after = int(said[1]), int(said[2])
    assert 3 <= last <= 6 and (last - 2) + after == 4 + 2
    stored_as_emitted(server, namespace, emitted[: last + 1])
    with pytest.raises(SessionBusyError):
        writer.close()
