"""Upstream keys are scrubbed at the gateway's exits, from a copy of the error.

The gateway alone scrubs (server/gateway.py says why); it renders a scrubbed copy, and
the error it was handed (held by whoever raised it, or inside a frozen ``StreamError``)
is never changed. End to end, in process in front of a stub upstream that echoes its key
back: the key never reaches a client or a log, on either path, from either upstream kind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web
from starlette.types import Message as Message_

from interlingua.config import parse_config
from interlingua.core import (
    BlockStart,
    Message,
    Request,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
)
from interlingua.dialects import get_dialect
from interlingua.errors import AuthenticationError, RateLimitError
from interlingua.routing import Router
from interlingua.server import create_app
from interlingua.server.asgi_io import StreamResponse
from interlingua.server.gateway import Gateway
from interlingua.upstreams import build_upstreams

from ..stub_upstream import Stub

KEY = "sk-secret-123"
CONFIG = parse_config(
    {"upstreams": {"f": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "f"}]}
)
REQUEST = Request(model="m", messages=(Message("user", (TextPart("hi"),)),), stream=True)


def _gateway() -> Gateway:
    return Gateway(CONFIG, Router(CONFIG, build_upstreams(CONFIG, None)), [KEY])


def _echoing_error() -> RateLimitError:
    return RateLimitError(
        f"Slow down, {KEY}",
        code="rate_limit",
        retry_after=2.0,
        upstream_type="requests",
        headers={"x-should-retry": "true"},
    )


def test_scrubbed_is_a_copy_and_the_original_is_untouched() -> None:
    error = _echoing_error()
    clean = _gateway().scrubbed(error)
    assert clean is not error
    assert type(clean) is RateLimitError
    assert clean.message == str(clean) == "Slow down, ***"
    assert (clean.status, clean.code, clean.retry_after, clean.upstream_type) == (
        429,
        "rate_limit",
        2.0,
        "requests",
    )
    assert clean.headers == {"x-should-retry": "true"}
    assert error.message == str(error) == f"Slow down, {KEY}"


def test_an_error_without_a_secret_is_not_copied() -> None:
    error = AuthenticationError("no key given")
    assert _gateway().scrubbed(error) is error


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_error_response_scrubs_a_copy(dialect: str) -> None:
    error = _echoing_error()
    response = _gateway().error_response(get_dialect(dialect), error, "req_1")
    assert KEY not in response.body.decode()
    assert "Slow down, ***" in response.body.decode()
    assert (b"retry-after", b"2") in response.headers
    assert (b"x-should-retry", b"true") in response.headers
    assert error.message == f"Slow down, {KEY}"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_stream_error_bytes_scrubs_a_copy(dialect: str) -> None:
    error = _echoing_error()
    data = _gateway().stream_error_bytes(get_dialect(dialect), REQUEST, error)
    assert KEY not in data.decode() and "Slow down, ***" in data.decode()
    assert error.message == f"Slow down, {KEY}"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_an_in_band_error_is_rendered_scrubbed_and_left_as_it_was(dialect: str) -> None:
    error = _echoing_error()
    failure = StreamError(error)
    batches: list[list[StreamEvent]] = [
        [StreamStart(id="s1", model="m"), BlockStart(0, TextPart(""))],
        [TextDelta(0, "Hel"), failure],
    ]

    async def stream_batches(request: Request) -> AsyncIterator[list[StreamEvent]]:
        for batch in batches:
            yield batch

    # Only the route's upstream is read by _stream.
    route: Any = SimpleNamespace(upstream=SimpleNamespace(stream_batches=stream_batches))
    # A key JSON must escape is missed by the pass over the stream's bytes: the event
    # itself must be rendered scrubbed.
    odd = 'sk-"odd"-key'
    error.message = f"Slow down, {odd}"  # (before the stream: nobody else holds it yet)
    gateway = Gateway(CONFIG, Router(CONFIG, build_upstreams(CONFIG, None)), [odd])
    response = await gateway._stream(get_dialect(dialect), route, REQUEST, REQUEST)
    text = b"".join([chunk async for chunk in response.chunks]).decode()
    assert "Slow down, ***" in text and "odd" not in text
    assert failure.error is error
    assert error.message == f"Slow down, {odd}"
    if dialect == "openai":
        last = text.strip().splitlines()[-1]
        assert orjson.loads(last.removeprefix("data: "))["error"]["message"] == "Slow down, ***"


async def test_an_error_raised_mid_stream_is_sent_and_logged_scrubbed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="interlingua")
    gateway = _gateway()
    error = _echoing_error()
    openai = get_dialect("openai")

    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"
        raise error

    response = StreamResponse(
        chunks(), on_error=lambda exc: gateway.stream_error_bytes(openai, REQUEST, exc)
    )
    sent: list[Message_] = []

    async def send(message: Message_) -> None:
        sent.append(message)

    async def receive() -> Message_:
        await asyncio.Event().wait()  # the client never hangs up
        raise AssertionError

    await response({"type": "http"}, receive, send)
    body = b"".join(m.get("body", b"") for m in sent).decode()
    assert "Slow down, ***" in body and KEY not in body
    assert "Slow down, ***" in caplog.text and KEY not in caplog.text
    assert error.message == f"Slow down, {KEY}"


# --- end to end: an upstream that echoes its key ------------------------------------------

KEY_ENV = "INTERLINGUA_TEST_SCRUB_KEY"
CLIENT_HEADERS = {"anthropic-version": "2023-06-01"}


@dataclass
class Echoing:
    """What the stub upstream answers: ``(status, content type, body)``; by default an
    error in the dialect of the request's path, quoting the key it was sent."""

    stub: Stub
    status: int = 401
    content_type: str = "application/json"
    body: bytes = b""

    async def answer(self, request: web.Request, body: bytes) -> web.StreamResponse:
        reply = self.body or _error_body(request.path, f"Incorrect API key provided: {KEY}.")
        return web.Response(body=reply, status=self.status, content_type=self.content_type)

    def last_key(self) -> str:
        """The credential header of the last request the upstream saw."""
        headers = self.stub.seen[-1].headers
        return headers.get("x-api-key") or headers.get("authorization", "")


