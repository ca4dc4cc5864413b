"""Anthropic upstream against a scripted local aiohttp server."""

from __future__ import annotations

import orjson
import pytest
from aiohttp import web

from interlingua.config import TimeoutConfig
from interlingua.core import (
    Message,
    Request,
    StopReason,
    StreamError,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolSpec,
    fold,
)
from interlingua.dialects.anthropic import DIALECT
from interlingua.errors import (
    AuthenticationError,
    OverloadedError,
    RateLimitError,
    UpstreamConnectionError,
    UpstreamError,
)
from interlingua.upstreams._transport import Transports
from interlingua.upstreams.anthropic import AnthropicUpstream

from .conftest import SECRET, Stub, json_response, sse_response
from .test_openai_compatible import assert_secret_free

REQUEST = Request(
    model="claude-sonnet-4-5",
    messages=(Message("system", (TextPart("Be brief."),)), Message("user", (TextPart("Hi"),))),
    max_tokens=64,
    temperature=0.5,
    tools=(ToolSpec("get_time", "Current time", {"type": "object", "properties": {}}),),
)

MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 3},
}


def event(kind: str, **data: object) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


START = event(
    "message_start",
    message={
        **MESSAGE,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    },
)
STREAM = [
    START,
    event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    event("ping"),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hel"}),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "lo!"}),
    event("content_block_stop", index=0),
    event(
        "message_delta",
        delta={"stop_reason": "end_turn", "stop_sequence": None},
        usage={"output_tokens": 3},
    ),
    event("message_stop"),
]


def upstream(stub: Stub, transports: Transports, base: str = "") -> AnthropicUpstream:
    return AnthropicUpstream(
        "claude",
        stub.url + base,
        api_key=SECRET,
        timeout=TimeoutConfig(connect=2, read=5),
        transports=transports,
    )


async def collect(up: AnthropicUpstream) -> list[StreamEvent]:
    return [e async for e in up.stream(REQUEST)]


def test_default_base_url_and_v1_suffix_are_both_accepted() -> None:
    assert AnthropicUpstream("a").url == "https://api.anthropic.com/v1/messages"
    assert AnthropicUpstream("a", "http://h:1/v1/").url == "http://h:1/v1/messages"
    assert AnthropicUpstream("a", "http://h:1").count_url == "http://h:1/v1/messages/count_tokens"


