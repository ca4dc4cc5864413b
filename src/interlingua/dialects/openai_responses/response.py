"""Responses API ``response`` objects <-> neutral :class:`Response`.

Wire facts: docs/protocols.md, "Responses: response object" and "Stop reasons".

Each neutral part is one output item (a text part a ``message`` with one content part,
a reasoning part a ``reasoning`` item, a tool call a ``function_call`` or
``custom_tool_call``); parts with no Responses form are left out. The stream encoder
renders its items with the same :func:`render_item` and :func:`item_id`, so an item
sent in ``response.output_item.done`` is the one in the final ``response.completed``.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from ...core import (
    Part,
    ReasoningPart,
    Request,
    Response,
    StopReason,
    TextPart,
    TokenLogprob,
    ToolCallPart,
    UnknownPart,
    Usage,
)
from ...errors import UpstreamError
from .._common import call_arguments, call_name, random_id
from ..loose_usage import loose_usage
from ..openai_chat.errors import error_from_payload
from ._items import DIALECT_NAME
from .request import INSTRUCTIONS
from .sealed import DEFAULT_SEALER, Sealer

__all__ = [
    "NAME",
    "STATE",
    "item_id",
    "own_id",
    "parse_logprobs",
    "parse_response",
    "parse_usage",
    "render_item",
    "render_logprobs",
    "render_response",
    "render_usage",
    "response_body",
    "response_id",
    "sealer_for",
]

NAME = DIALECT_NAME
"""The dialect's name, as :class:`~interlingua.core.UnknownPart` ``dialect`` records it."""
#: ``Request.extra`` key the gateway's stored state sets (server/responses/state.py):
#: ``{"store": bool, "previous_response_id": str | None, "id": str | None}``, what a
#: rendered response says of the first two (absent: ``store: false``, no previous id:
#: nothing was kept) and the response id to use instead of one derived from the
#: upstream's (a stored id must be unique; some upstreams repeat theirs). A codec
#: marker: never on the wire.
STATE = "_responses_state"
#: the ``include`` entry that asks for reasoning's ``encrypted_content``
ENCRYPTED_INCLUDE = "reasoning.encrypted_content"
#: meta of a reasoning part parsed from a Responses upstream: its signature is that
#: upstream's own ``encrypted_content``, relayed as it came, never sealed again
UPSTREAM_REASONING = "responses_reasoning"

# Neutral stop reason -> ``incomplete_details.reason`` (docs/protocols.md, "Stop reasons");
# the rest are ``completed``.
_INCOMPLETE: dict[StopReason, str] = {
    StopReason.MAX_TOKENS: "max_output_tokens",
    StopReason.CONTEXT_WINDOW: "max_output_tokens",
    StopReason.REFUSAL: "content_filter",
}
_STOP_FOR_INCOMPLETE = {
    "max_output_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.REFUSAL,
}


def response_id(neutral_id: str) -> str:
    """A ``resp_`` id: kept when it is one, else prefixed (a fresh one when empty)."""
    if neutral_id.startswith("resp_"):
        return neutral_id
    return "resp_" + neutral_id if neutral_id else random_id("resp_")


def own_id(request: Request, neutral_id: str) -> str:
    """The response id for an answer to ``request``: the one ``STATE`` names, else
    :func:`response_id` of the upstream's."""
    state = request.extra.get(STATE)
    chosen = state.get("id") if isinstance(state, dict) else None
    return chosen if isinstance(chosen, str) and chosen else response_id(neutral_id)


def item_id(prefix: str, resp_id: str, output_index: int, part: Part) -> str:
    """The id of output item ``output_index``: the upstream's own (``meta["id"]``) when
    the part came from a Responses upstream, else derived from the response id, so the
    stream and the final object name an item alike without sharing state."""
    own = getattr(part, "meta", {}).get("id")
    if isinstance(own, str) and own:
        return own
    digest = hashlib.blake2b(f"{resp_id}/{output_index}".encode(), digest_size=12).hexdigest()
    return prefix + digest


def item_prefix(part: Part) -> str | None:
    """The id prefix of ``part``'s output item; None: the part has no Responses form."""
    if isinstance(part, TextPart):
        return "msg_"
    if isinstance(part, ToolCallPart):
        return "ctc_" if part.kind == "custom" else "fc_"
    if isinstance(part, ReasoningPart):
        return "rs_"
    if isinstance(part, UnknownPart) and part.dialect == NAME:
        return ""
    return None


