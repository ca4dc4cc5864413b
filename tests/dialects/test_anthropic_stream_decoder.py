"""Anthropic upstream SSE -> neutral events (docs/protocols.md, "Messages: stream")."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from interlingua.core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    ReasoningPart,
    Request,
    Response,
    SignatureDelta,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextPart,
    ToolCallPart,
    UnknownPart,
    Usage,
    fold,
)
from interlingua.dialects.anthropic import DIALECT
from interlingua.errors import (
    AuthenticationError,
    InvalidRequestError,
    OverloadedError,
    RateLimitError,
    UpstreamError,
)
from interlingua.sse import SSEDecoder, SSEEvent, encode_json_event

FIXTURE = Path(__file__).parent.parent / "fixtures" / "anthropic_thinking_tool_use.sse"
REQUEST = Request("claude-sonnet-4-5", ())

EXPECTED = Response(
    id="msg_01",
    model="claude-sonnet-4-5",
    parts=(
        ReasoningPart("User wants weather.", signature="ErUB..."),
        ToolCallPart("toolu_01", "get_weather", '{"city": "Paris"}'),
    ),
    stop_reason=StopReason.TOOL_USE,
    usage=Usage(input_tokens=377, output_tokens=65),
)


def decode_chunks(chunks: list[bytes]) -> list[StreamEvent]:
    sse = SSEDecoder()
    codec = DIALECT.stream_decoder(REQUEST)
    events: list[StreamEvent] = []
    for chunk in chunks:
        for event in sse.decode(chunk):
            events.extend(codec.feed(event))
    for event in sse.flush():
        events.extend(codec.feed(event))
    events.extend(codec.flush())
    return events


def feed(*payloads: dict[str, Any]) -> tuple[list[StreamEvent], Any]:
    codec = DIALECT.stream_decoder(REQUEST)
    events: list[StreamEvent] = []
    for payload in payloads:
        events.extend(codec.feed(SSEEvent(payload["type"], orjson.dumps(payload).decode())))
    return events, codec


def start(**usage: int) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_x",
            "type": "message",
            "role": "assistant",
            "model": "claude-up",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1, **usage},
        },
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **d: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(reason: str = "end_turn", seq: str | None = None, **usage: int) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": seq},
        "usage": {"output_tokens": 5, **usage},
    }


MESSAGE_STOP = {"type": "message_stop"}


def test_fixture_events_exactly() -> None:
    events = decode_chunks([FIXTURE.read_bytes()])
    assert events == [
        StreamStart("msg_01", "claude-sonnet-4-5", usage=Usage(input_tokens=377, output_tokens=1)),
        BlockStart(0, ReasoningPart("")),
        ReasoningDelta(0, "User wants weather."),
        SignatureDelta(0, "ErUB..."),
        BlockStop(0),
        BlockStart(1, ToolCallPart("toolu_01", "get_weather", "")),
        ArgumentsDelta(1, '{"city": "Pa'),
        ArgumentsDelta(1, 'ris"}'),
        BlockStop(1),
        StreamEnd(StopReason.TOOL_USE, None, Usage(input_tokens=377, output_tokens=65)),
    ]


def test_fixture_whole_byte_by_byte_and_random_splits() -> None:
    raw = FIXTURE.read_bytes()
    assert fold(decode_chunks([raw])) == EXPECTED
    assert fold(decode_chunks([raw[i : i + 1] for i in range(len(raw))])) == EXPECTED
    rng = random.Random(1234)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(raw)), rng.randint(1, 40)))
        chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        assert fold(decode_chunks(chunks)) == EXPECTED


def test_fixture_with_crlf_line_ends() -> None:
    raw = FIXTURE.read_bytes().replace(b"\n", b"\r\n")
    assert fold(decode_chunks([raw[i : i + 7] for i in range(0, len(raw), 7)])) == EXPECTED


def test_text_stream_with_cache_usage_and_stop_sequence() -> None:
    events, codec = feed(
        start(cache_creation_input_tokens=3, cache_read_input_tokens=100),
        block_start(0, {"type": "text", "text": ""}),
        {"type": "ping"},
        delta(0, type="text_delta", text="Hé"),
        delta(0, type="citations_delta", citation={"type": "char_location"}),
        delta(0, type="text_delta", text="llo"),
        stop(0),
        message_delta("stop_sequence", "###", output_tokens=7),
        MESSAGE_STOP,
    )
    assert codec.flush() == []
    assert events[0] == StreamStart(
        "msg_x",
        "claude-up",
        usage=Usage(113, 1, cache_read_tokens=100, cache_write_tokens=3),
    )
    resp = fold(events)
    assert resp.parts == (TextPart("Héllo"),)
    assert (resp.stop_reason, resp.stop_sequence) == (StopReason.STOP_SEQUENCE, "###")
    assert resp.usage == Usage(113, 7, cache_read_tokens=100, cache_write_tokens=3)


def test_message_delta_may_restate_input_usage() -> None:
    events, _ = feed(
        start(),
        message_delta(input_tokens=50, cache_read_input_tokens=20, output_tokens=9),
        MESSAGE_STOP,
    )
    assert events[-1] == StreamEnd(
        StopReason.END_TURN, None, Usage(input_tokens=70, output_tokens=9, cache_read_tokens=20)
    )


def test_redacted_thinking_and_empty_first_json_fragment() -> None:
    events, _ = feed(
        start(),
        block_start(0, {"type": "redacted_thinking", "data": "opaque"}),
        stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}),
        delta(1, type="input_json_delta", partial_json=""),
        stop(1),
        message_delta("tool_use"),
        MESSAGE_STOP,
    )
    assert events[1] == BlockStart(0, ReasoningPart(redacted="opaque"))
    assert not any(isinstance(e, ArgumentsDelta) for e in events)
    resp = fold(events)
    assert resp.parts == (ReasoningPart(redacted="opaque"), ToolCallPart("toolu_1", "f", ""))


def test_server_tool_blocks_are_held_and_emitted_complete() -> None:
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    events, _ = feed(
        start(),
        block_start(0, server),
        delta(0, type="input_json_delta", partial_json='{"query": '),
        delta(0, type="input_json_delta", partial_json='"paris"}'),
        stop(0),
        block_start(1, result),
        stop(1),
        block_start(2, {"type": "text", "text": ""}),
        delta(2, type="text_delta", text="Found."),
        stop(2),
        message_delta(),
        MESSAGE_STOP,
    )
    assert events[1:5] == [
        BlockStart(0, UnknownPart("anthropic", {**server, "input": {"query": "paris"}})),
        BlockStop(0),
        BlockStart(1, UnknownPart("anthropic", result)),
        BlockStop(1),
    ]
    assert fold(events).text == "Found."


@pytest.mark.parametrize(
    ("error_type", "cls"),
    [
        ("overloaded_error", OverloadedError),
        ("rate_limit_error", RateLimitError),
        ("api_error", UpstreamError),
        ("invalid_request_error", InvalidRequestError),
        ("authentication_error", AuthenticationError),
        ("brand_new_error", UpstreamError),
    ],
)
def test_in_band_error(error_type: str, cls: type) -> None:
    error = {"type": "error", "error": {"type": error_type, "message": "Overloaded"}}
    events, codec = feed(start(), block_start(0, {"type": "text", "text": ""}), error)
    assert isinstance(events[-1], StreamError)
    assert type(events[-1].error) is cls
    assert events[-1].error.message == "Overloaded"
    assert events[-1].error.upstream_type == error_type
    assert codec.flush() == []
    assert codec.feed(SSEEvent("message_stop", '{"type":"message_stop"}')) == []


def test_overloaded_error_keeps_529() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    events, _ = feed(start(), error)
    assert isinstance(events[-1], StreamError)
    assert events[-1].error.status == 529


def test_flush_after_message_delta_without_message_stop() -> None:
    events, codec = feed(
        start(), block_start(0, {"type": "text", "text": ""}), message_delta("max_tokens")
    )
    tail = codec.flush()
    assert tail == [BlockStop(0), StreamEnd(StopReason.MAX_TOKENS, None, Usage(10, 5))]
    assert fold(events + tail).stop_reason is StopReason.MAX_TOKENS


def test_flush_when_cut_short() -> None:
    _, codec = feed(start(), block_start(0, {"type": "text", "text": ""}))
    tail = codec.flush()
    assert len(tail) == 1 and isinstance(tail[0], StreamError)
    assert isinstance(tail[0].error, UpstreamError)
    assert tail[0].error.message == "upstream stream ended early"


def test_flush_with_nothing() -> None:
    assert DIALECT.stream_decoder(REQUEST).flush() == []


def test_unknown_events_ping_and_non_json() -> None:
    codec = DIALECT.stream_decoder(REQUEST)
    assert codec.feed(SSEEvent("ping", '{"type": "ping"}')) == []
    assert codec.feed(SSEEvent("future_event", '{"type": "future_event", "x": 1}')) == []
    bad = codec.feed(SSEEvent("message_start", "{not json"))
    assert len(bad) == 1 and isinstance(bad[0], StreamError)
    assert bad[0].error.status == 502


def test_an_event_that_is_not_a_json_object_ends_the_stream() -> None:
    # The SDK would fail on it too: skipping it would shorten the answer silently.
    codec = DIALECT.stream_decoder(REQUEST)
    bad = codec.feed(SSEEvent("message", "[1, 2]"))
    assert len(bad) == 1 and isinstance(bad[0], StreamError)
    assert codec.feed(SSEEvent("message_stop", '{"type": "message_stop"}')) == []


def test_content_before_message_start_is_tolerated() -> None:
    events, _ = feed(
        block_start(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text="hi"),
        stop(0),
        message_delta(),
        MESSAGE_STOP,
    )
    assert isinstance(events[0], StreamStart)
    assert events[0].id.startswith("msg_")
    assert fold(events).text == "hi"


def test_sse_event_name_is_used_when_data_has_no_type() -> None:
    codec = DIALECT.stream_decoder(REQUEST)
    payload = orjson.dumps({k: v for k, v in start().items() if k != "type"})
    sse = SSEDecoder().decode(encode_json_event(payload, "message_start"))
    assert isinstance(codec.feed(sse[0])[0], StreamStart)


def test_stream_without_any_usage_ends_with_zeros_flagged_estimated() -> None:
    begin = start()
    del begin["message"]["usage"]
    end = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
    events, _ = feed(
        begin, block_start(0, {"type": "text", "text": ""}), stop(0), end, MESSAGE_STOP
    )
    assert isinstance(events[-1], StreamEnd)
    assert events[-1].usage == Usage(estimated=True)
    assert fold(events).usage.estimated is True


def test_usage_from_message_delta_alone_is_not_estimated() -> None:
    begin = start()
    del begin["message"]["usage"]
    events, _ = feed(begin, message_delta(input_tokens=7), MESSAGE_STOP)
    assert isinstance(events[-1], StreamEnd)
    assert events[-1].usage == Usage(input_tokens=7, output_tokens=5)
