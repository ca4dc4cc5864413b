"""The official openai and anthropic SDKs, driven against a live gateway.

The gateway sits in front of a scripted fake upstream that speaks the *other* dialect
on the wire, so every call here goes through translation both ways. If an SDK can parse
every response and stream, a real application can too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from interlingua.config import parse_config
from interlingua.core import ReasoningPart, ToolCallPart
from interlingua.errors import RateLimitError
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from ..conformance.cases import reply
from ..live_server import live_server

# The anthropic SDK warns about model names it knows are being retired; ours are only labels.
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

CONFIG = parse_config(
    {
        "upstreams": {"oai": {"kind": "fake"}, "ant": {"kind": "fake"}},
        "models": [
            {"name": "claude-sonnet-4-5", "upstream": "oai", "model": "deepseek-chat"},
            {"name": "gpt-4o-mini", "upstream": "ant", "model": "claude-haiku"},
        ],
    }
)
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, FakeUpstream, FakeUpstream]]:
    oai = FakeUpstream("oai", wire="openai", chunk_size=2)
    ant = FakeUpstream("ant", wire="anthropic", chunk_size=2)
    with live_server(create_app(CONFIG, upstreams={"oai": oai, "ant": ant})) as url:
        yield url, oai, ant


@pytest.fixture
def claude(gateway: tuple[str, FakeUpstream, FakeUpstream]) -> Iterator[anthropic.Anthropic]:
    # Closed after each test: an SDK client left to the garbage collector closes its
    # sockets whenever a collection happens, inside some later test, whose check of
    # unraisable warnings then fails.
    with anthropic.Anthropic(base_url=gateway[0], api_key="sk-test", max_retries=0) as client:
        yield client


@pytest.fixture
def gpt(gateway: tuple[str, FakeUpstream, FakeUpstream]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway[0] + "/v1", api_key="sk-test", max_retries=0) as client:
        yield client


def test_anthropic_create(claude: anthropic.Anthropic, gateway: tuple) -> None:
    gateway[1].enqueue(reply("Paris is the capital."))
    message = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        system="Be brief.",
        messages=[{"role": "user", "content": "Capital of France?"}],
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "Paris is the capital."
    assert message.stop_reason == "end_turn"
    assert message.model == "claude-sonnet-4-5"
    assert message.usage.input_tokens == 21 and message.usage.output_tokens == 9
    assert gateway[1].requests[-1].system_text == "Be brief."


def test_anthropic_stream_text(claude: anthropic.Anthropic, gateway: tuple) -> None:
    gateway[1].enqueue(reply("Hello there, streaming world!"))
    with claude.messages.stream(
        model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1
    assert "".join(pieces) == "Hello there, streaming world!"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 9


def test_anthropic_stream_tool_use(claude: anthropic.Anthropic, gateway: tuple) -> None:
    gateway[1].enqueue(
        reply(
            "Checking.",
            ToolCallPart("call_abc", "get_weather", '{"city": "Paris"}'),
            stop="tool_use",  # type: ignore[arg-type]
        )
    )
    with claude.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    tool = final.content[-1]
    assert tool.type == "tool_use"
    assert tool.name == "get_weather" and tool.input == {"city": "Paris"}
    assert tool.id == "call_abc"


def test_anthropic_stream_thinking(claude: anthropic.Anthropic, gateway: tuple) -> None:
    gateway[1].enqueue(reply(ReasoningPart("Think step by step."), "42."))
    with claude.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=4000,
        thinking={"type": "enabled", "budget_tokens": 2000},
        messages=[{"role": "user", "content": "Answer?"}],
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Think step by step."
    assert final.content[1].text == "42."
    assert gateway[1].requests[-1].reasoning is not None


def test_anthropic_errors_are_typed(claude: anthropic.Anthropic, gateway: tuple) -> None:
    gateway[1].enqueue(RateLimitError("slow down", retry_after=3))
    with pytest.raises(anthropic.RateLimitError) as info:
        claude.messages.create(
            model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.response.headers["retry-after"] == "3"
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(
            model="no-such-model", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=[])
    assert "messages" in str(bad.value)


def test_anthropic_models_and_count_tokens(claude: anthropic.Anthropic) -> None:
    ids = [m.id for m in claude.models.list()]
    assert ids == ["claude-sonnet-4-5", "gpt-4o-mini"]
    count = claude.messages.count_tokens(
        model="claude-sonnet-4-5", messages=[{"role": "user", "content": "Hello, world"}]
    )
    assert count.input_tokens > 0


def test_openai_create(gpt: openai.OpenAI, gateway: tuple) -> None:
    gateway[2].enqueue(reply("Hi from Claude."))
    completion = gpt.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hi"}],
    )
    assert completion.choices[0].message.content == "Hi from Claude."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens == 21
    assert completion.model == "gpt-4o-mini"


def test_openai_stream(gpt: openai.OpenAI, gateway: tuple) -> None:
    gateway[2].enqueue(reply("Streaming through a translation."))
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Streaming through a translation."
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9


def test_openai_stream_tool_calls(gpt: openai.OpenAI, gateway: tuple) -> None:
    gateway[2].enqueue(
        reply(
            ToolCallPart("toolu_1", "get_weather", '{"city": "Paris"}'),
            ToolCallPart("toolu_2", "get_weather", '{"city": "Rome"}'),
            stop="tool_use",  # type: ignore[arg-type]
        )
    )
    tools = [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": WEATHER_TOOL["input_schema"]},
        }
    ]
    with gpt.chat.completions.stream(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather?"}], tools=tools
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"}),
        ("toolu_2", "get_weather", {"city": "Rome"}),
    ]
    assert final.choices[0].finish_reason == "tool_calls"


def test_openai_errors_are_typed(gpt: openai.OpenAI, gateway: tuple) -> None:
    gateway[2].enqueue(RateLimitError("slow down", retry_after=1))
    with pytest.raises(openai.RateLimitError):
        gpt.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.NotFoundError):
        gpt.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        gpt.chat.completions.create(model="gpt-4o-mini", messages=[])
    ids = [m.id for m in gpt.models.list()]
    assert ids == ["claude-sonnet-4-5", "gpt-4o-mini"]


def test_head_root_and_health(gateway: tuple) -> None:
    assert httpx.head(gateway[0] + "/").status_code == 200
    assert httpx.get(gateway[0] + "/health").json() == {"status": "ok"}
