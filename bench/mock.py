"""The fixed answers the mock upstream (nginx) serves: what a fast real provider would send.

Four bodies, written to static files that nginx serves for every POST:

* ``/v1/chat/completions``: one ``chat.completion`` (PROTOCOLS.md 1.4).
* ``/stream/v1/chat/completions``: a 20-chunk ``chat.completion.chunk`` stream -- a role
  chunk, 17 text chunks, the finish chunk and the usage chunk (``choices: []``, asked for
  by ``stream_options.include_usage``) -- then ``data: [DONE]`` (PROTOCOLS.md 1.5).
* ``/v1/messages``: one Anthropic ``message`` (PROTOCOLS.md 2.4).
* ``/stream/v1/messages``: the Anthropic event sequence for the same 17 text pieces
  (``message_start`` ... ``message_stop``, PROTOCOLS.md 2.5).

The content is the same in both dialects so a translated answer is comparable with a
direct one. Everything is built once with orjson; nothing here runs during the load.
"""

from __future__ import annotations

from typing import Any

import orjson

#: The text the mock "model" answers, in the 17 pieces a stream delivers.
TEXT_PIECES: tuple[str, ...] = (
    "Sure",
    "!",
    " Here",
    " is",
    " a",
    " short",
    " answer",
    " from",
    " the",
    " mock",
    " upstream",
    ":",
    " the",
    " result",
    " is",
    " 42",
    ".",
)
TEXT = "".join(TEXT_PIECES)
OPENAI_MODEL = "gpt-4o-mini-2024-07-18"
ANTHROPIC_MODEL = "claude-sonnet-4-5-20250929"
CHAT_ID = "chatcmpl-BENCH0000000000000000000000"
MESSAGE_ID = "msg_01BENCH00000000000000000"
CREATED = 1_760_000_000
PROMPT_TOKENS = 58
COMPLETION_TOKENS = len(TEXT_PIECES)
#: Chunks in the OpenAI stream: role + text pieces + finish + usage.
OPENAI_STREAM_CHUNKS = 1 + len(TEXT_PIECES) + 2


def _sse(payload: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def openai_usage() -> dict[str, Any]:
    """The usage object both OpenAI answers carry."""
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def openai_completion() -> bytes:
    """A non-streamed ``chat.completion`` body."""
    return orjson.dumps(
        {
            "id": CHAT_ID,
            "object": "chat.completion",
            "created": CREATED,
            "model": OPENAI_MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": TEXT, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": openai_usage(),
            "system_fingerprint": "fp_bench",
        }
    )


def _chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": CHAT_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": OPENAI_MODEL,
        "system_fingerprint": "fp_bench",
        "choices": choices,
        "usage": usage,
    }


def _choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def openai_stream_chunks() -> list[bytes]:
    """The 20 SSE events of the streamed answer, each ``data: {...}\\n\\n``, without DONE."""
    chunks = [_chunk([_choice({"role": "assistant", "content": "", "refusal": None})])]
    chunks += [_chunk([_choice({"content": piece})]) for piece in TEXT_PIECES]
    chunks.append(_chunk([_choice({}, "stop")]))
    chunks.append(_chunk([], openai_usage()))
    return [_sse(chunk) for chunk in chunks]


def openai_stream() -> bytes:
    """The whole streamed answer, ``data: [DONE]`` included."""
    return b"".join(openai_stream_chunks()) + b"data: [DONE]\n\n"


def anthropic_message() -> bytes:
    """A non-streamed Anthropic ``message`` body."""
    return orjson.dumps(
        {
            "id": MESSAGE_ID,
            "type": "message",
            "role": "assistant",
            "model": ANTHROPIC_MODEL,
            "content": [{"type": "text", "text": TEXT}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": _anthropic_usage(COMPLETION_TOKENS),
        }
    )


def _anthropic_usage(output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": PROMPT_TOKENS,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def anthropic_stream() -> bytes:
    """The Anthropic event sequence of the same answer (PROTOCOLS.md 2.5)."""
    start = {
        "type": "message_start",
        "message": {
            "id": MESSAGE_ID,
            "type": "message",
            "role": "assistant",
            "model": ANTHROPIC_MODEL,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _anthropic_usage(1),
        },
    }
    events = [
        _sse(start, "message_start"),
        _sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
        _sse({"type": "ping"}, "ping"),
    ]
    events += [
        _sse(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
            "content_block_delta",
        )
        for p in TEXT_PIECES
    ]
    events.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": COMPLETION_TOKENS},
    }
    events.append(_sse(delta, "message_delta"))
    events.append(_sse({"type": "message_stop"}, "message_stop"))
    return b"".join(events)


def site() -> dict[str, tuple[str, str, bytes]]:
    """Every mock endpoint: URL path -> (file name, content type, body)."""
    return {
        "/v1/chat/completions": ("chat.json", "application/json", openai_completion()),
        "/stream/v1/chat/completions": ("chat.sse", "text/event-stream", openai_stream()),
        "/v1/messages": ("messages.json", "application/json", anthropic_message()),
        "/stream/v1/messages": ("messages.sse", "text/event-stream", anthropic_stream()),
    }
