"""The OpenAI (legacy) Completions API (``POST /v1/completions``): its request checks.
Pure: no I/O.

A request (the openai SDK's ``CompletionCreateParams``)::

    {"model": "m", "prompt": "text" | ["a", "b"] | [1, 2, 3] | [[1, 2], [3]],
     "max_tokens": 16, "temperature": 1, "stop": "\\n" | ["a", "b"], "n": 1,
     "best_of": 1, "echo": false, "logprobs": 0..5, "suffix": "...",
     "stream": true, "stream_options": {"include_usage": true}, "user": "u"}

An answer (``Completion``) and a stream's chunks have Chat's outline with ``text``
where Chat has a message::

    {"id": "cmpl-…", "object": "text_completion", "created": 1, "model": "m",
     "choices": [{"index": 0, "text": "…", "logprobs": null, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}

A stream ends with ``data: [DONE]``; with ``stream_options.include_usage`` a last chunk
has ``choices: []`` and the ``usage`` (as Chat's). The checks here are the API's own
(a 400 naming the parameter), made before any upstream is asked; what a given model
supports (``suffix``, ``logprobs``) is the upstream's to judge.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequestError

__all__ = ["MAX_LOGPROBS", "check_request"]

#: the API's bound on ``logprobs`` (the most likely tokens reported per position)
MAX_LOGPROBS = 5


def _invalid(message: str, param: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code="invalid_value")


def check_request(body: dict[str, Any]) -> None:
    """The API's checks of ``body``'s ``prompt``, ``n``, ``best_of``, ``logprobs``,
    ``echo`` and ``stream_options`` (a 400 naming the parameter; ``model`` is the
    gateway's to check)."""
    _check_prompt(body.get("prompt"))
    n = _count(body, "n")
    best_of = _count(body, "best_of")
    if best_of is not None and best_of < (n or 1):
        raise _invalid("'best_of' must be greater than or equal to 'n'.", "best_of")
    logprobs = body.get("logprobs")
    if logprobs is not None and (type(logprobs) is not int or not 0 <= logprobs <= MAX_LOGPROBS):
        raise _invalid(
            f"Invalid value for 'logprobs': {logprobs!r}; expected an integer from 0 to "
            f"{MAX_LOGPROBS}.",
            "logprobs",
        )
    echo = body.get("echo")
    if echo is not None and type(echo) is not bool:
        raise _invalid("Invalid type for 'echo': expected a boolean.", "echo")
    if body.get("stream_options") is not None and body.get("stream") is not True:
        raise _invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )


def _count(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is not None and (type(value) is not int or value < 1):
        raise _invalid(f"Invalid value for '{name}': {value!r}; expected a positive integer.", name)
    return value


def _check_prompt(prompt: Any) -> None:
    """A string, a list of strings, a list of token ids, or a list of token id lists."""
    if prompt is None:
        raise InvalidRequestError("Missing required parameter: 'prompt'.", param="prompt")
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt) or all(_tokens(p) for p in prompt):
            return
        if _tokens(prompt):
            return
    raise _invalid(
        "Invalid value for 'prompt': expected a string, an array of strings, an array of "
        "token ids, or an array of arrays of token ids.",
        "prompt",
    )


def _tokens(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of token ids (non-negative integers)."""
    return isinstance(value, list) and bool(value) and all(type(t) is int and t >= 0 for t in value)