def _error_body(path: str, message: str) -> bytes:
    if path.endswith("/messages"):
        error = {"type": "error", "error": {"type": "authentication_error", "message": message}}
        return orjson.dumps(error)
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})


@pytest.fixture
async def echoing(
    monkeypatch: pytest.MonkeyPatch, stub: Stub
) -> AsyncIterator[tuple[httpx.AsyncClient, Echoing]]:
    """A gateway in front of an openai and an anthropic upstream on one echoing stub."""
    state = Echoing(stub)
    stub.handler = state.answer
    monkeypatch.setenv(KEY_ENV, KEY)
    config = parse_config(
        {
            "upstreams": {
                "oa": {"kind": "openai", "base_url": f"{stub.url}/v1", "api_key_env": KEY_ENV},
                "an": {"kind": "anthropic", "base_url": stub.url, "api_key_env": KEY_ENV},
            },
            "models": [{"name": "oa", "upstream": "oa"}, {"name": "an", "upstream": "an"}],
        }
    )
    upstreams = build_upstreams(config, None)
    gateway = create_app(config, upstreams=upstreams)
    transport = httpx.ASGITransport(app=gateway)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield client, state
    finally:
        for upstream in upstreams.values():
            await upstream.aclose()


async def _call(
    client: httpx.AsyncClient, dialect: str, model: str, stream: bool
) -> httpx.Response:
    body: dict[str, Any] = {"model": model, "max_tokens": 8, "stream": stream}
    body["messages"] = [{"role": "user", "content": "hi"}]
    path = "/v1/messages" if dialect == "anthropic" else "/v1/chat/completions"
    return await client.post(path, json=body, headers=CLIENT_HEADERS)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model", ["oa", "an"], ids=["openai-upstream", "anthropic-upstream"])
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_a_key_echoed_in_an_upstream_error_never_reaches_the_client(
    echoing: tuple[httpx.AsyncClient, Echoing],
    caplog: pytest.LogCaptureFixture,
    dialect: str,
    model: str,
    stream: bool,
) -> None:
    # Both paths: the client's own dialect is passthrough, the other one translated.
    client, state = echoing
    caplog.set_level(logging.DEBUG)
    resp = await _call(client, dialect, model, stream)
    assert resp.status_code == 401, resp.text
    assert "Incorrect API key provided: ***." in resp.text
    assert KEY not in resp.text and KEY not in caplog.text
    assert state.last_key().endswith(KEY)  # the key did go upstream


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_a_key_echoed_in_a_page_that_is_not_an_answer_never_reaches_the_client(
    echoing: tuple[httpx.AsyncClient, Echoing], dialect: str
) -> None:
    # A 2xx HTML page: its first bytes are quoted in our 502's message.
    client, state = echoing
    state.status, state.content_type = 200, "text/html"
    state.body = f"<p>key {KEY}</p>".encode()
    resp = await _call(client, dialect, "oa", stream=False)
    assert resp.status_code == 502, resp.text
    assert KEY not in resp.text
    if dialect == "openai":  # (the translated path does not quote the page)
        assert "<p>key ***</p>" in resp.text
