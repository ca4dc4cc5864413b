"""The bytes a well-behaved upstream would send, in both wire dialects.

The fault upstream (:mod:`.fault_upstream`) starts from these and breaks them at the byte
level; the matrix compares what a client finally sees against :func:`expected_text`. The
shapes follow docs/protocols.md, "Chat Completions" and "Anthropic Messages". Everything
here is pure: no sockets, no event loop.
"""

from __future__ import annotations

from typing import Any

import orjson

OPENAI = "openai"
ANTHROPIC = "anthropic"
#: The text of every normal answer (split into one stream event per word).
ANSWER_TEXT = "The quick brown fox jumps over the lazy dog."
#: The text of a huge answer is this pattern repeated (ASCII: 1 char = 1 byte).
HUGE_PATTERN = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.\n"
#: Text per stream event when a huge answer is streamed.
HUGE_PIECE = 16 * 1024
CREATED = 1_727_346_182
USAGE_IN, USAGE_OUT = 12, 9

# Anthropic has no 503 of its own (docs/protocols.md, "Messages: errors"); api_error is
# its generic 5xx.
_OPENAI_ERROR_TYPES = {429: "requests", 500: "server_error", 503: "server_error"}
_ANTHROPIC_ERROR_TYPES = {
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


def dialect_of(path: str) -> str | None:
    """The wire dialect a request path speaks, or None for a path no upstream serves."""
    if path.endswith("/chat/completions"):
        return OPENAI
    if path.endswith("/messages"):
        return ANTHROPIC
    return None


def huge_text(size: int) -> str:
    """Exactly ``size`` bytes of ASCII text, recognisable if cut or reordered."""
    reps = size // len(HUGE_PATTERN) + 1
    return (HUGE_PATTERN * reps)[:size]


def text_pieces(text: str) -> list[str]:
    """How a stream carries ``text``: word by word, or in :data:`HUGE_PIECE` slices."""
    if len(text) > 1000:
        return [text[i : i + HUGE_PIECE] for i in range(0, len(text), HUGE_PIECE)]
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


def answer_json(dialect: str, model: str, text: str) -> bytes:
    """A complete non-stream answer carrying ``text``."""
    if dialect == OPENAI:
        message = {"role": "assistant", "content": text, "refusal": None}
        choice = {"index": 0, "finish_reason": "stop", "logprobs": None, "message": message}
        usage = {
            "prompt_tokens": USAGE_IN,
            "completion_tokens": USAGE_OUT,
            "total_tokens": USAGE_IN + USAGE_OUT,
        }
        return orjson.dumps(
            {
                "id": "chatcmpl-fault",
                "object": "chat.completion",
                "created": CREATED,
                "model": model,
                "choices": [choice],
                "usage": usage,
            }
        )
    return orjson.dumps(
        {
            "id": "msg_fault",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": USAGE_IN, "output_tokens": USAGE_OUT},
        }
    )


def _openai_chunk(model: str, delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    chunk: dict[str, Any] = {
        "id": "chatcmpl-fault",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": choices,
    }
    if delta is None:
        chunk["usage"] = {
            "prompt_tokens": USAGE_IN,
            "completion_tokens": USAGE_OUT,
            "total_tokens": USAGE_IN + USAGE_OUT,
        }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _anthropic_event(payload: dict[str, Any]) -> bytes:
    name = str(payload["type"]).encode()
    return b"event: " + name + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def stream_events(dialect: str, model: str, text: str, usage: bool = True) -> list[bytes]:
    """The complete event stream carrying ``text``, one SSE event per list item.

    OpenAI streams end with a usage chunk (only when ``usage``, as OpenAI sends it only
    for ``stream_options.include_usage``) and ``data: [DONE]``; Anthropic ones with
    ``message_delta`` and ``message_stop`` (docs/protocols.md, "Chat Completions: stream"
    and "Messages: stream").
    """
    pieces = text_pieces(text)
    if dialect == OPENAI:
        events = [_openai_chunk(model, {"role": "assistant", "content": ""})]
        events += [_openai_chunk(model, {"content": piece}) for piece in pieces]
        events.append(_openai_chunk(model, {}, "stop"))
        if usage:
            events.append(_openai_chunk(model, None))
        return [*events, b"data: [DONE]\n\n"]
    start: dict[str, Any] = {
        "id": "msg_fault",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": USAGE_IN, "output_tokens": 1},
    }
    events = [
        _anthropic_event({"type": "message_start", "message": start}),
        _anthropic_event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        ),
        _anthropic_event({"type": "ping"}),
    ]
    for piece in pieces:
        delta = {"type": "text_delta", "text": piece}
        events.append(_anthropic_event({"type": "content_block_delta", "index": 0, "delta": delta}))
    events.append(_anthropic_event({"type": "content_block_stop", "index": 0}))
    events.append(
        _anthropic_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": USAGE_OUT},
            }
        )
    )
    return [*events, _anthropic_event({"type": "message_stop"})]


def error_json(dialect: str, status: int, message: str) -> bytes:
    """The dialect's error body for ``status``.

    docs/protocols.md, "Chat Completions: errors" and "Messages: errors".
    """
    if dialect == OPENAI:
        kind = _OPENAI_ERROR_TYPES.get(status, "server_error")
        code = "rate_limit_exceeded" if status == 429 else None
        error = {"message": message, "type": kind, "param": None, "code": code}
        return orjson.dumps({"error": error})
    return overloaded_json(message, _ANTHROPIC_ERROR_TYPES.get(status, "api_error"))


def overloaded_json(message: str = "Overloaded", kind: str = "overloaded_error") -> bytes:
    """Anthropic's error body (by default the 529 ``overloaded_error`` one)."""
    error = {"type": kind, "message": message}
    return orjson.dumps({"type": "error", "error": error, "request_id": "req_fault"})


__all__ = [
    "ANSWER_TEXT",
    "ANTHROPIC",
    "HUGE_PATTERN",
    "OPENAI",
    "answer_json",
    "dialect_of",
    "error_json",
    "huge_text",
    "overloaded_json",
    "stream_events",
    "text_pieces",
]
