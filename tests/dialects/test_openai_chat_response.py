"""OpenAI Chat response codec: chat.completion <-> Response, usage, finish reasons, model list."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import openai.types
import openai.types.chat
import pytest

from interlingua.core import (
    Message,
    ReasoningPart,
    Request,
    Response,
    StopReason,
    TextPart,
    ToolCallPart,
    Usage,
)
from interlingua.dialects.openai_chat import (
    DIALECT,
    parse_response,
    render_model_list,
    render_response,
)
from interlingua.errors import RateLimitError, UpstreamError

REQUEST = Request("client-model", (Message("user", (TextPart("hi"),)),))

# A whole chat.completion with a tool call, every field that docs/protocols.md,
# "Chat Completions: response body", lists.
SPEC_EXAMPLE: dict[str, Any] = {
    "id": "chatcmpl-123",
    "object": "chat.completion",
    "created": 1727346182,
    "model": "gpt-4o-2024-08-06",
    "system_fingerprint": "fp_x",
    "service_tier": "default",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "logprobs": None,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "annotations": [],
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 44,
        "completion_tokens": 16,
        "total_tokens": 60,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
}


def completion(message: dict[str, Any], finish: str | None = "stop", **kw: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", **message},
        "finish_reason": finish,
    }
    choice.update(kw.pop("choice", {}))
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 5,
        "model": "up",
        "choices": [choice],
        **kw,
    }


def validated(body: dict[str, Any]) -> openai.types.chat.ChatCompletion:
    return openai.types.chat.ChatCompletion.model_validate(body)


def test_parse_spec_example() -> None:
    r = parse_response(SPEC_EXAMPLE)
    assert r == Response(
        id="chatcmpl-123",
        model="gpt-4o-2024-08-06",
        parts=(ToolCallPart("call_1", "get_weather", '{"city":"Paris"}'),),
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=44, output_tokens=16),
        created=1727346182,
    )
    assert r.meta == {"system_fingerprint": "fp_x", "service_tier": "default"}


def test_parse_text_with_reasoning_content() -> None:
    r = DIALECT.parse_response(completion({"content": "4", "reasoning_content": "2+2"}))
    assert r.parts == (ReasoningPart("2+2"), TextPart("4"))
    assert r.stop_reason is StopReason.END_TURN


def test_parse_reasoning_name_fallback_and_details() -> None:
    details = [{"type": "reasoning.encrypted", "data": "xyz"}]
    r = parse_response(
        completion({"content": "ok", "reasoning": "vllm style", "reasoning_details": details})
    )
    assert r.parts[0] == ReasoningPart("vllm style")
    assert r.parts[0].meta == {"reasoning_details": details}
    # reasoning_content wins when both are present
    # (docs/protocols.md, "Chat Completions: server extensions").
    r = parse_response(completion({"content": "ok", "reasoning_content": "a", "reasoning": "b"}))
    assert r.reasoning == "a"


def test_parse_refusal() -> None:
    r = parse_response(completion({"content": None, "refusal": "I can't help."}, "content_filter"))
    assert r.parts == (TextPart("I can't help."),)
    assert r.parts[0].meta == {"refusal": True}
    assert r.stop_reason is StopReason.REFUSAL


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("stop", StopReason.END_TURN),
        ("length", StopReason.MAX_TOKENS),
        ("tool_calls", StopReason.TOOL_USE),
        ("function_call", StopReason.TOOL_USE),
        ("content_filter", StopReason.REFUSAL),
        ("eos", StopReason.END_TURN),
        (None, StopReason.END_TURN),
    ],
)
def test_finish_reason_to_stop_reason(finish: str | None, reason: StopReason) -> None:
    assert parse_response(completion({"content": "x"}, finish)).stop_reason is reason


def test_vllm_stop_reason_string_is_a_stop_sequence() -> None:
    r = parse_response(completion({"content": "x"}, "stop", choice={"stop_reason": "END"}))
    assert (r.stop_reason, r.stop_sequence) == (StopReason.STOP_SEQUENCE, "END")
    # vLLM reports a token id (int) when an EOS/stop token ended generation.
    r = parse_response(completion({"content": "x"}, "stop", choice={"stop_reason": 128009}))
    assert (r.stop_reason, r.stop_sequence) == (StopReason.END_TURN, None)


def test_stop_with_tool_calls_is_tool_use() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert (
        parse_response(completion({"content": None, "tool_calls": [call]}, "stop")).stop_reason
        is StopReason.TOOL_USE
    )


def test_parse_usage_details() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "total_tokens": 140,
        "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 25},
    }
    r = parse_response(completion({"content": "x"}, usage=usage))
    assert r.usage == Usage(
        100, 40, cache_read_tokens=60, cache_write_tokens=30, reasoning_tokens=25
    )


def test_parse_usage_fallbacks() -> None:
    deepseek = {"prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 8}
    assert parse_response(completion({"content": "x"}, usage=deepseek)).usage == Usage(
        10, 2, cache_read_tokens=8
    )
    ollama = completion({"content": "x"}, prompt_eval_count=12, eval_count=3)
    assert parse_response(ollama).usage == Usage(12, 3)
    nulls = {"prompt_tokens": None, "completion_tokens": 4, "prompt_tokens_details": None}
    assert parse_response(completion({"content": "x"}, usage=nulls)).usage == Usage(0, 4)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [  # odd values take the value-by-value reading, plain ints the quick one: same counts
        ({"prompt_tokens": -3, "completion_tokens": 4}, Usage(0, 4)),
        ({"prompt_tokens": 5, "completion_tokens": 4.0}, Usage(5, 4)),
        ({"prompt_tokens": True, "completion_tokens": 4}, Usage(0, 4)),
        (
            {
                "prompt_tokens": 9,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 3.0},
            },
            Usage(9, 4, cache_read_tokens=3),
        ),
        (
            {
                "prompt_tokens": 9,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": -1},
            },
            Usage(9, 4),
        ),
        (
            {
                "prompt_tokens": 9,
                "completion_tokens": 4,
                "completion_tokens_details": {"reasoning_tokens": False},
            },
            Usage(9, 4),
        ),
        (
            {
                "prompt_tokens": 9,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 0},
                "prompt_cache_hit_tokens": 6,
            },
            Usage(9, 4, cache_read_tokens=6),
        ),
    ],
)
def test_parse_usage_odd_values(usage: dict[str, object], expected: Usage) -> None:
    assert parse_response(completion({"content": "x"}, usage=usage)).usage == expected


def test_missing_usage_is_estimated() -> None:
    r = parse_response(completion({"content": "abcdefgh", "reasoning_content": "ijkl"}))
    assert r.usage == Usage(input_tokens=0, output_tokens=3, estimated=True)


def test_parse_error_body_raises() -> None:
    with pytest.raises(RateLimitError):
        parse_response(
            {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}
        )


@pytest.mark.parametrize("body", [{"id": "x", "choices": []}, {"id": "x"}, ["not", "a", "dict"]])
def test_parse_without_choices_is_a_bad_gateway(body: Any) -> None:
    with pytest.raises(UpstreamError) as info:
        parse_response(body)
    assert info.value.status == 502


def test_parse_tolerates_legacy_function_call_and_list_content() -> None:
    r = parse_response(
        completion({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    )
    assert r.parts == (TextPart("ab"),)
    r = parse_response(
        completion(
            {"content": None, "function_call": {"name": "f", "arguments": "{}"}}, "function_call"
        )
    )
    assert r.tool_calls == (ToolCallPart("call_0", "f", "{}"),)
    assert r.stop_reason is StopReason.TOOL_USE


# ----------------------------------------------------------------------------- render


def full_response(**kw: Any) -> Response:
    fields: dict[str, Any] = {
        "id": "msg_01XYZ",
        "model": "upstream-name",
        "parts": (ReasoningPart("hmm", signature="sig"), TextPart("Hello "), TextPart("world")),
        "stop_reason": StopReason.END_TURN,
        "usage": Usage(50, 20, cache_read_tokens=10, reasoning_tokens=5),
        "created": 1700000000,
    }
    fields.update(kw)
    return Response(**fields)


def test_render_exact_shape() -> None:
    body = render_response(full_response(), REQUEST)
    assert body == {
        "id": "chatcmpl-msg_01XYZ",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "client-model",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello world",
                    "refusal": None,
                    "reasoning_content": "hmm",
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 20,
            "total_tokens": 70,
            "prompt_tokens_details": {"cached_tokens": 10, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 5,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
    }
    sdk = validated(body)
    assert sdk.choices[0].message.content == "Hello world"
    assert sdk.usage is not None and sdk.usage.prompt_tokens_details is not None
    assert sdk.usage.prompt_tokens_details.cached_tokens == 10


def test_render_tool_calls_only_has_null_content_and_no_empty_reasoning() -> None:
    parts = (ToolCallPart("call_a", "f", '{"x":1}'), ToolCallPart("call_b", "g", "{}"))
    body = render_response(full_response(parts=parts, stop_reason=StopReason.TOOL_USE), REQUEST)
    message = body["choices"][0]["message"]
    assert message["content"] is None and "reasoning_content" not in message
    assert [c["id"] for c in message["tool_calls"]] == ["call_a", "call_b"]
    sdk = validated(body)
    assert sdk.choices[0].finish_reason == "tool_calls"
    assert sdk.choices[0].message.tool_calls is not None
    assert sdk.choices[0].message.tool_calls[1].function.name == "g"  # type: ignore[union-attr]


def test_render_empty_turn_has_empty_string_content() -> None:
    body = render_response(full_response(parts=()), REQUEST)
    assert body["choices"][0]["message"]["content"] == ""
    validated(body)


def test_render_refusal_and_cache_writes() -> None:
    parts = (TextPart("No.", meta={"refusal": True}),)
    usage = Usage(10, 1, cache_write_tokens=4)
    body = render_response(
        full_response(parts=parts, stop_reason=StopReason.REFUSAL, usage=usage), REQUEST
    )
    message = body["choices"][0]["message"]
    assert (message["content"], message["refusal"]) == (None, "No.")
    assert body["choices"][0]["finish_reason"] == "content_filter"
    assert body["usage"]["prompt_tokens_details"]["cache_write_tokens"] == 4
    validated(body)


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        (StopReason.END_TURN, "stop"),
        (StopReason.STOP_SEQUENCE, "stop"),
        (StopReason.PAUSE_TURN, "stop"),
        (StopReason.MAX_TOKENS, "length"),
        (StopReason.CONTEXT_WINDOW, "length"),
        (StopReason.TOOL_USE, "tool_calls"),
        (StopReason.REFUSAL, "content_filter"),
    ],
)
def test_stop_reason_to_finish_reason(reason: StopReason, finish: str) -> None:
    body = render_response(full_response(stop_reason=reason), REQUEST)
    assert body["choices"][0]["finish_reason"] == finish
    validated(body)


def test_render_created_defaults_to_now() -> None:
    before = int(time.time())
    created = render_response(full_response(created=0), REQUEST)["created"]
    assert before <= created <= int(time.time())


def test_render_parse_round_trip() -> None:
    original = full_response(
        parts=(ReasoningPart("why"), TextPart("Answer"), ToolCallPart("call_1", "f", '{"q":"ü"}')),
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(30, 12, cache_read_tokens=6, cache_write_tokens=2, reasoning_tokens=3),
    )
    back = parse_response(render_response(original, REQUEST))
    assert back.parts == original.parts
    assert (back.stop_reason, back.usage, back.id.removeprefix("chatcmpl-"), back.created) == (
        original.stop_reason,
        original.usage,
        original.id,
        original.created,
    )
    assert back.model == "client-model"


def test_model_list() -> None:
    body = render_model_list(["a", "b"], 1700000000)
    assert body == {
        "object": "list",
        "data": [
            {"id": "a", "object": "model", "created": 1700000000, "owned_by": "interlingua"},
            {"id": "b", "object": "model", "created": 1700000000, "owned_by": "interlingua"},
        ],
    }
    assert [openai.types.Model.model_validate(m).id for m in body["data"]] == ["a", "b"]


@pytest.mark.parametrize(
    "choice", [{"finish_reason": "stop"}, {"message": None}, {"message": "hi"}]
)
def test_parse_choice_without_message_is_a_bad_gateway(choice: dict[str, Any]) -> None:
    with pytest.raises(UpstreamError) as info:
        parse_response({"id": "x", "choices": [{"index": 0, **choice}]})
    assert info.value.status == 502


def test_missing_id_gets_a_fresh_completion_id() -> None:
    body = completion({"content": "hi"})
    del body["id"]
    r = parse_response(body)
    assert r.id.startswith("chatcmpl-") and len(r.id) > len("chatcmpl-")
    # A response with no id at all (another kind of upstream) still renders one.
    rendered = render_response(replace(r, id=""), REQUEST)
    assert rendered["id"].startswith("chatcmpl-") and len(rendered["id"]) > len("chatcmpl-")
    validated(rendered)


def test_missing_usage_without_request_keeps_input_zero_but_flags_it() -> None:
    r = parse_response(completion({"content": "hi"}, usage=None))
    assert r.usage == Usage(input_tokens=0, output_tokens=1, estimated=True)


def test_completion_ids_look_like_openai_ones_whatever_the_upstream() -> None:
    from interlingua.dialects.openai_chat.response import completion_id

    assert completion_id("chatcmpl-abc") == "chatcmpl-abc"
    assert completion_id("msg_01XY") == "chatcmpl-msg_01XY"
    assert completion_id("local-7").startswith("chatcmpl-local-7")
    fresh = completion_id("")
    assert fresh.startswith("chatcmpl-") and len(fresh) > len("chatcmpl-")
