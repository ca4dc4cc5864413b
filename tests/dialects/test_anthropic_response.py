"""Anthropic responses, usage, stop reasons and the model list.

The wire: docs/protocols.md, "Messages: response body" and "Usage and caching".
"""

from __future__ import annotations

from typing import Any

import anthropic.types
import pytest

from interlingua.core import (
    ImagePart,
    ReasoningPart,
    Request,
    Response,
    StopReason,
    TextPart,
    ToolCallPart,
    UnknownPart,
    Usage,
)
from interlingua.dialects._common import sanitize_tool_id
from interlingua.dialects.anthropic import DIALECT
from interlingua.errors import OverloadedError, UpstreamError

REQUEST = Request("claude-client-name", ())

WIRE: dict[str, Any] = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "User wants weather.", "signature": "ErUB"},
        {"type": "text", "text": "I'll check."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 377,
        "output_tokens": 65,
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 100,
        "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
        "output_tokens_details": {"thinking_tokens": 30},
    },
}


def test_parse_response() -> None:
    resp = DIALECT.parse_response(WIRE)
    assert resp.id == "msg_01"
    assert resp.model == "claude-sonnet-4-5"
    assert resp.parts == (
        ReasoningPart("User wants weather.", signature="ErUB"),
        TextPart("I'll check."),
        ToolCallPart("toolu_01", "get_weather", '{"city":"Paris"}'),
    )
    assert resp.stop_reason is StopReason.TOOL_USE
    # Anthropic input excludes cache traffic; neutral input includes it
    # (docs/protocols.md, "Usage and caching").
    assert resp.usage == Usage(
        input_tokens=497,
        output_tokens=65,
        cache_read_tokens=100,
        cache_write_tokens=20,
        reasoning_tokens=30,
    )


def test_parse_response_keeps_server_blocks_and_stop_details() -> None:
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    wire = {
        **WIRE,
        "content": [server],
        "stop_reason": "refusal",
        "stop_details": {"type": "refusal"},
    }
    resp = DIALECT.parse_response(wire)
    assert resp.parts == (UnknownPart("anthropic", server),)
    assert resp.stop_reason is StopReason.REFUSAL
    again = DIALECT.render_response(resp, REQUEST)
    assert again["content"] == [server]
    assert again["stop_details"] == {"type": "refusal"}


@pytest.mark.parametrize("bad", [None, [], {"content": "text"}, {"content": [{"type": 3}]}])
def test_malformed_upstream_response(bad: Any) -> None:
    with pytest.raises(UpstreamError) as info:
        DIALECT.parse_response(bad)
    assert info.value.status == 502  # the upstream broke the protocol: bad gateway


@pytest.mark.parametrize("reason", [r.value for r in StopReason])
def test_stop_reasons_both_ways(reason: str) -> None:
    resp = DIALECT.parse_response({**WIRE, "stop_reason": reason})
    assert resp.stop_reason.value == reason
    assert DIALECT.render_response(resp, REQUEST)["stop_reason"] == reason


def test_stop_sequence_both_ways() -> None:
    resp = DIALECT.parse_response({**WIRE, "stop_reason": "stop_sequence", "stop_sequence": "###"})
    assert (resp.stop_reason, resp.stop_sequence) == (StopReason.STOP_SEQUENCE, "###")
    body = DIALECT.render_response(resp, REQUEST)
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "###")
    anthropic.types.Message.model_validate(body)


def test_null_stop_reason_becomes_end_turn() -> None:
    assert DIALECT.parse_response({**WIRE, "stop_reason": None}).stop_reason is StopReason.END_TURN


def test_same_dialect_response_round_trip() -> None:
    body = DIALECT.render_response(DIALECT.parse_response(WIRE), REQUEST)
    assert body["content"] == WIRE["content"]
    assert body["usage"] == {
        "input_tokens": 377,
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 100,
        "output_tokens": 65,
        "output_tokens_details": {"thinking_tokens": 30},
    }
    assert body["model"] == "claude-client-name"  # the name the client asked for
    message = anthropic.types.Message.model_validate(body)
    assert message.usage.input_tokens == 377


