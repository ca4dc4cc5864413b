"""Which upstream errors are refusals of the request: a prompt too long for the context
window, or a content filter (interlingua.errors.refusal), on both paths: the passthrough
path reads the body as the upstream sent it, the translated one the error each dialect's
parser made of it."""

from __future__ import annotations

import orjson
import pytest

from interlingua.dialects.anthropic.errors import parse_error as anthropic_parse
from interlingua.dialects.openai_chat.errors import parse_error as openai_parse
from interlingua.errors import (
    CONTENT_FILTER,
    CONTEXT_WINDOW,
    InvalidRequestError,
    body_refusal,
    error_refusal,
    refusal,
)

from .faults.refusal_bodies import CONTEXT_REFUSALS, FILTER_REFUSALS

EXPECTED = {
    **dict.fromkeys(CONTEXT_REFUSALS, CONTEXT_WINDOW),
    **dict.fromkeys(FILTER_REFUSALS, CONTENT_FILTER),
    # vLLM before its errors took OpenAI's shape: a flat object
    "vllm-flat": CONTEXT_WINDOW,
    # Anthropic, when input plus max_tokens overflow the window
    "anthropic-max-tokens": CONTEXT_WINDOW,
    # the Responses API's words
    "openai-responses": CONTEXT_WINDOW,
    "text-error": CONTEXT_WINDOW,
    "plain-400": None,
}
BODIES = {
    **CONTEXT_REFUSALS,
    **FILTER_REFUSALS,
    "vllm-flat": orjson.dumps(
        {
            "object": "error",
            "message": "This model's maximum context length is 2048 tokens. However, you "
            "requested 2100 tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    ),
    "anthropic-max-tokens": orjson.dumps(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "input length and `max_tokens` exceed context limit: 197626 + "
                "21333 > 200000, decrease input length or `max_tokens` and try again",
            },
        }
    ),
    "openai-responses": orjson.dumps(
        {
            "error": {
                "message": "Your input exceeds the context window of this model. Please "
                "adjust your input and try again.",
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
        }
    ),
    "text-error": orjson.dumps({"error": "prompt is too long for this model"}),
    "plain-400": orjson.dumps(
        {"error": {"message": "messages: required", "type": "invalid_request_error"}}
    ),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_each_documented_shape_is_recognized_on_both_paths(name: str) -> None:
    body = BODIES[name]
    assert body_refusal(400, orjson.loads(body)) == EXPECTED[name]
    # (the content filters are OpenAI's and Azure's: only an OpenAI-kind upstream sends
    # them, and only the Chat parser keeps an error's code)
    parsers = (openai_parse,) if name in FILTER_REFUSALS else (openai_parse, anthropic_parse)
    for parse in parsers:
        assert error_refusal(parse(400, body, {})) == EXPECTED[name], parse


def test_only_a_refusal_of_the_request_counts() -> None:
    # a server fault that mentions a context length is not the prompt's fault
    body = orjson.loads(CONTEXT_REFUSALS["ctx-openai"])
    assert body_refusal(500, body) is None and body_refusal(429, body) is None
    assert body_refusal(413, body) == CONTEXT_WINDOW
    # in-band (no status): judged by what it says
    assert refusal(None, "context_length_exceeded", None, "") == CONTEXT_WINDOW
    assert error_refusal(InvalidRequestError("Prompt Is Too Long")) == CONTEXT_WINDOW
    assert body_refusal(400, [1, 2]) is None and body_refusal(400, {"error": 3}) is None
