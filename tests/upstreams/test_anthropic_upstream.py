"""Anthropic upstream: its dialect's answers, and what only this kind does (base URLs,
the version header, token counts, beta flags).

What both HTTP kinds do alike (keys, errors, timeouts, streams cut short, passthrough) is
tested once for both in test_http_upstreams.py, from the answers and :func:`build` here.
"""

from __future__ import annotations

from functools import partial

import orjson
import pytest
from aiohttp import web

from interlingua.core import Message, Request, TextPart, ToolSpec
from interlingua.dialects.anthropic import DIALECT
from interlingua.errors import AuthenticationError
from interlingua.http_pool.engines import Transports
from interlingua.upstreams.anthropic import AnthropicUpstream

from .conftest import SECRET, Stub, build_upstream, json_response

REQUEST = Request(
    model="claude-sonnet-4-5",
    messages=(Message("system", (TextPart("Be brief."),)), Message("user", (TextPart("Hi"),))),
    max_tokens=64,
    temperature=0.5,
    tools=(ToolSpec("get_time", "Current time", {"type": "object", "properties": {}}),),
)

MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 3},
}


def event(kind: str, **data: object) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


def text_chunk(text: str) -> bytes:
    return event("content_block_delta", index=0, delta={"type": "text_delta", "text": text})


START = event(
    "message_start",
    message={
        **MESSAGE,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    },
)
STREAM = [
    START,
    event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    event("ping"),
    text_chunk("Hel"),
    text_chunk("lo!"),
    event("content_block_stop", index=0),
    event(
        "message_delta",
        delta={"stop_reason": "end_turn", "stop_sequence": None},
        usage={"output_tokens": 3},
    ),
    event("message_stop"),
]


# error.type as Anthropic sends it with each status.
_ERROR_TYPES = {
    529: "overloaded_error",
    429: "rate_limit_error",
    500: "api_error",
    401: "authentication_error",
}


def error_body(status: int, message: str) -> dict[str, object]:
    error = {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}
    return {"type": "error", "error": error, "request_id": "req_2"}


def error_event(error_type: str, message: str) -> bytes:
    return event("error", error={"type": error_type, "message": message})


build = partial(build_upstream, AnthropicUpstream, "claude")


def test_default_base_url_and_v1_suffix_are_both_accepted() -> None:
    assert AnthropicUpstream("a").url == "https://api.anthropic.com/v1/messages"
    assert AnthropicUpstream("a", "http://h:1/v1/").url == "http://h:1/v1/messages"
    assert AnthropicUpstream("a", "http://h:1").count_url == "http://h:1/v1/messages/count_tokens"


@pytest.mark.parametrize("base", ["", "/", "/v1", "/v1/"])
async def test_complete_sends_key_and_version_headers(
    stub: Stub, transports: Transports, base: str
) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(MESSAGE, headers={"request-id": "req_1"})

    stub.handler = handler
    assert (await build(stub.url + base, transports).complete(REQUEST)).text == "Hello!"
    seen = stub.seen[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == SECRET
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.json["system"] in ("Be brief.", [{"type": "text", "text": "Be brief."}])


async def test_count_tokens_uses_the_count_endpoint(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response({"input_tokens": 42})

    stub.handler = handler
    assert await build(stub.url, transports).count_tokens(REQUEST) == 42
    seen = stub.seen[0]
    assert seen.path == "/v1/messages/count_tokens"
    assert seen.headers["x-api-key"] == SECRET
    assert set(seen.json) == {"model", "messages", "system", "tools"}


async def test_count_tokens_sends_what_the_count_endpoint_accepts(
    stub: Stub, transports: Transports
) -> None:
    # An Anthropic client's count_tokens body: its cache_control and fields this codec does
    # not know travel on; what count_tokens rejects (max_tokens, stream) does not.
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response({"input_tokens": 7})

    stub.handler = handler
    request = DIALECT.parse_count_tokens_request(
        {
            "model": "claude-sonnet-4-5",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 10,
            "stream": True,
            "temperature": 0.5,
            "cache_control": {"type": "ephemeral"},
            "speed": "fast",
        }
    )
    assert await build(stub.url, transports).count_tokens(request) == 7
    assert stub.seen[0].json == {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": "Hi"}],
        "cache_control": {"type": "ephemeral"},
        "speed": "fast",
    }


async def test_count_tokens_relays_upstream_errors(stub: Stub, transports: Transports) -> None:
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(error_body(401, "bad key"), status=401)

    stub.handler = handler
    with pytest.raises(AuthenticationError, match="bad key"):
        await build(stub.url, transports).count_tokens(REQUEST)


async def test_passthrough_forwards_beta_flags(stub: Stub, transports: Transports) -> None:
    # (That client credentials are not forwarded: test_http_upstreams.py.)
    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(MESSAGE)

    stub.handler = handler
    client_headers = {"Anthropic-Beta": "fine-grained-tool-streaming-2025-05-14"}
    raw = await build(stub.url, transports).passthrough(b"{}", False, client_headers)
    assert raw.status == 200
    assert stub.seen[0].headers["anthropic-beta"] == "fine-grained-tool-streaming-2025-05-14"
