"""FakeUpstream: every item type, with no wire and through each wire dialect's codec."""

from __future__ import annotations

import orjson
import pytest

from interlingua.core import (
    BlockStart,
    BlockStop,
    ImagePart,
    Message,
    Request,
    Response,
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
from interlingua.dialects import get_dialect
from interlingua.errors import InterlinguaError, OverloadedError, RateLimitError
from interlingua.sse import SSEDecoder
from interlingua.upstreams.fake import FakeUpstream

WIRES = [None, "openai", "anthropic"]

REQUEST = Request(
    model="upstream-model",
    messages=(
        Message("system", (TextPart("Be brief."),)),
        Message("user", (TextPart("first"),)),
        Message("assistant", (TextPart("ok"),)),
        Message("user", (TextPart("Hello "), TextPart("there"))),
    ),
    max_tokens=100,
)

ANSWER = Response(
    id="resp_1",
    model="upstream-model",
    parts=(
        TextPart("Let me check the weather."),
        ToolCallPart("call_1", "get_weather", '{"city": "Paris"}'),
    ),
    stop_reason=StopReason.TOOL_USE,
    usage=Usage(input_tokens=10, output_tokens=7),
)


def essence(response: Response) -> tuple[object, ...]:
    """What must survive a trip through any wire (ids and timestamps may be re-minted)."""
    calls = tuple((c.id, c.name, orjson.loads(c.arguments)) for c in response.tool_calls)
    usage = (response.usage.input_tokens, response.usage.output_tokens)
    return (response.text, calls, response.stop_reason, response.stop_sequence, usage)


async def collect(fake: FakeUpstream, request: Request = REQUEST) -> list[StreamEvent]:
    return [event async for event in fake.stream(request)]


@pytest.mark.parametrize("wire", WIRES)
async def test_echo_is_the_default_answer(wire: str | None) -> None:
    fake = FakeUpstream("f", wire=wire)
    response = await fake.complete(REQUEST)
    assert response.text == "echo: Hello there"
    assert response.stop_reason is StopReason.END_TURN
    assert response.model == "upstream-model"
    assert response.usage.output_tokens == 5  # len("echo: Hello there") == 17 -> 5
    assert response.usage.input_tokens > 0
    streamed = fold(await collect(fake))
    assert streamed.text == "echo: Hello there"
    assert fake.requests == [REQUEST, REQUEST]


async def test_echo_without_text_says_so() -> None:
    request = Request(model="m", messages=(Message("user", (ImagePart(url="http://x/a.png"),)),))
    assert (await FakeUpstream().complete(request)).text == "echo: (no text)"
    assert (await FakeUpstream().complete(Request(model="m", messages=()))).text == (
        "echo: (no text)"
    )


@pytest.mark.parametrize("wire", WIRES)
async def test_scripted_response_survives_the_wire(wire: str | None) -> None:
    fake = FakeUpstream("f", wire=wire)
    fake.enqueue(ANSWER)
    fake.enqueue(ANSWER)
    assert essence(await fake.complete(REQUEST)) == essence(ANSWER)
    events = await collect(fake)
    assert essence(fold(events)) == essence(ANSWER)
    assert [e.text for e in events if isinstance(e, TextDelta)] == [
        "Let ",
        "me c",
        "heck",
        " the",
        " wea",
        "ther",
        ".",
    ]
    assert (await fake.complete(REQUEST)).text.startswith("echo: ")  # queue drained


@pytest.mark.parametrize("wire", WIRES)
async def test_event_list_with_a_stream_error_fails_mid_stream(wire: str | None) -> None:
    events: list[StreamEvent] = [
        StreamStart("id1", "upstream-model"),
        BlockStart(0, TextPart("")),
        TextDelta(0, "partial"),
        StreamError(OverloadedError("Overloaded, try later")),
        TextDelta(0, "never sent"),
    ]
    fake = FakeUpstream("f", wire=wire)
    fake.enqueue(events)
    got = await collect(fake)
    assert [e.text for e in got if isinstance(e, TextDelta)] == ["partial"]
    assert isinstance(got[-1], StreamError)
    assert isinstance(got[-1].error, OverloadedError)
    assert "Overloaded, try later" in got[-1].error.message
    fake.enqueue(events)
    with pytest.raises(OverloadedError):
        await fake.complete(REQUEST)


@pytest.mark.parametrize("wire", WIRES)
async def test_event_list_without_error_folds_for_complete(wire: str | None) -> None:
    fake = FakeUpstream("f", wire=wire)
    fake.enqueue(
        [
            StreamStart("id2", "upstream-model"),
            BlockStart(0, TextPart("")),
            TextDelta(0, "Hi"),
            BlockStop(0),
            StreamEnd(StopReason.MAX_TOKENS, usage=Usage(input_tokens=3, output_tokens=1)),
        ]
    )
    response = await fake.complete(REQUEST)
    assert (response.text, response.stop_reason) == ("Hi", StopReason.MAX_TOKENS)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 1)


