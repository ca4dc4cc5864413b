"""The HTTP engines (``http_pool/engines.py``): which one a URL gets, the lean engine's
encoded heads, and aiohttp's errors mapped onto the pool's ``TransportError`` tree."""

from __future__ import annotations

import aiohttp
import pytest

from interlingua.config import TimeoutConfig
from interlingua.http_pool import (
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    DeadlineExceeded,
    InvalidTarget,
    Pool,
    ReadTimeout,
)
from interlingua.http_pool.engines import (
    ENGINE_ENV,
    AiohttpTransport,
    LeanTransport,
    Transports,
    aiohttp_error,
)
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream

from .test_pool import KEY, URL, FakeNet

# --- picking an engine ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "url", "engine"),
    [
        (None, "http://127.0.0.1:8000/v1", LeanTransport),
        ("lean", "http://127.0.0.1:8000/v1", LeanTransport),
        (" AIOHTTP ", "http://127.0.0.1:8000/v1", AiohttpTransport),
        (None, "https://api.openai.com/v1", AiohttpTransport),
        ("aiohttp", "https://api.openai.com/v1", AiohttpTransport),
    ],
)
def test_transports_pick_by_scheme_and_honour_the_variable(
    monkeypatch: pytest.MonkeyPatch, choice: str | None, url: str, engine: type
) -> None:
    if choice is None:
        monkeypatch.delenv(ENGINE_ENV, raising=False)
    else:
        monkeypatch.setenv(ENGINE_ENV, choice)
    engines = Transports()
    assert type(engines.for_url(url)) is engine
    if engine is AiohttpTransport:
        # one aiohttp engine (one session) for both schemes
        assert engines.for_url(url) is engines.https


def test_the_variable_is_read_once_when_transports_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    engines = Transports()
    monkeypatch.setenv(ENGINE_ENV, "aiohttp")
    assert type(engines.for_url("http://h/v1")) is LeanTransport
    up = OpenAICompatibleUpstream("u", "http://h/v1", transports=engines)
    assert up._transport is engines.http


# --- the lean engine ------------------------------------------------------------------


async def test_lean_transport_keeps_one_head_per_header_set() -> None:
    net = FakeNet()
    lean = LeanTransport(Pool(opener=net.open))  # type: ignore[arg-type]
    limits = TimeoutConfig(5, 5)
    first, second = {"authorization": "Bearer a"}, {"authorization": "Bearer b"}
    for headers in (first, second, first):
        answer = await lean.post(URL, b"{}", headers, timeout=limits)
        await answer.read()
        answer.release()
    assert [b"Bearer a" in r for r in net.requests] == [True, False, True]
    assert len(net.transports) == 1  # one pool: the connection serves both
    await lean.aclose()
    assert lean._pool.idle_count(KEY) == 0


async def test_a_bound_lean_engine_posts_its_head_and_refuses_a_bad_header_at_once() -> None:
    net = FakeNet()
    lean = LeanTransport(Pool(opener=net.open))  # type: ignore[arg-type]
    post = lean.bind(URL, {"authorization": "Bearer a"}, timeout=TimeoutConfig(5, 5))
    for _ in range(2):
        answer = await post(b"{}")
        assert await answer.read() == b'{"a":1}'
        answer.release()
    assert [b"Bearer a" in r for r in net.requests] == [True, True]
    assert len(net.transports) == 1
    with pytest.raises(InvalidTarget):
        lean.bind(URL, {"x-bad": "a\r\nhost: evil"}, timeout=TimeoutConfig(5, 5))
    await lean.aclose()


# --- the aiohttp engine's errors ------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "mapped"),
    [
        (aiohttp.ConnectionTimeoutError(), ConnectTimeout),
        (TimeoutError(), DeadlineExceeded),
        (aiohttp.SocketTimeoutError(), ReadTimeout),
        (aiohttp.ServerDisconnectedError(), ConnectionLost),
        (aiohttp.ClientPayloadError("Response payload is not completed"), ConnectionLost),
    ],
)
def test_aiohttp_errors_map_onto_the_tree(error: Exception, mapped: type) -> None:
    assert type(aiohttp_error(error)) is mapped


def test_aiohttp_connect_failure_keeps_its_os_error() -> None:
    refused = ConnectionRefusedError(111, "Connection refused")
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None)
    mapped = aiohttp_error(aiohttp.ClientConnectorError(key, refused))
    assert isinstance(mapped, ConnectFailed) and mapped.os_error is refused
