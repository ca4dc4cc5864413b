"""The openai SDK's Responses API (``client.responses``) against a live gateway.

``POST /v1/responses`` goes through translation to a Chat Completions upstream and to an
Anthropic one (scripted fakes speaking each wire), streaming and not; the SDK's own types
and its stream accumulator must read every answer. Stored state (``previous_response_id``,
retrieve, delete) is tested in test_responses_state.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from interlingua.config import parse_config
from interlingua.core import ReasoningPart, StopReason, ToolCallPart
from interlingua.errors import RateLimitError
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from ...conformance.cases import reply
from ...live_server import live_server

CONFIG = parse_config(
    {
        "upstreams": {"oai": {"kind": "fake"}, "ant": {"kind": "fake"}},
        "models": [
            {"name": "via-chat", "upstream": "oai", "model": "deepseek-chat"},
            {"name": "via-anthropic", "upstream": "ant", "model": "claude-haiku"},
        ],
    }
)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
MODELS = ["via-chat", "via-anthropic"]


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, dict[str, FakeUpstream]]]:
    fakes = {
        "via-chat": FakeUpstream("oai", wire="openai", chunk_size=2),
        "via-anthropic": FakeUpstream("ant", wire="anthropic", chunk_size=2),
    }
    upstreams = {"oai": fakes["via-chat"], "ant": fakes["via-anthropic"]}
    with live_server(create_app(CONFIG, upstreams=upstreams)) as url:
        yield url, fakes


@pytest.fixture
def gpt(gateway: tuple[str, dict[str, FakeUpstream]]) -> Iterator[openai.OpenAI]:
    # Closed after each test: an open pool's socket is a ResourceWarning (an error) in
    # whatever later test the garbage collector happens to run in.
    with openai.OpenAI(base_url=gateway[0] + "/v1", api_key="sk-test", max_retries=0) as client:
        yield client


def _tool_reply() -> object:
    return reply(
        "Checking both.",
        ToolCallPart("call_1", "get_weather", '{"city":"Paris"}'),
        ToolCallPart("call_2", "get_weather", '{"city":"Rome"}'),
        stop=StopReason.TOOL_USE,
    )


@pytest.mark.parametrize("model", MODELS)
def test_create_text(gpt: openai.OpenAI, gateway: tuple, model: str) -> None:
    gateway[1][model].enqueue(reply("Paris is the capital."))
    response = gpt.responses.create(
        model=model, instructions="Be brief.", input="Capital of France?", max_output_tokens=50
    )
    assert response.output_text == "Paris is the capital."
    assert response.status == "completed" and response.model == model
    assert response.usage is not None and response.usage.input_tokens == 21
    assert response.usage.output_tokens == 9
    sent = gateway[1][model].requests[-1]
    assert sent.system_text == "Be brief." and sent.max_tokens == 50


@pytest.mark.parametrize("model", MODELS)
def test_stream_text_accumulates_to_the_final_response(
    gpt: openai.OpenAI, gateway: tuple, model: str
) -> None:
    gateway[1][model].enqueue(reply("Paris is the capital."))
    with gpt.responses.stream(model=model, input="Capital of France?") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Paris is the capital." == final.output_text
    assert final.status == "completed" and final.usage is not None


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", MODELS)
def test_parallel_function_calls_and_their_outputs(
    gpt: openai.OpenAI, gateway: tuple, model: str, stream: bool
) -> None:
    fake = gateway[1][model]
    fake.enqueue(_tool_reply())
    ask = {"model": model, "input": "Weather in Paris and Rome?", "tools": [WEATHER]}
    if stream:
        with gpt.responses.stream(**ask) as events:
            response = events.get_final_response()
    else:
        response = gpt.responses.create(**ask)
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_weather", {"city": "Rome"}),
    ]
    # the outputs go back as function_call_output items
    fake.enqueue(reply("Sunny in both."))
    history = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        *[c.model_dump(exclude_none=True) for c in calls],
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "sunny"},
    ]
    again = gpt.responses.create(model=model, input=history, tools=[WEATHER])
    assert again.output_text == "Sunny in both."
    sent = fake.requests[-1]
    results = [p for m in sent.messages for p in m.parts if type(p).__name__ == "ToolResultPart"]
    assert [r.tool_call_id for r in results] == ["call_1", "call_2"]


@pytest.mark.parametrize("model", MODELS)
def test_reasoning_becomes_a_reasoning_item(gpt: openai.OpenAI, gateway: tuple, model: str) -> None:
    gateway[1][model].enqueue(reply(ReasoningPart("Think: Paris."), "Paris."))
    response = gpt.responses.create(model=model, input="Capital of France?")
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"]
    assert response.output_text == "Paris."


def test_a_length_stop_is_incomplete(gpt: openai.OpenAI, gateway: tuple) -> None:
    gateway[1]["via-chat"].enqueue(reply("Par", stop=StopReason.MAX_TOKENS))
    response = gpt.responses.create(model="via-chat", input="Capital?", max_output_tokens=1)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_upstream_errors_are_typed(gpt: openai.OpenAI, gateway: tuple) -> None:
    gateway[1]["via-chat"].enqueue(RateLimitError("slow down", status=429, retry_after=3.0))
    with pytest.raises(openai.RateLimitError) as caught:
        gpt.responses.create(model="via-chat", input="hi")
    assert caught.value.response.headers.get("retry-after") == "3"
    with pytest.raises(openai.NotFoundError):
        gpt.responses.create(model="no-such-model", input="hi")


def test_bad_input_names_the_item(gpt: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gpt.responses.create(
            model="via-chat",
            input=[{"type": "function_call_output", "output": "x"}],  # type: ignore[list-item]
        )
    assert caught.value.body["param"] == "input[0].call_id"  # type: ignore[index]
