"""OpenAI-compatible upstream: its dialect's answers, and what only this kind does.

What both HTTP kinds do alike (keys, errors, timeouts, streams cut short, passthrough) is
tested once for both in test_http_upstreams.py, from the answers and :func:`build` here.
"""

from __future__ import annotations

from functools import partial

import orjson

from interlingua.core import Message, Request, TextPart
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream

from .conftest import build_upstream

REQUEST = Request(model="qwen", messages=(Message("user", (TextPart("Hi"),)),), max_tokens=20)

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "qwen",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello there"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
}


def chunk(delta: dict[str, object], finish: str | None = None, usage: object = None) -> bytes:
    payload: dict[str, object] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "qwen",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        payload["choices"] = []
        payload["usage"] = usage
    return b"data: " + orjson.dumps(payload) + b"\n\n"


STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo"}),
    chunk({}, finish="stop"),
    chunk({}, usage={"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}),
    b"data: [DONE]\n\n",
]


def text_chunk(text: str) -> bytes:
    return chunk({"content": text})


# error.type (and code) as OpenAI sends them with each status.
_ERROR_TYPES = {
    429: {"type": "requests", "code": "rate_limit_exceeded"},
    401: {"type": "invalid_request_error", "code": "invalid_api_key"},
}


def error_body(status: int, message: str) -> dict[str, object]:
    return {"error": {"message": message, **_ERROR_TYPES.get(status, {"type": "server_error"})}}


def error_event(error_type: str, message: str) -> bytes:
    """An in-band stream error (docs/protocols.md, "Chat Completions: errors")."""
    return b"data: " + orjson.dumps({"error": {"message": message, "type": error_type}}) + b"\n\n"


build = partial(build_upstream, OpenAICompatibleUpstream, "vllm")


async def test_count_tokens_is_not_asked_for(closed_port: int) -> None:
    # Chat Completions has no count endpoint: None, without a request (nothing listens).
    up = build(f"http://127.0.0.1:{closed_port}/v1", None)
    try:
        assert await up.count_tokens(REQUEST) is None
    finally:
        await up.aclose()
