"""The fixed answers the mock upstream (nginx) serves: what a fast real provider would send.

Seven bodies, written to static files that nginx serves for every POST:

* ``/v1/chat/completions``: one ``chat.completion``
  (docs/protocols.md, "Chat Completions: response body").
* ``/stream/v1/chat/completions``: a 20-chunk ``chat.completion.chunk`` stream -- a role
  chunk, 17 text chunks, the finish chunk and the usage chunk (``choices: []``, asked for
  by ``stream_options.include_usage``) -- then ``data: [DONE]``
  (docs/protocols.md, "Chat Completions: stream").
* ``/v1/messages``: one Anthropic ``message`` (docs/protocols.md, "Messages: response body").
* ``/stream/v1/messages``: the Anthropic event sequence for the same 17 text pieces
  (``message_start`` ... ``message_stop``; docs/protocols.md, "Messages: stream").
* ``/v1/responses``: one OpenAI Responses ``response``
  (docs/protocols.md, "Responses: response object").
* ``/stream/v1/responses``: the Responses event sequence for the same pieces
  (``response.created`` ... ``response.completed``; docs/protocols.md,
  "Responses: stream events").
* ``/v1/embeddings``: two 1,536-dimension vectors as base64 float32, what the OpenAI SDK
  asks for by default (text-embedding-3-small's width).

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
    """The Anthropic event sequence of the same answer (docs/protocols.md, "Messages: stream")."""
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


RESPONSE_ID = "resp_BENCH000000000000000000000000"
RESPONSE_MESSAGE_ID = "msg_BENCH000000000000000000000000"


def _responses_usage() -> dict[str, Any]:
    return {
        "input_tokens": PROMPT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": COMPLETION_TOKENS,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
    }


def _response(status: str, output: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
    """A Responses ``response`` object with the fields OpenAI always writes."""
    return {
        "id": RESPONSE_ID, "object": "response", "created_at": CREATED, "status": status,
        "background": False, "error": None, "incomplete_details": None, "instructions": None,
        "max_output_tokens": None, "model": OPENAI_MODEL, "output": output,
        "parallel_tool_calls": True, "previous_response_id": None, "reasoning": {"effort": None,
        "summary": None}, "store": False, "temperature": 1.0, "text": {"format": {"type": "text"}},
        "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
        "usage": usage, "user": None, "metadata": {},
    }  # fmt: skip


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _response_message(status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": RESPONSE_MESSAGE_ID, "type": "message", "status": status,
            "content": content, "role": "assistant"}  # fmt: skip


def responses_object() -> bytes:
    """A non-streamed Responses ``response`` body.

    docs/protocols.md, "Responses: response object".
    """
    message = _response_message("completed", [_output_text(TEXT)])
    return orjson.dumps(_response("completed", [message], _responses_usage()))


def responses_stream() -> bytes:
    """The Responses event sequence for the same 17 pieces.

    docs/protocols.md, "Responses: stream events".
    """
    payloads: list[dict[str, Any]] = []
    ids = {"item_id": RESPONSE_MESSAGE_ID, "output_index": 0, "content_index": 0}
    started = _response("in_progress", [], None)
    payloads.append({"type": "response.created", "response": started})
    payloads.append({"type": "response.in_progress", "response": started})
    payloads.append({"type": "response.output_item.added", "output_index": 0,
                     "item": _response_message("in_progress", [])})  # fmt: skip
    payloads.append({"type": "response.content_part.added", **ids, "part": _output_text("")})
    for piece in TEXT_PIECES:
        payloads.append({"type": "response.output_text.delta", **ids, "delta": piece,
                         "logprobs": []})  # fmt: skip
    payloads.append({"type": "response.output_text.done", **ids, "text": TEXT, "logprobs": []})
    payloads.append({"type": "response.content_part.done", **ids, "part": _output_text(TEXT)})
    done = _response_message("completed", [_output_text(TEXT)])
    payloads.append({"type": "response.output_item.done", "output_index": 0, "item": done})
    final = _response("completed", [done], _responses_usage())
    payloads.append({"type": "response.completed", "response": final})
    events = []
    for seq, payload in enumerate(payloads):
        kind = payload["type"]
        events.append(_sse({"type": kind, "sequence_number": seq, **payload}, kind))
    return b"".join(events)


#: the width of the mock's embedding vectors
EMBEDDING_DIMENSIONS = 1536


def openai_embeddings() -> bytes:
    """An ``/v1/embeddings`` answer: two base64 float32 vectors and the usage."""
    import base64
    import struct

    def vector(seed: int) -> str:
        values = [((i * 7919 + seed) % 1000) / 1000.0 - 0.5 for i in range(EMBEDDING_DIMENSIONS)]
        return base64.b64encode(struct.pack(f"<{EMBEDDING_DIMENSIONS}f", *values)).decode()

    return orjson.dumps(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": vector(i)} for i in range(2)],
            "model": "text-embedding-3-small",
            "usage": {"prompt_tokens": 29, "total_tokens": 29},
        }
    )


def site() -> dict[str, tuple[str, str, bytes]]:
    """Every mock endpoint: URL path -> (file name, content type, body)."""
    return {
        "/v1/chat/completions": ("chat.json", "application/json", openai_completion()),
        "/stream/v1/chat/completions": ("chat.sse", "text/event-stream", openai_stream()),
        "/v1/messages": ("messages.json", "application/json", anthropic_message()),
        "/stream/v1/messages": ("messages.sse", "text/event-stream", anthropic_stream()),
        "/v1/responses": ("responses.json", "application/json", responses_object()),
        "/stream/v1/responses": ("responses.sse", "text/event-stream", responses_stream()),
        "/v1/embeddings": ("embeddings.json", "application/json", openai_embeddings()),
    }
