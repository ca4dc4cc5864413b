"""Responses ``response`` objects: ``render_response`` validated by the official SDK's type
(status, incomplete details, every item kind, the request echo, usage) and
``parse_response`` as its inverse (items -> parts, status -> stop reason, errors)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from openai.types.responses import Response as SDKResponse

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
    UnknownPart,
    Usage,
)
from interlingua.dialects.openai_responses.response import (
    UPSTREAM_REASONING,
    parse_response,
    render_response,
)
from interlingua.errors import RateLimitError, UpstreamError

REQUEST = Request("client-model", (Message("user", (TextPart("hi"),)),))
#: a client that asked for reasoning's encrypted_content (the API returns it only then)
INCLUDING = replace(REQUEST, extra={"include": ["reasoning.encrypted_content"]})
USAGE = Usage(input_tokens=36, output_tokens=87, cache_read_tokens=6, reasoning_tokens=64)
PARTS = (
    # as parsed from a Responses upstream: its encrypted_content rides as the signature
    ReasoningPart("Thinking.", signature="gAAA", meta={UPSTREAM_REASONING: True}),
    TextPart("Hi!"),
    TextPart("I can't.", meta={"refusal": True}),
    ToolCallPart("call_1", "get_weather", '{"city":"Paris"}'),
    ToolCallPart("call_2", "apply_patch", "*** Begin Patch", kind="custom"),
)


def _render(response: Response, request: Request = REQUEST) -> dict[str, Any]:
    body = render_response(response, request)
    SDKResponse.model_validate(body)  # the official type accepts it
    return body


def test_every_item_kind() -> None:
    response = Response("abc", "upstream", PARTS, StopReason.TOOL_USE, usage=USAGE, created=5)
    assert "encrypted_content" not in _render(response)["output"][0]  # not asked for
    body = _render(response, INCLUDING)
    assert body["id"] == "resp_abc" and body["object"] == "response"
    assert body["model"] == "client-model" and body["created_at"] == 5
    assert body["status"] == "completed" and body["incomplete_details"] is None
    reasoning, text, refusal, call, custom = body["output"]
    assert reasoning["id"].startswith("rs_") and reasoning["encrypted_content"] == "gAAA"
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Thinking."}]
    assert text["id"].startswith("msg_") and text["role"] == "assistant"
    assert text["content"][0]["type"] == "output_text" and text["content"][0]["text"] == "Hi!"
    assert refusal["content"] == [{"type": "refusal", "refusal": "I can't."}]
    assert call["type"] == "function_call" and call["id"].startswith("fc_")
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_1",
        "get_weather",
        '{"city":"Paris"}',
    )
    assert custom["type"] == "custom_tool_call" and custom["id"].startswith("ctc_")
    assert custom["input"] == "*** Begin Patch"
    assert len({item["id"] for item in body["output"]}) == 5
    assert body["usage"] == {
        "input_tokens": 36,
        "input_tokens_details": {"cached_tokens": 6, "cache_write_tokens": 0},
        "output_tokens": 87,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 123,
    }


def test_ids_are_stable_for_the_same_response() -> None:
    response = Response("resp_x", "m", PARTS, created=1)
    assert (
        render_response(response, REQUEST)["output"] == render_response(response, REQUEST)["output"]
    )


@pytest.mark.parametrize(
    ("stop", "reason"),
    [
        (StopReason.MAX_TOKENS, "max_output_tokens"),
        (StopReason.CONTEXT_WINDOW, "max_output_tokens"),
        (StopReason.REFUSAL, "content_filter"),
    ],
)
def test_incomplete(stop: StopReason, reason: str) -> None:
    body = _render(Response("r", "m", (TextPart("cut"),), stop, created=1))
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": reason}


def test_request_echo() -> None:
    request = replace(
        REQUEST,
        tools=(
            ToolSpec("f", "does f", {"type": "object", "properties": {}}, strict=True),
            ToolSpec("apply_patch", kind="custom", format={"type": "text"}),
        ),
        tool_choice=ToolChoice("tool", "apply_patch"),
        parallel_tool_calls=False,
        temperature=0.2,
        max_tokens=100,
    )
    body = _render(Response("r", "m", (TextPart("x"),), created=1), request)
    assert body["tools"][0] == {
        "type": "function",
        "name": "f",
        "description": "does f",
        "parameters": {"type": "object", "properties": {}},
        "strict": True,
    }
    assert body["tools"][1] == {"type": "custom", "name": "apply_patch", "format": {"type": "text"}}
    assert body["tool_choice"] == {"type": "custom", "name": "apply_patch"}
    assert body["parallel_tool_calls"] is False
    assert body["temperature"] == 0.2 and body["max_output_tokens"] == 100


def test_other_dialects_unknown_parts_are_left_out() -> None:
    parts = (UnknownPart("anthropic", {"type": "server_tool_use"}), TextPart("x"))
    body = _render(Response("r", "m", parts, created=1))
    assert [item["type"] for item in body["output"]] == ["message"]


def test_parse_is_the_inverse_of_render() -> None:
    response = Response("resp_abc", "m", PARTS, StopReason.TOOL_USE, usage=USAGE, created=5)
    parsed = parse_response(render_response(response, INCLUDING))
    expected = replace(
        response,
        model="client-model",
        parts=(replace(PARTS[0], signature="gAAA"), *PARTS[1:]),  # encrypted content
    )
    assert parsed == expected


def test_parse_stop_reasons() -> None:
    def body(status: str, reason: str | None = None, output: Any = ()) -> dict[str, Any]:
        details = {"reason": reason} if reason else None
        return {
            "id": "resp_1",
            "status": status,
            "incomplete_details": details,
            "output": list(output),
        }

    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    assert parse_response(body("completed")).stop_reason == StopReason.END_TURN
    assert parse_response(body("completed", output=[call])).stop_reason == StopReason.TOOL_USE
    incomplete = body("incomplete", "max_output_tokens")
    assert parse_response(incomplete).stop_reason == StopReason.MAX_TOKENS
    filtered = body("incomplete", "content_filter")
    assert parse_response(filtered).stop_reason == StopReason.REFUSAL


def test_parse_items() -> None:
    body = {
        "id": "resp_1",
        "model": "gpt-5",
        "created_at": 1741487325,
        "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [
                {"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": "b"}]},
            {"type": "message", "id": "msg_1", "role": "assistant", "content": [
                {"type": "output_text", "text": "Hi", "annotations": []},
                {"type": "refusal", "refusal": "no"}]},
            {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c1", "name": "p", "input": "x"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        ],
        "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 2},
                  "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 3},
                  "total_tokens": 15},
    }  # fmt: skip
    response = parse_response(body)
    assert response.created == 1741487325 and response.model == "gpt-5"
    reasoning, text, refusal, custom, unknown = response.parts
    assert reasoning == ReasoningPart("a\n\nb")
    assert text == TextPart("Hi") and refusal.meta == {"refusal": True}  # type: ignore[union-attr]
    assert custom == ToolCallPart("c1", "p", "x", kind="custom")
    assert unknown == UnknownPart("responses", body["output"][3])  # type: ignore[index]
    assert response.stop_reason == StopReason.TOOL_USE
    assert response.usage == Usage(10, 5, cache_read_tokens=2, reasoning_tokens=3)


def test_parse_failures() -> None:
    with pytest.raises(UpstreamError):
        parse_response([])
    with pytest.raises(UpstreamError):
        parse_response({"id": "resp_1"})
    failed = {
        "status": "failed",
        "output": [],
        "error": {"code": "rate_limit_exceeded", "message": "slow"},
    }
    with pytest.raises(RateLimitError, match="slow"):
        parse_response(failed)


def test_instructions_echoed() -> None:
    """The API echoes the request's instructions in the response object."""
    from interlingua.dialects.openai_responses import parse_request

    request = parse_request({"model": "m", "instructions": "Be brief.", "input": "hi"})
    response = Response("abc", "upstream", (TextPart("ok"),), StopReason.END_TURN, usage=USAGE)
    assert _render(response, request)["instructions"] == "Be brief."
    assert _render(response)["instructions"] is None
