"""Per-model text options wrap any upstream: think tags and text-written tool calls."""

from __future__ import annotations

from dataclasses import replace

import httpx

from interlingua.config import ModelOptions, parse_config
from interlingua.core import (
    Message,
    ReasoningPart,
    Request,
    Response,
    StopReason,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolSpec,
    fold,
)
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.text_options import TextOptionsUpstream, with_options

WEATHER = ToolSpec("get_weather", "Weather", {"type": "object", "properties": {}})
CALL_TEXT = (
    'Checking.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
)


def _answer(text: str) -> Response:
    return Response("r1", "m", (TextPart(text),))


def _request(stream: bool = False, tools: tuple[ToolSpec, ...] = ()) -> Request:
    return Request("m", (Message("user", (TextPart("Weather?"),)),), stream=stream, tools=tools)


def test_without_options_the_upstream_is_not_wrapped() -> None:
    fake = FakeUpstream("f")
    assert with_options(fake, ModelOptions()) is fake
    assert isinstance(with_options(fake, ModelOptions(think_tags=True)), TextOptionsUpstream)


async def test_think_tags_become_reasoning_streaming_and_not() -> None:
    fake = FakeUpstream("f", wire="openai", chunk_size=3)
    wrapped = with_options(fake, ModelOptions(think_tags=True))
    fake.enqueue(_answer("<think>Let me see.</think>\n\nParis."))
    whole = await wrapped.complete(_request())
    fake.enqueue(_answer("<think>Let me see.</think>\n\nParis."))
    streamed = fold([e async for e in wrapped.stream(_request(stream=True))])
    for response in (whole, streamed):
        assert [type(p) for p in response.parts] == [ReasoningPart, TextPart]
        assert response.reasoning == "Let me see."
        assert response.text == "Paris."


async def test_text_tool_calls_send_tools_as_prompt_and_parse_calls() -> None:
    fake = FakeUpstream("f", wire="openai", chunk_size=5)
    wrapped = with_options(fake, ModelOptions(text_tool_calls=True))
    fake.enqueue(_answer(CALL_TEXT))
    response = await wrapped.complete(_request(tools=(WEATHER,)))
    sent = fake.requests[-1]
    assert sent.tools == ()
    assert "get_weather" in sent.system_text and "<tool_call>" in sent.system_text
    assert response.stop_reason == StopReason.TOOL_USE
    calls = response.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city":"Paris"}')]
    assert response.text == "Checking."

    fake.enqueue(_answer(CALL_TEXT))
    streamed = fold([e async for e in wrapped.stream(_request(stream=True, tools=(WEATHER,)))])
    assert isinstance(streamed.parts[-1], ToolCallPart)
    assert streamed.parts[-1].arguments == '{"city":"Paris"}'
    assert streamed.stop_reason == StopReason.TOOL_USE


async def test_tool_choice_none_never_yields_a_call_even_if_the_model_writes_one() -> None:
    """As the local engine does: a call the client ruled out stays text."""
    fake = FakeUpstream("f", wire="openai", chunk_size=5)
    wrapped = with_options(fake, ModelOptions(text_tool_calls=True))
    none = replace(_request(tools=(WEATHER,)), tool_choice=ToolChoice("none"))
    fake.enqueue(_answer(CALL_TEXT))
    whole = await wrapped.complete(none)
    fake.enqueue(_answer(CALL_TEXT))
    streamed = fold([e async for e in wrapped.stream(replace(none, stream=True))])
    for response in (whole, streamed):
        assert not response.tool_calls and response.stop_reason != StopReason.TOOL_USE
        assert response.text == CALL_TEXT
    assert fake.requests[-1].tools == ()


async def test_gateway_applies_model_options_for_anthropic_clients() -> None:
    config = parse_config(
        {
            "upstreams": {"f": {"kind": "fake"}},
            "models": [{"name": "qwen", "upstream": "f", "options": {"think_tags": True}}],
        }
    )
    fake = FakeUpstream("f", wire="openai")
    fake.enqueue(_answer("<think>Hmm.</think>Yes."))
    app = create_app(config, upstreams={"f": fake})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post(
            "/v1/messages",
            json={
                "model": "qwen",
                "max_tokens": 50,
                "messages": [{"role": "user", "content": "?"}],
            },
        )
    assert r.status_code == 200, r.text
    blocks = r.json()["content"]
    assert [b["type"] for b in blocks] == ["thinking", "text"]
    assert blocks[0]["thinking"] == "Hmm." and blocks[1]["text"] == "Yes."


async def test_openai_client_with_options_is_not_passed_through() -> None:
    config = parse_config(
        {
            "upstreams": {"f": {"kind": "fake"}},
            "models": [{"name": "qwen", "upstream": "f", "options": {"think_tags": True}}],
        }
    )
    fake = FakeUpstream("f", wire="openai")
    fake.enqueue(_answer("<think>Hmm.</think>Yes."))
    app = create_app(config, upstreams={"f": fake})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post(
            "/v1/chat/completions",
            json={"model": "qwen", "messages": [{"role": "user", "content": "?"}]},
        )
    message = r.json()["choices"][0]["message"]
    assert message["content"] == "Yes."
    assert message["reasoning_content"] == "Hmm."


BASH = ToolSpec(
    "Bash",
    "Run a shell command",
    {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"],
    },
)
QWEN_XML = (
    "Listing.\n<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n</parameter>\n"
    "<parameter=timeout>\n60000\n</parameter>\n</function>\n</tool_call>"
)


async def test_qwen3_coder_xml_calls_are_typed_by_the_offered_tool() -> None:
    """The request's tool schemas reach the parser: a number parameter stays a number."""
    fake = FakeUpstream("f", wire="openai", chunk_size=3)
    wrapped = with_options(fake, ModelOptions(text_tool_calls=True))
    fake.enqueue(_answer(QWEN_XML))
    whole = await wrapped.complete(_request(tools=(BASH,)))
    fake.enqueue(_answer(QWEN_XML))
    streamed = fold([e async for e in wrapped.stream(_request(stream=True, tools=(BASH,)))])
    for response in (whole, streamed):
        assert response.stop_reason == StopReason.TOOL_USE
        assert response.text == "Listing.\n"
        calls = [(c.name, c.arguments) for c in response.tool_calls]
        assert calls == [("Bash", '{"command":"ls -la","timeout":60000}')]
