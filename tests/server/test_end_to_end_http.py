"""The official SDKs, end to end over real sockets, against a realistic upstream.

    anthropic SDK -> live gateway (translated) -> mock OpenAI-compatible server
    openai SDK    -> live gateway (passthrough) -> the same mock

The mock streams ``chat.completion.chunk`` events the way OpenAI does (a role chunk,
text, a tool call whose arguments are split over several chunks, a finish chunk, a usage
chunk, ``[DONE]``; one event split over two writes) and answers non-stream requests with
the matching JSON. What the SDKs parse must be exactly what the upstream said.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app

from ..live_server import live_server
from .mock_upstream import (
    TEXT_PIECES,
    TOOL_ID,
    USAGE,
    MockOpenAI,
    completion,
    mock_openai,
    stream_events,
)

TEXT = "".join(TEXT_PIECES)
WEATHER: Any = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
QUESTION: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[str, MockOpenAI]]:
    with mock_openai() as mock:
        config = parse_config(
            {
                "upstreams": {"up": {"kind": "openai", "base_url": mock.base_url}},
                "models": [
                    {"name": "claude-gateway", "upstream": "up", "model": "qwen3-8b"},
                    {"name": "gpt-4o", "upstream": "up", "model": "qwen3-8b"},
                ],
            }
        )
        with live_server(create_app(config)) as url:
            yield url, mock


@pytest.fixture
def claude(stack: tuple[str, MockOpenAI]) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stack[0], api_key="sk-client", max_retries=0) as client:
        yield client


@pytest.fixture
def gpt(stack: tuple[str, MockOpenAI]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack[0] + "/v1", api_key="sk-client", max_retries=0) as client:
        yield client


# --- anthropic SDK, translated path -----------------------------------------------------


def _check_upstream_request(mock: MockOpenAI, stream: bool) -> None:
    sent = mock.received[-1].body
    assert sent["model"] == "qwen3-8b"
    assert sent["messages"] == [{"role": "user", "content": "What is the weather in Paris?"}]
    assert sent["tools"][0]["type"] == "function"
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    assert sent.get("max_tokens", sent.get("max_completion_tokens")) == 300
    assert sent.get("stream", False) is stream
    if stream:
        assert sent["stream_options"] == {"include_usage": True}
    # The client's key is not the upstream's business.
    assert "sk-client" not in str(mock.received[-1].headers)


def _check_message(message: anthropic.types.Message) -> None:
    assert message.model == "claude-gateway"
    assert message.role == "assistant"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    text, tool = message.content
    assert isinstance(text, anthropic.types.TextBlock) and text.text == TEXT
    assert isinstance(tool, anthropic.types.ToolUseBlock)
    assert (tool.id, tool.name, tool.input) == (TOOL_ID, "get_weather", {"city": "Paris"})
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == USAGE["prompt_tokens"]
    assert message.usage.output_tokens == USAGE["completion_tokens"]


def test_anthropic_create(claude: anthropic.Anthropic, stack: tuple[str, MockOpenAI]) -> None:
    message = claude.messages.create(
        model="claude-gateway", max_tokens=300, tools=[WEATHER], messages=QUESTION
    )
    _check_message(message)
    _check_upstream_request(stack[1], stream=False)


def test_anthropic_stream(claude: anthropic.Anthropic, stack: tuple[str, MockOpenAI]) -> None:
    with claude.messages.stream(
        model="claude-gateway", max_tokens=300, tools=[WEATHER], messages=QUESTION
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    _check_message(final)
    _check_upstream_request(stack[1], stream=True)
    kinds = [e.type for e in events if e.type not in ("text", "input_json")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("content_block_start") == 2
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    texts = [d.text for d in deltas if d.type == "text_delta"]
    assert "".join(texts) == TEXT and len(texts) == len(TEXT_PIECES)
    # Tool arguments arrive whole, in ONE input_json_delta, once the upstream's call is
    # complete: correctness over incremental streaming (docs/decisions.md, "Anthropic
    # stream: tool arguments are sent whole, at block stop") -- an
    # OpenAI upstream's arguments may be invalid JSON, which the SDK would choke on.
    partial = [d.partial_json for d in deltas if d.type == "input_json_delta"]
    assert partial == ['{"city": "Paris"}']


def test_anthropic_stream_text_only(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="claude-gateway", max_tokens=300, messages=QUESTION
    ) as stream:
        pieces = list(stream.text_stream)
    assert pieces == list(TEXT_PIECES)


# --- openai SDK, passthrough path -------------------------------------------------------

EXTRA = {"seed": 7, "user": "u-1", "top_k": 20, "chat_template_kwargs": {"enable_thinking": 0}}
OPENAI_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": WEATHER["input_schema"]},
    }
]


def test_openai_create_passthrough(gpt: openai.OpenAI, stack: tuple[str, MockOpenAI]) -> None:
    result = gpt.chat.completions.create(
        model="gpt-4o", messages=QUESTION, tools=OPENAI_TOOLS, extra_body=EXTRA
    )
    # Every field the upstream sent survives, including ones we do not model.
    assert result.model_dump(exclude_unset=True) == completion("qwen3-8b")
    sent = stack[1].received[-1].body
    assert sent == {"model": "qwen3-8b", "messages": QUESTION, "tools": OPENAI_TOOLS, **EXTRA}


def test_openai_stream_passthrough(gpt: openai.OpenAI, stack: tuple[str, MockOpenAI]) -> None:
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-4o",
            messages=QUESTION,
            tools=OPENAI_TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    expected = [orjson.loads(e[6:]) for e in stream_events("qwen3-8b")[:-1]]
    assert [c.model_dump(exclude_unset=True) for c in chunks] == expected
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 59
    assert stack[1].received[-1].body["stream_options"] == {"include_usage": True}


def test_openai_stream_bytes_are_relayed_verbatim(stack: tuple[str, MockOpenAI]) -> None:
    url, mock = stack
    body = {"model": "gpt-4o", "messages": QUESTION, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=10) as resp:
        raw = b"".join(resp.iter_raw())
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-request-id"].startswith("req_")
    # The client did not ask for usage: the gateway asks for it (its usage log counts
    # the tokens) and cuts the chunk that brings it, so the client gets exactly the
    # stream it would have got.
    assert raw == b"".join(stream_events("qwen3-8b", include_usage=False))
    assert mock.received[-1].body["stream_options"] == {"include_usage": True}
