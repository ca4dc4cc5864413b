"""The passthrough path rejects malformed bodies as the translated path does.

Malformed bodies used to reach lenient upstreams, which answered 200 (docs/decisions.md,
"Passthrough validates the body and forwards it as parsed").

Each app here routes ``m`` to an upstream of the client's own dialect, so the gateway takes
the passthrough path and would forward the body as it is. The upstream records every raw
body it is handed *before* looking at it, so "never called" is observable. The same body is
then sent through the translated path (an upstream of the other dialect) and both answers
must be the same error, word for word.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import orjson
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.upstreams.base import RawResponse
from interlingua.upstreams.fake import FakeUpstream

from ..request_ids import without_request_id

PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
OTHER = {"openai": "anthropic", "anthropic": "openai"}


class RecordingUpstream(FakeUpstream):
    """A FakeUpstream that keeps each raw passthrough body before anything reads it."""

    def __init__(self, wire: str) -> None:
        super().__init__("up", wire=wire)
        self.raw_bodies: list[bytes] = []

    async def passthrough(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        self.raw_bodies.append(body)
        return await super().passthrough(body, stream, headers)


def _app(wire: str, upstream_model: str = "m") -> tuple[Any, RecordingUpstream]:
    config = parse_config(
        {
            "upstreams": {"up": {"kind": "fake"}},
            "models": [{"name": "m", "upstream": "up", "model": upstream_model}],
        }
    )
    upstream = RecordingUpstream(wire)
    return create_app(config, upstreams={"up": upstream}), upstream


async def _post(app: Any, dialect: str, content: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.post(PATHS[dialect], content=content)


def _ok(dialect: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if dialect == "anthropic":
        body["max_tokens"] = 16
    return body


def _error_of(resp: httpx.Response, dialect: str) -> tuple[str, str | None]:
    """(message, param) of an error answer in ``dialect``'s shape."""
    body = resp.json()
    message = without_request_id(body["error"]["message"])
    if dialect == "openai":
        return message, body["error"]["param"]
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    return message, None


def _edit(dialect: str, **changes: Any) -> dict[str, Any]:
    body = _ok(dialect)
    for key, value in changes.items():
        if value is _DROP:
            del body[key]
        else:
            body[key] = value
    return body


_DROP = object()

# (case, edits to the valid body, the field the error must name) -- the examples.
MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("no-messages", {"messages": _DROP}, "messages"),
    ("messages-not-a-list", {"messages": {"role": "user", "content": "hi"}}, "messages"),
    ("numeric-content", {"messages": [{"role": "user", "content": 42}]}, "messages[0].content"),
    ("unknown-role", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ("string-temperature", {"temperature": "0.5"}, "temperature"),
    ("string-max-tokens", {"max_tokens": "16"}, "max_tokens"),
    ("boolean-top-p", {"top_p": True}, "top_p"),
    ("string-stream", {"stream": "yes"}, "stream"),
    ("part-without-type", {"messages": [{"role": "user", "content": [{"text": "x"}]}]},
     "messages[0].content[0].type"),
    ("tools-not-a-list", {"tools": {"name": "f"}}, "tools"),
]  # fmt: skip


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize(("case", "edits", "field"), MALFORMED, ids=[c[0] for c in MALFORMED])
async def test_malformed_body_is_400_and_never_forwarded(
    dialect: str, case: str, edits: dict[str, Any], field: str
) -> None:
    content = orjson.dumps(_edit(dialect, **edits))
    app, upstream = _app(wire=dialect)
    resp = await _post(app, dialect, content)
    assert resp.status_code == 400, resp.text
    message, param = _error_of(resp, dialect)
    assert field in f"{message} {param}"
    assert upstream.raw_bodies == []
    # The translated path (upstream of the other dialect) says exactly the same.
    other, other_upstream = _app(wire=OTHER[dialect])
    translated = await _post(other, dialect, content)
    assert translated.status_code == 400
    assert _error_of(translated, dialect) == (message, param)
    assert other_upstream.requests == []


def _tool_turns(dialect: str) -> list[dict[str, Any]]:
    if dialect == "openai":
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]


# Well-formed bodies with what only this dialect (or only this upstream) understands:
# passthrough must relay them, even where translation would refuse.
SAME_DIALECT_ONLY: dict[str, dict[str, Any]] = {
    "openai": {
        "n": 2,
        "logit_bias": {"50256": -100},
        "x_vendor_field": {"anything": [1, 2]},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "listen"},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            ]},
        ],
    },
    "anthropic": {
        "container": "c_1",
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "search_result", "source": "s", "title": "t", "content": []},
            ]},
        ],
    },
}  # fmt: skip


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_well_formed_bodies_are_relayed(dialect: str) -> None:
    app, upstream = _app(wire=dialect)
    for body in (
        {**_ok(dialect), **SAME_DIALECT_ONLY[dialect]},
        _edit(dialect, messages=_tool_turns(dialect)),
    ):
        resp = await _post(app, dialect, orjson.dumps(body))
        assert resp.status_code == 200, resp.text
        assert orjson.loads(upstream.raw_bodies[-1]) == body


# --- duplicate top-level keys -----------------------------------------------------------
# The gateway routes and validates the decoded body, where the last copy of a key wins.
# Forwarding the client's bytes would let an upstream that reads the first copy see a
# model it was not routed to, or messages nobody validated: the parsed body goes instead.

DUPLICATES = {
    "model-literal": b'{"model": "expensive", "model": "m", %s}',
    "model-escaped": b'{"model": "expensive", "mod\\u0065l": "m", %s}',
    "messages": b'{"messages": [{"role": "wizard", "content": 5}], "model": "m", %s}',
}


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize("case", sorted(DUPLICATES))
async def test_duplicate_keys_reach_the_upstream_once(dialect: str, case: str) -> None:
    rest = orjson.dumps({k: v for k, v in _ok(dialect).items() if k != "model"})[1:-1]
    app, upstream = _app(wire=dialect)
    resp = await _post(app, dialect, DUPLICATES[case] % rest)
    assert resp.status_code == 200, resp.text
    forwarded = upstream.raw_bodies[0]
    assert forwarded.count(b'"model"') == 1 and forwarded.count(b'"messages"') == 1
    assert b"expensive" not in forwarded and b"wizard" not in forwarded
    assert orjson.loads(forwarded) == _ok(dialect)


@pytest.mark.parametrize("upstream_model", ["m", "real-name"])
async def test_the_forwarded_body_is_the_clients_with_the_upstream_model(
    upstream_model: str,
) -> None:
    body = {**_ok("openai"), **SAME_DIALECT_ONLY["openai"], "temperature": 0.25}
    app, upstream = _app(wire="openai", upstream_model=upstream_model)
    resp = await _post(app, "openai", orjson.dumps(body, option=orjson.OPT_INDENT_2))
    assert resp.status_code == 200, resp.text
    assert orjson.loads(upstream.raw_bodies[0]) == {**body, "model": upstream_model}
