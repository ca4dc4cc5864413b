"""An upstream's tool call no client could use (here: no name) reaches the client as the
gateway's upstream fault, a 502 naming the call (in-band once the stream began), never
as a normal-looking answer; read with the official SDKs over real sockets.

    anthropic SDK -> live gateway -> mock Chat upstream      (translated)
    openai SDK    -> live gateway -> mock Messages upstream  (translated)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.server import create_app

from ..live_server import live_server
from .mock_upstream import MockOpenAI, mock_openai

HELLO: Any = [{"role": "user", "content": "hello"}]
USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def _sse(*payloads: tuple[str | None, Any]) -> bytes:
    out = b""
    for name, payload in payloads:
        head = f"event: {name}\n".encode() if name else b""
        out += head + b"data: " + orjson.dumps(payload) + b"\n\n"
    return out


async def _respond(request: web.Request, body: dict[str, Any], whole: Any, streamed: bytes) -> Any:
    if not body.get("stream"):
        return web.Response(body=orjson.dumps(whole), content_type="application/json")
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(streamed)
    await resp.write_eof()
    return resp


async def nameless_chat_call(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> Any:
    """A Chat answer whose tool call has no name."""
    call = {"id": "call_9", "type": "function", "function": {"arguments": "{}"}}
    message = {"role": "assistant", "content": "Let me look.", "tool_calls": [call]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    whole = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return None, {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}

    opening = {"index": 0, "id": "call_9", "type": "function", "function": {"arguments": ""}}
    streamed = _sse(
        chunk({"role": "assistant", "content": "Let me look."}),
        chunk({"tool_calls": [opening]}),
        chunk({}, "tool_calls"),
    )
    return await _respond(request, body, {**whole, "usage": USAGE}, streamed + b"data: [DONE]\n\n")


async def nameless_tool_use(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> Any:
    """A Messages answer whose tool_use has no name."""
    block = {"type": "tool_use", "id": "toolu_9", "input": {}}
    usage = {"input_tokens": 5, "output_tokens": 3}
    whole = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "Let me look."}, block],
        "stop_reason": "tool_use",
        "usage": usage,
    }
    start = {**whole, "content": [], "stop_reason": None}
    text = {"type": "text", "text": ""}
    streamed = _sse(
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": text}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": block},
        ),
    )
    return await _respond(request, body, whole, streamed)


#: the gateway's URL, its Chat upstream and its Messages upstream
Stack = tuple[str, MockOpenAI, MockOpenAI]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with (
        mock_openai(default=nameless_chat_call) as chat,
        mock_openai("/v1/messages", default=nameless_tool_use) as messages,
    ):
        config = parse_config(
            {
                "upstreams": {
                    "chat": {"kind": "openai", "base_url": chat.base_url},
                    "msg": {"kind": "anthropic", "base_url": messages.base_url},
                },
                "models": [
                    {"name": "to-chat", "upstream": "chat", "model": "up-chat"},
                    {"name": "to-msg", "upstream": "msg", "model": "up-msg"},
                ],
            }
        )
        with live_server(create_app(config)) as url:
            yield url, chat, messages


def _names_the_call(message: str, call_id: str) -> None:
    assert "upstream returned a malformed tool call" in message
    assert call_id in message and "no name" in message


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_claude_code_gets_an_upstream_fault(stack: Stack, stream: bool) -> None:
    with (
        anthropic.Anthropic(base_url=stack[0], api_key="k", max_retries=0) as claude,
        pytest.raises(anthropic.APIStatusError) as caught,
    ):
        kwargs: Any = {"model": "to-chat", "max_tokens": 8, "messages": HELLO}
        if stream:
            list(claude.messages.create(stream=True, **kwargs))
        else:
            claude.messages.create(**kwargs)
    body = caught.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "api_error"
    _names_the_call(body["error"]["message"], "call_9")
    if not stream:
        assert caught.value.status_code == 502


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_openai_client_gets_an_upstream_fault(stack: Stack, stream: bool) -> None:
    with (
        openai.OpenAI(base_url=stack[0] + "/v1", api_key="k", max_retries=0) as gpt,
        pytest.raises(openai.APIError) as caught,
    ):
        if stream:
            list(gpt.chat.completions.create(model="to-msg", messages=HELLO, stream=True))
        else:
            gpt.chat.completions.create(model="to-msg", messages=HELLO)
    _names_the_call(caught.value.message, "toolu_9")
    assert caught.value.code == "malformed_tool_call"
    if not stream:
        assert isinstance(caught.value, openai.InternalServerError)
        assert caught.value.status_code == 502
