"""Upstream failures, end to end over real sockets: status mapping and key hygiene.

A live gateway (uvicorn on a thread) sits in front of a mock OpenAI-compatible upstream
(aiohttp on its own thread). OpenAI clients take the passthrough path (same dialect, no
model options) and Anthropic clients the translated one, so both code paths are covered
for every failure: HTTP error statuses, ``Retry-After``, overload, refused connections,
and an upstream that echoes our API key back -- which must never reach a client or a log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app

from ..live_server import live_server
from ..request_ids import without_request_id
from .mock_upstream import MockOpenAI, drop_after, endless, free_port, mock_openai, status
from .mock_upstream import completion as mock_completion
from .mock_upstream import stream_events as mock_events

KEY = "sk-secret-123"
KEY_ENV = "INTERLINGUA_TEST_UPSTREAM_KEY"
CLIENT_KEY = "client-key-456"
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": CLIENT_KEY}
OPENAI_HEADERS = {"authorization": f"Bearer {CLIENT_KEY}"}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[str, MockOpenAI]]:
    """(gateway URL, mock upstream); the key is set only while the module runs."""
    with pytest.MonkeyPatch.context() as mp, mock_openai() as mock:
        mp.setenv(KEY_ENV, KEY)
        config = parse_config(
            {
                "upstreams": {
                    "up": {"kind": "openai", "base_url": mock.base_url, "api_key_env": KEY_ENV},
                    "dead": {
                        "kind": "openai",
                        "base_url": f"http://127.0.0.1:{free_port()}/v1",
                        "api_key_env": KEY_ENV,
                    },
                },
                "models": [
                    {"name": "gpt-4o", "upstream": "up", "model": "up-model"},
                    {"name": "claude-x", "upstream": "up", "model": "up-model"},
                    {"name": "dead-gpt", "upstream": "dead"},
                    {"name": "dead-claude", "upstream": "dead"},
                ],
            }
        )
        with live_server(create_app(config)) as url:
            yield url, mock


@pytest.fixture
def gateway(stack: tuple[str, MockOpenAI]) -> Iterator[tuple[httpx.Client, MockOpenAI]]:
    url, mock = stack
    mock.script.clear()
    mock.stream_ends.clear()
    with httpx.Client(base_url=url, timeout=10) as client:
        yield client, mock


def call(
    client: httpx.Client, dialect: str, *, stream: bool = False, model: str | None = None
) -> httpx.Response:
    """One generation request; OpenAI -> passthrough, Anthropic -> translated."""
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    if dialect == "openai":
        body: dict[str, Any] = {"model": model or "gpt-4o", "messages": messages}
        path, headers = "/v1/chat/completions", OPENAI_HEADERS
    else:
        body = {"model": model or "claude-x", "max_tokens": 100, "messages": messages}
        path, headers = "/v1/messages", ANTHROPIC_HEADERS
    if stream:
        body["stream"] = True
    return client.post(path, json=body, headers=headers)


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert KEY not in text
        assert KEY[3:] not in text  # not even partly


def openai_error(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


ECHOED_KEY = openai_error(
    f"Incorrect API key provided: {KEY}. You can find your API key at "
    "https://platform.openai.com/account/api-keys.",
    "invalid_request_error",
    "invalid_api_key",
)


# --- the key never leaks ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_echoed_key_is_scrubbed_from_upstream_401(
    gateway: tuple[httpx.Client, MockOpenAI],
    caplog: pytest.LogCaptureFixture,
    dialect: str,
    stream: bool,
) -> None:
    client, mock = gateway
    caplog.set_level(logging.DEBUG)
    mock.enqueue(status(401, ECHOED_KEY))
    resp = call(client, dialect, stream=stream)
    assert resp.status_code == 401, resp.text
    assert "Incorrect API key provided: ***" in resp.text
    assert_no_key(resp.text, str(resp.headers), caplog.text)
    assert '"POST /v1/' in caplog.text  # the gateway thread's logs were captured
    if dialect == "anthropic":
        assert resp.json()["error"]["type"] == "authentication_error"
    else:
        assert resp.json()["error"]["code"] == "invalid_api_key"
    # Our key went upstream; the client's own credentials did not.
    sent = mock.received[-1].headers
    assert sent["authorization"] == f"Bearer {KEY}"
    assert CLIENT_KEY not in str(sent)


def _error_event(message: str) -> bytes:
    return b"data: " + orjson.dumps(openai_error(message, "server_error")) + b"\n\n"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_echoed_key_is_scrubbed_mid_stream(
    gateway: tuple[httpx.Client, MockOpenAI],
    caplog: pytest.LogCaptureFixture,
    dialect: str,
) -> None:
    client, mock = gateway
    caplog.set_level(logging.DEBUG)
    error = _error_event(f"upstream auth glitch for key {KEY}, retry")
    mock.enqueue(drop_after([*mock_events("up-model")[:3], error]))
    resp = call(client, dialect, stream=True)
    assert resp.status_code == 200
    assert "auth glitch for key ***" in resp.text
    assert_no_key(resp.text, caplog.text)
    if dialect == "anthropic":
        assert "event: error" in resp.text
    else:
        # relayed as the upstream sent it; the connection drop after it changes nothing
        assert resp.text.count('"error"') == 1


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_echoed_key_is_scrubbed_from_a_successful_answer(
    gateway: tuple[httpx.Client, MockOpenAI], dialect: str
) -> None:
    client, mock = gateway
    answer = mock_completion("up-model")
    answer["choices"][0]["message"]["content"] = f"I was called with {KEY}."
    mock.enqueue(status(200, answer))
    resp = call(client, dialect)
    assert resp.status_code == 200, resp.text
    assert "I was called with ***." in resp.text
    assert_no_key(resp.text)


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_refused_connection_is_502_naming_upstream(
    gateway: tuple[httpx.Client, MockOpenAI],
    caplog: pytest.LogCaptureFixture,
    dialect: str,
) -> None:
    client, _ = gateway
    caplog.set_level(logging.DEBUG)
    model = "dead-gpt" if dialect == "openai" else "dead-claude"
    for stream in (False, True):
        resp = call(client, dialect, stream=stream, model=model)
        assert resp.status_code == 502, resp.text
        body = resp.json()
        message = body["error"]["message"]
        assert "'dead'" in message and "refused" in message
        if dialect == "anthropic":
            assert body["error"]["type"] == "api_error"
        assert_no_key(resp.text, caplog.text)


# --- status mapping ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_rate_limit_relays_retry_after(
    gateway: tuple[httpx.Client, MockOpenAI], dialect: str, stream: bool
) -> None:
    client, mock = gateway
    body = openai_error("Rate limit reached for requests", "requests", "rate_limit_exceeded")
    mock.enqueue(status(429, body, {"retry-after": "7"}))
    resp = call(client, dialect, stream=stream)
    assert resp.status_code == 429, resp.text
    assert resp.headers["retry-after"] == "7"
    error = resp.json()["error"]
    assert "Rate limit reached" in error["message"]
    if dialect == "anthropic":
        assert error["type"] == "rate_limit_error"


@pytest.mark.parametrize("upstream_status", [529, 503])
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_overloaded(
    gateway: tuple[httpx.Client, MockOpenAI], dialect: str, upstream_status: int
) -> None:
    client, mock = gateway
    mock.enqueue(status(upstream_status, openai_error("Overloaded", "overloaded_error")))
    resp = call(client, dialect)
    error = resp.json()["error"]
    assert "Overloaded" in error["message"]
    if dialect == "anthropic":
        assert resp.status_code == 529, resp.text
        assert error["type"] == "overloaded_error"
    else:
        # OpenAI has no 529; its SDK knows 503 as "try again later".
        assert resp.status_code == 503, resp.text


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_server_error_is_500(gateway: tuple[httpx.Client, MockOpenAI], dialect: str) -> None:
    client, mock = gateway
    mock.enqueue(status(500, openai_error("The server had an error", "server_error")))
    resp = call(client, dialect)
    assert resp.status_code == 500, resp.text
    error = resp.json()["error"]
    assert "The server had an error" in error["message"]
    if dialect == "anthropic":
        assert error["type"] == "api_error"
        assert resp.json()["request_id"] == resp.headers["x-request-id"]


def test_bad_request_keeps_param_on_passthrough(gateway: tuple[httpx.Client, MockOpenAI]) -> None:
    client, mock = gateway
    body = openai_error("Invalid value for 'temperature'", "invalid_request_error")
    body["error"]["param"] = "temperature"
    mock.enqueue(status(400, body))
    resp = call(client, "openai")
    assert resp.status_code == 400
    relayed = resp.json()
    # the same dialect: relayed as is, but for the gateway's request id after the message
    message = relayed["error"]["message"]
    assert message.endswith(f" (request id: {resp.headers['x-request-id']})")
    relayed["error"]["message"] = without_request_id(message)
    assert relayed == body


def test_upstream_stream_closed_after_in_band_error(
    gateway: tuple[httpx.Client, MockOpenAI],
) -> None:
    # Translated path: once the upstream reports an error mid-stream, the gateway stops
    # reading and closes the upstream response even though the upstream keeps sending.
    client, mock = gateway
    mock.enqueue(endless(after=[_error_event("model crashed")]))
    resp = call(client, "anthropic", stream=True)
    assert resp.status_code == 200
    assert "event: error" in resp.text and "model crashed" in resp.text
    assert mock.wait_for_end(5.0) in ("ConnectionResetError", "CancelledError")
