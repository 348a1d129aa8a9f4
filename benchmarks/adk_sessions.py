"""``python -m benchmarks.adk_sessions``: Google ADK session services, ours against ADK's.

The services: ADK's own ``InMemorySessionService`` and ``DatabaseSessionService`` on
SQLite (``sqlite+aiosqlite:///...``, as ADK documents it), and
:class:`~sessionstore.integrations.adk.SessionStoreSessionService` on ``memory://``,
SQLite, files and Redis (a ``redis-server`` of its own with ``appendfsync always``, so
that the default ``durability="fsync"`` holds; SQLite and files fsync each append by
default, as ADK's SQLite service commits each append).

Per service, microseconds per call:

* ``append``: ``append_event`` of an event with a text and a session-scoped state delta,
  to a session of its own;
* ``append user:``: the same event with a ``user:`` key in its delta as well;
* ``get 20 of 20`` and ``get 20 of N``: ``get_session`` with ``num_recent_events=20`` of a
  session of 20 events and of one of ``--events`` events (10,000 by default).

Each measure runs ``--calls`` calls, ``--rounds`` times, the services taking turns (a
shared machine slows whatever runs when it is busy); the median of each measure's
fastest rounds is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from google.adk.events import Event, EventActions  # noqa: E402
from google.adk.sessions import (  # noqa: E402
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
)
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from benchmarks.servers import RedisServer  # noqa: E402
from sessionstore.integrations.adk import SessionStoreSessionService  # noqa: E402

APP, USER = "bench", "user-1"
RECENT = GetSessionConfig(num_recent_events=20)
MEASURES = ("append", "append user:", "get 20 of 20", "get 20 of N")


def event(n: int, user: bool = False) -> Event:
    delta: dict[str, Any] = {"turn": n, "last": f"answer {n}"}
    if user:
        delta["user:turns"] = n
    text = f"turn {n}: " + "the quick brown fox jumps over the lazy dog " * 2
    return Event(
        author="model",
        invocation_id=f"inv-{n}",
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


async def fill(service: BaseSessionService, count: int) -> str:
    """A new session of ``count`` events; its id."""
    sid = uuid.uuid4().hex
    session = await service.create_session(app_name=APP, user_id=USER, session_id=sid)
    for n in range(count):
        await service.append_event(session, event(n))
    return sid


class Bench:
    """One service's measures: the sessions it reads made once, the calls timed."""

    def __init__(self, service: BaseSessionService, events: int) -> None:
        self.service, self.events = service, events
        self.small = self.large = ""

    async def prepare(self) -> None:
        self.small = await fill(self.service, 20)
        self.large = await fill(self.service, self.events)

    async def measure(self, name: str, calls: int) -> float:
        """Microseconds per call of measure ``name``."""
        call = await self._call(name)
        started = time.perf_counter()
        for n in range(calls):
            await call(n)
        return (time.perf_counter() - started) / calls * 1e6

    async def _call(self, name: str) -> Callable[[int], Awaitable[Any]]:
        service = self.service
        if name.startswith("append"):
            sid = await fill(service, 0)
            session = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
            assert session is not None
            user = name == "append user:"
            return lambda n: service.append_event(session, event(n, user))
        sid = self.small if name == "get 20 of 20" else self.large

        async def get(_: int) -> None:
            found = await service.get_session(
                app_name=APP, user_id=USER, session_id=sid, config=RECENT
            )
            assert found is not None and len(found.events) == 20

        return get


def _typical(figures: list[float]) -> float:
    """The median of the fastest half: what a call costs when nothing else interferes."""
    fastest = sorted(figures)[: max(1, len(figures) // 2)]
    return statistics.median(fastest)


async def run(
    services: dict[str, BaseSessionService], events: int, rounds: int, calls: int
) -> None:
    benches = {name: Bench(service, events) for name, service in services.items()}
    for name, bench in benches.items():
        started = time.perf_counter()
        await bench.prepare()
        print(f"# {name}: {events} events filled in {time.perf_counter() - started:.1f} s")
    found: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for measure in MEASURES:
            for name, bench in benches.items():
                found.setdefault((name, measure), []).append(await bench.measure(measure, calls))
    header = f"{'service':28}" + "".join(f"{m.replace('N', str(events)):>18}" for m in MEASURES)
    print(header)
    for name in benches:
        cells = "".join(f"{_typical(found[(name, m)]):18.0f}" for m in MEASURES)
        print(f"{name:28}{cells}")


async def main_async(options: argparse.Namespace, folder: str, redis_url: str) -> None:
    ours = {
        "ours memory://": "memory://",
        "ours sqlite": f"sqlite:///{folder}/ours.db",
        "ours files": Path(folder, "files").as_uri(),
        "ours redis": redis_url,
    }
    services: dict[str, BaseSessionService] = {
        "ADK InMemorySessionService": InMemorySessionService(),
        "ADK DatabaseSessionService": DatabaseSessionService(
            f"sqlite+aiosqlite:///{folder}/adk.db"
        ),
    }
    services.update(
        {name: SessionStoreSessionService(url, namespace="adk-bench") for name, url in ours.items()}
    )
    chosen = {name: s for name, s in services.items() if not options.only or name in options.only}
    try:
        await run(chosen, options.events, options.rounds, options.calls)
    finally:
        for service in services.values():
            close = getattr(service, "close", None)
            if close is not None:
                await close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="events of the long session")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--only", action="append", help="run only this service (repeatable)")
    options = parser.parse_args(argv)
    fsync = ("--appendonly", "yes", "--appendfsync", "always")
    with tempfile.TemporaryDirectory() as folder, RedisServer(*fsync) as server:
        asyncio.run(main_async(options, folder, server.url))


if __name__ == "__main__":
    main()
