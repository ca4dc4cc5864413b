"""_outputs.py: usage normalization, JSON extraction, ChatResult conveniences."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from interlingua.client import (
    ChatResult,
    JSONExtractionError,
    StructuredOutputError,
    ToolArgumentsError,
    extract_json,
    normalize_usage,
)
from interlingua.client._outputs import validate_structured
from interlingua.core import ReasoningPart, Response, TextPart, ToolCallPart, Usage

# Recorded shapes (trimmed to what matters) from each backend.
OPENAI = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "usage": {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0},
    },
}
ANTHROPIC = {
    "id": "msg_1",
    "type": "message",
    "usage": {
        "input_tokens": 50,
        "cache_creation_input_tokens": 200,
        "cache_read_input_tokens": 1000,
        "output_tokens": 80,
        "service_tier": "standard",
    },
}
OLLAMA_NATIVE = {
    "model": "llama3.2",
    "message": {"role": "assistant", "content": "hi"},
    "done": True,
    "total_duration": 123456,
    "prompt_eval_count": 26,
    "eval_count": 298,
}
VLLM = {
    "id": "chatcmpl-abc",
    "object": "chat.completion",
    "usage": {
        "prompt_tokens": 17,
        "total_tokens": 40,
        "completion_tokens": 23,
        "prompt_tokens_details": None,
    },
}
RESPONSES_API = {
    "usage": {
        "input_tokens": 500,
        "input_tokens_details": {"cached_tokens": 128},
        "output_tokens": 60,
        "output_tokens_details": {"reasoning_tokens": 40},
        "total_tokens": 560,
    }
}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (OPENAI, Usage(1200, 300, cache_read_tokens=1024, reasoning_tokens=256)),
        # Anthropic's input_tokens excludes cache traffic; ours includes it
        (ANTHROPIC, Usage(1250, 80, cache_read_tokens=1000, cache_write_tokens=200)),
        (OLLAMA_NATIVE, Usage(26, 298)),
        (VLLM, Usage(17, 23)),
        (RESPONSES_API, Usage(500, 60, cache_read_tokens=128, reasoning_tokens=40)),
        (ANTHROPIC["usage"], Usage(1250, 80, cache_read_tokens=1000, cache_write_tokens=200)),
        ({"usage": None}, Usage()),
        (None, Usage()),
    ],
    ids=["openai", "anthropic", "ollama", "vllm", "responses", "bare-usage", "null", "none"],
)
def test_normalize_usage(body: object, expected: Usage) -> None:
    assert normalize_usage(body) == expected


def test_deepseek_cache_hits() -> None:
    body = {"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 64}
    assert normalize_usage(body).cache_read_tokens == 64


# --- JSON extraction ---


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  [1, 2]  ", [1, 2]),
        ('Here you go:\n```json\n{"a": {"b": [1, "}"]}}\n```\nanything else?', {"a": {"b": [1, "}"]}}),
        ('```\n{"plain": true}\n```', {"plain": True}),
        ('```python\nx = {1}\n```\n```json\n{"json": 1}\n```', {"json": 1}),
        ('The answer is {"name": "Ada", "quote": "say \\"hi\\" {"} — done.', {"name": "Ada", "quote": 'say "hi" {'}),
        ("set {x} then {\"ok\": 1}", {"ok": 1}),
        ('<think>maybe {"wrong": 1}</think>{"right": 2}', {"right": 2}),
    ],
)  # fmt: skip
def test_extract_json(text: str, expected: object) -> None:
    assert extract_json(text) == expected


def test_extract_json_error_quotes_the_text() -> None:
    with pytest.raises(JSONExtractionError, match=r"no JSON object.*it starts: 'I cannot help"):
        extract_json("I cannot help with that, sorry. " * 10)


# --- results ---


def response(*parts: object, usage: Usage | None = None) -> Response:
    return Response("r1", "m", tuple(parts), usage=usage or Usage(3, 4))  # type: ignore[arg-type]


def test_result_basics_and_think_tags() -> None:
    r = response(ReasoningPart("let me think"), TextPart("42"))
    plain = ChatResult(r, raw={"x": 1}, request_id="req_1")
    assert (plain.text, plain.reasoning, plain.model, plain.id) == ("42", "let me think", "m", "r1")
    assert plain.usage.total_tokens == 7 and plain.raw == {"x": 1}
    assert str(plain) == "42"
    assert ChatResult(r, think_tags=True).text == "<think>\nlet me think\n</think>\n\n42"
    assert ChatResult(response(TextPart("x")), think_tags=True).text == "x"


def test_tool_call_arguments() -> None:
    r = ChatResult(
        response(
            ToolCallPart("c1", "get_weather", '{"city": "Paris"}'),
            ToolCallPart("c2", "search", '{"q": "unterminated'),
            ToolCallPart("c3", "noargs", ""),
            ToolCallPart("c4", "listy", "[1]"),
        )
    )
    good, bad, empty, listy = r.tool_calls
    assert good.arguments == {"city": "Paris"}
    assert empty.arguments == {}
    with pytest.raises(ToolArgumentsError, match="tool 'search' with invalid JSON") as info:
        bad.arguments  # noqa: B018
    assert info.value.tool == "search"
    with pytest.raises(ToolArgumentsError, match="not a JSON object"):
        listy.arguments  # noqa: B018


class Person(BaseModel):
    name: str
    age: int


def test_structured_output_with_pydantic() -> None:
    person = validate_structured('```json\n{"name": "Ada", "age": 36}\n```', Person)
    assert person == Person(name="Ada", age=36)
    with pytest.raises(StructuredOutputError, match="does not match Person"):
        validate_structured('{"name": "Ada"}', Person)
    assert validate_structured('{"a": 1}', None) == {"a": 1}
