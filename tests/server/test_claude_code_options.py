"""The Claude Code model options as Claude Code sees them: the anthropic SDK on a live
gateway over an OpenAI-compatible upstream, stream and not.

* ``force_background_tasks_off``: the ``Agent`` call the model made with
  ``run_in_background: true`` reaches the client with ``false``;
* ``fill_empty_answer``: an answer with no content has one empty text block;
* ``estimate_input_tokens``: ``message_start`` carries the estimated input tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.server import create_app

from ..live_server import live_server
from .mock_upstream import MockOpenAI, mock_openai

AGENT: Any = {
    "name": "Agent",
    "description": "Launch a subagent",
    "input_schema": {
        "type": "object",
        "properties": {
            "prompt": {"type": "string"},
            "run_in_background": {"type": "boolean"},
        },
        "required": ["prompt"],
    },
}
ARGUMENTS = '{"prompt": "explore the repo", "run_in_background": true}'
HELLO: Any = [{"role": "user", "content": "explore " * 40}]


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: Any = None) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    payload: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
    }
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + orjson.dumps(payload) + b"\n\n"


USAGE = {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}


def answer(tool: bool, as_text: bool = False) -> Any:
    """The model's turn: an Agent call in the background (``tool``), or nothing at all;
    with ``as_text`` the call is written in the text as a ``<tool_call>`` block."""

    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "Agent", "arguments": ARGUMENTS},
        }
        if as_text:
            return await _written(request, body)
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": None if tool else ""}
            if tool:
                message["tool_calls"] = [call]
            finish = "tool_calls" if tool else "stop"
            payload = {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": USAGE,
            }
            return web.Response(body=orjson.dumps(payload), content_type="application/json")
        chunks = [_chunk({"role": "assistant", "content": None})]
        if tool:
            head = {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "Agent", "arguments": ""},
            }
            chunks.append(_chunk({"tool_calls": [head]}))
            for i in range(0, len(ARGUMENTS), 7):  # the arguments in pieces
                piece = {"index": 0, "function": {"arguments": ARGUMENTS[i : i + 7]}}
                chunks.append(_chunk({"tool_calls": [piece]}))
        chunks.append(_chunk({}, "tool_calls" if tool else "stop"))
        chunks.append(_chunk(None, usage=USAGE))
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in [*chunks, b"data: [DONE]\n\n"]:
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    return behaviour


WRITTEN = '<tool_call>\n{"name": "Agent", "arguments": ' + ARGUMENTS + "}\n</tool_call>"


async def _written(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    """The Agent call written in the text, as a model without native tools does."""
    assert "tools" not in body  # described in the prompt instead
    if not body.get("stream"):
        message = {"role": "assistant", "content": WRITTEN}
        payload = {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": USAGE,
        }
        return web.Response(body=orjson.dumps(payload), content_type="application/json")
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": WRITTEN[i : i + 9]}) for i in range(0, len(WRITTEN), 9)]
    chunks += [_chunk({}, "stop"), _chunk(None, usage=USAGE), b"data: [DONE]\n\n"]
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    for chunk in chunks:
        await resp.write(chunk)
    await resp.write_eof()
    return resp


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[str, MockOpenAI]]:
    with mock_openai() as mock:
        options = {
            "force_background_tasks_off": True,
            "fill_empty_answer": True,
            "estimate_input_tokens": True,
        }
        config = parse_config(
            {
                "upstreams": {"up": {"kind": "openai", "base_url": mock.base_url}},
                "models": [
                    {"name": "claude-cc", "upstream": "up", "model": "m", "options": options},
                    {"name": "claude-raw", "upstream": "up", "model": "m"},
                    {
                        "name": "claude-cc-text",
                        "upstream": "up",
                        "model": "m",
                        "options": {**options, "text_tool_calls": True},
                    },
                ],
            }
        )
        with live_server(create_app(config)) as url:
            yield url, mock


@pytest.fixture
def claude(stack: tuple[str, MockOpenAI]) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stack[0], api_key="k", max_retries=0) as client:
        yield client


def ask(
    claude: anthropic.Anthropic, model: str, stream: bool, mock: MockOpenAI, turn: Any
) -> tuple[Any, list[Any]]:
    """The final message, and the raw stream events (empty when not streaming); the
    upstream answers each call (a stream is asked twice: raw, then the SDK's helper)
    with ``turn``."""
    mock.enqueue(*[turn] * (2 if stream else 1))
    kwargs: Any = {"model": model, "max_tokens": 100, "messages": HELLO, "tools": [AGENT]}
    if not stream:
        return claude.messages.create(**kwargs), []
    events = list(claude.messages.create(stream=True, **kwargs))
    with claude.messages.stream(**kwargs) as s:  # the SDK's own accumulation
        return s.get_final_message(), events


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])


@STREAM
def test_background_agent_turned_off(
    claude: anthropic.Anthropic, stack: tuple[str, MockOpenAI], stream: bool
) -> None:
    message, _ = ask(claude, "claude-cc", stream, stack[1], answer(tool=True))
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.name == "Agent"
    assert use.input == {"prompt": "explore the repo", "run_in_background": False}


@STREAM
def test_background_agent_turned_off_in_a_call_written_as_text(
    claude: anthropic.Anthropic, stack: tuple[str, MockOpenAI], stream: bool
) -> None:
    turn = answer(tool=True, as_text=True)
    message, _ = ask(claude, "claude-cc-text", stream, stack[1], turn)
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.name == "Agent"
    assert use.input == {"prompt": "explore the repo", "run_in_background": False}
    assert message.stop_reason == "tool_use"


@STREAM
def test_without_the_option_the_call_is_relayed_as_made(
    claude: anthropic.Anthropic, stack: tuple[str, MockOpenAI], stream: bool
) -> None:
    message, _ = ask(claude, "claude-raw", stream, stack[1], answer(tool=True))
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.input["run_in_background"] is True


@STREAM
def test_empty_answer_gets_an_empty_text_block(
    claude: anthropic.Anthropic, stack: tuple[str, MockOpenAI], stream: bool
) -> None:
    message, _ = ask(claude, "claude-cc", stream, stack[1], answer(tool=False))
    assert [(b.type, b.text) for b in message.content] == [("text", "")]
    raw, _ = ask(claude, "claude-raw", stream, stack[1], answer(tool=False))
    assert raw.content == []


def test_message_start_carries_the_estimate(
    claude: anthropic.Anthropic, stack: tuple[str, MockOpenAI]
) -> None:
    message, events = ask(claude, "claude-cc", True, stack[1], answer(tool=False))
    assert events[0].type == "message_start"
    assert events[0].message.usage.input_tokens > 0
    assert message.usage.input_tokens == 50  # the upstream's count still ends the stream
    _, raw = ask(claude, "claude-raw", True, stack[1], answer(tool=False))
    assert raw[0].message.usage.input_tokens == 0
