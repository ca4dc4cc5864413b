"""Neutral events -> Anthropic SSE bytes, checked with the official SDK.

The stream's shape: docs/protocols.md, "Messages: stream".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic.types
import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from pydantic import TypeAdapter

from interlingua.core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    ReasoningPart,
    Request,
    SignatureDelta,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallPart,
    UnknownPart,
    Usage,
    fold,
)
from interlingua.dialects._common import sanitize_tool_id
from interlingua.dialects.anthropic import DIALECT
from interlingua.errors import OverloadedError, RateLimitError
from interlingua.sse import SSEDecoder, SSEEvent

FIXTURE = Path(__file__).parent.parent / "fixtures" / "anthropic_thinking_tool_use.sse"
REQUEST = Request("claude-client", ())
RAW_EVENT = TypeAdapter(anthropic.types.RawMessageStreamEvent)


def encode(events: list[StreamEvent], request: Request = REQUEST) -> bytes:
    encoder = DIALECT.stream_encoder(request)
    return b"".join(encoder.encode(e) for e in events)


def sse_events(raw: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return decoder.decode(raw) + decoder.flush()


def sdk_check(raw: bytes) -> anthropic.types.Message:
    """Validate every event with the SDK's types, fold with its accumulator."""
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for sse in sse_events(raw):
        payload = orjson.loads(sse.data)
        # Anthropic repeats the type in data (docs/protocols.md, "Messages: endpoint and headers")
        assert payload["type"] == sse.event
        if sse.event == "ping":
            assert payload == {"type": "ping"}
            continue
        event = RAW_EVENT.validate_python(payload)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    return anthropic.types.Message.model_validate(snapshot.model_dump())


def round_trip(raw: bytes) -> list[StreamEvent]:
    codec = DIALECT.stream_decoder(REQUEST)
    out: list[StreamEvent] = []
    for sse in sse_events(raw):
        out.extend(codec.feed(sse))
    return out + codec.flush()


THINKING_TOOL_STREAM: list[StreamEvent] = [
    StreamStart("msg_01", "upstream", usage=Usage(input_tokens=377, output_tokens=1)),
    BlockStart(0, ReasoningPart("")),
    ReasoningDelta(0, "User wants weather."),
    SignatureDelta(0, "ErUB..."),
    BlockStop(0),
    BlockStart(1, ToolCallPart("toolu_01", "get_weather", "")),
    ArgumentsDelta(1, '{"city": "Pa'),
    ArgumentsDelta(1, 'ris"}'),
    BlockStop(1),
    StreamEnd(StopReason.TOOL_USE, usage=Usage(input_tokens=377, output_tokens=65)),
]