def test_render_response_from_openai_side() -> None:
    resp = Response(
        id="chatcmpl-abc",
        model="gpt-x",
        parts=(
            ReasoningPart("unsigned reasoning"),
            TextPart("Checking."),
            ToolCallPart("functions.Bash:0", "Bash", '{"cmd": "ls"}'),
            ToolCallPart("call_2", "noargs", ""),
            ToolCallPart("call_3", "broken", '{"cmd": '),
            ImagePart(url="https://x/y.png"),
            UnknownPart("openai", {"type": "audio"}),
        ),
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=50, output_tokens=10, cache_read_tokens=40),
    )
    body = DIALECT.render_response(resp, REQUEST)
    assert body["id"] == "msg_chatcmpl-abc"
    assert body["content"] == [
        {"type": "thinking", "thinking": "unsigned reasoning", "signature": ""},
        {"type": "text", "text": "Checking."},
        {
            "type": "tool_use",
            "id": sanitize_tool_id("functions.Bash:0"),
            "name": "Bash",
            "input": {"cmd": "ls"},
        },
        {"type": "tool_use", "id": "call_2", "name": "noargs", "input": {}},
        {
            "type": "tool_use",
            "id": "call_3",
            "name": "broken",
            "input": {"raw_arguments": '{"cmd": '},
        },
    ]
    assert body["usage"] == {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 40,
        "output_tokens": 10,
    }
    assert body["stop_sequence"] is None
    message = anthropic.types.Message.model_validate(body)
    assert message.content[2].type == "tool_use"


def test_render_response_ids_and_usage_floor() -> None:
    resp = Response(id="", model="x", parts=(), usage=Usage(input_tokens=5, cache_read_tokens=9))
    body = DIALECT.render_response(resp, REQUEST)
    assert body["id"].startswith("msg_") and len(body["id"]) > 10
    assert body["usage"]["input_tokens"] == 0  # never negative
    assert body["content"] == []
    anthropic.types.Message.model_validate(body)
    weird = DIALECT.render_response(Response(id="resp:1/2", model="x", parts=()), REQUEST)
    assert weird["id"] == "msg_" + sanitize_tool_id("resp:1/2")


def test_model_list() -> None:
    body = DIALECT.render_model_list(["claude-a", "smollm2"], 1_700_000_000)
    assert body == {
        "data": [
            {
                "type": "model",
                "id": "claude-a",
                "display_name": "claude-a",
                "created_at": "2023-11-14T22:13:20Z",
                "lifecycle": "active",
            },
            {
                "type": "model",
                "id": "smollm2",
                "display_name": "smollm2",
                "created_at": "2023-11-14T22:13:20Z",
                "lifecycle": "active",
            },
        ],
        "has_more": False,
        "first_id": "claude-a",
        "last_id": "smollm2",
    }
    for item in body["data"]:
        anthropic.types.ModelInfo.model_validate(item)
    assert DIALECT.render_model_list([], 0)["first_id"] is None


def test_missing_id_gets_a_fresh_message_id() -> None:
    body = {k: v for k, v in WIRE.items() if k != "id"}
    first, second = DIALECT.parse_response(body), DIALECT.parse_response({**body, "id": None})
    assert first.id.startswith("msg_") and len(first.id) > len("msg_")
    assert second.id.startswith("msg_") and second.id != first.id
    from interlingua.dialects.openai_chat import DIALECT as OPENAI

    # An OpenAI client sees an OpenAI-looking id that still carries the upstream's.
    assert OPENAI.render_response(first, REQUEST)["id"] == "chatcmpl-" + first.id


@pytest.mark.parametrize("usage", [None, "absent", {}, {"service_tier": "standard"}, [1]])
def test_missing_usage_is_zeros_flagged_estimated(usage: Any) -> None:
    body = {k: v for k, v in WIRE.items() if k != "usage"}
    if usage != "absent":
        body["usage"] = usage
    assert DIALECT.parse_response(body).usage == Usage(estimated=True)


def test_usage_counts_are_never_negative() -> None:
    wire_usage = {
        "input_tokens": -5,
        "output_tokens": -1,
        "cache_creation_input_tokens": -2,
        "cache_read_input_tokens": 3,
    }
    usage = DIALECT.parse_response({**WIRE, "usage": wire_usage}).usage
    assert usage == Usage(input_tokens=3, output_tokens=0, cache_read_tokens=3)
    assert usage.estimated is False


@pytest.mark.parametrize(
    "body",
    [
        {"hello": "world"},
        {"type": "message", "content": None},
        {"id": "msg_1", "role": "assistant"},
    ],
)
def test_a_body_that_is_not_a_message_is_a_502_not_an_empty_answer(body: dict[str, Any]) -> None:
    # Read as an empty message it would reach an OpenAI client as a normal, empty answer.
    with pytest.raises(UpstreamError) as info:
        DIALECT.parse_response(body)
    assert info.value.status == 502


def test_a_200_error_body_raises_that_error() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    with pytest.raises(OverloadedError, match="busy"):
        DIALECT.parse_response(body)
