"""Bad requests get the caller's own error shape, the right status, and a useful message.

Every case runs against both generation endpoints, in process (httpx.ASGITransport) in
front of a FakeUpstream: ``/v1/chat/completions`` must answer OpenAI's ``{"error": {...}}``
and ``/v1/messages`` Anthropic's ``{"type": "error", "error": {...}, "request_id": ...}``
with ``request_id`` equal to the ``x-request-id`` header. The message (or OpenAI's
``param``) must name what is wrong, so a caller can fix the request without guessing.
Gateway auth (``server.api_keys``) is covered here too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
PATHS = {"openai": OPENAI_PATH, "anthropic": ANTHROPIC_PATH}
# 0.001 MB = 1048 bytes: every ordinary body here fits, a 5 kB one does not.
LIMIT_BYTES = 1048


def _config(**server: Any) -> Any:
    return parse_config(
        {
            "server": {"max_body_mb": 0.001, **server},
            "upstreams": {"fake": {"kind": "fake"}},
            "models": [{"name": "m", "upstream": "fake"}],
        }
    )


def _ok_body(dialect: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if dialect == "anthropic":
        body["max_tokens"] = 16
    return body


async def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(_config(), upstreams={"fake": FakeUpstream("fake")})
    async with await _client(app) as c:
        yield c


def assert_error(
    resp: httpx.Response, dialect: str, status: int, names: str, error_type: str | None = None
) -> dict[str, Any]:
    """Check status, shape, request id and that ``names`` is in the message or param."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    request_id = resp.headers["x-request-id"]
    assert request_id.startswith("req_")
    body = resp.json()
    if dialect == "openai":
        assert set(body) == {"error"}, body
        error = body["error"]
        assert {"message", "type", "param", "code"} <= set(error)
        said = f"{error['message']} {error['param']}"
    else:
        assert set(body) == {"type", "error", "request_id"}, body
        assert body["type"] == "error"
        assert body["request_id"] == request_id
        error = body["error"]
        assert set(error) == {"type", "message"}
        said = error["message"]
    assert isinstance(error["message"], str) and error["message"]
    assert names.lower() in said.lower(), said
    if error_type is not None:
        assert error["type"] == error_type
    return dict(error)


