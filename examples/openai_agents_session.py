"""An OpenAI Agents SDK conversation kept in sessionstore, across turns and session objects.

    python examples/openai_agents_session.py                  # the embedded default store
    python examples/openai_agents_session.py redis://localhost:6379/0

Runs offline: the agent's model is a stand-in that answers from its input, so no API key
and no network are needed. Needs ``pip install 'sessionstore[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from agents import Agent, RunConfig, Runner, Usage
from agents.items import ModelResponse
from agents.models.interface import Model
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from sessionstore.integrations.openai_agents import SessionStoreSession


class StandInModel(Model):
    """Prints how many input items each call was given and answers with the last user text."""

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:  # noqa: ANN001
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        print(f"model input: {len(items)} item{'s' if len(items) != 1 else ''}")
        last = next(item["content"] for item in reversed(items) if item.get("role") == "user")
        answer = f"You said: {last}"
        message = ResponseOutputMessage(
            id="msg_stand_in",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=answer, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this example does not stream")


def text(item: dict[str, Any]) -> str:
    content = item["content"]
    return content if isinstance(content, str) else content[0]["text"]


async def main(url: str | None) -> None:
    agent = Agent(name="assistant", instructions="Answer briefly.", model=StandInModel())
    config = RunConfig(tracing_disabled=True)

    session = SessionStoreSession.from_url("user-123", url, namespace="agents-example")
    async with session:
        await session.clear_session()  # start the example afresh
        for turn, prompt in enumerate(["My name is Ada.", "What is my name?"], start=1):
            print(f"turn {turn}", end=" ")
            result = await Runner.run(agent, prompt, session=session, run_config=config)
            print(f"  -> {result.final_output}")

    # Another session object (another process would do the same) sees the conversation.
    async with SessionStoreSession.from_url("user-123", url, namespace="agents-example") as again:
        for item in await again.get_items():
            print(f"  {item['role']:>9}: {text(item)}")
        print("newest two:", [text(item) for item in await again.get_items(limit=2)])
        popped = await again.pop_item()
        print("popped:", text(popped) if popped else None)
        print("items left:", len(await again.get_items()))
        print("store:", again.store.url)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
