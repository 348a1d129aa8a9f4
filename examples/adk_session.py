"""A Google ADK agent's session kept in sessionstore, run by ADK's Runner in two processes.

    python examples/adk_session.py                  # the embedded default store
    python examples/adk_session.py redis://localhost:6379/0

The agent needs no model: each run answers with how many runs its session, its user and
its app have seen, kept in ADK's scoped state (``user:`` and ``app:`` keys; ``temp:``
is never stored). The first process runs two turns; a second process, started afresh,
runs a third on the same session and sees the first two. Run again, the session starts
afresh while the user's and the app's counts go on (deleting a session keeps them, as
ADK's own services do). Needs
``pip install 'sessionstore[adk]'``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
from collections.abc import AsyncGenerator

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event, EventActions
from google.adk.runners import Runner
from google.genai import types

from sessionstore.integrations.adk import SessionStoreSessionService

APP, USER, SESSION = "counter-app", "ann", "chat-1"
NAMESPACE = "adk-example"


class Counter(BaseAgent):
    """Answers ``run N`` and counts its runs in session, user and app state."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        state = ctx.session.state
        runs = state.get("runs", 0) + 1
        yield Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            content=types.Content(role="model", parts=[types.Part(text=f"run {runs}")]),
            actions=EventActions(
                state_delta={
                    "runs": runs,
                    "user:runs": state.get("user:runs", 0) + 1,
                    "app:runs": state.get("app:runs", 0) + 1,
                    "temp:scratch": "never stored",
                }
            ),
        )


async def turns(url: str | None, texts: list[str], fresh: bool) -> None:
    async with SessionStoreSessionService(url, namespace=NAMESPACE) as service:
        if fresh:  # the session starts afresh; its user's and app's state outlive it
            await service.delete_session(app_name=APP, user_id=USER, session_id=SESSION)
            await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
        runner = Runner(agent=Counter(name="counter"), app_name=APP, session_service=service)
        for text in texts:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for event in runner.run_async(
                user_id=USER, session_id=SESSION, new_message=message
            ):
                print(f"{text!r} -> {event.content.parts[0].text}")


def in_another_process(url: str | None) -> None:
    asyncio.run(turns(url, ["and again"], fresh=False))


async def show(url: str | None) -> None:
    async with SessionStoreSessionService(url, namespace=NAMESPACE) as service:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
        assert session is not None
        print("events:", [(e.author, e.content.parts[0].text) for e in session.events])
        print("state:", dict(sorted(session.state.items())))


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else None
    asyncio.run(turns(url, ["hello", "once more"], fresh=True))
    other = multiprocessing.get_context("spawn").Process(target=in_another_process, args=(url,))
    other.start()
    other.join()
    if other.exitcode != 0:
        raise SystemExit(f"the second process failed (exit code {other.exitcode})")
    asyncio.run(show(url))


if __name__ == "__main__":
    main()
