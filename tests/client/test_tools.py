"""The agent loop (run_tools) against the fake server, and tool specs from signatures."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Literal

import pytest

from interlingua.client import AsyncClient, MaxTurnsError, tool_spec
from interlingua.core import ToolResultPart, Usage

from .conftest import FakeServer, Reply, Seen, call, openai_body


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url + "/v1", model="m") as c:
        yield c


def tool_messages(body: dict[str, object]) -> list[dict[str, object]]:
    return [m for m in body["messages"] if m["role"] == "tool"]  # type: ignore[attr-defined, index]


async def test_parallel_async_tools_run_concurrently(
    client: AsyncClient, server: FakeServer
) -> None:
    started: dict[str, asyncio.Event] = {"a": asyncio.Event(), "b": asyncio.Event()}
    log: list[str] = []

    async def fetch(name: str, other: str) -> str:
        log.append(f"start {name}")
        started[name].set()
        # Finishes only once the other call has started too: run one after the other,
        # this times out and the model gets an error result instead.
        await asyncio.wait_for(started[other].wait(), 2)
        log.append(f"end {name}")
        return f"{name} done"

    async def tool_a(x: int) -> str:
        return await fetch("a", "b")

    async def tool_b() -> str:
        return await fetch("b", "a")

    server.push(
        Reply(
            openai_body(
                None, tool_calls=[call("c1", "tool_a", '{"x": 1}'), call("c2", "tool_b", "{}")]
            )
        ),
        Reply(openai_body("both done")),
    )
    result = await client.run_tools("go", {"tool_a": tool_a, "tool_b": tool_b})
    assert result.text == "both done"
    assert log[:2] == ["start a", "start b"]  # both started before either finished
    second = server.bodies[1]
    assert [m["content"] for m in tool_messages(second)] == ["a done", "b done"]
    assert [m["tool_call_id"] for m in tool_messages(second)] == ["c1", "c2"]
    # the transcript: user, assistant (calls), user (results), assistant (answer)
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]
    tools_sent = server.bodies[0]["tools"]
    assert [t["function"]["name"] for t in tools_sent] == ["tool_a", "tool_b"]


async def test_parallel_sync_tools_run_in_threads(client: AsyncClient, server: FakeServer) -> None:
    barrier = threading.Barrier(2, timeout=2)  # breaks unless both wait at the same time

    def left() -> str:
        barrier.wait()
        return "L"

    def right() -> str:
        barrier.wait()
        return "R"

    server.push(
        Reply(openai_body(None, tool_calls=[call("c1", "left", ""), call("c2", "right", "{}")])),
        Reply(openai_body("ok")),
    )
    await client.run_tools("go", {"left": left, "right": right})
    assert [m["content"] for m in tool_messages(server.bodies[1])] == ["L", "R"]


async def test_failing_unknown_and_malformed_tools(client: AsyncClient, server: FakeServer) -> None:
    def weather(city: str) -> dict[str, object]:
        if city == "Atlantis":
            raise ValueError(f"no such city: {city}")
        return {"city": city, "temp": 21}

    server.push(
        Reply(
            openai_body(
                None,
                tool_calls=[
                    call("c1", "weather", '{"city": "Atlantis"}'),
                    call("c2", "weather", '{"city": "Paris"}'),
                    call("c3", "teleport", "{}"),
                    call("c4", "weather", '{"city": '),
                ],
            )
        ),
        Reply(openai_body("sorry about Atlantis")),
    )
    result = await client.run_tools("weather?", {"weather": weather})
    assert result.text == "sorry about Atlantis"
    results = [p for p in result.messages[2].parts if isinstance(p, ToolResultPart)]
    assert [r.is_error for r in results] == [True, False, True, True]
    assert results[0].text == "ValueError: no such city: Atlantis"
    assert results[1].text == '{"city":"Paris","temp":21}'
    assert results[2].text == "unknown tool 'teleport'; available: weather"
    assert "tool 'weather' with invalid JSON" in results[3].text
    # on the wire (OpenAI): error results are marked in the text
    assert (
        tool_messages(server.bodies[1])[0]["content"] == "Error: ValueError: no such city: Atlantis"
    )


async def test_max_turns(client: AsyncClient, server: FakeServer) -> None:
    def again(seen: Seen) -> Reply:
        n = len(seen.body["messages"])
        return Reply(openai_body(None, tool_calls=[call(f"c{n}", "ping", "{}")]))

    server.push(again, again, again)
    with pytest.raises(MaxTurnsError, match="no final answer after max_turns=3") as info:
        await client.run_tools("loop", {"ping": lambda: "pong"}, max_turns=3)
    assert "assistant: call ping({})" in str(info.value)
    assert "user: result: pong" in str(info.value)
    assert len(info.value.messages) == 7  # user + 3 x (calls, results)
    assert len(server.seen) == 3


def test_tool_spec_from_signature() -> None:
    def search(
        query: str,
        limit: int = 10,
        tags: list[str] | None = None,
        mode: Literal["fast", "deep"] = "fast",
        score: float = 0.5,
    ) -> str:
        """Search the index.

        Longer description that is not sent.
        """
        return ""

    spec = tool_spec("search", search)
    assert spec.description == "Search the index."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["fast", "deep"]},
            "score": {"type": "number"},
        },
        "required": ["query"],
    }


# --- totals across the loop --------------------------------------------------------------


def _usage(prompt: int, completion: int, cached: int = 0) -> dict[str, object]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


async def test_run_tools_totals_usage_latency_and_round_trips(
    client: AsyncClient, server: FakeServer
) -> None:
    server.push(
        Reply(openai_body(None, tool_calls=[call("c1", "ping", "{}")], usage=_usage(10, 4))),
        Reply(openai_body(None, tool_calls=[call("c2", "ping", "{}")], usage=_usage(20, 5, 8))),
        Reply(openai_body("pong pong", usage=_usage(30, 6, 16)), delay=0.05),
    )
    result = await client.run_tools("ping twice", {"ping": lambda: "pong"})
    assert result.text == "pong pong"
    assert result.round_trips == 3
    assert [t.usage.input_tokens for t in result.turns] == [10, 20, 30]  # each call's own
    assert result.usage == Usage(30, 6, cache_read_tokens=16)  # the last call's, as before
    assert result.total_usage == Usage(60, 15, cache_read_tokens=24)
    assert result.total_usage.total_tokens == 75
    latencies = [t.latency for t in result.turns]
    assert all(lat is not None and lat > 0 for lat in latencies)
    assert result.total_latency == pytest.approx(sum(latencies))  # type: ignore[arg-type]
    assert result.total_latency >= 0.05 and result.latency == latencies[-1]
    last = result.turns[-1]
    assert (last.text, last.usage, last.turns) == (result.text, result.usage, ())
    assert [len(t.tool_calls) for t in result.turns] == [1, 1, 0]
    # a plain call is one round trip: its totals are its own
    plain = await client.chat("hi")
    assert (plain.round_trips, plain.turns) == (1, ())
    assert (plain.total_usage, plain.total_latency) == (plain.usage, plain.latency)


async def test_max_turns_error_carries_the_totals(client: AsyncClient, server: FakeServer) -> None:
    reply = Reply(openai_body(None, tool_calls=[call("c", "ping", "{}")], usage=_usage(7, 1)))
    server.push(reply, reply)
    with pytest.raises(MaxTurnsError) as info:
        await client.run_tools("loop", {"ping": lambda: "pong"}, max_turns=2)
    last = info.value.last
    assert last.round_trips == 2
    assert last.total_usage == Usage(14, 2)
