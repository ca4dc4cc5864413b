"""Upstream keys are scrubbed at the gateway's exits, from a copy of the error.

The gateway renders a scrubbed copy; the error it was handed (held by whoever raised
it, or inside a frozen ``StreamError``) is never changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
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
from interlingua.server.gateway import Gateway
from interlingua.server.http import StreamResponse

KEY = "sk-secret-123"
CONFIG = parse_config(
    {"upstreams": {"f": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "f"}]}
)
REQUEST = Request(model="m", messages=(Message("user", (TextPart("hi"),)),), stream=True)


def _gateway() -> Gateway:
    return Gateway(CONFIG, None, [KEY])


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
    gateway = Gateway(CONFIG, None, [odd])
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
