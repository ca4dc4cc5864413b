"""OpenRouter's ``reasoning_details`` from a Chat upstream, streamed and whole: the same
reasoning parts either way (text, signature, redacted payload), never counted twice when
the plain ``reasoning`` field carries the same text, and Claude Code (the Anthropic
dialect) sees thinking blocks."""

from __future__ import annotations

from typing import Any

import anthropic.types
import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from pydantic import TypeAdapter

from interlingua.core import (
    ReasoningPart,
    Request,
    StreamEvent,
    TextPart,
    fold,
)
from interlingua.dialects.anthropic import DIALECT as ANTHROPIC
from interlingua.dialects.openai_chat import DIALECT as CHAT
from interlingua.sse import SSEDecoder

REQUEST = Request("m", ())
RAW_EVENT = TypeAdapter(anthropic.types.RawMessageStreamEvent)
ANTHROPIC_FORMAT = "anthropic-claude-v1"


def text(piece: str, index: int = 0) -> dict[str, Any]:
    return {"type": "reasoning.text", "text": piece, "format": ANTHROPIC_FORMAT, "index": index}


def signature(value: str, index: int = 0) -> dict[str, Any]:
    detail = text("", index)
    detail["signature"] = value
    return detail


def summary(piece: str) -> dict[str, Any]:
    return {"type": "reasoning.summary", "summary": piece, "format": "openai-responses-v1"}


def encrypted(data: str, index: int = 1) -> dict[str, Any]:
    return {"type": "reasoning.encrypted", "data": data, "format": ANTHROPIC_FORMAT, "index": index}


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "gen-1",
        "object": "chat.completion.chunk",
        "created": 5,
        "model": "anthropic/claude-sonnet-4",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


USAGE = {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}


def stream(deltas: list[dict[str, Any]], content: str = "4") -> bytes:
    """An OpenRouter stream: the reasoning deltas, the answer, the finish, usage."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk(d) for d in deltas]
    chunks += [chunk({"content": content}), chunk({}, "stop")]
    usage = {"id": "gen-1", "object": "chat.completion.chunk", "choices": [], "usage": USAGE}
    chunks += [b"data: " + orjson.dumps(usage) + b"\n\n", b"data: [DONE]\n\n"]
    return b"".join(chunks)


def body(message: dict[str, Any], content: str = "4") -> dict[str, Any]:
    """The non-stream answer the same model gives."""
    return {
        "id": "gen-1",
        "object": "chat.completion",
        "created": 5,
        "model": "anthropic/claude-sonnet-4",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message},
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE,
    }


def decode(raw: bytes) -> list[StreamEvent]:
    """bytes -> SSE -> the Chat stream decoder, one byte at a time (the worst split)."""
    sse = SSEDecoder()
    decoder = CHAT.stream_decoder(REQUEST)
    events: list[StreamEvent] = []
    for i in range(len(raw)):
        for event in sse.decode(raw[i : i + 1]):
            events += decoder.feed(event)
    for event in sse.flush():
        events += decoder.feed(event)
    return events + decoder.flush()


def anthropic_stream(events: list[StreamEvent]) -> anthropic.types.Message:
    """The events as an Anthropic client gets them, folded by the SDK's accumulator."""
    encoder = ANTHROPIC.stream_encoder(Request("claude-client", ()))
    raw = b"".join(encoder.encode(e) for e in events)
    decoder = SSEDecoder()
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for sse in decoder.decode(raw) + decoder.flush():
        if sse.event == "ping":
            continue
        event = RAW_EVENT.validate_python(orjson.loads(sse.data))
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    return anthropic.types.Message.model_validate(snapshot.model_dump())


THOUGHT = ["Let me ", "add: ", "2 + 2 = 4."]
CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any], tuple[Any, ...]]] = {
    # Anthropic models through OpenRouter: text pieces, then the signature, then a
    # redacted block; nothing in the plain field
    "details only": (
        [
            *({"reasoning_details": [text(p)]} for p in THOUGHT),
            {"reasoning_details": [signature("EqQBsig")]},
            {"reasoning_details": [encrypted("RED4CTED")]},
        ],
        {
            "reasoning_details": [
                {**text("".join(THOUGHT)), "signature": "EqQBsig"},
                encrypted("RED4CTED"),
            ]
        },
        (
            ReasoningPart("".join(THOUGHT), signature="EqQBsig"),
            ReasoningPart("", redacted="RED4CTED"),
            TextPart("4"),
        ),
    ),
    # OpenAI models through OpenRouter: a summary, then the encrypted reasoning
    "summary": (
        [
            *({"reasoning_details": [summary(p)]} for p in THOUGHT),
            {"reasoning_details": [encrypted("gAAAA", 1)]},
        ],
        {"reasoning_details": [summary("".join(THOUGHT)), encrypted("gAAAA", 1)]},
        (
            ReasoningPart("".join(THOUGHT)),
            ReasoningPart("", redacted="gAAAA"),
            TextPart("4"),
        ),
    ),
    # the usual OpenRouter stream: the plain field and the details carry the same
    # text; it is read once
    "both fields": (
        [{"reasoning": p, "reasoning_details": [text(p)]} for p in THOUGHT],
        {"reasoning": "".join(THOUGHT), "reasoning_details": [text("".join(THOUGHT))]},
        (ReasoningPart("".join(THOUGHT)), TextPart("4")),
    ),
    # only an encrypted block: no empty thinking block before it
    "encrypted only": (
        [{"reasoning_details": [encrypted("opaque", 0)]}],
        {"reasoning_details": [encrypted("opaque", 0)]},
        (ReasoningPart("", redacted="opaque"), TextPart("4")),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_streamed_details_fold_to_the_non_stream_answer(case: str) -> None:
    deltas, message, parts = CASES[case]
    streamed = fold(decode(stream(deltas)))
    whole = CHAT.parse_response(body(message))
    assert streamed.parts == parts  # parts compare without their meta
    assert whole.parts == parts
    assert streamed.usage == whole.usage
    # the whole answer keeps the details as they came, for a Chat upstream to get back
    # (a stream event has no place for them)
    first = whole.parts[0]
    assert first.meta == {"reasoning_details": message["reasoning_details"]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_claude_code_gets_thinking_blocks(case: str) -> None:
    deltas, message, _ = CASES[case]
    streamed = anthropic_stream(decode(stream(deltas)))
    whole = anthropic.types.Message.model_validate(
        ANTHROPIC.render_response(CHAT.parse_response(body(message)), REQUEST)
    )
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in whole.content]
    kinds = [b.type for b in streamed.content]
    assert kinds[-1] == "text"
    assert "thinking" in kinds or "redacted_thinking" in kinds
    thinking = [b for b in streamed.content if b.type == "thinking"]
    for block in thinking:
        assert block.thinking == "".join(THOUGHT)  # once, not twice


def test_plain_field_wins_over_different_details_text() -> None:
    # the plain field is the reasoning text whenever a server sends it; the details'
    # copy is not added to it (a server may word its copy differently)
    deltas = [{"reasoning": "plain", "reasoning_details": [text("detail")]}]
    assert fold(decode(stream(deltas))).reasoning == "plain"
    whole = CHAT.parse_response(body({"reasoning": "plain", "reasoning_details": [text("x")]}))
    assert whole.reasoning == "plain"


def test_unknown_and_malformed_details_are_ignored() -> None:
    odd = [{"type": "reasoning.future", "blob": 1}, "not an object", {"type": "reasoning.text"}]
    deltas = [{"reasoning_details": odd}, {"reasoning_details": "not a list"}]
    assert fold(decode(stream(deltas))).parts == (TextPart("4"),)