def _without(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def edit(body: dict[str, Any]) -> dict[str, Any]:
        del body[key]
        return body

    return edit


def _with(key: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def edit(body: dict[str, Any]) -> dict[str, Any]:
        body[key] = value
        return body

    return edit


# (case id, raw bytes or an edit of the valid body, status, what the message must name)
BAD_BODIES: list[tuple[str, bytes | Callable[[dict[str, Any]], dict[str, Any]], int, str]] = [
    ("malformed-json", b'{"model": "m",', 400, "not valid JSON"),
    ("json-array", b'[{"model": "m"}]', 400, "JSON object"),
    ("empty-body", b"", 400, "empty"),
    ("messages-string", _with("messages", "hi"), 400, "messages"),
    ("max-tokens-string", _with("max_tokens", "16"), 400, "max_tokens"),
    ("temperature-string", _with("temperature", "hot"), 400, "temperature"),
    ("model-number", _with("model", 7), 400, "model"),
    ("missing-model", _without("model"), 400, "model"),
    ("missing-messages", _without("messages"), 400, "messages"),
    ("empty-messages", _with("messages", []), 400, "messages"),
    (
        "part-without-type",
        _with("messages", [{"role": "user", "content": [{"text": "x"}]}]),
        400,
        "messages[0].content[0].type",
    ),
    (
        "part-text-number",
        _with("messages", [{"role": "user", "content": [{"type": "text", "text": 5}]}]),
        400,
        "messages[0].content[0].text",
    ),
    (
        "invalid-utf8",
        b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\xff\xfe"}]}',
        400,
        "UTF-8",
    ),
]


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("case", "edit", "status", "names"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES]
)
async def test_bad_body(
    client: httpx.AsyncClient, dialect: str, case: str, edit: Any, status: int, names: str
) -> None:
    content = edit if isinstance(edit, bytes) else orjson.dumps(edit(_ok_body(dialect)))
    resp = await client.post(
        PATHS[dialect], content=content, headers={"content-type": "application/json"}
    )
    assert_error(resp, dialect, status, names, "invalid_request_error")


async def test_anthropic_requires_max_tokens(client: httpx.AsyncClient) -> None:
    body = _ok_body("anthropic")
    del body["max_tokens"]
    resp = await client.post(ANTHROPIC_PATH, json=body)
    assert_error(resp, "anthropic", 400, "max_tokens", "invalid_request_error")
    # The OpenAI dialect has no such requirement: the same body without it is fine there.
    ok = await client.post(OPENAI_PATH, json=_ok_body("openai"))
    assert ok.status_code == 200
    assert ok.json()["choices"][0]["message"]["content"] == "echo: hi"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_unknown_model_is_404(client: httpx.AsyncClient, dialect: str) -> None:
    body = {**_ok_body(dialect), "model": "no-such-model"}
    resp = await client.post(PATHS[dialect], json=body)
    error = assert_error(resp, dialect, 404, "no-such-model")
    if dialect == "openai":
        assert error["code"] == "model_not_found" and error["param"] == "model"
    else:
        assert error["type"] == "not_found_error"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_body_over_limit_with_content_length(client: httpx.AsyncClient, dialect: str) -> None:
    body = _ok_body(dialect)
    body["messages"][0]["content"] = "x" * 5000
    resp = await client.post(PATHS[dialect], json=body)
    assert resp.request.headers["content-length"] == str(len(resp.request.content))
    expected = "invalid_request_error" if dialect == "openai" else "request_too_large"
    error = assert_error(resp, dialect, 413, "larger than the limit", expected)
    assert str(LIMIT_BYTES) in error["message"]  # names the limit, not "0 MB"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_chunked_body_over_limit(client: httpx.AsyncClient, dialect: str) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b" " * 300

    resp = await client.post(PATHS[dialect], content=chunks())
    assert "content-length" not in resp.request.headers
    assert resp.request.headers["transfer-encoding"] == "chunked"
    assert_error(resp, dialect, 413, "larger than the limit")


async def test_body_at_limit_is_accepted(client: httpx.AsyncClient) -> None:
    body = _ok_body("openai")
    raw = orjson.dumps(body)
    body["messages"][0]["content"] = "x" * (LIMIT_BYTES - len(raw) + 2)  # "hi" -> x * n
    content = orjson.dumps(body)
    assert len(content) == LIMIT_BYTES
    resp = await client.post(OPENAI_PATH, content=content)
    assert resp.status_code == 200, resp.text


# --- content the target dialect cannot carry --------------------------------------------

BOGUS_PART = {"role": "user", "content": [{"type": "bogus", "text": "x"}]}


async def test_unknown_part_to_anthropic_upstream_is_400() -> None:
    app = create_app(_config(), upstreams={"fake": FakeUpstream("fake", wire="anthropic")})
    async with await _client(app) as client:
        resp = await client.post(OPENAI_PATH, json={"model": "m", "messages": [BOGUS_PART]})
    error = assert_error(resp, "openai", 400, "bogus", "invalid_request_error")
    assert error["param"] == "messages[0].content[0]"


async def test_unknown_block_to_openai_upstream_is_400() -> None:
    app = create_app(_config(), upstreams={"fake": FakeUpstream("fake", wire="openai")})
    async with await _client(app) as client:
        body = {"model": "m", "max_tokens": 5, "messages": [BOGUS_PART]}
        resp = await client.post(ANTHROPIC_PATH, json=body)
    assert_error(resp, "anthropic", 400, "bogus", "invalid_request_error")


async def test_unknown_block_to_openai_upstream_names_its_position() -> None:
    app = create_app(_config(), upstreams={"fake": FakeUpstream("fake", wire="openai")})
    async with await _client(app) as client:
        body = {"model": "m", "max_tokens": 5, "messages": [BOGUS_PART]}
        resp = await client.post(ANTHROPIC_PATH, json=body)
    assert_error(resp, "anthropic", 400, "messages[0].content[0]")


# --- count_tokens, unknown URLs, wrong methods ------------------------------------------


async def test_count_tokens_bad_input_in_anthropic_shape(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/messages/count_tokens", content=b"[]")
    assert_error(resp, "anthropic", 400, "JSON object", "invalid_request_error")
    resp = await client.post("/v1/messages/count_tokens", json={"model": "m"})
    assert_error(resp, "anthropic", 400, "messages", "invalid_request_error")


async def test_unknown_url_in_callers_shape(client: httpx.AsyncClient) -> None:
    resp = await client.get("/v1/nope")
    error = assert_error(resp, "openai", 404, "/v1/nope")
    assert error["code"] == "unknown_url"
    resp = await client.post("/v1/nope", headers={"anthropic-version": "2023-06-01"})
    assert_error(resp, "anthropic", 404, "/v1/nope", "not_found_error")
    resp = await client.post("/v1/messages/nope")
    assert_error(resp, "anthropic", 404, "/v1/messages/nope", "not_found_error")


async def test_wrong_method_is_405_in_callers_shape(client: httpx.AsyncClient) -> None:
    resp = await client.get(OPENAI_PATH)
    assert_error(resp, "openai", 405, "GET /v1/chat/completions")
    resp = await client.get(ANTHROPIC_PATH)
    assert_error(resp, "anthropic", 405, "GET /v1/messages", "invalid_request_error")
    assert resp.headers["allow"] == "POST"
    resp = await client.put("/health")
    assert_error(resp, "openai", 405, "PUT /health")


# --- gateway auth -----------------------------------------------------------------------


@pytest.fixture
async def locked() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(_config(api_keys=["k", "k2"]), upstreams={"fake": FakeUpstream("fake")})
    async with await _client(app) as c:
        yield c


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer nope"},
        {"x-api-key": "nope"},
        {"authorization": "k"},
        {"authorization": "Basic k"},
    ],
    ids=["missing", "wrong-bearer", "wrong-x-api-key", "no-scheme", "basic"],
)
async def test_auth_refused(
    locked: httpx.AsyncClient, dialect: str, headers: dict[str, str]
) -> None:
    resp = await locked.post(PATHS[dialect], json=_ok_body(dialect), headers=headers)
    error = assert_error(resp, dialect, 401, "API key")
    if dialect == "anthropic":
        assert error["type"] == "authentication_error"
    else:
        assert error["code"] == "invalid_api_key"


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize(
    "headers",
    [{"authorization": "Bearer k"}, {"authorization": "bearer k2"}, {"x-api-key": "k"}],
    ids=["bearer", "bearer-lowercase", "x-api-key"],
)
async def test_auth_accepted(
    locked: httpx.AsyncClient, dialect: str, headers: dict[str, str]
) -> None:
    resp = await locked.post(PATHS[dialect], json=_ok_body(dialect), headers=headers)
    assert resp.status_code == 200, resp.text
    assert "echo: hi" in resp.text


async def test_auth_on_models_and_count_tokens_but_not_health(locked: httpx.AsyncClient) -> None:
    assert_error(await locked.get("/v1/models"), "openai", 401, "API key")
    anthropic_headers = {"anthropic-version": "2023-06-01"}
    resp = await locked.get("/v1/models", headers=anthropic_headers)
    assert_error(resp, "anthropic", 401, "API key", "authentication_error")
    resp = await locked.post("/v1/messages/count_tokens", json=_ok_body("anthropic"))
    assert_error(resp, "anthropic", 401, "API key", "authentication_error")
    resp = await locked.get("/v1/models", headers={"x-api-key": "k", **anthropic_headers})
    assert resp.status_code == 200 and resp.json()["data"][0]["id"] == "m"
    assert (await locked.get("/health")).status_code == 200
