"""Text completions (``POST /v1/completions``) from the local engine: the prompt is the
raw text (or token ids) the model continues, with no chat template around it, as
llama.cpp's own ``/completion`` takes it.

:func:`text_request` makes the client's body a neutral request whose
``extra[RAW_PROMPT]`` holds the prompt (the upstream tokenizes it instead of rendering
messages); :func:`whole_answer` and :func:`stream_answer` write the engine's answer in
the API's shape (``text_completion`` objects; a stream's chunks end with ``data:
[DONE]``, after the usage chunk when ``stream_options.include_usage`` asks for it), as
bytes the gateway relays like an HTTP upstream's.

One prompt a request (a list of several, ``n`` or ``best_of`` above 1 is a 400 naming
it: the engine generates one sequence a request), and no ``echo``, ``suffix`` or
``logprobs`` (the engine has no fill-in-the-middle, and its log probabilities are not
yet written in this API's shape): each is a 400 naming it rather than an answer
without it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from ...core import (
    Request,
    Response,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    TextDelta,
    aclose_iterator,
)
from ...dialects import random_id
from ...errors import InvalidRequestError
from ..base import RawResponse

__all__ = ["RAW_PROMPT", "stream_answer", "text_request", "whole_answer"]

#: the key of a neutral request's ``extra`` that holds a raw prompt (a string or token ids)
RAW_PROMPT = "raw_prompt"
_JSON = {"content-type": "application/json"}
_SSE = {"content-type": "text/event-stream"}
#: the fields the engine cannot honour, and the value that asks for nothing
_REFUSED = (("echo", False), ("suffix", None), ("logprobs", None), ("best_of", 1), ("n", 1))


def _refused(name: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"'{name}' is not supported by the local engine's text completions: {why}",
        param=name,
        code="unsupported_parameter",
    )


def text_request(body: dict[str, Any]) -> Request:
    """A checked Completions ``body`` (dialects/completions.py) as a neutral request for
    the local engine, its prompt in ``extra[RAW_PROMPT]``."""
    for name, nothing in _REFUSED:
        value = body.get(name)
        if value is not None and value != nothing:
            raise _refused(name, "it generates one plain continuation of one prompt")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):
        prompt = prompt[0]  # (a list of one prompt)
    if isinstance(prompt, list) and not all(type(t) is int for t in prompt):
        raise _refused("prompt", "one prompt a request, not a list of several")
    stop = body.get("stop")
    options = body.get("stream_options")
    return Request(
        model=str(body.get("model")),
        messages=(),
        max_tokens=body.get("max_tokens", 16),  # (the API's default, unlike Chat's)
        stream=body.get("stream") is True,
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        seed=body.get("seed"),
        stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        extra={RAW_PROMPT: prompt},
    )


def _finish(reason: StopReason) -> str:
    return "length" if reason in (StopReason.MAX_TOKENS, StopReason.CONTEXT_WINDOW) else "stop"


def _usage(event: Response | StreamEnd) -> dict[str, int]:
    usage = event.usage
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def _object(cid: str, model: str, created: int, choices: list[Any]) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
    }


def _choice(text: str, finish: str | None) -> dict[str, Any]:
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}


def whole_answer(response: Response, model: str) -> RawResponse:
    """The engine's whole answer as the API's ``text_completion`` JSON."""
    answer = _object(
        random_id("cmpl-"),
        model,
        response.created or int(time.time()),
        [_choice(response.text, _finish(response.stop_reason))],
    )
    answer["usage"] = _usage(response)
    return RawResponse(200, dict(_JSON), body=orjson.dumps(answer))


def stream_answer(
    first: StreamEvent, events: AsyncIterator[StreamEvent], request: Request
) -> RawResponse:
    """The engine's events (``first``, read already, then ``events``) as the API's
    stream, relayed as an HTTP upstream's chunks; an error after the first event is
    raised for the gateway to end the stream with (its in-band error event)."""
    return RawResponse(
        200,
        dict(_SSE),
        chunks=_chunks(first, events, request),
        closer=lambda: aclose_iterator(events),
    )


async def _chunks(
    first: StreamEvent, events: AsyncIterator[StreamEvent], request: Request
) -> AsyncIterator[bytes]:
    cid, created = random_id("cmpl-"), int(time.time())

    def chunk(choices: list[Any], **more: Any) -> bytes:
        return (
            b"data: "
            + orjson.dumps({**_object(cid, request.model, created, choices), **more})
            + b"\n\n"
        )

    async for event in _after(first, events):
        if isinstance(event, TextDelta) and event.text:
            yield chunk([_choice(event.text, None)])
        elif isinstance(event, StreamEnd):
            yield chunk([_choice("", _finish(event.stop_reason))])
            if request.include_usage:
                yield chunk([], usage=_usage(event))
        elif isinstance(event, StreamError):
            raise event.error
    yield b"data: [DONE]\n\n"


async def _after(
    first: StreamEvent, events: AsyncIterator[StreamEvent]
) -> AsyncIterator[StreamEvent]:
    yield first
    async for event in events:
        yield event
