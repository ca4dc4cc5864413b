"""Streams under stress: clients hanging up, and failures after the first byte.

Promises checked: a client that disconnects mid-stream makes the gateway close the upstream
stream promptly (docs/decisions.md, "Client hang-ups are watched on `receive`"); an error
after the first streamed byte travels in-band as the client dialect's error event
(Anthropic ``event: error``, OpenAI ``data: {"error": ...}``), and the upstream response is
closed (CONTRIBUTING.md, "Errors know their status"). The disconnect tests use
real sockets (live uvicorn gateway, aiohttp mock upstream that records how its stream
ended); the in-band tests also run in process against an upstream whose generator
records being closed.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from interlingua.config import parse_config
from interlingua.core import (
    BlockStart,
    Request,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
)
from interlingua.errors import OverloadedError
from interlingua.routing import Router
from interlingua.server import create_app
from interlingua.server.gateway import Gateway
from interlingua.sse import SSEDecoder, SSEEvent
from interlingua.upstreams import build_upstreams
from interlingua.upstreams.base import Upstream

from ..live_server import live_server
from ..request_ids import without_request_id
from .mock_upstream import MockOpenAI, drop_after, endless, mock_openai
from .mock_upstream import stream_events as mock_events

PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
DISCONNECTED = ("ConnectionResetError", "CancelledError")


def _body(dialect: str, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": "Tell me a long story"}],
    }
    if dialect == "anthropic":
        body["max_tokens"] = 1000
    return body


def _events(raw: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return decoder.decode(raw) + decoder.flush()


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[str, MockOpenAI]]:
    with mock_openai() as mock:
        config = parse_config(
            {
                "upstreams": {"up": {"kind": "openai", "base_url": mock.base_url}},
                # gpt-4o: passthrough for OpenAI clients; claude-x: translated for Anthropic.
                "models": [
                    {"name": "gpt-4o", "upstream": "up"},
                    {"name": "claude-x", "upstream": "up"},
                ],
            }
        )
        with live_server(create_app(config)) as url:
            yield url, mock


@pytest.fixture
def gateway(stack: tuple[str, MockOpenAI]) -> tuple[str, MockOpenAI]:
    stack[1].script.clear()
    stack[1].stream_ends.clear()
    return stack


MODELS = {"openai": "gpt-4o", "anthropic": "claude-x"}


# --- client disconnects -----------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_client_disconnect_mid_stream_closes_upstream(
    gateway: tuple[str, MockOpenAI], dialect: str
) -> None:
    url, mock = gateway
    mock.enqueue(endless())
    with (
        httpx.Client(base_url=url, timeout=10) as client,
        client.stream("POST", PATHS[dialect], json=_body(dialect, MODELS[dialect])) as resp,
    ):
        assert resp.status_code == 200
        first = next(resp.iter_raw())
        assert first.startswith(b"data: " if dialect == "openai" else b"event: ")
        # Leaving the block unread closes the connection: the client hung up.
    assert mock.wait_for_end(5.0) in DISCONNECTED
    assert mock.received[-1].body["stream"] is True


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_raw_socket_hangup_after_headers_closes_upstream(
    gateway: tuple[str, MockOpenAI], dialect: str
) -> None:
    url, mock = gateway
    mock.enqueue(endless())
    host, port = url.removeprefix("http://").split(":")
    body = orjson.dumps(_body(dialect, MODELS[dialect]))
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST {PATHS[dialect]} HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    assert status_line.startswith(b"HTTP/1.1 200")
    # An abortive close (RST), as a killed client process would do.
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    writer.close()
    ended = await asyncio.to_thread(mock.wait_for_end, 5.0)
    assert ended in DISCONNECTED


def test_gateway_serves_next_request_after_disconnect(gateway: tuple[str, MockOpenAI]) -> None:
    # A connection abandoned mid-stream must not poison the pool for the next request.
    url, mock = gateway
    mock.enqueue(endless())
    with httpx.Client(base_url=url, timeout=10) as client:
        with client.stream("POST", PATHS["openai"], json=_body("openai", "gpt-4o")) as resp:
            next(resp.iter_raw())
        mock.wait_for_end(5.0)
        resp = client.post(PATHS["anthropic"], json={**_body("anthropic", "claude-x")})
    assert resp.status_code == 200
    kinds = [e.event for e in _events(resp.content)]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


# --- errors after the first byte --------------------------------------------------------


def test_upstream_drop_is_in_band_error_for_openai(gateway: tuple[str, MockOpenAI]) -> None:
    url, mock = gateway
    mock.enqueue(drop_after(mock_events("gpt-4o")[:3]))
    resp = httpx.post(url + PATHS["openai"], json=_body("openai", "gpt-4o"), timeout=10)
    assert resp.status_code == 200
    events = _events(resp.content)
    assert [orjson.loads(e.data)["choices"][0]["delta"] for e in events[:3]] == [
        {"role": "assistant", "content": ""},
        {"content": "Let me "},
        {"content": "check "},
    ]
    error = orjson.loads(events[-1].data)["error"]
    assert "'up'" in error["message"]  # names the upstream
    assert error["type"] == "server_error" or error["type"].endswith("error")
    assert "[DONE]" not in [e.data for e in events]  # a failed stream does not claim success
    assert mock.stream_ends == ["dropped"]


def test_upstream_drop_is_in_band_error_for_anthropic(gateway: tuple[str, MockOpenAI]) -> None:
    url, mock = gateway
    mock.enqueue(drop_after(mock_events("claude-x")[:3]))
    resp = httpx.post(url + PATHS["anthropic"], json=_body("anthropic", "claude-x"), timeout=10)
    assert resp.status_code == 200
    events = _events(resp.content)
    kinds = [e.event for e in events]
    assert kinds[0] == "message_start"
    assert "content_block_delta" in kinds
    assert kinds[-1] == "error"
    assert "message_stop" not in kinds
    payload = orjson.loads(events[-1].data)
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "api_error"
    assert "'up'" in payload["error"]["message"]


class _Recording(Upstream):
    """Streams a start and some text, then fails (an error event or an exception);
    records whether its generator was closed."""

    def __init__(self, failure: BaseException | StreamError) -> None:
        super().__init__("rec")
        self.failure = failure
        self.closed = asyncio.Event()
        self.after_failure = False

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        try:
            yield StreamStart(id="msg_1", model=request.model)
            yield BlockStart(0, TextPart(""))
            yield TextDelta(0, "Once upon")
            await asyncio.sleep(0)
            if isinstance(self.failure, StreamError):
                yield self.failure
            else:
                raise self.failure
            self.after_failure = True
            yield TextDelta(0, " a time")  # must never be asked for
        finally:
            self.closed.set()


async def _in_process(upstream: _Recording, dialect: str) -> httpx.Response:
    config = parse_config(
        {"upstreams": {"rec": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "rec"}]}
    )
    app = create_app(config, upstreams={"rec": upstream})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.post(PATHS[dialect], json=_body(dialect, "m"))


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_exception_after_first_byte_is_in_band(dialect: str) -> None:
    upstream = _Recording(RuntimeError("secret internals"))
    resp = await _in_process(upstream, dialect)
    assert resp.status_code == 200
    events = _events(resp.content)
    payload = orjson.loads(events[-1].data)
    if dialect == "anthropic":
        assert events[-1].event == "error"
        assert payload["error"]["type"] == "api_error"
    assert "internal gateway error (RuntimeError)" in payload["error"]["message"]
    assert "secret internals" not in resp.text  # no internals leak to clients
    assert "Once upon" in resp.text
    assert upstream.closed.is_set()


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_error_event_after_first_byte_is_in_band(dialect: str) -> None:
    upstream = _Recording(StreamError(OverloadedError("Overloaded, try later")))
    resp = await _in_process(upstream, dialect)
    assert resp.status_code == 200
    events = _events(resp.content)
    payload = orjson.loads(events[-1].data)
    message = payload["error"]["message"]
    assert message.endswith(f" (request id: {resp.headers['x-request-id']})")
    assert without_request_id(message) == "Overloaded, try later"
    if dialect == "anthropic":
        assert events[-1].event == "error"
        assert payload == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": message},
        }
        assert "message_stop" not in [e.event for e in events]
    else:
        assert "[DONE]" not in [e.data for e in events]
    assert upstream.closed.is_set()
    assert not upstream.after_failure


# --- scrubbing a relayed stream ---------------------------------------------------------


async def test_secret_split_across_relayed_chunks_is_scrubbed() -> None:
    secret = "sk-secret-123"
    config = parse_config(
        {"upstreams": {"f": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "f"}]}
    )
    gateway = Gateway(config, Router(config, build_upstreams(config, None)), [secret])
    data = f'data: {{"error": {{"message": "bad key {secret}s"}}}}\n\nsk-\n\n'.encode()
    for cut in range(len(data) + 1):
        for second_cut in (cut, min(len(data), cut + 5)):
            pieces = [data[:cut], data[cut:second_cut], data[second_cut:]]

            async def chunks(pieces: list[bytes] = pieces) -> AsyncIterator[bytes]:
                for piece in pieces:
                    yield piece

            out = [c async for c in gateway._scrub_stream(chunks())]
            assert b"".join(out) == data.replace(secret.encode(), b"***"), (cut, second_cut)
            assert all(out), "no empty chunks are relayed"