@pytest.mark.parametrize("base", ["", "/", "/v1", "/v1/"])
async def test_complete_sends_key_and_version_headers(
    stub: Stub, transports: Transports, base: str
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(MESSAGE, headers={"request-id": "req_1"})

    stub.handler = handler
    response = await upstream(stub, transports, base).complete(REQUEST)
    assert response.text == "Hello!"
    assert response.stop_reason is StopReason.END_TURN
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    seen = stub.seen[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == SECRET
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.json["system"] in ("Be brief.", [{"type": "text", "text": "Be brief."}])
    assert seen.json["stream"] is False
    assert "stream_options" not in seen.json


async def test_stream_decodes_events(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, STREAM)

    stub.handler = handler
    events = await collect(upstream(stub, transports))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo!"]
    folded = fold(events)
    assert folded.text == "Hello!"
    assert (folded.usage.input_tokens, folded.usage.output_tokens) == (12, 3)
    assert stub.seen[0].json["stream"] is True


async def test_in_band_error_event_ends_the_stream(stub: Stub, transports: Transports) -> None:
    error = {"type": "overloaded_error", "message": "Overloaded"}

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, [*STREAM[:4], event("error", error=error), STREAM[4]])

    stub.handler = handler
    events = await collect(upstream(stub, transports))
    assert isinstance(events[-1], StreamError)
    assert isinstance(events[-1].error, OverloadedError)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel"]


async def test_stream_closed_before_its_end_is_a_stream_error(
    stub: Stub, transports: Transports
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, STREAM[:4])

    stub.handler = handler
    events = await collect(upstream(stub, transports))
    # The codec or the upstream reports it; either way a 5xx-kind in-band error.
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel"]
    assert isinstance(events[-1], StreamError)
    assert isinstance(events[-1].error, UpstreamError)
    assert events[-1].error.status >= 500


async def test_empty_stream_raises_before_any_event(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, [])

    stub.handler = handler
    with pytest.raises(UpstreamConnectionError, match="closed the stream before it ended"):
        await collect(upstream(stub, transports))


@pytest.mark.parametrize(
    ("status", "error_type", "cls"),
    [
        (529, "overloaded_error", OverloadedError),
        (429, "rate_limit_error", RateLimitError),
        (500, "api_error", UpstreamError),
        (401, "authentication_error", AuthenticationError),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_status_errors_raise_before_any_event(
    stub: Stub,
    transports: Transports,
    status: int,
    error_type: str,
    cls: type[Exception],
    streaming: bool,
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        body_out = {
            "type": "error",
            "error": {"type": error_type, "message": "nope"},
            "request_id": "req_2",
        }
        return json_response(body_out, status=status, headers={"retry-after": "3"})

    stub.handler = handler
    up = upstream(stub, transports)
    with pytest.raises(cls) as info:
        await (collect(up) if streaming else up.complete(REQUEST))
    err = info.value
    assert type(err) is cls
    assert getattr(err, "status", None) == status
    assert str(err) == "nope"  # (an echoed key is the gateway's to scrub)
    assert_secret_free(err)
    if cls is RateLimitError:
        assert getattr(err, "retry_after", None) == 3.0


async def test_count_tokens_uses_the_count_endpoint(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response({"input_tokens": 42})

    stub.handler = handler
    assert await upstream(stub, transports).count_tokens(REQUEST) == 42
    seen = stub.seen[0]
    assert seen.path == "/v1/messages/count_tokens"
    assert seen.headers["x-api-key"] == SECRET
    assert set(seen.json) == {"model", "messages", "system", "tools"}


async def test_count_tokens_sends_what_the_count_endpoint_accepts(
    stub: Stub, transports: Transports
) -> None:
    # An Anthropic client's count_tokens body: its cache_control and fields this codec does
    # not know travel on; what count_tokens rejects (max_tokens, stream) does not.
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response({"input_tokens": 7})

    stub.handler = handler
    request = DIALECT.parse_count_tokens_request(
        {
            "model": "claude-sonnet-4-5",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 10,
            "stream": True,
            "temperature": 0.5,
            "cache_control": {"type": "ephemeral"},
            "speed": "fast",
        }
    )
    assert await upstream(stub, transports).count_tokens(request) == 7
    assert stub.seen[0].json == {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": "Hi"}],
        "cache_control": {"type": "ephemeral"},
        "speed": "fast",
    }


async def test_count_tokens_relays_upstream_errors(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        error = {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}
        return json_response(error, status=401)

    stub.handler = handler
    with pytest.raises(AuthenticationError, match="bad key"):
        await upstream(stub, transports).count_tokens(REQUEST)


async def test_passthrough_forwards_beta_flags_but_never_client_credentials(
    stub: Stub, transports: Transports
) -> None:
    answer = orjson.dumps(MESSAGE)

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.Response(
            body=answer, content_type="application/json", headers={"request-id": "req_7"}
        )

    stub.handler = handler
    client_headers = {
        "Anthropic-Beta": "fine-grained-tool-streaming-2025-05-14",
        "x-api-key": "client-key",
        "authorization": "Bearer client-key",
    }
    body = b'{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[]}'
    raw = await upstream(stub, transports).passthrough(body, False, client_headers)
    assert (raw.status, raw.body) == (200, answer)
    assert raw.headers["upstream-request-id"] == "req_7"
    seen = stub.seen[0]
    assert seen.body == body
    assert seen.headers["anthropic-beta"] == "fine-grained-tool-streaming-2025-05-14"
    assert seen.headers["x-api-key"] == SECRET
    assert "authorization" not in seen.headers


async def test_passthrough_stream_relays_bytes_exactly(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, STREAM)

    stub.handler = handler
    raw = await upstream(stub, transports).passthrough(b'{"stream":true}', True, {})
    assert raw.chunks is not None
    try:
        received = b"".join([piece async for piece in raw.chunks])
    finally:
        await raw.aclose()
    assert received == b"".join(STREAM)
