"""HTTPS_PROXY / HTTP_PROXY / NO_PROXY: upstream calls and the client go through the
proxy that applies (a real forward proxy on a socket records what went through it), and
a NO_PROXY host is reached directly, by the lean pool."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from interlingua.client import AsyncClient
from interlingua.core import Message, Request, TextPart
from interlingua.http_pool.engines import LeanTransport, Transports
from interlingua.proxies import Proxies
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream

from ..forward_proxy import forward_proxy
from .conftest import Stub, json_response, sse_response

REQUEST = Request(model="m", messages=(Message("user", (TextPart("hi"),)),))
COMPLETION: Any = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
CHUNKS = [
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


def answer(stub: Stub) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        if b'"stream":true' in body:
            return await sse_response(request, CHUNKS)
        return json_response(COMPLETION)

    stub.handler = handler


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_rules() -> None:
    proxies = Proxies(
        {
            "http": "http://p:1",
            "https": "proxy.corp:3128",
            "no": "localhost,.internal,10.0.0.1:8000",
        }
    )
    assert proxies.for_url("http://api.example.com/v1") == "http://p:1"
    assert proxies.for_url("https://api.openai.com/v1") == "http://proxy.corp:3128"
    assert proxies.for_url("http://localhost:8000/v1") is None
    assert proxies.for_url("https://llm.internal/v1") is None
    assert proxies.for_url("http://10.0.0.1:8000/v1") is None
    assert proxies.for_url("http://10.0.0.1:9000/v1") == "http://p:1"
    assert not Proxies({}) and not Proxies({"no": "*"})
    assert Proxies({"http": "http://p:1", "no": "*"}).for_url("http://a/") is None


def test_environment_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://p:1")
    monkeypatch.setenv("NO_PROXY", "api.anthropic.com")
    proxies = Proxies()
    monkeypatch.delenv("HTTPS_PROXY")
    assert proxies.for_url("https://api.openai.com/v1") == "http://p:1"
    assert proxies.for_url("https://api.anthropic.com/v1") is None


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_call_goes_through_the_proxy(stub: Stub, stream: bool) -> None:
    answer(stub)
    async with forward_proxy() as proxy:
        user_proxy = proxy.url.replace("http://", "http://user:pw@")
        transports = Transports(proxies=Proxies({"http": user_proxy}))
        upstream = OpenAICompatibleUpstream("u", stub.url + "/v1", transports=transports)
        try:
            assert transports.for_url(upstream.url) is transports.https  # not the lean pool
            if stream:
                text = [e async for e in upstream.stream(REQUEST)]
                assert text
            else:
                assert (await upstream.complete(REQUEST)).parts == (TextPart("hi"),)
        finally:
            await transports.aclose()
    assert proxy.targets == [stub.url + "/v1/chat/completions"]
    assert proxy.headers[0]["proxy-authorization"] == "Basic dXNlcjpwdw=="
    assert len(stub.seen) == 1 and "proxy-authorization" not in stub.seen[0].headers


async def test_no_proxy_host_goes_direct_through_the_lean_pool(stub: Stub) -> None:
    answer(stub)
    async with forward_proxy() as proxy:
        transports = Transports(proxies=Proxies({"http": proxy.url, "no": "127.0.0.1"}))
        upstream = OpenAICompatibleUpstream("u", stub.url + "/v1", transports=transports)
        try:
            assert isinstance(transports.for_url(upstream.url), LeanTransport)
            await upstream.complete(REQUEST)
        finally:
            await transports.aclose()
    assert proxy.targets == []
    assert len(stub.seen) == 1


async def test_gateway_transports_read_the_environment(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer(stub)
    async with forward_proxy() as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        transports = Transports()
        upstream = OpenAICompatibleUpstream("u", stub.url + "/v1", transports=transports)
        try:
            await upstream.complete(REQUEST)
        finally:
            await transports.aclose()
    assert proxy.targets == [stub.url + "/v1/chat/completions"]


@pytest.mark.parametrize("bypass", [False, True])
async def test_client_honours_the_environment(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, bypass: bool
) -> None:
    answer(stub)
    async with forward_proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        if bypass:
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with AsyncClient(stub.url + "/v1", "k", model="m", max_retries=0) as client:
            assert (await client.chat("hello")).text == "hi"
            async with client.stream("hello") as events:
                async for _ in events:
                    pass
    assert proxy.targets == ([] if bypass else [stub.url + "/v1/chat/completions"] * 2)
    assert len(stub.seen) == 2