def content_part(part: TextPart) -> dict[str, Any]:
    """A message's content part for a text part: ``output_text`` or ``refusal``."""
    if part.meta.get("refusal"):
        return {"type": "refusal", "refusal": part.text}
    logprobs = render_logprobs(part.logprobs)
    return {"type": "output_text", "text": part.text, "annotations": [], "logprobs": logprobs}


def _token(t: TokenLogprob, top: bool) -> dict[str, Any]:
    # the SDK's output_text type requires bytes: derived from the token when the
    # upstream did not say them
    data = list(t.bytes) if t.bytes is not None else list(t.token.encode())
    out: dict[str, Any] = {"token": t.token, "logprob": t.logprob, "bytes": data}
    if top:
        out["top_logprobs"] = [_token(a, False) for a in t.top_logprobs]
    return out


def render_logprobs(tokens: tuple[TokenLogprob, ...] | None) -> list[dict[str, Any]]:
    """Token logprobs -> an ``output_text`` part's ``logprobs`` (``[]`` when none). The
    stream's ``output_text.delta`` events carry the same shape: the SDK's delta type
    lists no ``bytes``, but keeps them (its models allow extra keys), and a client that
    folds the stream gets what the finished part says."""
    return [_token(t, True) for t in tokens or ()]


def parse_logprobs(raw: Any) -> tuple[TokenLogprob, ...] | None:
    """An ``output_text`` part's (or delta event's) ``logprobs`` -> token logprobs; None
    for ``[]``, which the API sends whether or not they were asked for."""
    if not isinstance(raw, list) or not raw:
        return None
    out: list[TokenLogprob] = []
    for entry in raw:
        if not isinstance(entry, dict):
            continue
        token, logprob, data = entry.get("token"), entry.get("logprob"), entry.get("bytes")
        if not isinstance(token, str) or not isinstance(logprob, int | float):
            continue
        top = parse_logprobs(entry.get("top_logprobs")) or ()
        out.append(
            TokenLogprob(
                token, float(logprob), tuple(data) if isinstance(data, list) else None, top
            )
        )
    return tuple(out)


def sealer_for(request: Request, sealer: Sealer) -> Sealer | None:
    """``sealer`` when the client asked for reasoning's ``encrypted_content``
    (``include``), as the API returns it only then, or when the answer is stored (the
    stored items are the conversation ``previous_response_id`` rebuilds, and an upstream
    may need its reasoning back exactly: an Anthropic signature); else None."""
    include = request.extra.get("include")
    if isinstance(include, list) and ENCRYPTED_INCLUDE in include:
        return sealer
    state = request.extra.get(STATE)
    return sealer if isinstance(state, dict) and state.get("store") is True else None


def encrypted_content(part: ReasoningPart, sealer: Sealer) -> str | None:
    """A reasoning item's ``encrypted_content``: a Responses upstream's own token as it
    came (the client sends it back, and it goes back to that upstream), else the part
    sealed by the gateway (:mod:`.sealed`), or None when there is nothing to carry."""
    if part.meta.get(UPSTREAM_REASONING):
        return part.signature
    return sealer.seal(part)


def render_item(part: Part, iid: str, sealer: Sealer | None = None) -> dict[str, Any]:
    """The finished output item for ``part`` (``item_prefix(part)`` is not None); a
    reasoning item carries ``encrypted_content`` only when given a ``sealer``
    (:func:`sealer_for`)."""
    if isinstance(part, TextPart):
        return {
            "id": iid,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [content_part(part)],
        }
    if isinstance(part, ToolCallPart):
        if part.kind == "custom":
            return {
                "id": iid,
                "type": "custom_tool_call",
                "call_id": part.id,
                "name": part.name,
                "input": part.arguments,
            }
        return {
            "id": iid,
            "type": "function_call",
            "call_id": part.id,
            "name": part.name,
            "arguments": part.arguments,
            "status": "completed",
        }
    if isinstance(part, ReasoningPart):
        summary = [{"type": "summary_text", "text": part.text}] if part.text else []
        item: dict[str, Any] = {"id": iid, "type": "reasoning", "summary": summary}
        token = encrypted_content(part, sealer) if sealer is not None else None
        if token:
            item["encrypted_content"] = token
        return item
    assert isinstance(part, UnknownPart)
    return part.raw


def render_usage(usage: Usage) -> dict[str, Any]:
    """Usage -> the Responses ``usage`` object: input includes cache reads.

    docs/protocols.md, "Usage and caching".
    """
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def _tools(request: Request) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for spec in request.tools:
        if spec.kind == "custom":
            tool: dict[str, Any] = {"type": "custom", "name": spec.name}
            if spec.format is not None:
                tool["format"] = spec.format
        else:
            tool = {
                "type": "function",
                "name": spec.name,
                "parameters": spec.parameters,
                "strict": spec.strict,
            }
        if spec.description is not None:
            tool["description"] = spec.description
        tools.append(tool)
    return tools


