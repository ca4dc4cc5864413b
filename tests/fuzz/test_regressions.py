"""Every failure the fuzzer found, pinned as a plain test.

Each test names what the fuzzer sent and what went wrong before the fix.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from interlingua.config import parse_config
from interlingua.dialects import encode_body, get_dialect
from interlingua.errors import InvalidRequestError
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


def _deep(levels: int) -> Any:
    value: Any = {"type": "string"}
    for _ in range(levels):
        value = {"type": "object", "properties": {"x": value}}
    return value


def _app(wire: str, upstream_model: str = "m") -> Any:
    config = parse_config(
        {
            "upstreams": {"up": {"kind": "fake"}},
            "models": [{"name": "m", "upstream": "up", "model": upstream_model}],
        }
    )
    return create_app(config, upstreams={"up": FakeUpstream("up", wire=wire)})


async def _post(app: Any, path: str, body: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.post(path, content=body)


def _deep_tool_body(dialect: str, levels: int) -> bytes:
    # orjson decodes up to 1,024 levels but encodes at most 254: a tool schema ~300 deep
    # was read, then every re-encoding of it (token estimate, upstream body) raised
    # TypeError("Recursion limit reached"): a 500 "unexpected failure".
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if dialect == "openai":
        fn = {"name": "f", "parameters": _deep(levels)}
        body["tools"] = [{"type": "function", "function": fn}]
    else:
        body["max_tokens"] = 5
        body["tools"] = [{"name": "f", "input_schema": _deep(levels)}]
    return json.dumps(body).encode()  # orjson cannot write it either


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize("route", ["translated", "renamed-passthrough"])
async def test_a_body_too_deep_to_reencode_is_400(dialect: str, route: str) -> None:
    other = {"openai": "anthropic", "anthropic": "openai"}[dialect]
    app = _app(other) if route == "translated" else _app(dialect, upstream_model="real")
    resp = await _post(app, PATHS[dialect], _deep_tool_body(dialect, 150))
    assert resp.status_code == 400, resp.text
    assert "nested too deeply" in resp.text
    # Just inside the limit still works.
    ok = await _post(app, PATHS[dialect], _deep_tool_body(dialect, 60))
    assert ok.status_code == 200, ok.text


async def test_count_tokens_with_a_body_too_deep_is_400() -> None:
    app = _app("anthropic")
    body = _deep_tool_body("anthropic", 150)
    resp = await _post(app, "/v1/messages/count_tokens", body)
    assert resp.status_code == 400, resp.text
    assert "nested too deeply" in resp.text


def test_encode_body() -> None:
    assert encode_body({"a": [1]}) == b'{"a":[1]}'
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(InvalidRequestError, match="nested too deeply"):
        encode_body({"a": deep})


@pytest.mark.parametrize("wire", ["anthropic", "openai"])
async def test_output_config_effort_must_be_a_string(wire: str) -> None:
    # An object here was carried into OpenAI's reasoning_effort, and the 400 (from the
    # upstream) named a field the Anthropic client never sent.
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": {"level": "high"}},
    }
    resp = await _post(_app(wire), PATHS["anthropic"], json.dumps(body).encode())
    assert resp.status_code == 400, resp.text
    assert "output_config.effort" in resp.json()["error"]["message"]


def _deep_list(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


def _deep_call_body(dialect: str) -> dict[str, Any]:
    """A deep tool call followed by a malformed message, as the slow fuzz run sent."""
    if dialect == "openai":
        fn = {"name": "f", "arguments": {"a": _deep_list(300)}}
        call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": fn}]}
        return {"model": "m", "messages": [call, {"role": None, "content": "x"}]}
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": _deep_list(300)}}
    return {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "assistant", "content": [use]}, {"role": "user", "content": None}],
    }


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_parse_request_names_a_tool_call_too_deep_to_reencode(dialect: str) -> None:
    # parse_request re-encodes object arguments / tool_use input as JSON text; a value
    # 300 levels deep raised TypeError there: a 500 on the passthrough path, whose walk
    # hands a malformed body to parse_request for the error.
    body = _deep_call_body(dialect)
    with pytest.raises(InvalidRequestError, match="nested too deeply") as caught:
        get_dialect(dialect).parse_request(body)
    expected = (
        "messages[0].tool_calls[0].function.arguments"
        if dialect == "openai"
        else "messages[0].content[0].input"
    )
    assert caught.value.param == expected


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize("wire", ["same", "other"])
async def test_deep_tool_call_with_a_bad_message_is_400_on_both_paths(
    dialect: str, wire: str
) -> None:
    other = {"openai": "anthropic", "anthropic": "openai"}[dialect]
    app = _app(dialect if wire == "same" else other)
    resp = await _post(app, PATHS[dialect], json.dumps(_deep_call_body(dialect)).encode())
    assert resp.status_code == 400, resp.text
    assert "nested too deeply" in resp.text
