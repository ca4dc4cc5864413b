"""The server's one error boundary and its one table of generation routes.

In process (httpx.ASGITransport) in front of a FakeUpstream. A bug anywhere in a
handler's work must come back as the same dialect-shaped 500 on every route, logged with
its traceback and naming nothing but the exception's type; and every generation route
must be in both dispatch tables (the fast path serves it, Starlette answers 405 for the
other methods).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from interlingua.config import parse_config
from interlingua.routing import Router
from interlingua.server import create_app
from interlingua.server.app import GENERATION_ROUTES
from interlingua.server.gateway import Gateway
from interlingua.server.middleware import Front
from interlingua.upstreams.fake import FakeUpstream

from ..request_ids import without_request_id

CONFIG = parse_config(
    {"upstreams": {"fake": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "fake"}]}
)
ANTHROPIC_VERSION = {"anthropic-version": "2023-06-01"}
DETAIL = "db password is hunter2"  # what a bug's message may hold: never shown

OPENAI_500 = {
    "error": {
        "message": "internal gateway error (RuntimeError)",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}
ANTHROPIC_500 = {
    "type": "error",
    "error": {"type": "api_error", "message": OPENAI_500["error"]["message"]},
}


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(DETAIL)


async def _aboom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(DETAIL)


@pytest.fixture
async def client(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    # The work behind every route fails the way a bug would.
    monkeypatch.setattr(Gateway, "generate", _aboom)
    monkeypatch.setattr(Gateway, "count_tokens", _aboom)
    monkeypatch.setattr(Router, "model_names", _boom)
    app = create_app(CONFIG, upstreams={"fake": FakeUpstream("fake")})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
        yield c


BODY = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("method", "path", "headers", "expected"),
    [
        ("POST", "/v1/chat/completions", {}, OPENAI_500),
        ("POST", "/chat/completions", {}, OPENAI_500),
        ("POST", "/v1/chat/completions/", {}, OPENAI_500),
        ("POST", "/v1/messages", ANTHROPIC_VERSION, ANTHROPIC_500),
        ("POST", "/v1/messages/count_tokens", ANTHROPIC_VERSION, ANTHROPIC_500),
        ("GET", "/v1/models", {}, OPENAI_500),
        ("GET", "/models", {}, OPENAI_500),
        ("GET", "/v1/models", ANTHROPIC_VERSION, ANTHROPIC_500),
    ],
)
async def test_a_bug_is_the_same_dialect_shaped_500_on_every_route(
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    headers: dict[str, str],
    expected: dict[str, Any],
) -> None:
    caplog.set_level(logging.ERROR, logger="interlingua.server")
    json = BODY if method == "POST" else None
    resp = await client.request(method, path, json=json, headers=headers)
    assert resp.status_code == 500, resp.text
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    if "request_id" in body:  # Anthropic's body carries the request id
        assert body.pop("request_id") == resp.headers["x-request-id"]
    # and every message names it
    message = body["error"]["message"]
    assert message.endswith(f" (request id: {resp.headers['x-request-id']})")
    body["error"]["message"] = without_request_id(message)
    assert body == expected
    assert DETAIL not in resp.text
    [record] = [r for r in caplog.records if r.getMessage().startswith("unexpected failure")]
    assert record.getMessage() == f"unexpected failure on {path}"
    assert record.exc_info is not None and DETAIL in str(record.exc_info[1])


def test_every_generation_route_is_in_both_tables() -> None:
    app = create_app(CONFIG, upstreams={"fake": FakeUpstream("fake")})
    assert isinstance(app, Front)
    starlette_routes = {
        r.path: r
        for r in app.app.router.routes  # type: ignore[attr-defined]
        if isinstance(r, Route)
    }
    assert {path for _, path in app.fast_routes} == set(GENERATION_ROUTES)
    for path, endpoint in GENERATION_ROUTES.items():
        fast = app.fast_routes[("POST", path)]
        assert fast.__func__ is endpoint  # type: ignore[attr-defined]
        route = starlette_routes[path]
        assert route.methods is not None and "POST" in route.methods
        assert route.endpoint.__func__ is endpoint  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", list(GENERATION_ROUTES))
async def test_another_method_on_a_generation_route_is_405(path: str) -> None:
    app = create_app(CONFIG, upstreams={"fake": FakeUpstream("fake")})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        resp = await client.get(path)
    assert resp.status_code == 405, resp.text
    assert "POST" in resp.headers["allow"]
