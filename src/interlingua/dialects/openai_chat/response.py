"""``chat.completion`` bodies <-> neutral :class:`Response`.

Wire facts: docs/protocols.md, "Chat Completions: response body", "Stop reasons" and
"Usage and caching".

Also the pieces the stream codec shares: finish-reason mapping both ways, usage parsing
and rendering, and the usage estimate used when an upstream reports none.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ...core import (
    AudioPart,
    Part,
    ReasoningPart,
    Request,
    Response,
    StopReason,
    TextPart,
    TokenLogprob,
    ToolCallPart,
    Usage,
)
from ...core.tokens import estimate_text as estimate_tokens
from ...errors import MalformedToolCallError, UpstreamError
from .._common import call_arguments, call_name, random_id
from ..loose_usage import loose_usage
from ._messages import render_tool_call
from ._reasoning import reasoning_parts
from .errors import error_from_payload

__all__ = [
    "FINISH_REASONS",
    "estimated_usage",
    "parse_logprobs",
    "parse_response",
    "parse_usage",
    "render_logprobs",
    "render_model_list",
    "render_response",
    "render_usage",
    "stop_reason_for",
]

# Chat -> neutral (docs/protocols.md, "Stop reasons"). Anything unknown is END_TURN.
_STOP_REASONS: dict[str, StopReason] = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.REFUSAL,
}

FINISH_REASONS: dict[StopReason, str] = {
    StopReason.END_TURN: "stop",
    StopReason.STOP_SEQUENCE: "stop",
    StopReason.PAUSE_TURN: "stop",
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTEXT_WINDOW: "length",
    StopReason.TOOL_USE: "tool_calls",
    StopReason.REFUSAL: "content_filter",
}
"""Neutral stop reason -> Chat ``finish_reason`` (docs/protocols.md, "Stop reasons")."""


def stop_reason_for(
    finish: Any, matched_stop: Any, has_tool_calls: bool
) -> tuple[StopReason, str | None]:
    """Chat ``finish_reason`` (+ vLLM's ``stop_reason``) -> (StopReason, stop sequence).

    A ``stop`` finish whose choice names the matched string (vLLM's ``stop_reason``) is a
    STOP_SEQUENCE. Some servers (older Ollama, vLLM with some parsers) report ``stop``
    with tool calls present; clients run their tool loop on TOOL_USE, so that wins.
    """
    reason = _STOP_REASONS.get(finish, StopReason.END_TURN) if isinstance(finish, str) else None
    if reason is None or reason is StopReason.END_TURN:
        if has_tool_calls:
            return StopReason.TOOL_USE, None
        if finish == "stop" and isinstance(matched_stop, str) and matched_stop:
            return StopReason.STOP_SEQUENCE, matched_stop
        return StopReason.END_TURN, None
    return reason, None


def parse_usage(raw: Any) -> Usage | None:
    """A Chat ``usage`` object -> Usage, or None when it is absent/null.

    ``prompt_tokens`` already includes cache reads/writes
    (docs/protocols.md, "Usage and caching"). The usual shape (ints where the API puts
    them) is read here; anything else -- counts as strings or floats, DeepSeek's
    ``prompt_cache_hit_tokens``, Ollama's ``prompt_eval_count``/``eval_count``
    (docs/protocols.md, "Chat Completions: server extensions"), a top-level
    ``reasoning_tokens``, Anthropic's cache fields added by a proxy -- by
    :func:`~interlingua.dialects.loose_usage.loose_usage`.
    """
    if not isinstance(raw, dict):
        return None
    prompt_tokens, completion_tokens = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if type(prompt_tokens) is int and type(completion_tokens) is int:  # the usual shape
        prompt = raw.get("prompt_tokens_details")
        completion = raw.get("completion_tokens_details")
        cached = prompt.get("cached_tokens") if type(prompt) is dict else None
        written = prompt.get("cache_write_tokens") if type(prompt) is dict else None
        reasoning = completion.get("reasoning_tokens") if type(completion) is dict else None
        if (
            (cached is None or type(cached) is int)
            and (written is None or type(written) is int)
            and (reasoning is None or type(reasoning) is int)
            and "prompt_cache_hit_tokens" not in raw
            and "reasoning_tokens" not in raw
            and "cache_read_input_tokens" not in raw
            and "cache_creation_input_tokens" not in raw
        ):
            return Usage(
                input_tokens=max(prompt_tokens, 0),
                output_tokens=max(completion_tokens, 0),
                cache_read_tokens=max(cached or 0, 0),
                cache_write_tokens=max(written or 0, 0),
                reasoning_tokens=max(reasoning or 0, 0),
            )
    return loose_usage(raw)


def render_usage(usage: Usage) -> dict[str, Any]:
    """Usage -> the Chat ``usage`` object with both detail objects.

    docs/protocols.md, "Chat Completions: response body".
    """
    prompt_details: dict[str, int] = {"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0}
    if usage.cache_write_tokens:
        prompt_details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {
            "reasoning_tokens": usage.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def estimated_usage(texts: Iterable[str], input_tokens: int = 0) -> Usage:
    """The usage to report when the upstream gave none, flagged ``estimated``.

    Output is estimated from the generated ``texts``; input is ``input_tokens`` (the
    stream decoder estimates it from the request it was given; ``parse_response`` has no
    request, so there it stays 0).
    """
    return Usage(
        input_tokens=max(0, input_tokens),
        output_tokens=estimate_tokens("".join(texts)),
        estimated=True,
    )


def _generated_texts(parts: Iterable[Part]) -> Iterable[str]:
    """What the model generated, for estimation: text, reasoning and tool arguments."""
    for p in parts:
        if isinstance(p, TextPart | ReasoningPart):
            yield p.text
        elif isinstance(p, ToolCallPart):
            yield p.arguments


def _reasoning_parts(message: dict[str, Any]) -> list[Part]:
    """``reasoning_content ?? reasoning``, else the text of OpenRouter's
    ``reasoning_details``, whose signature and encrypted entries become the part's
    signature and redacted parts (:mod:`._reasoning`); the details themselves in the
    first part's meta.

    docs/protocols.md, "Chat Completions: server extensions".
    """
    text = message.get("reasoning_content")
    if not isinstance(text, str):
        text = message.get("reasoning")
    details = message.get("reasoning_details")
    if not details:  # (most answers: no details to read)
        return [ReasoningPart(text)] if isinstance(text, str) and text else []
    meta = {"reasoning_details": details}
    return [*reasoning_parts(text if isinstance(text, str) else "", details, meta)]


def _tool_call(call: Any, where: str, position: int) -> ToolCallPart:
    """One ``tool_calls`` entry (or the legacy ``function_call``); a call no client could
    use is a :class:`MalformedToolCallError` naming it by ``where``."""
    if not isinstance(call, dict):
        raise MalformedToolCallError("not an object", where)
    call_id = call.get("id")
    custom = call.get("type") == "custom"
    key = "custom" if custom else "function"
    fn = call.get(key)
    if not isinstance(fn, dict):
        raise MalformedToolCallError(f"its {key} is not an object", where, call_id)
    name = call_name(fn.get("name"), where, call_id)
    field = "input" if custom else "arguments"
    return ToolCallPart(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{position}",
        name=name,
        arguments=call_arguments(fn.get(field), where, call_id, field, text=custom),
        kind="custom" if custom else "function",
    )


def _token(raw: Any) -> TokenLogprob | None:
    """One ``{token, logprob, bytes, top_logprobs}`` entry; None when malformed.

    docs/protocols.md, "Chat Completions: response body".
    """
    if not isinstance(raw, dict):
        return None
    token, logprob = raw.get("token"), raw.get("logprob")
    if not isinstance(token, str) or not isinstance(logprob, int | float):
        return None
    data = raw.get("bytes")
    top = raw.get("top_logprobs")
    return TokenLogprob(
        token,
        float(logprob),
        tuple(data) if isinstance(data, list) else None,
        tuple(t for t in map(_token, top) if t is not None) if isinstance(top, list) else (),
    )


def parse_logprobs(raw: Any, key: str = "content") -> tuple[TokenLogprob, ...] | None:
    """``choice.logprobs[key]`` (``content`` or ``refusal``) -> token logprobs, or None
    when the choice has none (``logprobs: null``, or the key null)."""
    if not isinstance(raw, dict):
        return None
    tokens = raw.get(key)
    if not isinstance(tokens, list):
        return None
    return tuple(t for t in map(_token, tokens) if t is not None)


def _render_token(t: TokenLogprob, top: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "token": t.token,
        "logprob": t.logprob,
        "bytes": list(t.bytes) if t.bytes is not None else None,
    }
    if top:
        out["top_logprobs"] = [_render_token(a, False) for a in t.top_logprobs]
    return out


def render_logprobs(
    content: Iterable[TokenLogprob] | None, refusal: Iterable[TokenLogprob] | None = None
) -> dict[str, Any]:
    """Token logprobs -> a choice's ``logprobs`` object.

    docs/protocols.md, "Chat Completions: response body".
    """
    return {
        "content": None if content is None else [_render_token(t) for t in content],
        "refusal": None if refusal is None else [_render_token(t) for t in refusal],
    }


def _audio_part(audio: Any) -> AudioPart | None:
    """``message.audio`` ``{id, data, expires_at, transcript}`` -> AudioPart."""
    if not isinstance(audio, dict):
        return None
    data, transcript = audio.get("data"), audio.get("transcript")
    audio_id, expires = audio.get("id"), audio.get("expires_at")
    return AudioPart(
        data=data if isinstance(data, str) else "",
        transcript=transcript if isinstance(transcript, str) else "",
        id=audio_id if isinstance(audio_id, str) else None,
        expires_at=expires if isinstance(expires, int) and not isinstance(expires, bool) else None,
    )


def _message_parts(message: dict[str, Any], logprobs: Any = None) -> list[Part]:
    parts = _reasoning_parts(message)
    content = message.get("content")
    tokens = parse_logprobs(logprobs)
    if isinstance(content, list):  # a few servers answer with a part list
        content = "".join(c.get("text") or "" for c in content if isinstance(c, dict))
    if (isinstance(content, str) and content) or tokens:
        parts.append(TextPart(content if isinstance(content, str) else "", logprobs=tokens))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        tokens = parse_logprobs(logprobs, "refusal")
        parts.append(TextPart(refusal, meta={"refusal": True}, logprobs=tokens))
    audio = _audio_part(message.get("audio"))
    if audio is not None:
        parts.append(audio)
    calls = message.get("tool_calls")
    legacy = message.get("function_call")
    if not calls and legacy is not None:
        parts.append(_tool_call({"id": "call_0", "function": legacy}, "function_call", 0))
    for position, call in enumerate(calls if isinstance(calls, list) else ()):
        parts.append(_tool_call(call, f"tool_calls[{position}]", position))
    return parts


def parse_response(body: Any) -> Response:
    """An upstream's ``chat.completion`` body -> Response (first choice only).

    A body with a top-level ``error`` (some servers answer 200 with one) raises it; a
    body without ``choices[0].message`` raises ``UpstreamError`` with status 502. A
    missing ``id`` gets a fresh ``chatcmpl-`` id. With no usage the output is estimated
    and input stays 0 (there is no request here), flagged ``estimated``.
    """
    if not isinstance(body, dict):
        raise UpstreamError("upstream returned a non-object body", status=502, body=body)
    if body.get("error"):
        raise error_from_payload(body["error"])
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamError("upstream returned no choices", status=502, body=body)
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise UpstreamError("upstream returned a choice without a message", status=502, body=body)
    parts = _message_parts(message, choice.get("logprobs"))
    has_calls = any(isinstance(p, ToolCallPart) for p in parts)
    stop, sequence = stop_reason_for(
        choice.get("finish_reason"), choice.get("stop_reason"), has_calls
    )
    # Ollama's native counts sit at the top level of the body.
    usage = parse_usage(body.get("usage")) or (
        parse_usage(body) if "prompt_eval_count" in body or "eval_count" in body else None
    )
    created = body.get("created")
    meta = {k: body[k] for k in ("system_fingerprint", "service_tier") if body.get(k) is not None}
    return Response(
        id=str(body.get("id") or random_id("chatcmpl-")),
        model=str(body.get("model") or ""),
        parts=tuple(parts),
        stop_reason=stop,
        stop_sequence=sequence,
        usage=usage if usage is not None else estimated_usage(_generated_texts(parts)),
        created=created if isinstance(created, int) and not isinstance(created, bool) else 0,
        meta=meta,
    )


def render_message(parts: Iterable[Part]) -> dict[str, Any]:
    """The ``choices[0].message`` object for a response's parts.

    docs/protocols.md, "Chat Completions: response body".
    """
    text: list[str] = []
    refusal: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    audio: dict[str, Any] | None = None
    for p in parts:
        if isinstance(p, TextPart):
            (refusal if p.meta.get("refusal") else text).append(p.text)
        elif isinstance(p, AudioPart):
            audio = {
                "id": p.id or random_id("audio_"),
                "data": p.data,
                "expires_at": p.expires_at or 0,
                "transcript": p.transcript,
            }
        elif isinstance(p, ToolCallPart):
            calls.append(render_tool_call(p))
        elif isinstance(p, ReasoningPart):
            reasoning.append(p.text)
    content = "".join(text)
    message: dict[str, Any] = {
        "role": "assistant",
        # null only when the turn is tool calls (or a refusal) and no text
        # (docs/protocols.md, "Chat Completions: response body").
        "content": content if content or not (calls or refusal or audio) else None,
        "refusal": "".join(refusal) if refusal else None,
    }
    if audio is not None:
        message["audio"] = audio
    if calls:
        message["tool_calls"] = calls
    thought = "".join(reasoning)
    if thought:
        # the DeepSeek extension (docs/protocols.md, "Chat Completions: server extensions")
        message["reasoning_content"] = thought
    return message


def completion_id(response_id: str) -> str:
    """An OpenAI-looking completion id: ``chatcmpl-`` ids kept, others prefixed (an id from
    an Anthropic or local upstream would otherwise give the translation away), none
    invented unless there is none."""
    if response_id.startswith("chatcmpl-"):
        return response_id
    return "chatcmpl-" + response_id if response_id else random_id("chatcmpl-")


def render_response(response: Response, request: Request) -> dict[str, Any]:
    """Response -> a ``chat.completion`` body the official SDK parses.

    Its shape: docs/protocols.md, "Chat Completions: response body".

    ``model`` echoes what the client asked for, not the upstream's name for it; an empty
    ``id`` (an upstream of another kind may have none) is replaced by a fresh one.
    """
    return {
        "id": completion_id(response.id),
        "object": "chat.completion",
        "created": response.created or int(time.time()),
        "model": request.model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": render_message(response.parts),
                "logprobs": _response_logprobs(response.parts),
                "finish_reason": FINISH_REASONS.get(response.stop_reason, "stop"),
            }
        ],
        "usage": render_usage(response.usage),
    }


def _response_logprobs(parts: Iterable[Part]) -> dict[str, Any] | None:
    """The choice's ``logprobs``: null unless some text part carries them."""
    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None
    for p in parts:
        if isinstance(p, TextPart) and p.logprobs is not None:
            if p.meta.get("refusal"):
                refusal = [*(refusal or ()), *p.logprobs]
            else:
                content = [*(content or ()), *p.logprobs]
    if content is None and refusal is None:
        return None
    return render_logprobs(content, refusal)


def render_model_list(names: list[str], created: int) -> dict[str, Any]:
    """The ``GET /v1/models`` body."""
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "interlingua"}
            for name in names
        ],
    }
