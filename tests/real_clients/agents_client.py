"""An OpenAI Agents SDK program, run by test_agents_sdk.py as the client in a scenario.

``python agents_client.py GATEWAY_URL`` runs one Agent with one function tool twice
through the gateway's Responses endpoint, with ``Runner.run`` (plain responses) and
``Runner.run_streamed`` (streamed), and prints one JSON line: each run's final output
and what the tool was called with. Tracing is off, so the SDK exports nothing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

CALLS: list[str] = []


@function_tool
def lookup_marker(name: str) -> str:
    """The marker stored under ``name``."""
    CALLS.append(name)
    return f"marker-{name}-42"


async def main(gateway: str) -> dict[str, Any]:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=gateway + "/v1", api_key="sk-dummy", max_retries=0)
    agent = Agent(
        name="assistant",
        instructions="Use the lookup_marker tool, then answer.",
        tools=[lookup_marker],
        model=OpenAIResponsesModel(model="gpt-5.5", openai_client=client),
    )
    plain = await Runner.run(agent, "What is the marker for alpha?")
    streamed = Runner.run_streamed(agent, "What is the marker for beta?")
    kinds = [event.type async for event in streamed.stream_events()]
    await client.close()
    return {
        "plain": plain.final_output,
        "streamed": streamed.final_output,
        "stream_event_types": sorted(set(kinds)),
        "tool_calls": CALLS,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
