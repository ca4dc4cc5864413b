"""Anthropic Messages responses <-> neutral :class:`Response`.

Wire facts: docs/protocols.md, "Messages: response body". Usage is where the two worlds
differ most (docs/protocols.md, "Usage and caching"): Anthropic's ``input_tokens``
*excludes* cache traffic, ours includes it. Parsing adds ``cache_creation_input_tokens``
and ``cache_read_input_tokens`` back in; rendering subtracts them (never below zero).

Rendering for an Anthropic client always produces a body the official SDK accepts
(``anthropic.types.Message``): ``stop_reason`` is never null, both cache counts are
present, and parts with no place in an assistant message (images, documents, tool
results, other dialects' unknown parts) are left out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ...core import (
    Part,
    ReasoningPart,
    Request,
    Response,
    StopReason,
    TextPart,
    ToolCallPart,
    UnknownPart,
    Usage,
)
from ...errors import InvalidRequestError, MalformedToolCallError, UpstreamError
from .._common import call_input, call_name, random_id, sanitize_tool_id
from ..loose_usage import loose_usage
from ._custom import custom_names, unwrap_call, wrap
from .errors import error_from_type
from .render import parse_arguments, render_text_block
from .request import NAME, parse_block

_STOP_REASONS: dict[str, StopReason] = {r.value: r for r in StopReason}
_KEPT_META = ("stop_details", "container")


def stop_reason_from_wire(value: Any) -> StopReason:
    """Anthropic ``stop_reason`` -> neutral; null or unknown values -> END_TURN."""
    return (
        _STOP_REASONS.get(value, StopReason.END_TURN)
        if isinstance(value, str)
        else (StopReason.END_TURN)
    )


_COUNT_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def usage_from_wire(usage: Any) -> Usage:
    """Anthropic ``usage`` -> neutral: input = input + cache writes + cache reads.

    No usage at all (absent, not an object, or no count in it -- some compatible servers
    omit it) gives zeros flagged ``estimated``: the gateway does not know the counts.
    The usual shape (ints, or nulls, where the API puts them) is read here; counts
    written otherwise (strings, floats, a top-level ``reasoning_tokens``...) by
    :func:`~interlingua.dialects.loose_usage.loose_usage`.
    """
    if not isinstance(usage, dict) or not any(k in usage for k in _COUNT_KEYS):
        return Usage(estimated=True)
    get = usage.get
    tokens_in, tokens_out = get("input_tokens"), get("output_tokens")
    write, read = get("cache_creation_input_tokens"), get("cache_read_input_tokens")
    details = get("output_tokens_details")
    if (
        (tokens_in is None or type(tokens_in) is int)
        and (tokens_out is None or type(tokens_out) is int)
        and (write is None or type(write) is int)
        and (read is None or type(read) is int)
        and details is None
        and "reasoning_tokens" not in usage
    ):
        write = write if write and write > 0 else 0
        read = read if read and read > 0 else 0
        return Usage(
            input_tokens=(tokens_in if tokens_in and tokens_in > 0 else 0) + write + read,
            output_tokens=tokens_out if tokens_out and tokens_out > 0 else 0,
            cache_read_tokens=read,
            cache_write_tokens=write,
        )
    return loose_usage(usage)


def usage_to_wire(usage: Usage) -> dict[str, Any]:
    """Neutral usage -> Anthropic's (input excludes cache; every count present, ≥ 0)."""
    cache_read = max(0, usage.cache_read_tokens)
    cache_write = max(0, usage.cache_write_tokens)
    wire: dict[str, Any] = {
        "input_tokens": max(0, usage.input_tokens - cache_read - cache_write),
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
        "output_tokens": max(0, usage.output_tokens),
    }
    if usage.reasoning_tokens > 0:
        wire["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    return wire


def message_id(response_id: str) -> str:
    """An Anthropic-looking message id: ``msg_`` kept, others prefixed, none invented."""
    if response_id.startswith("msg_") and sanitize_tool_id(response_id) == response_id:
        return response_id
    if response_id:
        return "msg_" + sanitize_tool_id(response_id)
    return random_id("msg_")


def parse_response(body: Any, request: Request | None = None) -> Response:
    """An Anthropic upstream's ``Message`` body -> neutral response.

    ``request``, the neutral request that was sent, tells which ``tool_use`` blocks are
    calls of custom tools offered as functions (:mod:`._custom`): they become custom
    calls again. Without it they stay function calls of ``{"input": <text>}``.

    A body with an ``error`` (a 200 some providers send) raises that error; a body that
    is not a message at all (no ``content`` list) raises ``UpstreamError`` with status 502
    (the upstream broke the protocol, the caller did nothing wrong): read as an empty
    message it would reach the client as a normal, empty answer. A missing ``id`` gets a
    fresh ``msg_`` id, so no client ever sees ``"id": ""``.
    """
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        message = err.get("message")
        raise error_from_type(
            str(err.get("type") or ""),
            message if isinstance(message, str) and message else "upstream error",
            body=body,
        )
    if not isinstance(body, dict) or not isinstance(body.get("content"), list):
        raise UpstreamError("upstream returned a malformed Anthropic message", status=502)
    parts = tuple(_content_part(block, f"content[{i}]") for i, block in enumerate(body["content"]))
    custom = custom_names(request)
    if custom:
        parts = tuple(
            unwrap_call(p) if isinstance(p, ToolCallPart) and p.name in custom else p for p in parts
        )
    stop_sequence = body.get("stop_sequence")
    meta = {k: body[k] for k in _KEPT_META if body.get(k) is not None}
    return Response(
        id=str(body.get("id") or random_id("msg_")),
        model=str(body.get("model") or ""),
        parts=parts,
        stop_reason=stop_reason_from_wire(body.get("stop_reason")),
        stop_sequence=stop_sequence if isinstance(stop_sequence, str) else None,
        usage=usage_from_wire(body.get("usage")),
        meta=meta,
    )


def _content_part(block: Any, where: str) -> Part:
    """One block of an upstream's message; a ``tool_use`` no client could use (no name,
    an input that is not an object, no id) is a :class:`MalformedToolCallError`, any
    other broken block a 502 too."""
    call = isinstance(block, dict) and block.get("type") == "tool_use"
    call_id = block.get("id") if call else None
    if call:
        call_name(block.get("name"), where, call_id)
        call_input(block.get("input"), where, call_id)
    try:
        return parse_block(block, where)
    except InvalidRequestError as exc:
        if call:
            raise MalformedToolCallError(exc.message, where, call_id) from exc
        raise UpstreamError(
            f"upstream returned a malformed Anthropic message: {exc}", status=502
        ) from exc


def tool_input_for_client(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the ``input`` object an Anthropic client expects.

    Arguments that are not a JSON object (a model can emit broken JSON through an
    OpenAI-compatible upstream) cannot be made into one without guessing, and failing
    the whole response would lose the turn; they are wrapped as
    ``{"raw_arguments": "<text>"}`` so the client sees exactly what the model wrote.
    """
    tool_input = parse_arguments(arguments)
    return tool_input if tool_input is not None else {"raw_arguments": arguments}


def render_block(part: Part) -> dict[str, Any] | None:
    """One neutral response part -> an Anthropic response content block (None: skipped)."""
    if isinstance(part, TextPart):
        return render_text_block(part)
    if isinstance(part, ToolCallPart):
        return {
            "type": "tool_use",
            "id": sanitize_tool_id(part.id),
            "name": part.name,
            "input": (
                wrap(part.arguments)  # a custom call: the one string it was offered with
                if part.kind == "custom"
                else tool_input_for_client(part.arguments)
            ),
        }
    if isinstance(part, ReasoningPart):
        if part.redacted is not None:
            return {"type": "redacted_thinking", "data": part.redacted}
        # OpenAI-side reasoning has no signature; the SDK requires the key, "" it is.
        return {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}
    if isinstance(part, UnknownPart) and part.dialect == NAME:
        return part.raw
    return None


def render_response(response: Response, request: Request) -> dict[str, Any]:
    """The body for an Anthropic client; ``model`` echoes the name the client asked for."""
    content = [b for part in response.parts if (b := render_block(part)) is not None]
    stop_reason = response.stop_reason
    body: dict[str, Any] = {
        "id": message_id(response.id),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": str(stop_reason),
        "stop_sequence": (
            response.stop_sequence if stop_reason == StopReason.STOP_SEQUENCE else None
        ),
        "usage": usage_to_wire(response.usage),
    }
    for key in _KEPT_META:
        if key in response.meta:
            body[key] = response.meta[key]
    return body


def render_model_list(names: list[str], created: int) -> dict[str, Any]:
    """``GET /v1/models`` in Anthropic's shape (``created_at`` as RFC 3339, UTC).

    >>> render_model_list(["claude-a"], 0)["data"][0]["created_at"]
    '1970-01-01T00:00:00Z'
    """
    created_at = datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "data": [
            {
                "type": "model",
                "id": name,
                "display_name": name,
                "created_at": created_at,
                # Required by the 2026 SDK's ModelInfo; every model we route is live.
                "lifecycle": "active",
            }
            for name in names
        ],
        "has_more": False,
        "first_id": names[0] if names else None,
        "last_id": names[-1] if names else None,
    }
