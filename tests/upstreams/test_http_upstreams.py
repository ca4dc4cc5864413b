"""What every HTTP upstream kind does alike, tested once for each kind and on both engines.

Each test runs against the scripted local ``stub`` server for every row of :data:`KINDS`
(how to build that kind, and a good answer, a stream and error bodies in its dialect)
and, through the ``transports`` fixture, on both HTTP engines. What only one kind does
lives in its own file: test_openai_compatible.py, test_anthropic_upstream.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import orjson
import pytest
from aiohttp import web

from interlingua.core import Request, StopReason, StreamError, StreamEvent, TextDelta, fold
from interlingua.errors import (
    AuthenticationError,
    InterlinguaError,
    OverloadedError,
    RateLimitError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamTimeoutError,
)
from interlingua.http_pool.engines import Transports
from interlingua.upstreams.http_upstream import HttpUpstream

from . import test_anthropic_upstream as anthropic
from . import test_openai_compatible as openai
from .conftest import SECRET, Stub, assert_secret_free, json_response, sse_response

#: the headers an upstream key may travel in (each kind sends it in one of them)
KEY_HEADERS = ("authorization", "x-api-key")


@dataclass(frozen=True)
class Kind:
    """One HTTP upstream kind: how to build it, and what its dialect sends."""

    build: Callable[..., HttpUpstream]  # (base_url, transports, *, api_key=, read=)
    base: str  # added to the stub's URL to make the configured base_url
    path: str  # where the stub sees a chat request
    key: tuple[str, str]  # the header the key travels in, and its value
    request: Request
    answer: dict[str, object]  # a good non-streaming answer ...
    answer_text: str
    usage: tuple[int, int]  # ... and the (input, output) tokens of it and of ``stream``
    stream: list[bytes]  # a good stream ...
    first_text: int  # ... the index of its first text delta ...
    texts: list[str]  # ... and its text deltas
    stream_options: object  # what a stream request carries as ``stream_options``
    request_id: str  # the header this kind's server names its request id in
    text_chunk: Callable[[str], bytes]  # one more text delta
    error_body: Callable[[int, str], dict[str, object]]  # (status, message) -> body
    error_event: Callable[[str, str], bytes]  # (error type, message) -> in-band event

    def against(self, stub: Stub, transports: Transports | None, read: float = 5.0) -> HttpUpstream:
        return self.build(stub.url + self.base, transports, read=read)


KINDS = {
    "openai": Kind(
        build=openai.build,
        base="/v1/",
        path="/v1/chat/completions",
        key=("authorization", f"Bearer {SECRET}"),
        request=openai.REQUEST,
        answer=openai.COMPLETION,
        answer_text="Hello there",
        usage=(9, 2),
        stream=openai.STREAM,
        first_text=1,
        texts=["Hel", "lo"],
        # or no usage comes (docs/protocols.md, "Chat Completions: stream")
        stream_options={"include_usage": True},
        request_id="x-request-id",
        text_chunk=openai.text_chunk,
        error_body=openai.error_body,
        error_event=openai.error_event,
    ),
    "anthropic": Kind(
        build=anthropic.build,
        base="",
        path="/v1/messages",
        key=("x-api-key", SECRET),
        request=anthropic.REQUEST,
        answer=anthropic.MESSAGE,
        answer_text="Hello!",
        usage=(12, 3),
        stream=anthropic.STREAM,
        first_text=3,
        texts=["Hel", "lo!"],
        stream_options=None,
        request_id="request-id",
        text_chunk=anthropic.text_chunk,
        error_body=anthropic.error_body,
        error_event=anthropic.error_event,
    ),
}


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]


async def collect(up: HttpUpstream, kind: Kind) -> list[StreamEvent]:
    return [event async for event in up.stream(kind.request)]


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta)]


# --- answers ----------------------------------------------------------------------------


async def test_complete_sends_the_key_and_parses(
    stub: Stub, transports: Transports, kind: Kind
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(kind.answer)

    stub.handler = handler
    response = await kind.against(stub, transports).complete(kind.request)
    assert response.text == kind.answer_text
    assert response.stop_reason is StopReason.END_TURN
    assert (response.usage.input_tokens, response.usage.output_tokens) == kind.usage
    seen = stub.seen[0]
    assert seen.path == kind.path
    name, value = kind.key
    assert seen.headers[name] == value
    assert [h for h in KEY_HEADERS if h in seen.headers] == [name]
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-team"] == "research"  # configured headers go too
    assert seen.json["model"] == kind.request.model
    assert seen.json["stream"] is False
    assert "stream_options" not in seen.json


async def test_no_key_sends_no_key_header(stub: Stub, transports: Transports, kind: Kind) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(kind.answer)

    stub.handler = handler
    await kind.build(stub.url + kind.base, transports, api_key=None).complete(kind.request)
    assert not [h for h in KEY_HEADERS if h in stub.seen[0].headers]


async def test_stream_decodes_events(stub: Stub, transports: Transports, kind: Kind) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, kind.stream)

    stub.handler = handler
    events = await collect(kind.against(stub, transports), kind)
    assert texts(events) == kind.texts
    folded = fold(events)
    assert folded.text == "".join(kind.texts)
    assert (folded.usage.input_tokens, folded.usage.output_tokens) == kind.usage
    assert stub.seen[0].json["stream"] is True
    assert stub.seen[0].json.get("stream_options") == kind.stream_options


async def test_owns_its_transports_when_none_are_injected(stub: Stub, kind: Kind) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(kind.answer)

    stub.handler = handler
    up = kind.against(stub, None)
    try:
        assert (await up.complete(kind.request)).text == kind.answer_text
    finally:
        await up.aclose()


# --- errors before the first event ---------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (529, OverloadedError),
        (429, RateLimitError),
        (500, UpstreamError),
        (401, AuthenticationError),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_status_errors_raise_before_any_event(
    stub: Stub,
    transports: Transports,
    kind: Kind,
    status: int,
    cls: type[InterlinguaError],
    streaming: bool,
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        # (Both spellings of the header: names are case-blind.)
        retry = "Retry-After" if kind is KINDS["openai"] else "retry-after"
        return json_response(kind.error_body(status, "nope"), status=status, headers={retry: "3"})

    stub.handler = handler
    up = kind.against(stub, transports)
    with pytest.raises(cls) as info:
        await (collect(up, kind) if streaming else up.complete(kind.request))
    err = info.value
    assert type(err) is cls
    assert err.status == status
    assert str(err) == err.message == "nope"  # (an echoed key is the gateway's to scrub)
    assert_secret_free(err)
    if cls is RateLimitError:
        assert getattr(err, "retry_after", None) == 3.0


async def test_empty_stream_raises_before_any_event(
    stub: Stub, transports: Transports, kind: Kind
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, [])

    stub.handler = handler
    with pytest.raises(UpstreamConnectionError, match="closed the stream before it ended"):
        await collect(kind.against(stub, transports), kind)


async def test_connection_refused_names_upstream_not_key(
    transports: Transports, kind: Kind, closed_port: int
) -> None:
    base_url = f"http://127.0.0.1:{closed_port}{kind.base}"
    up = kind.build(base_url, transports)
    for call in (up.complete(kind.request), collect(up, kind)):
        with pytest.raises(UpstreamConnectionError) as info:
            await call
        assert info.value.status == 502
        assert info.value.message == (
            f"cannot reach upstream '{up.name}' at {base_url.rstrip('/')}: connection refused"
        )
        assert_secret_free(info.value)


async def test_silence_before_the_answer_is_a_timeout(
    stub: Stub, transports: Transports, kind: Kind
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        await stub.release.wait()
        return json_response(kind.answer)

    stub.handler = handler
    up = kind.against(stub, transports, read=0.2)
    with pytest.raises(UpstreamTimeoutError) as info:
        await up.complete(kind.request)
    assert info.value.status == 504
    assert f"upstream '{up.name}'" in info.value.message and "0.2s" in info.value.message
    assert_secret_free(info.value)


# --- streams that go wrong after the first event -------------------------------------------


async def test_in_band_error_event_ends_the_stream(
    stub: Stub, transports: Transports, kind: Kind
) -> None:
    head, rest = kind.stream[: kind.first_text + 1], kind.stream[kind.first_text + 1]
    error = kind.error_event("overloaded_error", "Overloaded")

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, [*head, error, rest])

    stub.handler = handler
    events = await collect(kind.against(stub, transports), kind)
    assert isinstance(events[-1], StreamError)
    assert isinstance(events[-1].error, OverloadedError)
    assert texts(events) == kind.texts[:1]


@pytest.mark.parametrize("cut", [False, True], ids=["closed", "dropped"])
async def test_stream_ended_before_its_end_is_a_stream_error(
    stub: Stub, transports: Transports, kind: Kind, cut: bool
) -> None:
    # Closed cleanly or the connection dropped, after two text deltas: the codec or the
    # upstream reports it; either way a 5xx-kind in-band error.
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, kind.stream[: kind.first_text + 2], cut=cut)

    stub.handler = handler
    up = kind.against(stub, transports)
    events = await collect(up, kind)
    assert texts(events) == kind.texts
    assert isinstance(events[-1], StreamError)
    error = events[-1].error
    assert isinstance(error, UpstreamError)
    assert error.status >= 500
    if cut:
        assert isinstance(error, UpstreamConnectionError)
        assert f"upstream '{up.name}'" in error.message
    assert_secret_free(error)


async def test_silence_mid_stream_becomes_a_stream_error(
    stub: Stub, transports: Transports, kind: Kind
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"".join(kind.stream[: kind.first_text + 1]))
        await stub.release.wait()
        return resp

    stub.handler = handler
    events = await collect(kind.against(stub, transports, read=0.2), kind)
    assert isinstance(events[-1], StreamError)
    assert isinstance(events[-1].error, UpstreamTimeoutError)
    assert texts(events) == kind.texts[:1]


async def test_consumer_leaving_early_closes_the_upstream_connection(
    stub: Stub, transports: Transports, kind: Kind
) -> None:
    gone = asyncio.Event()

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"".join(kind.stream[: kind.first_text]))
        try:
            for _ in range(200):
                await resp.write(kind.text_chunk("x"))
                await asyncio.sleep(0.01)
        except (ConnectionError, RuntimeError):
            gone.set()
        return resp

    stub.handler = handler
    stream = kind.against(stub, transports).stream(kind.request)
    async for event in stream:
        if isinstance(event, TextDelta):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.wait_for(gone.wait(), 2)


# --- passthrough: bytes relayed as they came ------------------------------------------------


async def test_passthrough_relays_bytes_but_never_client_credentials(
    stub: Stub, transports: Transports, kind: Kind
) -> None:
    answer = orjson.dumps(kind.answer) + b"\n"

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        headers = {kind.request_id: "req-9"}
        return web.Response(body=answer, content_type="application/json", headers=headers)

    stub.handler = handler
    body = b'{"model":"m","messages":[{"role":"user","content":"Hi"}],"logit_bias":{"1":2}}'
    client_headers = {"authorization": "Bearer client-key", "x-api-key": "client-key"}
    raw = await kind.against(stub, transports).passthrough(body, False, client_headers)
    assert (raw.status, raw.body) == (200, answer)
    assert raw.headers == {"content-type": "application/json", "upstream-request-id": "req-9"}
    seen = stub.seen[0]
    assert seen.body == body
    name, value = kind.key
    assert seen.headers[name] == value
    assert [h for h in KEY_HEADERS if h in seen.headers] == [name]


async def test_passthrough_stream_relays_bytes_exactly(
    stub: Stub, transports: Transports, kind: Kind
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return await sse_response(request, kind.stream)

    stub.handler = handler
    raw = await kind.against(stub, transports).passthrough(b'{"stream":true}', True, {})
    assert raw.chunks is not None
    try:
        received = b"".join([piece async for piece in raw.chunks])
    finally:
        await raw.aclose()
    assert received == b"".join(kind.stream)
    assert raw.status == 200
    assert raw.headers["content-type"] == "text/event-stream"
    assert raw.headers["upstream-request-id"] == "r1"


@pytest.mark.parametrize("streaming", [False, True])
async def test_passthrough_error_is_returned_as_sent(
    stub: Stub, transports: Transports, kind: Kind, streaming: bool
) -> None:
    # (An echoed key is left in: the gateway scrubs, tests/server/test_scrubbing.py.)
    error = kind.error_body(429, "Slow down")

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(error, status=429, headers={"retry-after-ms": "1500"})

    stub.handler = handler
    raw = await kind.against(stub, transports).passthrough(b"{}", streaming, {})
    assert raw.status == 429
    assert raw.chunks is None
    assert orjson.loads(raw.body) == error
    assert raw.headers["retry-after-ms"] == "1500"


async def test_passthrough_connection_refused_raises(
    transports: Transports, kind: Kind, closed_port: int
) -> None:
    up = kind.build(f"http://127.0.0.1:{closed_port}{kind.base}", transports)
    with pytest.raises(UpstreamConnectionError, match=f"cannot reach upstream '{up.name}'"):
        await up.passthrough(b"{}", False, {})
