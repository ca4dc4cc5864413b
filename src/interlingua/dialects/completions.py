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

A model whose upstream has no text completions may take them *as chat* (a model entry's
``completions: as_chat``): :func:`as_chat_body` makes the prompt one user message of a
Chat request, and :func:`text_answer` / :func:`text_chunk` write the Chat answer back as
a text completion. Lossy by nature: the model sees its chat template around the prompt,
and what has no Chat counterpart (``echo``, ``suffix``, ``logprobs``, ``best_of``) is
refused with a 400 naming it rather than dropped.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequestError

__all__ = [
    "AS_CHAT_FIELDS",
    "MAX_LOGPROBS",
    "as_chat_body",
    "check_request",
    "text_answer",
    "text_chunk",
]

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


# --- completions as chat ------------------------------------------------------------------

#: the fields a Chat request shares with a Completions one, passed on as they are
AS_CHAT_FIELDS = (
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stop",
    "stream",
    "stream_options",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "user",
)
#: the fields with no Chat counterpart, and the value that asks for nothing
_REFUSED_AS_CHAT = (("echo", False), ("suffix", ""), ("logprobs", None), ("best_of", 1))


def as_chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """A checked Completions ``body`` as a Chat Completions one: its prompt (one string)
    as the one user message, :data:`AS_CHAT_FIELDS` as they came. A field only text
    completions have, or a prompt that is not one text, is a 400 naming it."""
    for name, nothing in _REFUSED_AS_CHAT:
        value = body.get(name)
        if value is not None and value != nothing:
            raise _invalid(
                f"'{name}' is not supported for model {body.get('model')!r}: it answers "
                "text completions through a chat model (completions: as_chat).",
                name,
            )
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _invalid(
            f"Model {body.get('model')!r} answers text completions through a chat model "
            "(completions: as_chat): 'prompt' must be one string, not token ids or "
            "several prompts.",
            "prompt",
        )
    chat = {k: body[k] for k in AS_CHAT_FIELDS if k in body}
    chat["model"] = body.get("model")
    chat["messages"] = [{"role": "user", "content": prompt}]
    return chat


def _text_choice(choice: Any, text: Any) -> dict[str, Any]:
    index = choice.get("index", 0) if isinstance(choice, dict) else 0
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    return {
        "index": index,
        "text": text if isinstance(text, str) else "",
        "logprobs": None,
        "finish_reason": finish,
    }


def _text_of(answer: dict[str, Any], choices: list[dict[str, Any]]) -> dict[str, Any]:
    """``answer`` (a Chat answer or chunk) with ``choices`` in the text completion's
    shape; its id, created, model, system fingerprint and usage kept."""
    out: dict[str, Any] = {
        "id": answer.get("id", ""),
        "object": "text_completion",
        "created": answer.get("created", 0),
        "model": answer.get("model", ""),
        "choices": choices,
    }
    for name in ("system_fingerprint", "usage"):
        if name in answer:
            out[name] = answer[name]
    return out


def text_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions answer as a text completion: each choice's message content as
    its ``text`` (a refusal or tool call has none: ``""``)."""
    choices = [
        _text_choice(c, (c.get("message") or {}).get("content") if isinstance(c, dict) else None)
        for c in answer.get("choices") or ()
    ]
    return _text_of(answer, choices)


def text_chunk(chunk: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions stream chunk as a text completion's: each choice's
    ``delta.content`` as its ``text`` (the usage chunk keeps ``choices: []``)."""
    choices = [
        _text_choice(c, (c.get("delta") or {}).get("content") if isinstance(c, dict) else None)
        for c in chunk.get("choices") or ()
    ]
    return _text_of(chunk, choices)
