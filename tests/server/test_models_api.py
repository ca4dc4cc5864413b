"""``GET /v1/models`` with each model's ``kind``, and ``GET /v1/models/{id}``: both SDKs'
shapes, a key's globs, the 404. In process (httpx.ASGITransport), with the SDKs' own
``models.list`` / ``models.retrieve``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import httpx
import openai
import pytest

from interlingua.config import ConfigError, parse_config
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

KEY_ALL, KEY_EMBED = "sk-models-all", "sk-models-embed"


class EmbeddingFake(FakeUpstream):
    """An upstream that serves embedding models only (as a local embedding model does)."""

    model_kind = "embedding"


@pytest.fixture
async def transport(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.ASGITransport]:
    monkeypatch.setenv("MODELS_ALL", KEY_ALL)
    monkeypatch.setenv("MODELS_EMBED", KEY_EMBED)
    config = parse_config(
        {
            "upstreams": {"chat": {"kind": "fake"}, "emb": {"kind": "fake"}},
            "models": [
                {"name": "gpt-x", "upstream": "chat"},
                {"name": "local-embed", "upstream": "emb"},
                {"name": "text-embedding-3-small", "upstream": "chat", "kind": "embedding"},
            ],
            "keys": [
                {"name": "all", "key_env": "MODELS_ALL"},
                {"name": "embed", "key_env": "MODELS_EMBED", "models": ["*embed*"]},
            ],
        }
    )
    upstreams = {"chat": FakeUpstream("chat"), "emb": EmbeddingFake("emb")}
    yield httpx.ASGITransport(app=create_app(config, upstreams=upstreams))


def _openai(transport: httpx.ASGITransport, key: str) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=transport, base_url="http://gw/v1")
    return openai.AsyncOpenAI(base_url="http://gw/v1", api_key=key, http_client=http)


async def test_the_list_says_each_model_s_kind(transport: httpx.ASGITransport) -> None:
    async with _openai(transport, KEY_ALL) as client:
        page = await client.models.list()
    kinds = {m.id: m.model_extra["kind"] for m in page.data}  # type: ignore[index]
    assert kinds == {
        "gpt-x": "chat",
        "local-embed": "embedding",
        "text-embedding-3-small": "embedding",
    }


async def test_one_model(transport: httpx.ASGITransport) -> None:
    async with _openai(transport, KEY_ALL) as client:
        model = await client.models.retrieve("local-embed")
        assert (model.id, model.object, model.model_extra) == (
            "local-embed",
            "model",
            {"kind": "embedding"},
        )
        with pytest.raises(openai.NotFoundError) as caught:
            await client.models.retrieve("nope")
    assert caught.value.code == "model_not_found"


async def test_a_key_sees_only_its_models(transport: httpx.ASGITransport) -> None:
    async with _openai(transport, KEY_EMBED) as client:
        page = await client.models.list()
        assert [m.id for m in page.data] == ["local-embed", "text-embedding-3-small"]
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("gpt-x")


async def test_the_anthropic_shape(transport: httpx.ASGITransport) -> None:
    headers = {"x-api-key": KEY_ALL, "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        one = (await http.get("/v1/models/gpt-x", headers=headers)).json()
        listed = (await http.get("/v1/models", headers=headers)).json()
        missing = await http.get("/v1/models/nope", headers=headers)
    model = anthropic.types.ModelInfo.model_validate(one)
    assert (model.id, model.type, one["kind"]) == ("gpt-x", "model", "chat")
    assert [m["kind"] for m in listed["data"]] == ["chat", "embedding", "embedding"]
    assert (missing.status_code, missing.json()["error"]["type"]) == (404, "not_found_error")


def test_a_bad_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"models\[0\]\.kind"):
        parse_config(
            {
                "upstreams": {"f": {"kind": "fake"}},
                "models": [{"name": "m", "upstream": "f", "kind": "rerank"}],
            }
        )