def _joined_arguments(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with each block's input_json_delta fragments joined into one delta."""
    out: list[dict[str, Any]] = []
    for p in payloads:
        delta = p.get("delta", {})
        last = out[-1] if out else {}
        if (
            delta.get("type") == "input_json_delta"
            and last.get("delta", {}).get("type") == "input_json_delta"
        ):
            joined = last["delta"]["partial_json"] + delta["partial_json"]
            out[-1] = {**last, "delta": {**last["delta"], "partial_json": joined}}
        else:
            out.append(p)
    return out


def test_encoder_reproduces_the_recorded_stream() -> None:
    raw = encode(THINKING_TOOL_STREAM, Request("claude-sonnet-4-5", ()))
    ours = [orjson.loads(e.data) for e in sse_events(raw)]
    recorded = [orjson.loads(e.data) for e in sse_events(FIXTURE.read_bytes())]
    # The recording's message_start has cache counts 0 and one output token; ours too,
    # and the recorded message_delta has fewer usage keys than ours (we restate all).
    # Tool arguments go out whole, in one input_json_delta (encoder docstring): the
    # recording's two fragments are one delta here, everything else is identical.
    assert [p["delta"]["partial_json"] for p in ours if "partial_json" in p.get("delta", {})] == [
        '{"city": "Paris"}'
    ]
    recorded = _joined_arguments(recorded)
    assert [e["type"] for e in ours] == [e["type"] for e in recorded]
    assert ours[1:-2] == recorded[1:-2]
    assert ours[0] == recorded[0]
    assert ours[-2]["delta"] == recorded[-2]["delta"]
    assert ours[-2]["usage"]["output_tokens"] == 65


def test_sdk_accepts_and_folds_the_stream() -> None:
    raw = encode(THINKING_TOOL_STREAM)
    message = sdk_check(raw)
    assert message.model == "claude-client"
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "thinking"
    assert message.content[0].signature == "ErUB..."
    assert message.content[1].type == "tool_use"
    assert message.content[1].input == {"city": "Paris"}
    assert message.usage.output_tokens == 65
    assert message.usage.input_tokens == 377


def test_encoder_decoder_round_trip_equals_fold() -> None:
    original = fold(THINKING_TOOL_STREAM)
    again = fold(round_trip(encode(THINKING_TOOL_STREAM)))
    assert again.parts == original.parts
    assert again.stop_reason == original.stop_reason
    assert again.usage == original.usage


def test_ping_right_after_first_block_start_only() -> None:
    types = [e.event for e in sse_events(encode(THINKING_TOOL_STREAM))]
    assert types[:3] == ["message_start", "content_block_start", "ping"]
    assert types.count("ping") == 1
    ping = DIALECT.stream_encoder(REQUEST).ping()
    assert ping == b'event: ping\ndata: {"type": "ping"}\n\n'


def test_interleaved_blocks_are_buffered_and_replayed_in_order() -> None:
    # An OpenAI upstream interleaving two parallel tool calls and a trailing text block.
    events: list[StreamEvent] = [
        StreamStart("chatcmpl-1", "gpt", usage=None),
        BlockStart(0, ToolCallPart("call_a", "f", "")),
        BlockStart(1, ToolCallPart("functions.g:1", "g", "")),
        ArgumentsDelta(1, '{"y":'),
        ArgumentsDelta(0, '{"x":'),
        ArgumentsDelta(1, " 2}"),
        BlockStop(1),
        ArgumentsDelta(0, " 1}"),
        BlockStart(2, TextPart("")),
        TextDelta(2, "done"),
        BlockStop(0),
        BlockStop(2),
        StreamEnd(StopReason.TOOL_USE, usage=Usage(input_tokens=12, output_tokens=8)),
    ]
    raw = encode(events)
    payloads = [orjson.loads(e.data) for e in sse_events(raw)]
    # One block at a time, indices 0, 1, 2 in order.
    seen = [(p["type"], p.get("index")) for p in payloads if "index" in p]
    starts = [i for t, i in seen if t == "content_block_start"]
    assert starts == [0, 1, 2]
    open_block: int | None = None
    for kind, index in seen:
        if kind == "content_block_start":
            assert open_block is None
            open_block = index
        elif kind == "content_block_stop":
            assert open_block == index
            open_block = None
        else:
            assert open_block == index
    message = sdk_check(raw)
    assert [b.type for b in message.content] == ["tool_use", "tool_use", "text"]
    assert message.content[0].input == {"x": 1}
    assert message.content[1].input == {"y": 2}
    assert message.content[1].id == sanitize_tool_id("functions.g:1")
    assert fold(round_trip(raw)).parts == (
        ToolCallPart("call_a", "f", '{"x": 1}'),
        ToolCallPart(sanitize_tool_id("functions.g:1"), "g", '{"y": 2}'),
        TextPart("done"),
    )


def test_open_buffered_blocks_are_flushed_at_stream_end() -> None:
    events: list[StreamEvent] = [
        StreamStart("x", "m"),
        BlockStart(0, TextPart("")),
        BlockStart(1, ToolCallPart("c1", "f", "")),
        ArgumentsDelta(1, "{}"),
        TextDelta(0, "hi"),
        StreamEnd(StopReason.TOOL_USE),
    ]
    message = sdk_check(encode(events))
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "hi"


def test_empty_upstream_still_yields_a_valid_message() -> None:
    raw = encode([StreamEnd(StopReason.END_TURN)])
    assert [e.event for e in sse_events(raw)] == ["message_start", "message_delta", "message_stop"]
    message = sdk_check(raw)
    assert message.content == []
    assert message.id.startswith("msg_")
    assert message.usage.input_tokens == 0 and message.usage.output_tokens == 0


def test_message_start_usage_and_final_usage() -> None:
    usage = Usage(
        input_tokens=1200, output_tokens=40, cache_read_tokens=1000, cache_write_tokens=50
    )
    raw = encode(
        [
            StreamStart("chatcmpl-9", "gpt"),
            BlockStart(0, TextPart("")),
            TextDelta(0, "x"),
            BlockStop(0),
            StreamEnd(StopReason.STOP_SEQUENCE, "###", usage),
        ]
    )
    payloads = [orjson.loads(e.data) for e in sse_events(raw)]
    start = payloads[0]["message"]
    assert start["id"] == "msg_chatcmpl-9"
    assert start["model"] == "claude-client"
    assert start["usage"] == {
        "input_tokens": 0,  # not known yet (docs/protocols.md, "Stream translation")
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }
    final = payloads[-2]
    assert final["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "###"}
    assert final["usage"] == {
        "input_tokens": 150,
        "cache_creation_input_tokens": 50,
        "cache_read_input_tokens": 1000,
        "output_tokens": 40,
    }
    message = sdk_check(raw)
    assert message.stop_sequence == "###"
    assert fold(round_trip(raw)).usage == usage


def test_start_input_is_kept_when_end_has_none() -> None:
    raw = encode(
        [StreamStart("m", "m", usage=Usage(input_tokens=30)), StreamEnd(StopReason.END_TURN)]
    )
    final = orjson.loads(sse_events(raw)[-2].data)
    assert final["usage"]["input_tokens"] == 30
    assert final["usage"]["output_tokens"] == 0


def test_negative_output_tokens_are_floored() -> None:
    raw = encode(
        [StreamStart("m", "m"), StreamEnd(StopReason.END_TURN, usage=Usage(output_tokens=-3))]
    )
    assert orjson.loads(sse_events(raw)[-2].data)["usage"]["output_tokens"] == 0


def test_unsigned_reasoning_has_no_signature_delta() -> None:
    raw = encode(
        [
            StreamStart("m", "m"),
            BlockStart(0, ReasoningPart("")),
            ReasoningDelta(0, "thinking..."),
            ReasoningDelta(0, ""),
            BlockStop(0),
            StreamEnd(StopReason.END_TURN),
        ]
    )
    payloads = [orjson.loads(e.data) for e in sse_events(raw)]
    assert payloads[1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [p["delta"]["type"] for p in payloads if p["type"] == "content_block_delta"]
    assert deltas == ["thinking_delta"]
    message = sdk_check(raw)
    assert message.content[0].thinking == "thinking..."


def test_initial_content_in_block_start_becomes_deltas() -> None:
    raw = encode(
        [
            StreamStart("m", "m"),
            BlockStart(0, ReasoningPart("pre", signature="sig")),
            BlockStop(0),
            BlockStart(1, ReasoningPart(redacted="opaque")),
            BlockStop(1),
            BlockStart(2, TextPart("Hello")),
            TextDelta(2, ", world"),
            BlockStop(2),
            BlockStart(3, ToolCallPart("c", "f", '{"a": 1}')),
            BlockStop(3),
            StreamEnd(StopReason.TOOL_USE),
        ]
    )
    message = sdk_check(raw)
    assert message.content[0].type == "thinking"
    assert (message.content[0].thinking, message.content[0].signature) == ("pre", "sig")
    assert message.content[1].type == "redacted_thinking"
    assert message.content[2].text == "Hello, world"
    assert message.content[3].input == {"a": 1}


def test_foreign_unknown_blocks_are_skipped_and_indices_stay_dense() -> None:
    server = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"q": "x"},
    }
    raw = encode(
        [
            StreamStart("m", "m"),
            BlockStart(0, UnknownPart("openai", {"type": "audio"})),
            BlockStop(0),
            BlockStart(1, UnknownPart("anthropic", server)),
            BlockStop(1),
            BlockStart(2, TextPart("")),
            TextDelta(2, "hi"),
            BlockStop(2),
            StreamEnd(StopReason.END_TURN),
        ]
    )
    starts = [orjson.loads(e.data) for e in sse_events(raw) if e.event == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [
        (0, "server_tool_use"),
        (1, "text"),
    ]
    message = sdk_check(raw)
    assert message.content[0].type == "server_tool_use"


@pytest.mark.parametrize(
    ("error", "wire_type"),
    [
        (OverloadedError("Overloaded"), "overloaded_error"),
        (RateLimitError("slow"), "rate_limit_error"),
    ],
)
def test_stream_error_event(error: Exception, wire_type: str) -> None:
    encoder = DIALECT.stream_encoder(REQUEST)
    head = encoder.encode(StreamStart("m", "m")) + encoder.encode(BlockStart(0, TextPart("")))
    tail = encoder.encode(StreamError(error))  # type: ignore[arg-type]
    assert tail.startswith(b"event: error\n")
    payload = orjson.loads(sse_events(tail)[0].data)
    assert payload == {"type": "error", "error": {"type": wire_type, "message": str(error)}}
    anthropic.types.ErrorResponse.model_validate(payload)
    assert encoder.encode(StreamEnd(StopReason.END_TURN)) == b""  # nothing after an error
    decoded = round_trip(head + tail)
    assert isinstance(decoded[-1], StreamError)
    assert type(decoded[-1].error) is type(error)


def test_delta_bytes_use_compact_templates() -> None:
    encoder = DIALECT.stream_encoder(REQUEST)
    encoder.encode(StreamStart("m", "m"))
    encoder.encode(BlockStart(0, TextPart("")))
    assert encoder.encode(TextDelta(0, 'say "hi"\n')) == (
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,"delta":'
        b'{"type":"text_delta","text":"say \\"hi\\"\\n"}}\n\n'
    )
    assert encoder.encode(BlockStop(0)) == (
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    )
    assert encoder.encode(StreamEnd(StopReason.END_TURN)).endswith(
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )


# ------------------------------------------------- tool arguments: stream == non-stream


def _tool_inputs(parts: tuple[Any, ...]) -> list[Any]:
    """What a client sees as each tool call's ``input`` (``""`` and ``"{}"`` alike)."""
    return [
        orjson.loads(p.arguments) if p.arguments else {}
        for p in parts
        if isinstance(p, ToolCallPart)
    ]


@pytest.mark.parametrize(
    "fragments",
    [
        ['{"city": "Pa', 'ris"}'],  # valid object, split
        ['{"city": "Pa', "ris"],  # cut short: not JSON (the SDK used to raise on this)
        ["[1", ", 2]"],  # valid JSON, not an object
        ["null"],
        ["   "],  # whitespace only: {}
        [],  # no arguments at all: {}
        ["{}"],
        ['{"q": "a\\u00e9\\"b"}'],
    ],
)
def test_streamed_tool_input_equals_the_non_stream_input(fragments: list[str]) -> None:
    events: list[StreamEvent] = [
        StreamStart("chatcmpl-1", "gpt"),
        BlockStart(0, ToolCallPart("call_1", "get_weather", "")),
        *(ArgumentsDelta(0, f) for f in fragments),
        BlockStop(0),
        StreamEnd(StopReason.TOOL_USE, usage=Usage(input_tokens=5, output_tokens=7)),
    ]
    raw = encode(events)
    deltas = [
        orjson.loads(e.data)["delta"] for e in sse_events(raw) if e.event == "content_block_delta"
    ]
    assert len(deltas) <= 1  # arguments go out whole, at the block's end
    non_stream = DIALECT.render_response(fold(events), REQUEST)
    expected_input = non_stream["content"][0]["input"]
    # Through the official SDK's own accumulator (it raised here before the fix) ...
    message = sdk_check(raw)
    assert message.content[0].type == "tool_use"
    assert message.content[0].input == expected_input
    # ... and through our decoder, compared with the non-stream body parsed back.
    streamed = fold(round_trip(raw))
    assert _tool_inputs(streamed.parts) == _tool_inputs(DIALECT.parse_response(non_stream).parts)
    assert _tool_inputs(streamed.parts) == [expected_input]


def test_invalid_arguments_are_wrapped_as_raw_arguments_in_one_delta() -> None:
    raw = encode(
        [
            StreamStart("chatcmpl-1", "gpt"),
            BlockStart(0, ToolCallPart("call_1", "f", '{"a": ')),
            ArgumentsDelta(0, "tru"),
            BlockStop(0),
            StreamEnd(StopReason.TOOL_USE),
        ]
    )
    deltas = [
        orjson.loads(e.data)["delta"] for e in sse_events(raw) if e.event == "content_block_delta"
    ]
    assert deltas == [
        {"type": "input_json_delta", "partial_json": '{"raw_arguments":"{\\"a\\": tru"}'}
    ]
    assert sdk_check(raw).content[0].input == {"raw_arguments": '{"a": tru'}


def test_buffered_and_unclosed_tool_blocks_send_their_arguments_too() -> None:
    # Two interleaved calls (the second buffered behind the first), neither stopped
    # before the end: both still get their whole, valid input.
    events: list[StreamEvent] = [
        StreamStart("chatcmpl-1", "gpt"),
        BlockStart(0, ToolCallPart("call_a", "f", "")),
        BlockStart(1, ToolCallPart("call_b", "g", "")),
        ArgumentsDelta(1, '{"y": '),
        ArgumentsDelta(0, "{oops"),
        ArgumentsDelta(1, "2}"),
        StreamEnd(StopReason.TOOL_USE),
    ]
    message = sdk_check(encode(events))
    assert [b.input for b in message.content] == [{"raw_arguments": "{oops"}, {"y": 2}]  # type: ignore[union-attr]
    expected = DIALECT.render_response(fold(events), REQUEST)["content"]
    assert [b["input"] for b in expected] == [{"raw_arguments": "{oops"}, {"y": 2}]


def test_openai_upstream_with_broken_arguments_reaches_the_anthropic_sdk() -> None:
    from interlingua.dialects.openai_chat import DIALECT as OPENAI

    chunks = [
        {"id": "c1", "model": "gpt", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": '{"path": "a'},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "c1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "b.txt"}}]},
                    "finish_reason": "tool_calls",
                }
            ],
        },
    ]
    decoder = OPENAI.stream_decoder(REQUEST)
    neutral: list[StreamEvent] = []
    for chunk in chunks:
        neutral += decoder.feed(SSEEvent(data=orjson.dumps(chunk).decode()))
    neutral += decoder.feed(SSEEvent(data="[DONE]"))
    message = sdk_check(encode(neutral))
    assert message.stop_reason == "tool_use"
    assert message.content[0].input == {"raw_arguments": '{"path": "ab.txt'}  # type: ignore[union-attr]
