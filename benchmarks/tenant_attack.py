"""Other tenants' latency while one tenant attacks the server through the library.

On a ``redis-server`` of its own, two least-privilege users (``sessionstore acl``), one
namespace each. The attacker plants, in its own keys and with plain commands, a value's
seq hash of ``planted`` records, a history of ``planted`` versions, and fields of
``field_mb`` megabytes: a log entry of event separators, another log's ``next_seq`` and a
writer lease's owner; then, in a process of its own, calls the library's functions
against them in a loop:

* *planted records*: a value write whose trim bound argument is 0 and a delete of the
  value (both through the planted seq hash), a history write before the planted
  versions (refused: it would drop more than a call may) and one after them that trims
  the history to 3 versions;
* *planted fields*: an append replayed against the planted entry (an applied replay:
  its digests are compared, never the entry), an append to the log whose ``next_seq``
  is planted and a writer taking the planted lease (both refused as damage, the field
  measured, never read);
* *nothing planted*: the calls of *planted records* on a value without planted data,
  the reference: what any busy tenant costs the others on a shared machine.

Meanwhile the victim calls ``set_data``, ``get_data`` and a one-event ``append`` in turn,
each call timed, and an admin ``PING`` s. The attacker's process runs throughout and
attacks in every other window of the victim's calls (``reps`` of each, alternating which
comes first, as the machine is shared). Each row compares a percentile of the victim's
(or the admin's) latencies in the windows with the attack with the same percentile of
those without it, pooled over the windows; its ratio is the median of the windows'
ratios (lower is better; the target is the ratio it must stay under).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

import sessionstore
from sessionstore import SessionEvent, SessionHeader, SessionStoreError
from sessionstore.keys import ValueKey, history_keys, log_keys, log_lease_key, seq_key
from sessionstore.redis import valueformat as layout
from sessionstore.redis.acl import setuser_args
from sessionstore.redis.library import install, script

from .harness import Result, Sizes
from .servers import RedisServer

AREA = "tenants"
PASSWORD = "bench-tenant-password"
T0 = 1_718_000_000_000
VALUE = ValueKey("attacker", "PLANT", "s", "e", "1h", "backtest")
#: The value of the reference attack: nothing planted.
UNPLANTED = ValueKey("attacker", "PLAIN", "s", "e", "1h", "backtest")
#: (p50 target, p99 target) of the victim's latency ratio during an attack.
TARGETS = {"p50": 2.0, "p99": 3.0}


def attack_results(_url: str, sizes: Sizes) -> list[Result]:
    """The rows of both attacks, on a server of their own (users, planted data)."""
    planted, field_mb = sizes.planted, sizes.planted_field_mb
    with RedisServer() as server:
        admin = redis.Redis(port=server.port)
        install(admin)
        for user in ("attacker", "victim"):
            admin.execute_command(*setuser_args(user, PASSWORD, user))
        _plant(admin, planted, field_mb)
        url = f"redis://victim:{PASSWORD}@127.0.0.1:{server.port}/0?durability=none"
        rows: list[Result] = []
        for attack, label in (("plain", "nothing planted (the same calls)"),
                              ("records", f"{planted:,} planted records"),
                              ("field", f"{field_mb} MB planted fields")):  # fmt: skip
            quiet, loud = _windows(url, server.port, attack, sizes)
            rows += _rows(label, quiet, loud)
        admin.close()
    return rows


def _plant(admin: redis.Redis, planted: int, field_mb: int) -> None:
    at, values = history_keys(VALUE)
    pipe = admin.pipeline(transaction=False)
    for start in range(0, planted, 10_000):
        part = range(start, min(start + 10_000, planted))
        pipe.hset(seq_key(VALUE), mapping={f"planted-{i}": b"1:9999999999:1000" for i in part})
        pipe.zadd(at, {str(T0 + 1 + i): T0 + 1 + i for i in part})
        pipe.hset(values, mapping={str(T0 + 1 + i): b"\x01" for i in part})
    pipe.execute()
    with sessionstore.connect(_attacker_url(admin), "attacker") as store:
        store.events.create(SessionHeader(id="s"))
        store.events.append("s", _events(2))
        store.events.create(SessionHeader(id="m"))
        store.events.append("m", _events(1))
    _, stream = log_keys("attacker", "s")
    [(entry_id, _)] = admin.xrange(stream)
    admin.delete(stream)
    admin.xadd(stream, {"events": b"[" + b",\n" * (field_mb << 19) + b"]"}, id=entry_id)
    admin.hset(log_keys("attacker", "m")[0], "next_seq", b"1" * (field_mb << 20))
    admin.hset(log_lease_key("attacker", "w"), mapping={"owner": b"o" * (field_mb << 20)})


def _attacker_url(client: redis.Redis) -> str:
    port = client.connection_pool.connection_kwargs["port"]
    return f"redis://attacker:{PASSWORD}@127.0.0.1:{port}/0?durability=none"


def _events(count: int) -> list[SessionEvent]:
    return [SessionEvent(seq=i, type="note", time=T0 + i, data={"i": i}) for i in range(count)]


def _attack(port: int, attack: str, go: Any, stop: Any) -> None:
    """The attacker's loop, in a process of its own: attacking while ``go`` is set,
    until ``stop`` is."""
    client = redis.Redis(port=port, username="attacker", password=PASSWORD)
    url = _attacker_url(client)
    if attack == "field":
        calls = _field_calls(url)
    else:
        calls = _record_calls(client, VALUE if attack == "records" else UNPLANTED)
    number = 0
    while not stop.is_set():
        if not go.wait(0.05):
            continue
        number += 1
        for call in calls:
            with contextlib.suppress(redis.RedisError, SessionStoreError):
                call(number)  # refusals are part of the attack
    client.close()


def _record_calls(client: redis.Redis, key: ValueKey) -> list[Callable[[int], Any]]:
    swap, forget, history = (
        script(n).function for n in ("value_swap", "value_forget", "history_set")
    )

    def fcall(function: str, keys: list[str], args: list[Any]) -> Any:
        return client.execute_command("FCALL", function, len(keys), *keys, *args)

    def write(n: int) -> Any:
        args = layout.swap_args(layout.ANY, b"\x02", T0, (f"slot-{n}", 1), 1000)
        args[3] = "0"  # the seq hash's bound, as a hostile caller passes it
        return fcall(swap, layout.plain_keys(key), args)

    def delete(n: int) -> Any:
        args = layout.forget_args((f"forget-{n}", 1), 1000)
        args[3] = "0"
        return fcall(forget, layout.forget_keys(key), args)

    def rewrite(n: int) -> Any:
        args = layout.history_set_args(b"\x02", T0, None, None, False, (f"early-{n}", 1), 1000)
        return fcall(history, layout.history_set_keys(key), args)

    def trim(n: int) -> Any:
        args = layout.history_set_args(
            b"\x02", T0 + 10**9 + n, 3, None, False, (f"late-{n}", 1), 1000
        )
        return fcall(history, layout.history_set_keys(key), args)

    return [write, delete, rewrite, trim]


def _field_calls(url: str) -> list[Callable[[int], Any]]:
    store = sessionstore.connect(url, "attacker")

    def take_lease(_n: int) -> Any:
        writer = store.events.writer(SessionHeader(id="w"))
        writer.emit("note", {})
        writer.close()

    return [
        lambda _n: store.events.append("s", _events(2)),
        lambda _n: store.events.append("m", _events(2)[1:]),
        take_lease,
    ]


#: Latencies (ms) by whose they are ("victim", "ping"), one list per window.
Windows = dict[str, list[list[float]]]


def _windows(url: str, port: int, attack: str, sizes: Sizes) -> tuple[Windows, Windows]:
    """The victim's and the admin's latencies in ``sizes.reps`` windows without the
    attack and as many with it, taking turns."""
    go, stop = multiprocessing.Event(), multiprocessing.Event()
    attacker = multiprocessing.Process(target=_attack, args=(port, attack, go, stop))
    attacker.start()
    quiet: Windows = {"victim": [], "ping": []}
    loud: Windows = {"victim": [], "ping": []}
    try:
        for number in range(sizes.reps):
            for attacking in (False, True) if number % 2 else (True, False):
                if attacking:
                    go.set()
                else:
                    go.clear()
                time.sleep(0.5)  # the attacker's current call ends, or its loop is under way
                found = _victim(url, port, sizes.victim_rounds, f"{attack}-{number}-{attacking}")
                for who, figures in found.items():
                    (loud if attacking else quiet)[who].append(figures)
    finally:
        stop.set()
        attacker.join(timeout=30)
    return quiet, loud


def _victim(url: str, port: int, rounds: int, session_id: str) -> dict[str, list[float]]:
    """Latencies (ms) of the victim's calls and of the admin's PINGs meanwhile."""
    pings: list[float] = []
    done = threading.Event()

    def ping() -> None:
        admin = redis.Redis(port=port)
        while not done.is_set():
            started = time.perf_counter()
            admin.ping()
            pings.append((time.perf_counter() - started) * 1000)
            time.sleep(0.002)
        admin.close()

    pinger = threading.Thread(target=ping)
    pinger.start()
    found: list[float] = []
    try:
        with sessionstore.connect(url, "victim") as store:
            value = store.session("BTCUSDT", "victim", "e", "1h")
            store.events.create(SessionHeader(id=session_id))
            for i in range(rounds):
                event = SessionEvent(seq=i, type="note", time=T0 + i, data={"i": i})
                for timed in (
                    functools.partial(value.set_data, {"i": i}, T0 + i),
                    functools.partial(value.get_data, T0 + i),
                    functools.partial(store.events.append, session_id, [event]),
                ):
                    started = time.perf_counter()
                    timed()
                    found.append((time.perf_counter() - started) * 1000)
            store.events.delete(session_id)
    finally:
        done.set()
        pinger.join()
    return {"victim": found, "ping": pings}


def _percentile(figures: list[float], part: float) -> float:
    return statistics.quantiles(figures, n=100, method="inclusive")[int(part * 100) - 1]


def _rows(label: str, quiet: Windows, loud: Windows) -> list[Result]:
    rows = []
    for who, name in (("victim", "other tenant's calls"), ("ping", "admin's PING")):
        for level, part in (("p50", 0.5), ("p99", 0.99)):
            rows.append(
                Result(
                    area=AREA,
                    scenario=f"{name} {level} during an attack with {label}",
                    baseline_name="the same calls without the attack",
                    ours=_percentile([f for window in loud[who] for f in window], part),
                    baseline=_percentile([f for window in quiet[who] for f in window], part),
                    unit="ms",
                    target=TARGETS[level],
                    settings=f"{len(loud[who])} windows of each",
                    lower_is_better=True,
                    samples={
                        "ours": [_percentile(window, part) for window in loud[who]],
                        "baseline": [_percentile(window, part) for window in quiet[who]],
                    },
                )
            )
    return rows


def main() -> None:
    for row in attack_results("", Sizes()):
        print(
            f"{row.verdict}  {row.key}: ours {row.ours:.2f} ms, baseline {row.baseline:.2f} ms, "
            f"ratio {row.ratio:.2f} (target {row.target_text})"
        )


if __name__ == "__main__":
    main()
