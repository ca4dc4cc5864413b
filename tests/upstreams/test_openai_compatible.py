"""OpenAI-compatible upstream against a scripted local aiohttp server."""

from __future__ import annotations

import asyncio
import traceback

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
    fold,
)
from interlingua.errors import (
    InterlinguaError,
    OverloadedError,
    RateLimitError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamTimeoutError,
)
from interlingua.upstreams._transport import Transports
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream

from .conftest import SECRET, Stub, json_response, sse_response

REQUEST = Request(model="qwen", messages=(Message("user", (TextPart("Hi"),)),), max_tokens=20)

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "qwen",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello there"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
}


def chunk(delta: dict[str, object], finish: str | None = None, usage: object = None) -> bytes:
    payload: dict[str, object] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "qwen",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        payload["choices"] = []
        payload["usage"] = usage
    return b"data: " + orjson.dumps(payload) + b"\n\n"


STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo"}),
    chunk({}, finish="stop"),
    chunk({}, usage={"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}),
    b"data: [DONE]\n\n",
]


def upstream(stub: Stub, transports: Transports, read: float = 5.0) -> OpenAICompatibleUpstream:
    return OpenAICompatibleUpstream(
        "vllm",
        f"{stub.url}/v1/",
        api_key=SECRET,
        headers={"X-Team": "research"},
        timeout=TimeoutConfig(connect=2, read=read),
        transports=transports,
    )


async def collect(up: OpenAICompatibleUpstream, request: Request = REQUEST) -> list[StreamEvent]:
    return [event async for event in up.stream(request)]


def assert_secret_free(err: BaseException) -> None:
    text = "".join(traceback.format_exception(err)) + repr(err)
    assert SECRET not in text
    if isinstance(err, InterlinguaError):
        assert SECRET not in str(err.body) and SECRET not in str(err.headers)


async def test_complete_posts_bearer_and_parses(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(COMPLETION)

    stub.handler = handler
    response = await upstream(stub, transports).complete(REQUEST)
    assert response.text == "Hello there"
    assert response.stop_reason is StopReason.END_TURN
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 2)
    seen = stub.seen[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-team"] == "research"
    assert seen.json["model"] == "qwen"
    assert seen.json["stream"] is False
    assert "stream_options" not in seen.json


async def test_no_key_sends_no_authorization(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(COMPLETION)

    stub.handler = handler
    up = OpenAICompatibleUpstream("local", f"{stub.url}/v1", transports=transports)
    await up.complete(REQUEST)
    assert "authorization" not in stub.seen[0].headers


async def test_stream_decodes_events_and_asks_for_usage(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, STREAM)

    stub.handler = handler
    events = await collect(upstream(stub, transports))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    folded = fold(events)
    assert folded.text == "Hello"
    assert (folded.usage.input_tokens, folded.usage.output_tokens) == (9, 2)
    assert stub.seen[0].json["stream"] is True
    assert stub.seen[0].json["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("streaming", [False, True])
async def test_429_raises_rate_limit_with_retry_after(
    stub: Stub, transports: Transports, streaming: bool
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
        return json_response({"error": error}, status=429, headers={"Retry-After": "7"})

    stub.handler = handler
    up = upstream(stub, transports)
    with pytest.raises(RateLimitError) as info:
        await (collect(up) if streaming else up.complete(REQUEST))
    assert info.value.status == 429
    assert info.value.retry_after == 7.0
    assert "Rate limit reached" in info.value.message


@pytest.mark.parametrize(("status", "cls"), [(529, OverloadedError), (500, UpstreamError)])
async def test_server_errors_map_by_status(
    stub: Stub, transports: Transports, status: int, cls: type[InterlinguaError]
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response({"error": {"message": "boom", "type": "server_error"}}, status=status)

    stub.handler = handler
    with pytest.raises(cls) as info:
        await collect(upstream(stub, transports))
    assert type(info.value) is cls
    assert info.value.status == status


async def test_connection_refused_names_upstream_not_key(
    transports: Transports, closed_port: int
) -> None:
    up = OpenAICompatibleUpstream(
        "vllm", f"http://127.0.0.1:{closed_port}/v1", api_key=SECRET, transports=transports
    )
    for call in (up.complete(REQUEST), collect(up)):
        with pytest.raises(UpstreamConnectionError) as info:
            await call
        assert info.value.status == 502
        assert info.value.message == (
            f"cannot reach upstream 'vllm' at http://127.0.0.1:{closed_port}/v1: connection refused"
        )
        assert_secret_free(info.value)


async def test_silence_before_the_answer_is_a_timeout(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        await stub.release.wait()
        return json_response(COMPLETION)

    stub.handler = handler
    with pytest.raises(UpstreamTimeoutError) as info:
        await upstream(stub, transports, read=0.2).complete(REQUEST)
    assert info.value.status == 504
    assert "upstream 'vllm'" in info.value.message and "0.2s" in info.value.message
    assert_secret_free(info.value)


async def test_silence_mid_stream_becomes_a_stream_error(
    stub: Stub, transports: Transports
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(STREAM[0] + STREAM[1])
        await stub.release.wait()
        return resp

    stub.handler = handler
    events = await collect(upstream(stub, transports, read=0.2))
    assert isinstance(events[-1], StreamError)
    assert isinstance(events[-1].error, UpstreamTimeoutError)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel"]


async def test_disconnect_mid_stream_becomes_a_stream_error(
    stub: Stub, transports: Transports
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, STREAM[:3], cut=True)

    stub.handler = handler
    events = await collect(upstream(stub, transports))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert isinstance(events[-1], StreamError)
    error = events[-1].error
    assert isinstance(error, UpstreamConnectionError)
    assert "upstream 'vllm'" in error.message
    assert_secret_free(error)


async def test_consumer_leaving_early_closes_the_upstream_connection(
    stub: Stub, transports: Transports
) -> None:
    gone = asyncio.Event()

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(STREAM[0])
        try:
            for _ in range(200):
                await resp.write(chunk({"content": "x"}))
                await asyncio.sleep(0.01)
        except (ConnectionError, RuntimeError):
            gone.set()
        return resp

    stub.handler = handler
    stream = upstream(stub, transports).stream(REQUEST)
    async for event in stream:
        if isinstance(event, TextDelta):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.wait_for(gone.wait(), 2)


async def test_passthrough_relays_bytes_exactly(stub: Stub, transports: Transports) -> None:
    answer = orjson.dumps(COMPLETION) + b"\n"

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.Response(
            body=answer, content_type="application/json", headers={"x-request-id": "req-9"}
        )

    stub.handler = handler
    body = b'{"model":"qwen","messages":[{"role":"user","content":"Hi"}],"logit_bias":{"1":2}}'
    client_headers = {"authorization": "Bearer client-key", "x-api-key": "client-key"}
    raw = await upstream(stub, transports).passthrough(body, False, client_headers)
    assert (raw.status, raw.body) == (200, answer)
    assert raw.headers == {"content-type": "application/json", "upstream-request-id": "req-9"}
    seen = stub.seen[0]
    assert seen.body == body
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    assert "x-api-key" not in seen.headers


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
    assert raw.status == 200
    assert raw.headers["content-type"] == "text/event-stream"
    assert raw.headers["upstream-request-id"] == "r1"


@pytest.mark.parametrize("streaming", [False, True])
async def test_passthrough_error_is_returned_as_sent(
    stub: Stub, transports: Transports, streaming: bool
) -> None:
    # (An echoed key is left in: the gateway scrubs, tests/server/test_scrubbing.py.)
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        error = {"message": "Slow down", "type": "requests"}
        return json_response({"error": error}, status=429, headers={"retry-after-ms": "1500"})

    stub.handler = handler
    raw = await upstream(stub, transports).passthrough(b"{}", streaming, {})
    assert raw.status == 429
    assert raw.chunks is None
    assert orjson.loads(raw.body) == {"error": {"message": "Slow down", "type": "requests"}}
    assert raw.headers["retry-after-ms"] == "1500"


async def test_passthrough_connection_refused_raises(
    transports: Transports, closed_port: int
) -> None:
    up = OpenAICompatibleUpstream(
        "vllm", f"http://127.0.0.1:{closed_port}/v1", transports=transports
    )
    with pytest.raises(UpstreamConnectionError, match="cannot reach upstream 'vllm'"):
        await up.passthrough(b"{}", False, {})


async def test_owns_its_transports_when_none_are_injected(stub: Stub) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(COMPLETION)

    stub.handler = handler
    up = OpenAICompatibleUpstream("vllm", f"{stub.url}/v1")
    try:
        assert (await up.complete(REQUEST)).text == "Hello there"
    finally:
        await up.aclose()
    assert await up.count_tokens(REQUEST) is None


async def test_stream_closed_cleanly_before_its_end_is_a_stream_error(
    stub: Stub, transports: Transports
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, STREAM[:3])

    stub.handler = handler
    events = await collect(upstream(stub, transports))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert isinstance(events[-1], StreamError)
    assert isinstance(events[-1].error, UpstreamError)
    assert events[-1].error.status >= 500
