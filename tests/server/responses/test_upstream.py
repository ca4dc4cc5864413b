"""Kind ``responses``: the official SDKs, over real sockets, against a Responses upstream.

    openai SDK, responses.*        -> live gateway (passthrough) -> mock Responses API
    openai SDK, chat.completions.* -> live gateway (translated)  -> the same mock
    anthropic SDK, messages.*      -> live gateway (translated)  -> the same mock

The mock answers with a recorded OpenAI transcript (reasoning summary, text, two
parallel function calls, cached and reasoning token counts). What each SDK parses must
be what the upstream said, errors must reach each SDK typed, and what the gateway sends
upstream must be what the real API accepts (``store: false``, explicit ``strict``, no
``stop``, ``max_output_tokens`` >= 16).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from interlingua.config import parse_config
from interlingua.core import BlockStart, Request, StreamEvent, StreamStart, TextDelta, TextPart
from interlingua.server import create_app
from interlingua.sse import SSEDecoder
from interlingua.upstreams.base import Upstream

from ...live_server import live_server
from ..mock_upstream import MockOpenAI, drop_after, status
from .mock_responses import (
    CALLS,
    EVENTS,
    FINAL,
    MODEL,
    REASONING,
    TEXT,
    USAGE,
    mock_responses,
    text_answer,
    text_events,
)

KEY = "sk-upstream-responses-1"
KEY_ENV = "INTERLINGUA_TEST_RESPONSES_KEY"
QUESTION: Any = [{"role": "user", "content": "Weather in Paris and Tokyo?"}]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
CHAT_TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
CLAUDE_TOOLS: Any = [{"name": "get_weather", "input_schema": SCHEMA}]
RESPONSES_TOOLS: Any = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
RATE_LIMITED = {
    "error": {
        "message": "Rate limit reached for gpt-5 on tokens per min (TPM).",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
SERVER_ERROR = {
    "error": {
        "message": "The server had an error processing your request.",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[str, MockOpenAI]]:
    with pytest.MonkeyPatch.context() as mp, mock_responses() as mock:
        mp.setenv(KEY_ENV, KEY)
        config = parse_config(
            {
                "upstreams": {
                    "oai": {"kind": "responses", "base_url": mock.base_url, "api_key_env": KEY_ENV}
                },
                "models": [{"name": "gpt-5", "upstream": "oai", "model": MODEL}],
            }
        )
        with live_server(create_app(config)) as url:
            yield url, mock


@pytest.fixture
def mock(stack: tuple[str, MockOpenAI]) -> Iterator[MockOpenAI]:
    stack[1].script.clear()
    stack[1].stream_ends.clear()
    yield stack[1]
    stack[1].script.clear()


@pytest.fixture
def gpt(stack: tuple[str, MockOpenAI]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack[0] + "/v1", api_key="sk-client", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(stack: tuple[str, MockOpenAI]) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stack[0], api_key="sk-client", max_retries=0) as client:
        yield client


def _sent(mock: MockOpenAI) -> dict[str, Any]:
    """The last body the upstream got, after the checks every request must pass."""
    received = mock.received[-1]
    assert received.path == "/v1/responses"
    assert received.headers["authorization"] == f"Bearer {KEY}"  # ours, never the client's
    return received.body


def _check_translated(body: dict[str, Any], stream: bool) -> None:
    """What a real OpenAI server must get from a Chat or Messages client."""
    assert body["model"] == MODEL
    assert body["store"] is False
    assert body.get("stream", False) is stream
    assert "stream_options" not in body and "stop" not in body
    assert body["tools"] == [
        {"type": "function", "name": "get_weather", "parameters": SCHEMA, "strict": False}
    ]
    assert body["input"] == [{"type": "message", "role": "user", "content": QUESTION[0]["content"]}]


# --- openai SDK, Chat Completions, translated ---------------------------------------------


def _check_chat_calls(calls: Any) -> None:
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == CALLS


def test_chat_create(gpt: openai.OpenAI, mock: MockOpenAI) -> None:
    result = gpt.chat.completions.create(
        model="gpt-5", messages=QUESTION, tools=CHAT_TOOLS, max_completion_tokens=500
    )
    choice = result.choices[0]
    assert choice.message.content == TEXT
    _check_chat_calls(choice.message.tool_calls)
    assert choice.finish_reason == "tool_calls"
    assert result.model == "gpt-5"
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (312, 181)
    assert result.usage.prompt_tokens_details.cached_tokens == 64
    assert result.usage.completion_tokens_details.reasoning_tokens == 128
    body = _sent(mock)
    _check_translated(body, stream=False)
    assert body["max_output_tokens"] == 500


def test_chat_stream(gpt: openai.OpenAI, mock: MockOpenAI) -> None:
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-5",
            messages=QUESTION,
            tools=CHAT_TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == TEXT
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert reasoning == REASONING
    calls: dict[int, list[str]] = {}
    for d in deltas:
        for call in d.tool_calls or ():
            entry = calls.setdefault(call.index, ["", "", ""])
            entry[0] = entry[0] or call.id or ""
            entry[1] = entry[1] or (call.function.name or "")
            entry[2] += call.function.arguments or ""
    assert [tuple(calls[i]) for i in sorted(calls)] == CALLS
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == USAGE["total_tokens"]
    _check_translated(_sent(mock), stream=True)


# --- anthropic SDK, Messages, translated ------------------------------------------------


def _check_message(message: anthropic.types.Message) -> None:
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, *tools = message.content
    assert isinstance(thinking, anthropic.types.ThinkingBlock) and thinking.thinking == REASONING
    assert isinstance(text, anthropic.types.TextBlock) and text.text == TEXT
    assert [(t.id, t.name, json.dumps(t.input, separators=(",", ":"))) for t in tools] == CALLS  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"
    # Anthropic's input_tokens exclude cache reads (docs/protocols.md, "Usage and caching").
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (248, 64)
    assert message.usage.output_tokens == 181
    assert message.model == "gpt-5"


def test_messages_create(claude: anthropic.Anthropic, mock: MockOpenAI) -> None:
    message = claude.messages.create(
        model="gpt-5", max_tokens=1000, tools=CLAUDE_TOOLS, messages=QUESTION
    )
    _check_message(message)
    body = _sent(mock)
    _check_translated(body, stream=False)
    assert body["max_output_tokens"] == 1000


def test_messages_stream(claude: anthropic.Anthropic, mock: MockOpenAI) -> None:
    with claude.messages.stream(
        model="gpt-5", max_tokens=1000, tools=CLAUDE_TOOLS, messages=QUESTION
    ) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    _check_message(final)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    _check_translated(_sent(mock), stream=True)


def test_a_one_token_probe_is_raised_to_the_api_minimum(
    claude: anthropic.Anthropic, mock: MockOpenAI
) -> None:
    mock.enqueue(text_answer(["Hi"]))
    message = claude.messages.create(model="gpt-5", max_tokens=1, messages=QUESTION)
    assert message.content[0].text == "Hi"  # type: ignore[union-attr]
    assert _sent(mock)["max_output_tokens"] == 16


# --- openai SDK, Responses, passthrough -------------------------------------------------


def test_responses_create_passthrough(gpt: openai.OpenAI, mock: MockOpenAI) -> None:
    result = gpt.responses.create(model="gpt-5", input="Weather?", tools=RESPONSES_TOOLS)
    assert result.model_dump(exclude_unset=True) == FINAL  # every field, as the upstream sent it
    assert result.output_text == TEXT
    body = _sent(mock)
    # As parsed, model replaced: the client's own store (absent) and strict (omitted).
    assert body == {"model": MODEL, "input": "Weather?", "tools": RESPONSES_TOOLS}


def test_responses_stream_passthrough(gpt: openai.OpenAI, mock: MockOpenAI) -> None:
    with gpt.responses.stream(
        model="gpt-5", input="Weather?", tools=RESPONSES_TOOLS, store=True
    ) as stream:
        events = [(e.type, e.sequence_number) for e in stream]
        final = stream.get_final_response()
    expected = [orjson.loads(e.split(b"data: ", 1)[1]) for e in EVENTS]
    assert events == [(e["type"], e["sequence_number"]) for e in expected]
    assert final.output_text == TEXT and final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == 128
    body = _sent(mock)
    assert body["stream"] is True and body["store"] is True and body["model"] == MODEL


# --- errors ------------------------------------------------------------------------------


def _rate_limited() -> Any:
    return status(429, RATE_LIMITED, {"retry-after": "7", "x-request-id": "req_up"})


@pytest.mark.parametrize("stream", [False, True])
def test_429_reaches_each_sdk_typed_with_retry_after(
    gpt: openai.OpenAI, claude: anthropic.Anthropic, mock: MockOpenAI, stream: bool
) -> None:
    mock.enqueue(_rate_limited(), _rate_limited(), _rate_limited())
    with pytest.raises(openai.RateLimitError) as chat:
        gpt.chat.completions.create(model="gpt-5", messages=QUESTION, stream=stream)
    with pytest.raises(openai.RateLimitError) as responses:
        gpt.responses.create(model="gpt-5", input="hi", stream=stream)
    with pytest.raises(anthropic.RateLimitError) as messages:
        claude.messages.create(model="gpt-5", max_tokens=50, messages=QUESTION, stream=stream)
    for info in (chat, responses, messages):
        assert info.value.response.headers["retry-after"] == "7"
        assert "Rate limit reached" in info.value.message
    assert messages.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert chat.value.code == "rate_limit_exceeded"


def test_500_reaches_each_sdk_typed(
    gpt: openai.OpenAI, claude: anthropic.Anthropic, mock: MockOpenAI
) -> None:
    mock.enqueue(*[status(500, SERVER_ERROR)] * 3)
    with pytest.raises(openai.InternalServerError):
        gpt.chat.completions.create(model="gpt-5", messages=QUESTION)
    with pytest.raises(openai.InternalServerError):
        gpt.responses.create(model="gpt-5", input="hi")
    with pytest.raises(anthropic.InternalServerError):
        claude.messages.create(model="gpt-5", max_tokens=50, messages=QUESTION)


def _cut() -> Any:
    return drop_after(EVENTS[:14])  # mid-text: a reasoning item and some text, no end


def test_cut_stream_ends_chat_with_an_in_band_error(gpt: openai.OpenAI, mock: MockOpenAI) -> None:
    mock.enqueue(_cut())
    stream = gpt.chat.completions.create(model="gpt-5", messages=QUESTION, stream=True)
    text = ""
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
    assert "'oai'" in info.value.message and TEXT.startswith(text) and text


def test_cut_stream_ends_messages_with_an_in_band_error(
    claude: anthropic.Anthropic, mock: MockOpenAI
) -> None:
    mock.enqueue(_cut())
    stream = claude.messages.stream(model="gpt-5", max_tokens=50, messages=QUESTION)
    with stream as events, pytest.raises(anthropic.APIStatusError) as info:
        for _ in events:
            pass
    assert info.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def test_cut_passthrough_stream_ends_with_an_error_event(
    gpt: openai.OpenAI, mock: MockOpenAI
) -> None:
    mock.enqueue(_cut())
    with gpt.responses.stream(model="gpt-5", input="hi") as stream:
        events = list(stream)  # the SDK yields error events; it must not choke on them
    kinds = [e.type for e in events]
    assert "response.output_text.delta" in kinds and "response.completed" not in kinds
    error = events[-1]
    assert error.type == "error" and "'oai'" in error.message
    assert error.code == "server_error"


# --- stop sequences, enforced by the gateway ---------------------------------------------

PIECES = ["The answer", " is 4", "2.\nEN", "D and then", " more"]


def test_chat_stop_cuts_the_text_and_the_upstream(gpt: openai.OpenAI, mock: MockOpenAI) -> None:
    mock.enqueue(text_answer(PIECES, endless=True))
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-5",
            messages=QUESTION,
            stop=["\nEND"],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The answer is 42."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert "stop" not in _sent(mock)
    # The gateway hung up on the upstream once the stop matched.
    assert mock.wait_for_end() in ("ConnectionResetError", "CancelledError")


def test_messages_stop_sequence_is_reported_by_name(
    claude: anthropic.Anthropic, mock: MockOpenAI
) -> None:
    mock.enqueue(text_answer(PIECES, endless=True))
    with claude.messages.stream(
        model="gpt-5", max_tokens=100, messages=QUESTION, stop_sequences=["never", "\nEND"]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "The answer is 42."
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "\nEND")
    assert mock.wait_for_end() in ("ConnectionResetError", "CancelledError")


def test_stop_without_stream(
    gpt: openai.OpenAI, claude: anthropic.Anthropic, mock: MockOpenAI
) -> None:
    mock.enqueue(text_answer(PIECES), text_answer(PIECES))
    chat = gpt.chat.completions.create(model="gpt-5", messages=QUESTION, stop="\nEND")
    assert chat.choices[0].message.content == "The answer is 42."
    assert chat.choices[0].finish_reason == "stop"
    assert chat.usage is not None and chat.usage.completion_tokens == 7  # the upstream's count
    message = claude.messages.create(
        model="gpt-5", max_tokens=100, messages=QUESTION, stop_sequences=["\nEND"]
    )
    assert message.content[0].text == "The answer is 42."  # type: ignore[union-attr]
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "\nEND")


def test_stop_that_never_matches_changes_nothing(
    claude: anthropic.Anthropic, mock: MockOpenAI
) -> None:
    mock.enqueue(text_answer(PIECES))
    with claude.messages.stream(
        model="gpt-5", max_tokens=100, messages=QUESTION, stop_sequences=["zzz"]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "".join(PIECES)
    assert (final.stop_reason, final.stop_sequence) == ("end_turn", None)
    assert final.usage.output_tokens == 7  # the upstream's own count, read to the end
    assert len(text_events(PIECES)[1]) == 4


# --- the in-band error continues the stream it ends --------------------------------------


class _FailsAfterText(Upstream):
    """Streams a start and some text, then raises (a bug, or a fault between events)."""

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        yield StreamStart(id="resp_up", model=request.model)
        yield BlockStart(0, TextPart(""))
        yield TextDelta(0, "Once upon")
        await asyncio.sleep(0)
        raise RuntimeError("secret internals")


async def test_translated_failure_after_the_first_byte_keeps_the_response_id() -> None:
    config = parse_config(
        {"upstreams": {"f": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "f"}]}
    )
    app = create_app(config, upstreams={"f": _FailsAfterText("f")})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        resp = await client.post(
            "/v1/responses", json={"model": "m", "input": "hi", "stream": True}
        )
    decoder = SSEDecoder()
    payloads = [orjson.loads(e.data) for e in decoder.decode(resp.content) + decoder.flush()]
    kinds = [p["type"] for p in payloads]
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.failed"
    assert payloads[-1]["response"]["id"] == payloads[0]["response"]["id"]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert "secret internals" not in resp.text
