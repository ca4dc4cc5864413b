"""400 refusals as real servers word them, byte for byte, for the fault upstream.

A model named after a key of :data:`REFUSALS` is answered 400 with that body whatever
the path (Chat or Messages): what the gateway must recognize is the body itself. The
context-window shapes are the ones docs/reliability.md lists ("Refusals: context window
and content filter"); each is kept as its server sends it, extra fields included.
"""

from __future__ import annotations

import orjson

#: a prompt too long for the model's context window, by server
CONTEXT_REFUSALS: dict[str, bytes] = {
    # OpenAI (and Azure, Groq...): the code says it
    "ctx-openai": orjson.dumps(
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However, "
                "your messages resulted in 130512 tokens. Please reduce the length of the "
                "messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    ),
    # Anthropic: only the message says it
    "ctx-anthropic": orjson.dumps(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 208310 tokens > 200000 maximum",
            },
            "request_id": "req_011CTooLong",
        }
    ),
    # vLLM's OpenAI server: type BadRequestError, code the status number
    "ctx-vllm": orjson.dumps(
        {
            "error": {
                "message": "This model's maximum context length is 4096 tokens. However, you "
                "requested 5123 tokens (5023 in the messages, 100 in the completion). Please "
                "reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        }
    ),
    # llama.cpp's server: the type says it
    "ctx-llamacpp": orjson.dumps(
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 5000,
                "n_ctx": 4096,
            }
        }
    ),
}

#: content-filter refusals: Azure OpenAI's and OpenAI's
FILTER_REFUSALS: dict[str, bytes] = {
    "filter-azure": orjson.dumps(
        {
            "error": {
                "message": "The response was filtered due to the prompt triggering Azure "
                "OpenAI's content management policy.",
                "type": None,
                "param": "prompt",
                "code": "content_filter",
                "status": 400,
            }
        }
    ),
    "filter-openai": orjson.dumps(
        {
            "error": {
                "message": "Your request was rejected as a result of our safety system.",
                "type": "invalid_request_error",
                "param": None,
                "code": "content_policy_violation",
            }
        }
    ),
}

REFUSALS = {**CONTEXT_REFUSALS, **FILTER_REFUSALS}
