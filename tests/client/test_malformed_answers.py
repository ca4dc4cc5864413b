"""A tool call no client could use in a server's answer (no name, arguments that are not
text) is an :class:`UnreadableAnswerError` naming the call, whole and streamed, never a
result with a nameless call in it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from interlingua.client import AsyncClient, UnreadableAnswerError

from .conftest import FakeServer, Reply, Stream, openai_body


async def instant(_: float) -> None:
    """No waiting between retries."""


def client(server: FakeServer) -> AsyncClient:
    c = AsyncClient(server.url + "/v1", model="m", max_retries=0)
    c._sleep = instant
    return c


NAMELESS = {"id": "call_9", "type": "function", "function": {"arguments": "{}"}}


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    payload = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def test_a_nameless_call_in_a_whole_answer(server: FakeServer) -> None:
    server.push(Reply(openai_body(None, tool_calls=[NAMELESS])))
    async with client(server) as c:
        with pytest.raises(UnreadableAnswerError) as caught:
            await c.chat("q")
    message = str(caught.value)
    assert "malformed tool call" in message and "call_9" in message and "name" in message


@pytest.mark.parametrize(
    "call",
    [
        {"index": 0, "id": "call_9", "type": "function", "function": {"arguments": ""}},
        {"index": 0, "id": "call_9", "type": "function", "function": {"name": "f", "arguments": 4}},
    ],
    ids=["nameless", "number-arguments"],
)
async def test_a_malformed_call_in_a_stream(server: FakeServer, call: dict[str, Any]) -> None:
    chunks = [
        chunk({"role": "assistant", "content": "Let me look."}),
        chunk({"tool_calls": [call]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
    server.push(Stream(chunks))
    seen: list[Any] = []
    async with client(server) as c:
        with pytest.raises(UnreadableAnswerError) as caught:
            async with c.stream("q") as stream:
                seen.extend([e async for e in stream])
    message = str(caught.value)
    assert "malformed tool call" in message and "call_9" in message
    assert caught.value.kind == "invalid_response"