def _tool_choice(request: Request) -> Any:
    choice = request.tool_choice
    if choice is None:
        return "auto"
    if choice.mode != "tool":
        return choice.mode
    custom = any(t.name == choice.name and t.kind == "custom" for t in request.tools)
    return {"type": "custom" if custom else "function", "name": choice.name}


def _text_format(request: Request) -> dict[str, Any]:
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return {"type": "text"}
    if fmt.type == "json_object":
        return {"type": "json_object"}
    out: dict[str, Any] = {"type": "json_schema", "name": fmt.name or "response"}
    out["schema"] = fmt.schema or {}
    if fmt.strict is not None:
        out["strict"] = fmt.strict
    if fmt.description is not None:
        out["description"] = fmt.description
    return out


def _instructions(request: Request) -> str | None:
    """The request's ``instructions``, which the API echoes (the parser made them the
    first message; from another dialect there are none)."""
    first = request.messages[0] if request.messages else None
    if first is None or not first.meta.get(INSTRUCTIONS):
        return None
    return "".join(p.text for p in first.parts if isinstance(p, TextPart))


def response_body(
    resp_id: str, created: int, request: Request, status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    """A ``response`` object without ``usage``: the echo of the request's settings the
    SDK's type requires, around ``output``. Shared by the stream's lifecycle events."""
    reasoning = request.reasoning
    state = request.extra.get(STATE) or {}
    return {
        "id": resp_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": _instructions(request),
        "max_output_tokens": request.max_tokens,
        "model": request.model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": state.get("previous_response_id"),
        "reasoning": {"effort": reasoning.effort if reasoning else None, "summary": None},
        "store": bool(state.get("store", False)),
        "temperature": request.temperature if request.temperature is not None else 1.0,
        "text": {"format": _text_format(request)},
        "tool_choice": _tool_choice(request),
        "tools": _tools(request),
        "top_p": request.top_p if request.top_p is not None else 1.0,
        "truncation": "disabled",
        "usage": None,
        "user": request.user,
        "metadata": request.metadata or {},
    }


def finish(body: dict[str, Any], stop: StopReason, usage: Usage) -> dict[str, Any]:
    """Set ``body``'s terminal status (completed/incomplete) and usage; returns it."""
    reason = _INCOMPLETE.get(stop)
    body["status"] = "incomplete" if reason else "completed"
    body["incomplete_details"] = {"reason": reason} if reason else None
    body["usage"] = render_usage(usage)
    return body


def render_output(
    parts: tuple[Part, ...], resp_id: str, sealer: Sealer | None = None
) -> list[dict[str, Any]]:
    """The output items of ``parts``, in order (parts without a Responses form skipped)."""
    items: list[dict[str, Any]] = []
    for part in parts:
        prefix = item_prefix(part)
        if prefix is not None:
            iid = item_id(prefix, resp_id, len(items), part)
            items.append(render_item(part, iid, sealer))
    return items


def render_response(
    response: Response, request: Request, sealer: Sealer = DEFAULT_SEALER
) -> dict[str, Any]:
    """Response -> a Responses ``response`` object the official SDK parses.

    Its shape: docs/protocols.md, "Responses: response object".

    ``model`` echoes the name the client asked for; a length stop is ``incomplete``
    with ``incomplete_details.reason`` ``max_output_tokens`` (a refusal:
    ``content_filter``), anything else ``completed``.
    """
    resp_id = own_id(request, response.id)
    output = render_output(response.parts, resp_id, sealer_for(request, sealer))
    body = response_body(resp_id, response.created or int(time.time()), request, "", output)
    return finish(body, response.stop_reason, response.usage)


def parse_usage(raw: Any) -> Usage | None:
    """A Responses ``usage`` object -> Usage, or None when it is absent/null.

    The usual shape (int counts, and details objects of ints) is read here; counts
    written otherwise (strings, floats, a top-level ``reasoning_tokens``...) by
    :func:`~interlingua.dialects.loose_usage.loose_usage`.
    """
    if not isinstance(raw, dict):
        return None
    tokens_in, tokens_out = raw.get("input_tokens"), raw.get("output_tokens")
    inputs, outputs = raw.get("input_tokens_details"), raw.get("output_tokens_details")
    cached = inputs.get("cached_tokens", 0) if type(inputs) is dict else 0
    written = inputs.get("cache_write_tokens", 0) if type(inputs) is dict else 0
    reasoning = outputs.get("reasoning_tokens", 0) if type(outputs) is dict else 0
    if (
        type(tokens_in) is int
        and type(tokens_out) is int
        and type(cached) is int
        and type(written) is int
        and type(reasoning) is int
        and "reasoning_tokens" not in raw
    ):
        return Usage(
            input_tokens=max(tokens_in, 0),
            output_tokens=max(tokens_out, 0),
            cache_read_tokens=max(cached, 0),
            cache_write_tokens=max(written, 0),
            reasoning_tokens=max(reasoning, 0),
        )
    return loose_usage(raw)


def _str(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    return value if isinstance(value, str) else ""


def _item_meta(item: dict[str, Any]) -> dict[str, Any]:
    iid = item.get("id")
    return {"id": iid} if isinstance(iid, str) and iid else {}


def parse_item(item: Any, where: str = "output item") -> list[Part]:
    """One output item -> its neutral parts (a message may hold several contents). A
    call no client could use (no name, arguments neither text nor an object) is a
    :class:`MalformedToolCallError` naming it by ``where`` (``output[1]``)."""
    if not isinstance(item, dict):
        return []
    kind = item.get("type")
    if kind == "message":
        parts: list[Part] = []
        for content in item.get("content") or ():
            if not isinstance(content, dict):
                continue
            # The item's id goes on its first part only: ids must stay unique on render.
            meta = {} if parts else _item_meta(item)
            if content.get("type") == "refusal":
                parts.append(TextPart(_str(content, "refusal"), meta={**meta, "refusal": True}))
            elif content.get("type") == "output_text":
                logprobs = parse_logprobs(content.get("logprobs"))
                parts.append(TextPart(_str(content, "text"), meta=meta, logprobs=logprobs))
        return parts
    if kind == "reasoning":
        summary = item.get("summary") or ()
        text = "\n\n".join(_str(s, "text") for s in summary if isinstance(s, dict))
        if not text:  # raw reasoning (gpt-oss on vLLM) where there is no summary
            content = item.get("content") or ()
            text = "".join(_str(c, "text") for c in content if isinstance(c, dict))
        encrypted = item.get("encrypted_content")
        # encrypted_content is opaque state that round-trips only to OpenAI, as a
        # signature does only to Anthropic: it travels as the part's signature.
        signature = encrypted if isinstance(encrypted, str) and encrypted else None
        meta = {**_item_meta(item), UPSTREAM_REASONING: True}
        return [ReasoningPart(text, signature=signature, meta=meta)]
    if kind in ("function_call", "custom_tool_call"):
        custom = kind == "custom_tool_call"
        call_id = item.get("call_id")
        field = "input" if custom else "arguments"
        return [
            ToolCallPart(
                id=call_id if isinstance(call_id, str) and call_id else random_id("call_"),
                name=call_name(item.get("name"), where, call_id),
                arguments=call_arguments(item.get(field), where, call_id, field, text=custom),
                meta=_item_meta(item),
                kind="custom" if custom else "function",
            )
        ]
    return [UnknownPart(NAME, item)]


def stop_reason_for(status: Any, incomplete: Any, has_tool_calls: bool) -> StopReason:
    """``status`` + ``incomplete_details`` -> StopReason (docs/protocols.md, "Stop reasons")."""
    if status == "incomplete":
        reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
        return _STOP_FOR_INCOMPLETE.get(str(reason), StopReason.MAX_TOKENS)
    return StopReason.TOOL_USE if has_tool_calls else StopReason.END_TURN


def parse_response(body: Any) -> Response:
    """An upstream's ``response`` object -> Response.

    A ``failed`` response (or one with an ``error``) raises its error; a body that is
    not a response object raises ``UpstreamError`` (502). A completed response with
    a tool call is TOOL_USE.
    """
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        raise UpstreamError("upstream returned no response object", status=502, body=body)
    if body.get("status") == "failed" or body.get("error"):
        raise error_from_payload(body.get("error") or "upstream response failed")
    parts = [
        part for i, item in enumerate(body["output"]) for part in parse_item(item, f"output[{i}]")
    ]
    has_calls = any(isinstance(p, ToolCallPart) for p in parts)
    created = body.get("created_at")
    return Response(
        id=str(body.get("id") or random_id("resp_")),
        model=str(body.get("model") or ""),
        parts=tuple(parts),
        stop_reason=stop_reason_for(body.get("status"), body.get("incomplete_details"), has_calls),
        usage=parse_usage(body.get("usage")) or Usage(),
        created=int(created)
        if isinstance(created, int | float) and not isinstance(created, bool)
        else 0,
    )
