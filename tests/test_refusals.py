"""Which upstream errors are refusals of the request: a prompt too long for the context
window, or a content filter (interlingua.errors.refusal), or of an assistant prefill
(interlingua.errors.prefill_refusal), on both paths: the passthrough path reads the body
as the upstream sent it, the translated one the error each dialect's parser made of it."""

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
    prefill_refusal,
    prefill_refusal_body,
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


#: refusals of an assistant prefill as servers word them (docs/protocols.md, "Assistant
#: prefill" lists the phrases)
PREFILL_REFUSALS = {
    "anthropic-no-prefill": {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "This model does not support assistant message prefill. The "
            "conversation must end with a user message.",
        },
        "request_id": "req_011CNoPrefill",
    },
    "anthropic-whitespace": {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages: final assistant content cannot end with trailing whitespace",
        },
    },
    "anthropic-thinking": {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, "
            "but found `text`. When `thinking` is enabled, a final `assistant` message must "
            "start with a thinking block (preceeding the lastmost set of `tool_use` and "
            "`tool_result` blocks). We recommend you include thinking blocks from previous "
            "turns. To avoid this requirement, disable `thinking`.",
        },
    },
    "llamacpp-thinking": {
        "error": {
            "code": 400,
            "message": "Assistant response prefill is incompatible with enable_thinking.",
            "type": "invalid_request_error",
        }
    },
    "llamacpp-two-assistants": {
        "error": {
            "code": 400,
            "message": "Cannot have 2 or more assistant messages at the end of the list.",
            "type": "invalid_request_error",
        }
    },
    "vllm-both-true": {
        "error": {
            "message": "[{'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, Cannot "
            "set both `continue_final_message` and `add_generation_prompt` to True.'}]",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    },
    "vllm-not-found": {
        "object": "error",
        "message": "continue_final_message is set but the final message does not appear in "
        "the chat after applying the chat template! This can happen if the chat template "
        "deletes portions of the final message.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "openai-unknown-field": {
        "error": {
            "message": "Unrecognized request argument supplied: continue_final_message",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    },
    "mistral": {
        "object": "error",
        "message": "Expected last role User or Tool (or Assistant with prefix True) for "
        "serving but got assistant",
        "type": "invalid_request_message_order",
        "param": None,
        "code": "3230",
    },
    "text-error": {"error": "This model does not support assistant message prefill."},
}


@pytest.mark.parametrize("name", list(PREFILL_REFUSALS))
def test_each_documented_prefill_refusal_is_recognized_on_both_paths(name: str) -> None:
    payload = PREFILL_REFUSALS[name]
    assert prefill_refusal_body(400, payload)
    assert prefill_refusal_body(422, payload)
    body = orjson.dumps(payload)
    for parse in (openai_parse, anthropic_parse):
        assert prefill_refusal(parse(400, body, {})), parse
    # never a refusal of the prompt itself: a context fallback would not help
    assert body_refusal(400, payload) is None


@pytest.mark.parametrize("name", [*CONTEXT_REFUSALS, *FILTER_REFUSALS, "plain-400"])
def test_other_refusals_are_not_prefill_refusals(name: str) -> None:
    body = BODIES[name]
    assert not prefill_refusal_body(400, orjson.loads(body))
    for parse in (openai_parse, anthropic_parse):
        assert not prefill_refusal(parse(400, body, {})), parse


def test_only_a_refusal_of_the_request_is_a_prefill_refusal() -> None:
    payload = PREFILL_REFUSALS["anthropic-no-prefill"]
    # a server fault or a rate limit that happens to say it is not the prefill's fault
    assert not prefill_refusal_body(500, payload) and not prefill_refusal_body(429, payload)
    assert not prefill_refusal_body(400, [1]) and not prefill_refusal_body(400, {"error": 3})
    # in-band (no status) and case: judged by what it says
    error = InvalidRequestError("ASSISTANT RESPONSE PREFILL IS INCOMPATIBLE WITH ENABLE_THINKING")
    assert prefill_refusal(error)
    assert not prefill_refusal(InvalidRequestError("messages: field required"))
