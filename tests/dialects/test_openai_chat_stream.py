"""OpenAI Chat stream codec: recorded-style transcripts decoded whole, byte by byte and split
inside multi-byte characters; decoder quirks; encoder bytes checked by the official SDK;
encoder -> decoder round trips equal the original events' fold."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk

from interlingua.core import (
    ArgumentsDelta,
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
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallPart,
    Usage,
    fold,
)
from interlingua.core.tokens import estimate_request_tokens
from interlingua.dialects.openai_chat import (
    DIALECT,
    OpenAIChatStreamDecoder,
    OpenAIChatStreamEncoder,
)
from interlingua.errors import ErrorKind, OverloadedError, UpstreamError
from interlingua.sse import DONE, SSEDecoder, SSEEvent

FIXTURES = Path(__file__).parent.parent / "fixtures"
REQUEST = Request("client-model", (Message("user", (TextPart("hi"),)),))
INPUT_ESTIMATE = estimate_request_tokens(REQUEST)

PARALLEL = Response(
    id="chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    model="gpt-4o-2024-08-06",
    parts=(
        ToolCallPart(
            "call_GMQhAqiDMEEiEJpkhvi3kPrN", "get_weather", '{"city": "Paris, Île-de-France"}'
        ),
        ToolCallPart("call_o7uyztQLeVIoRdjcDkDJY3ni", "get_weather", '{"city": "東京"}'),
    ),
    stop_reason=StopReason.TOOL_USE,
    usage=Usage(input_tokens=82, output_tokens=46, cache_read_tokens=64),
    created=1741570283,
)
DEEPSEEK = Response(
    id="5d3c7a8e-8f0b-4f5e-9a57-0c2b8f1d6e42",
    model="deepseek-reasoner",
    parts=(
        ReasoningPart("嗯，用户问的是 2+2。 That's 4 — simple arithmetic."),
        TextPart("2 + 2 = 4 ✅"),
    ),
    stop_reason=StopReason.END_TURN,
    usage=Usage(input_tokens=17, output_tokens=42, reasoning_tokens=35),
    created=1738123456,
)
TRANSCRIPTS = {"openai_parallel_tools.sse": PARALLEL, "deepseek_reasoning.sse": DEEPSEEK}


def decode(chunks: list[bytes], request: Request = REQUEST) -> list[StreamEvent]:
    """bytes -> SSEDecoder -> our StreamDecoder, as the gateway runs it."""
    sse = SSEDecoder()
    decoder = DIALECT.stream_decoder(request)
    events: list[StreamEvent] = []
    for chunk in chunks:
        for event in sse.decode(chunk):
            events.extend(decoder.feed(event))
    for event in sse.flush():
        events.extend(decoder.feed(event))
    events.extend(decoder.flush())
    return events


def feed(*chunks: Any, request: Request = REQUEST, flush: bool = True) -> list[StreamEvent]:
    """Feed JSON chunks (dicts) or raw data strings straight into a decoder."""
    decoder = OpenAIChatStreamDecoder(request)
    events: list[StreamEvent] = []
    for chunk in chunks:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk)
        events.extend(decoder.feed(SSEEvent(data=data)))
    if flush:
        events.extend(decoder.flush())
    return events


def chunk(delta: dict[str, Any], finish: str | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 9,
        "model": "up",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **kw,
    }


def usage_chunk(prompt: int, completion: int, choices: Any = ()) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 9,
        "model": "up",
    }
    if choices != ():
        body["choices"] = choices
    body["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return body


def split_inside_characters(raw: bytes) -> list[bytes]:
    """Cut before every UTF-8 continuation byte, i.e. inside every multi-byte character."""
    cuts = [i for i, b in enumerate(raw) if 0x80 <= b < 0xC0]
    assert cuts, "the fixture must contain multi-byte characters"
    bounds = [0, *cuts, len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(bounds)]


# ----------------------------------------------------------------------------- transcripts


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
@pytest.mark.parametrize("how", ["whole", "byte_by_byte", "inside_characters"])
def test_transcript_folds_to_expected_response(name: str, how: str) -> None:
    raw = (FIXTURES / name).read_bytes()
    chunks = {
        "whole": [raw],
        "byte_by_byte": [raw[i : i + 1] for i in range(len(raw))],
        "inside_characters": split_inside_characters(raw),
    }[how]
    events = decode(chunks)
    assert fold(events) == TRANSCRIPTS[name]


@given(st.lists(st.integers(min_value=0), max_size=40))
@settings(max_examples=60, deadline=None)
def test_transcripts_survive_arbitrary_splits(cuts: list[int]) -> None:
    for name, expected in TRANSCRIPTS.items():
        raw = (FIXTURES / name).read_bytes()
        bounds = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
        chunks = [raw[a:b] for a, b in itertools.pairwise(bounds)]
        assert fold(decode(chunks)) == expected


def test_parallel_tools_exact_events() -> None:
    events = decode([(FIXTURES / "openai_parallel_tools.sse").read_bytes()])
    first, second = PARALLEL.tool_calls
    assert events == [
        StreamStart(PARALLEL.id, PARALLEL.model, PARALLEL.created),
        BlockStart(0, ToolCallPart(first.id, "get_weather")),
        ArgumentsDelta(0, '{"ci'),
        ArgumentsDelta(0, 'ty": "Pa'),
        ArgumentsDelta(0, "ris, Île-de-"),
        ArgumentsDelta(0, 'France"}'),
        BlockStart(1, ToolCallPart(second.id, "get_weather")),
        ArgumentsDelta(1, '{"ci'),
        ArgumentsDelta(1, 'ty": "東'),
        ArgumentsDelta(1, '京"}'),
        BlockStop(0),
        BlockStop(1),
        StreamEnd(StopReason.TOOL_USE, None, PARALLEL.usage),
    ]


def test_deepseek_reasoning_block_closes_before_text() -> None:
    events = decode([(FIXTURES / "deepseek_reasoning.sse").read_bytes()])
    shape = [(type(e).__name__, getattr(e, "index", None)) for e in events]
    assert shape[:2] == [("StreamStart", None), ("BlockStart", 0)]
    first_text = shape.index(("BlockStart", 1))
    assert shape[first_text - 1] == ("BlockStop", 0)  # reasoning closed before the text opens
    assert shape[-2:] == [("BlockStop", 1), ("StreamEnd", None)]


# ----------------------------------------------------------------------------- decoder quirks


def test_interleaved_tool_call_indices() -> None:
    events = feed(
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "a",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    }
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "b",
                        "type": "function",
                        "function": {"name": "g", "arguments": "{"},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "function": {"arguments": "}"}},
                    {"index": 0, "function": {"arguments": "1}"}},
                ]
            }
        ),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    r = fold(events)
    assert r.tool_calls == (ToolCallPart("a", "f", '{"x":1}'), ToolCallPart("b", "g", "{}"))
    assert r.stop_reason is StopReason.TOOL_USE
    assert [e for e in events if isinstance(e, BlockStop)] == [BlockStop(0), BlockStop(1)]


def test_tool_calls_without_index() -> None:
    events = feed(
        chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    assert fold(events).tool_calls == (ToolCallPart("a", "f", "{}"), ToolCallPart("b", "g", "{}"))


def test_sloppy_servers() -> None:
    raw = (
        b"".join(
            b"data:" + json.dumps(c).encode() + b"\n\n"  # no space after the colon
            for c in [
                chunk({"role": "assistant", "content": "Hel"}, usage=None),
                chunk({"role": "assistant", "content": "lo"}, usage=None),  # role repeated
                chunk(
                    {"role": "assistant", "content": "!"}, "stop", usage=None
                ),  # finish + content
                usage_chunk(7, 3, choices=None),  # vLLM: choices null
            ]
        )
        + b"data:[DONE]\n\n"
    )
    r = fold(decode([raw]))
    assert (r.text, r.stop_reason, r.usage) == ("Hello!", StopReason.END_TURN, Usage(7, 3))


def test_usage_chunk_without_choices_key_and_keepalives() -> None:
    events = feed(chunk({"content": "x"}), " ", chunk({}, "length"), usage_chunk(4, 1), "[DONE]")
    r = fold(events)
    assert (r.text, r.stop_reason, r.usage) == ("x", StopReason.MAX_TOKENS, Usage(4, 1))


def test_an_event_that_is_not_a_json_object_ends_the_stream_with_an_error() -> None:
    # The SDK reading the upstream directly would raise on it: skipping it would hand the
    # client a shortened answer that looks complete.
    events = feed(chunk({"content": "x"}), '{"choices": [', chunk({"content": "y"}), "[DONE]")
    assert isinstance(events[-1], StreamError) and events[-1].error.status == 502
    assert not any(isinstance(e, StreamEnd) for e in events)


def test_role_and_finish_only_is_a_valid_empty_message() -> None:
    events = feed(chunk({"role": "assistant", "content": ""}), chunk({}, "stop"), "[DONE]")
    assert events == [
        StreamStart("chatcmpl-1", "up", 9),
        StreamEnd(StopReason.END_TURN, None, Usage(input_tokens=INPUT_ESTIMATE, estimated=True)),
    ]
    assert fold(events).parts == ()


def test_missing_usage_is_estimated_from_everything_streamed() -> None:
    events = feed(
        chunk({"reasoning_content": "abcd"}),
        chunk({"content": "efgh"}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "a", "function": {"name": "f", "arguments": "ijkl"}}
                ]
            }
        ),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    end = events[-1]
    assert isinstance(end, StreamEnd)
    # Input from the request the decoder was given, output from what was streamed.
    assert INPUT_ESTIMATE == 5  # "hi" + 4 tokens of message framing
    assert end.usage == Usage(input_tokens=INPUT_ESTIMATE, output_tokens=3, estimated=True)


def test_vllm_reasoning_field_name() -> None:
    r = fold(
        feed(chunk({"reasoning": "think"}), chunk({"content": "done"}), chunk({}, "stop"), "[DONE]")
    )
    assert r.parts == (ReasoningPart("think"), TextPart("done"))


def test_refusal_deltas_become_a_refusal_text_block() -> None:
    r = fold(
        feed(
            chunk({"refusal": "I can't"}), chunk({"refusal": " help."}), chunk({}, "stop"), "[DONE]"
        )
    )
    assert r.parts == (TextPart("I can't help."),)
    assert r.parts[0].meta == {"refusal": True}


def test_stop_reason_matching_a_requested_stop_sequence() -> None:
    request = Request("m", REQUEST.messages, stop=("END", "STOP"))
    hit = [
        chunk({"content": "a"}),
        {
            **chunk({}, "stop"),
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}],
        },
        "[DONE]",
    ]
    r = fold(feed(*hit, request=request))
    assert (r.stop_reason, r.stop_sequence) == (StopReason.STOP_SEQUENCE, "END")
    # Not one of ours (or a token id): a plain end of turn.
    other = Request("m", REQUEST.messages, stop=("X",))
    assert fold(feed(*hit, request=other)).stop_reason is StopReason.END_TURN


def test_other_choices_are_ignored() -> None:
    two = chunk({"content": "a"})
    two["choices"].append({"index": 1, "delta": {"content": "b"}, "finish_reason": None})
    assert fold(feed(two, chunk({}, "stop"), "[DONE]")).text == "a"


def test_in_band_error() -> None:
    events = feed(
        chunk({"content": "Partial"}),
        {"error": {"message": "Overloaded", "type": "server_error", "code": "overloaded"}},
        chunk({"content": "ignored"}),
        "[DONE]",
    )
    assert isinstance(events[-1], StreamError)
    assert events[-1].error.kind is ErrorKind.OVERLOADED
    assert events[-1].error.message == "Overloaded"
    assert sum(isinstance(e, StreamError) for e in events) == 1


def test_flush_policies() -> None:
    # A finish was seen but the connection closed before [DONE]: end normally.
    events = feed(chunk({"content": "x"}), chunk({}, "stop"))
    assert isinstance(events[-1], StreamEnd) and fold(events).text == "x"
    # Nothing at all: the caller decides.
    assert feed() == []
    # Started but cut before a finish.
    events = feed(chunk({"content": "x"}))
    assert isinstance(events[-1], StreamError)
    assert isinstance(events[-1].error, UpstreamError)
    assert "before finish" in events[-1].error.message
    # Nothing more after [DONE].
    decoder = OpenAIChatStreamDecoder(REQUEST)
    decoder.feed(SSEEvent(data=json.dumps(chunk({}, "stop"))))
    assert isinstance(decoder.feed(SSEEvent(data="[DONE]"))[-1], StreamEnd)
    assert decoder.feed(SSEEvent(data=json.dumps(chunk({"content": "late"})))) == []
    assert decoder.flush() == []


# ----------------------------------------------------------------------------- encoder


def encode(events: list[StreamEvent], request: Request = REQUEST) -> bytes:
    encoder = DIALECT.stream_encoder(request)
    return b"".join(encoder.encode(e) for e in events)


def chunks_of(raw: bytes) -> list[dict[str, Any]]:
    events = SSEDecoder().decode(raw)
    assert events[-1].data == "[DONE]"
    return [json.loads(e.data) for e in events[:-1]]


TEXT_EVENTS: list[StreamEvent] = [
    StreamStart("chatcmpl-abc", "upstream-name", 1700000000),
    BlockStart(0, TextPart("")),
    TextDelta(0, "Hi"),
    TextDelta(0, ' "there"'),
    BlockStop(0),
    StreamEnd(StopReason.END_TURN, usage=Usage(5, 2)),
]


def test_encoder_exact_bytes() -> None:
    head = b'data: {"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,"model":"client-model","system_fingerprint":null,"choices":[{"index":0,"delta":'
    tail = b',"logprobs":null,"finish_reason":null}]}\n\n'
    assert encode(TEXT_EVENTS) == (
        head + b'{"role":"assistant","content":""}' + tail
        + head + b'{"content":"Hi"}' + tail
        + head + b'{"content":" \\"there\\""}' + tail
        + head + b'{},"logprobs":null,"finish_reason":"stop"}]}\n\n'
        + DONE
    )  # fmt: skip


def test_encoder_chunks_validate_and_share_id_created_model() -> None:
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks_of(encode(TEXT_EVENTS))]
    assert {(c.id, c.created, c.model, c.object) for c in parsed} == {
        ("chatcmpl-abc", 1700000000, "client-model", "chat.completion.chunk")
    }
    assert [c.choices[0].finish_reason for c in parsed] == [None, None, None, "stop"]
    assert all(c.choices[0].index == 0 and c.choices[0].logprobs is None for c in parsed)


def test_encoder_usage_chunk_when_asked() -> None:
    request = Request("client-model", REQUEST.messages, include_usage=True)
    events = [
        *TEXT_EVENTS[:-1],
        StreamEnd(StopReason.END_TURN, usage=Usage(5, 2, cache_read_tokens=1, reasoning_tokens=1)),
    ]
    chunks = chunks_of(encode(events, request))
    assert all(c["usage"] is None for c in chunks[:-1])
    last = ChatCompletionChunk.model_validate(chunks[-1])
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        5,
        2,
        7,
    )
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 1
    # Without include_usage there is no usage chunk and no usage key.
    assert all("usage" not in c for c in chunks_of(encode(TEXT_EVENTS)))


def test_encoder_tool_call_indices_count_tool_calls_only() -> None:
    events: list[StreamEvent] = [
        StreamStart("chatcmpl-t", "m", 1),
        BlockStart(0, ReasoningPart("")),
        ReasoningDelta(0, "plan"),
        SignatureDelta(0, "sig"),
        BlockStop(0),
        BlockStart(1, TextPart("")),
        TextDelta(1, "Calling."),
        BlockStop(1),
        BlockStart(2, ToolCallPart("call_a", "f")),
        BlockStart(3, ToolCallPart("call_b", "g")),
        ArgumentsDelta(3, "{}"),
        ArgumentsDelta(2, '{"x":1}'),
        BlockStop(2),
        BlockStop(3),
        StreamEnd(StopReason.TOOL_USE),
    ]
    chunks = chunks_of(encode(events))
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "plan"},
        {"content": "Calling."},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "f", "arguments": ""},
                }
            ]
        },
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "g", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"x":1}'}}]},
        {},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_encoder_refusal_block() -> None:
    events: list[StreamEvent] = [
        StreamStart("c", "m", 1),
        BlockStart(0, TextPart("", meta={"refusal": True})),
        TextDelta(0, "No."),
        StreamEnd(StopReason.REFUSAL),
    ]
    chunks = chunks_of(encode(events))
    assert chunks[1]["choices"][0]["delta"] == {"refusal": "No."}
    assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter"


def test_encoder_error_is_in_band_without_done() -> None:
    encoder = OpenAIChatStreamEncoder(REQUEST)
    out = encoder.encode(TEXT_EVENTS[0]) + encoder.encode(TEXT_EVENTS[2])
    error = encoder.encode(StreamError(OverloadedError("Overloaded")))
    assert (
        error
        == b'data: {"error":{"message":"Overloaded","type":"server_error","param":null,"code":"overloaded"}}\n\n'
    )
    assert encoder.encode(TEXT_EVENTS[-1]) == b""  # nothing after an error, no [DONE]
    assert DONE not in out + error


def test_encoder_quiet_events_and_ping() -> None:
    encoder = OpenAIChatStreamEncoder(REQUEST)
    encoder.encode(TEXT_EVENTS[0])
    assert encoder.encode(BlockStop(0)) == b""
    assert encoder.encode(SignatureDelta(0, "s")) == b""
    assert encoder.encode(TextDelta(0, "")) == b""
    assert encoder.ping() == b": ping\n\n"


def test_encoder_without_stream_start_still_valid() -> None:
    raw = encode([BlockStart(0, TextPart("")), TextDelta(0, "x"), StreamEnd(StopReason.END_TURN)])
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks_of(raw)]
    assert len({c.id for c in parsed}) == 1 and parsed[0].id.startswith("chatcmpl-")


def sdk_client(raw: bytes) -> openai.OpenAI:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=raw, headers={"content-type": "text/event-stream"})

    return openai.OpenAI(
        api_key="k",
        base_url="http://gateway/v1",
        # cast: newer SDKs type this as httpx2.Client, which accepts an httpx.Client
        http_client=cast(Any, httpx.Client(transport=httpx.MockTransport(handler))),
    )


def test_official_sdk_reads_the_encoded_stream() -> None:
    request = Request("client-model", REQUEST.messages, include_usage=True)
    raw = encode(
        [
            *TEXT_EVENTS[:-1],
            BlockStart(1, ToolCallPart("call_1", "f")),
            ArgumentsDelta(1, "{}"),
            TEXT_EVENTS[-1],
        ],
        request,
    )
    with sdk_client(raw) as client:
        stream = client.chat.completions.create(
            model="client-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == 'Hi "there"'
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 7


def test_official_sdk_raises_on_the_in_band_error() -> None:
    raw = encode([TEXT_EVENTS[0], TEXT_EVENTS[2], StreamError(OverloadedError("Overloaded"))])
    with sdk_client(raw) as client:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(openai.APIError, match="Overloaded"):
            list(stream)


# ----------------------------------------------------------------------------- round trips


def round_trip(events: list[StreamEvent], request: Request) -> list[StreamEvent]:
    return decode([encode(events, request)], request)


def test_encoder_decoder_round_trip_equals_fold() -> None:
    request = Request("client-model", REQUEST.messages, include_usage=True)
    events: list[StreamEvent] = [
        StreamStart("chatcmpl-rt", "client-model", 1700000001),
        BlockStart(0, ReasoningPart("")),
        ReasoningDelta(0, "Let me think… ü"),
        BlockStop(0),
        BlockStart(1, TextPart("")),
        TextDelta(1, "Two calls: "),
        BlockStop(1),
        BlockStart(2, ToolCallPart("call_a", "get_weather")),
        ArgumentsDelta(2, '{"city":'),
        BlockStart(3, ToolCallPart("call_b", "get_time")),
        ArgumentsDelta(3, '{"tz":"Asia/東京"}'),
        ArgumentsDelta(2, '"Paris"}'),
        BlockStop(2),
        BlockStop(3),
        StreamEnd(
            StopReason.TOOL_USE, usage=Usage(40, 30, cache_read_tokens=8, reasoning_tokens=6)
        ),
    ]
    assert fold(round_trip(events, request)) == fold(events)


@given(
    pieces=st.lists(st.text(min_size=1), min_size=1, max_size=8),
    args=st.lists(st.text(min_size=1), max_size=4),
    reason=st.sampled_from(
        [StopReason.END_TURN, StopReason.MAX_TOKENS, StopReason.TOOL_USE, StopReason.REFUSAL]
    ),
)
@settings(max_examples=80, deadline=None)
def test_round_trip_property(pieces: list[str], args: list[str], reason: StopReason) -> None:
    request = Request("client-model", REQUEST.messages, include_usage=True)
    events: list[StreamEvent] = [
        StreamStart("chatcmpl-p", "client-model", 1),
        BlockStart(0, TextPart("")),
    ]
    events += [TextDelta(0, p) for p in pieces]
    events += [BlockStop(0), BlockStart(1, ToolCallPart("call_1", "f"))]
    events += [ArgumentsDelta(1, a) for a in args]
    events += [BlockStop(1), StreamEnd(reason, usage=Usage(3, 4))]
    got = fold(round_trip(events, request))
    want = fold(events)
    # A "stop" finish with tool calls present reads back as TOOL_USE (see stop_reason_for).
    if reason is StopReason.END_TURN:
        assert got.stop_reason is StopReason.TOOL_USE
        got = Response(
            **{**{f: getattr(got, f) for f in got.__dataclass_fields__}, "stop_reason": reason}
        )
    assert got == want
