"""The small endpoints: model lists in both shapes, health, ``HEAD /``, ``?beta=true``,
and ``count_tokens``. In process (httpx.ASGITransport) in front of a FakeUpstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic.types
import httpx
import openai.types
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

CONFIG = parse_config(
    {
        "upstreams": {"fake": {"kind": "fake"}},
        "models": [
            {"name": "claude-sonnet-4-5", "upstream": "fake", "model": "qwen3"},
            {"name": "gpt-4o", "upstream": "fake"},
            {"name": "claude-sonnet-4-5", "upstream": "fake", "model": "backup"},
            {"name": "*", "upstream": "fake"},
        ],
    }
)
NAMES = ["claude-sonnet-4-5", "gpt-4o"]
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(CONFIG, upstreams={"fake": FakeUpstream("fake")})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
        yield c


@pytest.mark.parametrize("path", ["/v1/models", "/models"])
async def test_models_openai_shape(client: httpx.AsyncClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.status_code == 200
    assert resp.headers["x-request-id"].startswith("req_")
    body = resp.json()
    assert body["object"] == "list"
    # Listed once each, in config order, without the wildcard.
    assert [m["id"] for m in body["data"]] == NAMES
    for model in body["data"]:
        openai.types.Model.model_validate(model)
        assert model["object"] == "model" and isinstance(model["created"], int)


async def test_models_anthropic_shape(client: httpx.AsyncClient) -> None:
    resp = await client.get("/v1/models", headers=ANTHROPIC_HEADERS)
    assert resp.status_code == 200
    body = resp.json()
    assert [m["id"] for m in body["data"]] == NAMES
    assert body["has_more"] is False
    assert (body["first_id"], body["last_id"]) == ("claude-sonnet-4-5", "gpt-4o")
    for model in body["data"]:
        anthropic.types.ModelInfo.model_validate(model)
        assert model["type"] == "model"
        assert model["created_at"].endswith("Z")


async def test_health_and_root(client: httpx.AsyncClient) -> None:
    resp = await client.get("/health")
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}
    head = await client.head("/")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["x-request-id"].startswith("req_")
    assert (await client.get("/")).json()["status"] == "ok"


async def test_messages_beta_query_is_accepted(client: httpx.AsyncClient) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "beta hello"}],
    }
    resp = await client.post(
        "/v1/messages?beta=true",
        json=body,
        headers={**ANTHROPIC_HEADERS, "anthropic-beta": "interleaved-thinking-2025-05-14"},
    )
    assert resp.status_code == 200, resp.text
    message = anthropic.types.Message.model_validate(resp.json())
    assert message.content[0].type == "text"
    assert message.content[0].text == "echo: beta hello"
    assert message.model == "claude-sonnet-4-5"


@pytest.mark.parametrize("path", ["/v1/messages/", "/v1/chat/completions/"])
async def test_a_trailing_slash_is_served_not_redirected(
    client: httpx.AsyncClient, path: str
) -> None:
    # A 307 would carry a Location built from the client's Host header.
    body = {"model": "gpt-4o", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post(path, json=body, headers={"host": "evil.example"})
    assert resp.status_code == 200, resp.text
    assert "location" not in resp.headers


async def test_other_paths_with_a_slash_are_not_redirected(client: httpx.AsyncClient) -> None:
    resp = await client.get("/v1/models/", headers={"host": "evil.example"})
    assert resp.status_code == 404 and "location" not in resp.headers


async def _count(client: httpx.AsyncClient, body: dict[str, Any]) -> int:
    resp = await client.post(
        "/v1/messages/count_tokens?beta=true", json=body, headers=ANTHROPIC_HEADERS
    )
    assert resp.status_code == 200, resp.text
    payload = resp.json()
    assert set(payload) == {"input_tokens"}
    count = payload["input_tokens"]
    assert isinstance(count, int)
    return count


async def test_count_tokens_grows_with_input(client: httpx.AsyncClient) -> None:
    def body(text: str, **extra: Any) -> dict[str, Any]:
        return {
            "model": "claude-sonnet-4-5",
            "messages": [{"role": "user", "content": text}],
            **extra,
        }

    short = await _count(client, body("Hello"))
    longer = await _count(client, body("Hello " * 200))
    with_system = await _count(client, body("Hello", system="You are terse. " * 50))
    tool = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
    with_tools = await _count(client, body("Hello", tools=[tool]))
    assert short > 0
    assert longer > short + 200  # ~1200 chars is ~300 tokens by any estimate
    assert with_system > short
    assert with_tools > short
    # Unknown model names go to the wildcard, as they do for /v1/messages.
    assert await _count(client, {**body("Hello"), "model": "anything"}) == short
