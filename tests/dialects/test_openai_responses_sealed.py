"""Reasoning carried across turns in ``encrypted_content`` tokens the gateway seals.

The promise: reasoning an upstream needs back (an Anthropic signature, a
redacted block, a Chat model's reasoning and OpenRouter's details) reaches the client as
an authenticated token and comes back to that upstream exactly on the next turn; a token
the gateway did not issue is relayed to a Responses upstream and dropped elsewhere,
never an error.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from interlingua.core import (
    BlockStart,
    BlockStop,
    Message,
    ReasoningDelta,
    ReasoningPart,
    Request,
    Response,
    SignatureDelta,
    StopReason,
    StreamEnd,
    StreamStart,
    TextPart,
    ToolCallPart,
)
from interlingua.dialects import get_dialect
from interlingua.dialects.openai_responses import ResponsesDialect, Sealer
from interlingua.dialects.openai_responses.sealed import PREFIX
from interlingua.sse import SSEDecoder

SEALER = Sealer(b"k" * 32)
RESPONSES = ResponsesDialect(SEALER)
ANTHROPIC = get_dialect("anthropic")
CHAT = get_dialect("openai")
ASKING = Request(
    "m",
    (Message("user", (TextPart("hi"),)),),
    extra={"include": ["reasoning.encrypted_content"]},
)
THINKING = ReasoningPart("Let me think.", signature="EqQBCkgIARAB")
CALL = ToolCallPart("toolu_1", "get_weather", '{"city":"Paris"}')


def _first_turn(part: ReasoningPart, request: Request = ASKING) -> dict[str, Any]:
    response = Response("r1", "up", (part, CALL), StopReason.TOOL_USE)
    return RESPONSES.render_response(response, request)


def _second_turn(reasoning_item: dict[str, Any]) -> dict[str, Any]:
    """The next request a Responses client sends: the output items back, then the result."""
    return {
        "model": "m",
        "include": ["reasoning.encrypted_content"],
        "input": [
            {"role": "user", "content": "hi"},
            reasoning_item,
            {"type": "function_call", "call_id": "toolu_1", "name": "get_weather",
             "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "toolu_1", "output": "18C"},
        ],
    }  # fmt: skip


def _assistant_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    request = RESPONSES.parse_request(body)
    rendered = ANTHROPIC.render_request(request)
    (assistant,) = [m for m in rendered["messages"] if m["role"] == "assistant"]
    return assistant["content"]


def test_round_trip_and_refusals() -> None:
    token = SEALER.seal(THINKING)
    assert token is not None and token.startswith(PREFIX)
    assert SEALER.open(token) == THINKING
    redacted = ReasoningPart(redacted="opaque")
    assert SEALER.open(SEALER.seal(redacted) or "") == redacted
    assert SEALER.seal(ReasoningPart()) is None  # nothing to carry
    payload, mac = token[len(PREFIX) :].split(".")
    forged = [
        Sealer(b"another key of 32 bytes........").seal(THINKING),
        f"{PREFIX}{payload[:-2]}AA.{mac}",  # altered content
        f"{PREFIX}{payload}.{mac[:-2]}AA",  # altered tag
        f"{PREFIX}{payload}",
        f"{PREFIX}{payload}.",
        f"{PREFIX}!!!.***",
        "gAAAAABo-openai-s-own-token",
        "",
    ]
    for bad in forged:
        assert SEALER.open(bad or "") is None, bad


def test_short_key_refused() -> None:
    with pytest.raises(ValueError):
        Sealer(b"short")


def test_anthropic_signature_comes_back_exactly() -> None:
    body = _first_turn(THINKING)
    reasoning = body["output"][0]
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"].startswith(PREFIX)
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Let me think."}]
    blocks = _assistant_blocks(_second_turn(reasoning))
    assert blocks[0] == {
        "type": "thinking",
        "thinking": "Let me think.",
        "signature": "EqQBCkgIARAB",
    }
    assert blocks[1]["type"] == "tool_use"


def test_redacted_thinking_comes_back() -> None:
    reasoning = _first_turn(ReasoningPart(redacted="EmwKAhgB"))["output"][0]
    assert _assistant_blocks(_second_turn(reasoning))[0] == {
        "type": "redacted_thinking",
        "data": "EmwKAhgB",
    }


def test_chat_reasoning_and_details_come_back() -> None:
    details = [{"type": "reasoning.encrypted", "data": "xyz"}]
    part = ReasoningPart("step one", meta={"reasoning_details": details})
    reasoning = _first_turn(part)["output"][0]
    rendered = CHAT.render_request(RESPONSES.parse_request(_second_turn(reasoning)))
    (assistant,) = [m for m in rendered["messages"] if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "step one"
    assert assistant["reasoning_details"] == details


def test_not_asked_for_not_sent() -> None:
    reasoning = _first_turn(THINKING, replace(ASKING, extra={}))["output"][0]
    assert "encrypted_content" not in reasoning


@pytest.mark.parametrize(
    "token",
    ["gAAAAABo-openai-s-own-token", "ilg1.forged.token", None],
    ids=["openai", "forged", "absent"],
)
def test_foreign_reasoning_dropped_for_anthropic_kept_for_responses(token: str | None) -> None:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Thought."}],
    }
    if token is not None:
        item["encrypted_content"] = token
    body = _second_turn(item)
    blocks = _assistant_blocks(body)  # never an error
    assert [b["type"] for b in blocks] == ["tool_use"]
    rendered = RESPONSES.render_request(RESPONSES.parse_request(body))
    assert item in rendered["input"]  # relayed untouched to a Responses upstream


def test_gateway_token_not_sent_to_a_responses_upstream() -> None:
    """OpenAI cannot read the gateway's token: the item is not relayed there."""
    reasoning = _first_turn(THINKING)["output"][0]
    rendered = RESPONSES.render_request(RESPONSES.parse_request(_second_turn(reasoning)))
    assert [i.get("type", "message") for i in rendered["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]


def test_responses_upstream_token_relayed_as_it_came() -> None:
    """Reasoning from a Responses upstream keeps that upstream's token (not sealed
    again), so the client can send it back there."""
    upstream_body = {
        "id": "resp_up",
        "object": "response",
        "status": "completed",
        "model": "gpt",
        "output": [
            {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "gAAAup"}
        ],
    }
    response = RESPONSES.parse_response(upstream_body)
    body = RESPONSES.render_response(response, ASKING)
    assert body["output"][0]["encrypted_content"] == "gAAAup"


def test_stream_carries_the_same_token() -> None:
    request = replace(ASKING, stream=True)
    encoder = RESPONSES.stream_encoder(request)
    events = [
        StreamStart("r1", "up"),
        BlockStart(0, ReasoningPart("")),
        ReasoningDelta(0, "Let me think."),
        SignatureDelta(0, "EqQBCkgIARAB"),
        BlockStop(0),
        StreamEnd(StopReason.END_TURN),
    ]
    raw = b"".join(encoder.encode(e) for e in events)
    events_out = SSEDecoder().decode(raw)
    done = [orjson.loads(e.data) for e in events_out if e.event == "response.output_item.done"]
    token = done[0]["item"]["encrypted_content"]
    assert SEALER.open(token) == THINKING


def test_process_default_dialect_uses_its_own_key() -> None:
    """``get_dialect("responses")`` seals with a random per-process key: a gateway
    passes its configured one (a token from another key is foreign there)."""
    default = get_dialect("responses")
    body = default.render_response(Response("r", "up", (THINKING,), StopReason.END_TURN), ASKING)
    token = body["output"][0]["encrypted_content"]
    assert SEALER.open(token) is None
    assert default.sealer.open(token) == THINKING