@pytest.mark.parametrize("wire", WIRES)
async def test_error_item_is_raised_before_any_event(wire: str | None) -> None:
    fake = FakeUpstream("f", wire=wire)
    fake.enqueue(RateLimitError("Too many requests", retry_after=3))
    fake.enqueue(RateLimitError("Too many requests", retry_after=3))
    for attempt in (fake.complete(REQUEST), collect(fake)):
        with pytest.raises(RateLimitError) as info:
            await attempt
        assert info.value.status == 429
        assert info.value.retry_after == 3.0
        assert "Too many requests" in info.value.message


@pytest.mark.parametrize("wire", WIRES)
async def test_callable_item_decides_per_request(wire: str | None) -> None:
    seen: list[Request] = []

    def answer(request: Request) -> Response:
        seen.append(request)
        return Response("r", request.model, (TextPart(f"{len(request.messages)} messages"),))

    fake = FakeUpstream("f", wire=wire)
    fake.enqueue(answer)
    assert (await fake.complete(REQUEST)).text == "4 messages"
    assert seen == [REQUEST]


async def test_wire_requests_hold_the_bodies_a_real_upstream_would_get() -> None:
    openai = FakeUpstream("o", wire="openai")
    await openai.complete(REQUEST)
    await collect(openai)
    first, second = openai.wire_requests
    assert first["model"] == "upstream-model" and first["stream"] is False
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}  # type: ignore[index]
    assert second["stream"] is True and second["stream_options"] == {"include_usage": True}

    anthropic = FakeUpstream("a", wire="anthropic")
    await anthropic.complete(REQUEST)
    body = anthropic.wire_requests[0]
    assert body["max_tokens"] == 100
    assert all(m["role"] != "system" for m in body["messages"])  # type: ignore[attr-defined]
    assert FakeUpstream().wire_requests == []


def decode_stream(wire: str, data: bytes, request: Request) -> list[StreamEvent]:
    codec = get_dialect(wire)
    sse, decoder = SSEDecoder(), codec.stream_decoder(request)
    events = [out for ev in sse.decode(data) for out in decoder.feed(ev)]
    events += [out for ev in sse.flush() for out in decoder.feed(ev)]
    return events + decoder.flush()


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_passthrough_answers_with_wire_bytes(wire: str) -> None:
    codec = get_dialect(wire)
    body = orjson.dumps(codec.render_request(REQUEST))
    fake = FakeUpstream("f", wire=wire)
    assert fake.dialect == wire
    fake.enqueue(ANSWER)
    raw = await fake.passthrough(body, False, {})
    assert (raw.status, raw.headers["content-type"]) == (200, "application/json")
    assert essence(codec.parse_response(orjson.loads(raw.body))) == essence(ANSWER)
    assert fake.requests[0].model == "upstream-model"
    assert fake.wire_requests[0] == orjson.loads(body)

    fake.enqueue(ANSWER)
    # An OpenAI client gets usage in a stream only when it asks for it.
    asks = {"stream_options": {"include_usage": True}} if wire == "openai" else {}
    stream_body = orjson.dumps({**orjson.loads(body), "stream": True, **asks})
    raw = await fake.passthrough(stream_body, True, {})
    assert raw.chunks is not None and raw.headers["content-type"] == "text/event-stream"
    pieces = [piece async for piece in raw.chunks]
    assert len(pieces) > 1
    events = decode_stream(wire, b"".join(pieces), REQUEST)
    assert essence(fold(events)) == essence(ANSWER)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_passthrough_error_is_a_rendered_error_body(wire: str) -> None:
    codec = get_dialect(wire)
    fake = FakeUpstream("f", wire=wire)
    fake.enqueue(RateLimitError("Too many requests", retry_after=2))
    raw = await fake.passthrough(orjson.dumps(codec.render_request(REQUEST)), True, {})
    assert raw.status == 429
    assert raw.chunks is None
    assert raw.headers["retry-after"] == "2"
    err = codec.parse_error(raw.status, raw.body, raw.headers)
    assert isinstance(err, RateLimitError) and err.retry_after == 2.0


async def test_passthrough_needs_a_wire() -> None:
    with pytest.raises(NotImplementedError):
        await FakeUpstream().passthrough(b"{}", False, {})


def test_unknown_wire_is_refused() -> None:
    with pytest.raises(ValueError, match="wire must be"):
        FakeUpstream(wire="grpc")


@pytest.mark.parametrize("wire", WIRES)
async def test_any_interlingua_error_is_a_valid_item(wire: str | None) -> None:
    fake = FakeUpstream("f", wire=wire)
    fake.enqueue(InterlinguaError("generic failure"))
    with pytest.raises(InterlinguaError) as info:
        await fake.complete(REQUEST)
    assert info.value.status == 500
    assert "generic failure" in info.value.message
