"""Typed errors, retries and streaming failures, over real sockets (sleep patched), with
each of the client's two HTTP engines (the lean pool and aiohttp) saying the same."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from interlingua.client import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RateLimitError,
    UnprocessableEntityError,
)
from interlingua.core import TextDelta
from interlingua.http_pool.engines import ENGINE_ENV

from .conftest import Drop, FakeServer, Reply, Stream, error_body, openai_body, openai_chunks


def patched(client: AsyncClient) -> list[float]:
    """Make ``client`` record its retry sleeps instead of sleeping; full jitter draws 1.0."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    client._sleep = sleep
    client._rand = lambda: 1.0
    return slept


@pytest.fixture(autouse=True, params=["lean", "aiohttp"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here with each engine (the lean one is the default for http://)."""
    monkeypatch.setenv(ENGINE_ENV, request.param)
    return str(request.param)


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url + "/v1", "sk", model="m") as c:
        yield c


# --- typed errors ---


@pytest.mark.parametrize(
    ("status", "cls", "hint"),
    [
        (400, BadRequestError, "check the parameters"),
        (401, AuthenticationError, "check the api_key"),
        (403, PermissionDeniedError, "not allowed"),
        (404, NotFoundError, "check the model name and the base_url"),
        (409, ConflictError, "conflicting"),
        (422, UnprocessableEntityError, "invalid"),
        (429, RateLimitError, "rate limited"),
        (500, InternalServerError, "server failed"),
        (503, OverloadedError, "overloaded"),
        (529, OverloadedError, "overloaded"),
        (418, APIStatusError, ""),
    ],
)
async def test_typed_errors(server: FakeServer, status: int, cls: type, hint: str) -> None:
    server.push(Reply(error_body("nope"), status=status))
    async with AsyncClient(server.url + "/v1", model="m", max_retries=0) as c:
        with pytest.raises(cls) as info:
            await c.chat("x")
    err = info.value
    assert type(err) is cls
    assert err.status == status
    assert err.request_id == "req_1"
    assert err.body == error_body("nope")
    assert err.message.startswith(f"HTTP {status} from {server.url}/v1/chat/completions: nope")
    assert hint in err.message


async def test_connection_refused_says_what_to_do() -> None:
    async with AsyncClient("http://127.0.0.1:9/v1", model="m") as c:
        slept = patched(c)
        with pytest.raises(APIConnectionError) as info:
            await c.chat("x")
    assert str(info.value) == (
        "cannot reach http://127.0.0.1:9/v1: connection refused — is the server running?"
    )
    assert info.value.status is None
    assert slept == [0.5, 1.0]  # retried twice (the default) with backoff
    assert c.retries == 2


async def test_read_timeout(server: FakeServer) -> None:
    server.push(Reply(openai_body("late"), delay=2.0))
    async with AsyncClient(server.url + "/v1", model="m", timeout=(5, 0.2), max_retries=0) as c:
        with pytest.raises(APITimeoutError, match=r"no data from .* for 0\.2s \(read timeout\)"):
            await c.chat("x")


# --- retries ---


async def test_retry_after_honoured(
    client: AsyncClient, server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    slept = patched(client)
    server.push(Reply(error_body("slow down", "requests"), 429, {"retry-after": "3"}))
    with caplog.at_level(logging.DEBUG, logger="interlingua.client"):
        result = await client.chat("x")
    assert result.text == "echo: x"
    assert slept == [3.0]
    assert len(server.seen) == 2
    (record,) = [r for r in caplog.records if r.name == "interlingua.client"]
    assert record.levelno == logging.DEBUG
    assert "in 3.00s (retry 1 of 2; HTTP 429, request id req_1): HTTP 429" in record.getMessage()


async def test_retry_after_ms_preferred(client: AsyncClient, server: FakeServer) -> None:
    slept = patched(client)
    headers = {"retry-after-ms": "250", "retry-after": "9"}
    server.push(Reply(error_body("busy"), 529, headers))
    await client.chat("x")
    assert slept == [0.25]


async def test_500_then_200(client: AsyncClient, server: FakeServer) -> None:
    slept = patched(client)
    server.push(Reply(error_body("oops", "server_error"), 500))
    assert (await client.chat("x")).text == "echo: x"
    assert slept == [0.5]  # backoff: no Retry-After


async def test_retries_exhausted(client: AsyncClient, server: FakeServer) -> None:
    slept = patched(client)
    server.push(*(Reply(error_body("busy"), 503) for _ in range(3)))
    with pytest.raises(OverloadedError):
        await client.chat("x")
    assert slept == [0.5, 1.0]
    assert len(server.seen) == 3


async def test_max_retries_configurable(server: FakeServer) -> None:
    server.push(*(Reply(error_body("busy"), 500) for _ in range(4)))
    async with AsyncClient(server.url + "/v1", model="m", max_retries=4) as c:
        slept = patched(c)
        assert (await c.chat("x")).text == "echo: x"
    assert slept == [0.5, 1.0, 2.0, 4.0]


async def test_not_retried(client: AsyncClient, server: FakeServer) -> None:
    slept = patched(client)
    server.push(Reply(error_body("bad"), 400))
    with pytest.raises(BadRequestError):
        await client.chat("x")
    server.push(Reply(error_body("no"), 500, {"x-should-retry": "false"}))
    with pytest.raises(InternalServerError):
        await client.chat("x")
    assert slept == [] and len(server.seen) == 2


async def test_x_should_retry_true_retries_a_400(client: AsyncClient, server: FakeServer) -> None:
    slept = patched(client)
    server.push(Reply(error_body("retry me"), 400, {"x-should-retry": "true"}))
    assert (await client.chat("x")).text == "echo: x"
    assert slept == [0.5]


async def test_dropped_connection_is_retried(client: AsyncClient, server: FakeServer) -> None:
    slept = patched(client)
    server.push(Drop())
    assert (await client.chat("x")).text == "echo: x"
    assert len(slept) == 1 and len(server.seen) == 2


# --- streaming ---


async def test_stream_events_and_text(client: AsyncClient, server: FakeServer) -> None:
    server.push(Stream(openai_chunks(["Hel", "lo"])), Stream(openai_chunks(["a", "b"])))
    async with client.stream("x") as stream:
        pieces = [e.text async for e in stream if isinstance(e, TextDelta)]
    assert pieces == ["Hel", "lo"]
    assert stream.result is not None and stream.result.text == "Hello"
    assert stream.result.usage.total_tokens == 5
    assert stream.request_id == "req_stream"
    async with client.stream("y") as stream:
        assert [t async for t in stream.text_stream()] == ["a", "b"]
    assert server.bodies[0]["stream"] is True
    assert server.bodies[0]["stream_options"] == {"include_usage": True}


async def test_stream_retried_before_first_byte(client: AsyncClient, server: FakeServer) -> None:
    slept = patched(client)
    server.push(
        Reply(error_body("busy"), 503, {"retry-after": "1"}),
        Drop(),  # accepted, then closed with nothing sent: still before the first byte
        Stream(openai_chunks(["ok"])),
    )
    async with client.stream("x") as stream:
        result = await stream.final()
    assert result.text == "ok"
    assert slept == [1.0, 1.0]
    assert len(server.seen) == 3


async def test_no_retry_after_first_streamed_byte(client: AsyncClient, server: FakeServer) -> None:
    slept = patched(client)
    server.push(Stream(openai_chunks(["one", "two", "three"])[:3], cut=True))
    got: list[str] = []
    with pytest.raises(APIConnectionError, match="not retried") as info:
        async with client.stream("x") as stream:
            async for text in stream.text_stream():
                got.append(text)
    assert got == ["one", "two"]
    assert "after 4 events" in str(info.value)
    assert slept == [] and len(server.seen) == 1


async def test_in_band_stream_error_is_typed(client: AsyncClient, server: FakeServer) -> None:
    error = b'data: {"error": {"message": "overloaded", "type": "server_error", "code": "overloaded"}}\n\n'
    server.push(Stream([*openai_chunks(["a"])[:2], error]))
    with pytest.raises(OverloadedError, match=r"error in the stream .*: overloaded"):
        async with client.stream("x") as stream:
            await stream.final()


async def test_leaving_a_stream_early_closes_the_connection(
    client: AsyncClient, server: FakeServer
) -> None:
    server.push(Stream(openai_chunks([str(i) for i in range(200)]), delay=0.01))
    async with client.stream("x") as stream:
        async for event in stream:
            if isinstance(event, TextDelta):
                break
    for _ in range(200):  # the server's handler ends once its writes fail
        if server.in_flight == 0:
            break
        await asyncio.sleep(0.01)
    assert server.in_flight == 0
    assert (await client.chat("again")).text == "echo: again"  # the pool is healthy
