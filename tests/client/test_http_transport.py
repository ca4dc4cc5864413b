"""client/_transport.py's HttpTransport: which engine a client posts with, and its
connection bound with either engine (its typed errors are test_client_errors.py's, run
with both engines too)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from interlingua.client import APIConnectionError, AsyncClient, InternalServerError
from interlingua.client._transport import HttpTransport
from interlingua.dialects import get_dialect
from interlingua.http_pool.engines import ENGINE_ENV, AiohttpTransport, LeanTransport

from .conftest import Drop, FakeServer, Reply, Stream, error_body, openai_body, openai_chunks

OPENAI = get_dialect("openai")
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
ENGINES = {"lean": LeanTransport, "aiohttp": AiohttpTransport}


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_VARIABLES, *(n.lower() for n in PROXY_VARIABLES), ENGINE_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=list(ENGINES))
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test with each engine for http:// (the lean pool; aiohttp by the variable)."""
    monkeypatch.setenv(ENGINE_ENV, request.param)
    return str(request.param)


async def test_plain_http_goes_through_the_lean_pool_and_the_rest_through_aiohttp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def engine(url: str, **options: object) -> type:
        return type(HttpTransport(OPENAI, url, "sk", **options)._engine)  # type: ignore[arg-type]

    assert engine("http://127.0.0.1:8000/v1") is LeanTransport
    assert engine("https://api.openai.com/v1") is AiohttpTransport  # (TLS)
    async with aiohttp.ClientSession() as session:
        assert engine("http://127.0.0.1:8000/v1", session=session) is AiohttpTransport
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert engine("http://10.0.0.5:8000/v1") is AiohttpTransport  # (the proxy posts)
    monkeypatch.setenv("NO_PROXY", "10.0.0.5")
    assert engine("http://10.0.0.5:8000/v1") is LeanTransport  # (no proxy for that host)
    monkeypatch.setenv(ENGINE_ENV, "aiohttp")
    assert engine("http://10.0.0.5:8000/v1") is AiohttpTransport


def test_a_header_that_cannot_be_sent_is_refused_when_the_client_is_made(engine: str) -> None:
    with pytest.raises(ValueError, match="invalid character in HTTP header 'x-bad'"):
        AsyncClient("http://127.0.0.1:8000/v1", headers={"x-bad": "a\r\nhost: evil"})


async def test_at_most_connections_requests_hold_a_connection(
    server: FakeServer, engine: str
) -> None:
    server.hold = 0.05
    async with AsyncClient(server.url + "/v1", "sk", model="m", connections=3) as client:
        assert isinstance(client._transport, HttpTransport)
        assert type(client._transport._engine) is ENGINES[engine]
        results = await asyncio.gather(*(client.chat(f"q{i}") for i in range(10)))
    assert [r.text for r in results] == [f"echo: q{i}" for i in range(10)]
    assert server.max_in_flight == 3


async def test_every_way_an_answer_ends_gives_its_connection_back(
    server: FakeServer, engine: str
) -> None:
    """One connection: a status error, a dropped connection, a stream read halfway and a
    stream cut by the server each free it, or the last call would wait forever."""
    async with (
        asyncio.timeout(15),
        AsyncClient(server.url + "/v1", "sk", model="m", connections=1, max_retries=0) as client,
    ):
        server.push(Reply(error_body("boom", "server_error"), status=500))
        with pytest.raises(InternalServerError):
            await client.chat("a")
        server.push(Drop())
        with pytest.raises(APIConnectionError):
            await client.chat("b")
        server.push(Stream(openai_chunks(["one ", "two ", "three"]), delay=0.05))
        async with client.stream("c") as stream:
            async for _ in stream:
                break  # (left halfway)
        server.push(Stream(openai_chunks(["one ", "two"])[:2], cut=True))
        with pytest.raises(APIConnectionError):
            async with client.stream("d") as stream:
                async for _ in stream:
                    pass
        server.push(Reply(openai_body("last")))
        result = await client.chat("e")
    assert result.text == "last"


async def test_a_closed_client_says_so(server: FakeServer, engine: str) -> None:
    client = AsyncClient(server.url + "/v1", "sk", model="m")
    assert (await client.chat("a")).text == "echo: a"
    await client.aclose()
    with pytest.raises(RuntimeError, match="this client is closed; create a new one"):
        await client.chat("b")
