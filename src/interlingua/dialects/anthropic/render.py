"""Neutral Request -> Anthropic Messages request body (for Anthropic-speaking upstreams).

The parse direction lives in ``request.py``. Rendering applies the documented drop policy
(docs/mapping.md): system messages hoisted into ``system``, consecutive same-role turns
merged, tool results first in their user turn, tool ids sanitized, empty text dropped,
thinking left out where Anthropic would reject it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from ...core import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    Request,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    UnknownPart,
)
from ...core.parts import Meta
from ...errors import InvalidRequestError
from .._common import (
    SOURCE_INDEX,
    SOURCE_PARAM,
    parse_data_uri,
    refuse_unsupported,
    sanitize_tool_id,
    spoken_answer,
    spoken_answer_text,
)
from ._custom import custom_schema, wrap
from .request import EXTRA_META, NAME, effort_to_budget

IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
DEFAULT_MAX_TOKENS = 4096
MIN_THINKING_BUDGET = 1024
FILLER_USER_TEXT = "."
"""The user turn inserted before a conversation that would otherwise start with the
assistant (docs/protocols.md, "Traps"): one character, so it costs one token and says
nothing."""

# The body fields /v1/messages/count_tokens accepts, as the SDK's MessageCountTokensParams
# lists them (docs/protocols.md, "Messages: token counting"); it rejects max_tokens, stream
# and the sampling settings. Top-level cache_control is one of them (it only ever comes
# from a same-dialect extra).
_COUNT_TOKENS_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "cache_control",
    }
)
_CHOICE_TYPES = {"auto": "auto", "required": "any", "tool": "tool"}


def _with_meta(block: dict[str, Any], meta: Meta) -> dict[str, Any]:
    """Re-attach ``cache_control`` and the block's unknown Anthropic keys."""
    if meta:
        cache_control = meta.get("cache_control")
        if cache_control is not None:
            block["cache_control"] = cache_control
        rest = meta.get(EXTRA_META)
        if rest:
            block.update(rest)
    return block


def render_text_block(part: TextPart) -> dict[str, Any]:
    """A neutral text part -> ``{"type":"text","text":...}`` (+ cache_control, citations)."""
    return _with_meta({"type": "text", "text": part.text}, part.meta)


def parse_arguments(arguments: str) -> dict[str, Any] | None:
    """Tool call arguments text -> the ``input`` object; ``""`` -> ``{}``.

    None when the text is not JSON or not a JSON object
    (docs/protocols.md, "Tool definitions and tool calls").
    """
    if not arguments or arguments.isspace():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _source_from_data_uri(uri: str, param: str) -> tuple[str, str]:
    parsed = parse_data_uri(uri)
    if parsed is None:
        raise InvalidRequestError("only base64 data URIs are supported", param=param)
    return parsed  # media type already lower-cased


def _render_image(part: ImagePart, param: str) -> dict[str, Any]:
    media_type, data = part.media_type, part.data
    if data is None and part.url and part.url.startswith("data:"):
        media_type, data = _source_from_data_uri(part.url, param)
    source: dict[str, Any]
    if data is not None:
        # MIME types are case-insensitive (RFC 2045 §5.1); Anthropic accepts lower case only.
        media_type = media_type.lower() if media_type else media_type
        media_type = "image/jpeg" if media_type == "image/jpg" else media_type
        if media_type not in IMAGE_MEDIA_TYPES:
            raise InvalidRequestError(
                f"image media type {media_type!r} is not supported by this model's API; "
                "use image/jpeg, image/png, image/gif or image/webp",
                param=param,
            )
        source = {"type": "base64", "media_type": media_type, "data": data}
    elif part.url:
        source = {"type": "url", "url": part.url}
    else:
        raise InvalidRequestError("image has neither data nor url", param=param)
    return _with_meta({"type": "image", "source": source}, part.meta)


def _render_document(part: DocumentPart, param: str) -> dict[str, Any]:
    media_type, data = (part.media_type or "application/pdf").lower(), part.data
    if data is None and part.text is None and part.url and part.url.startswith("data:"):
        media_type, data = _source_from_data_uri(part.url, param)
    source: dict[str, Any]
    if part.text is not None:
        source = {"type": "text", "media_type": "text/plain", "data": part.text}
    elif data is not None and media_type == "application/pdf":
        source = {"type": "base64", "media_type": media_type, "data": data}
    elif data is not None and media_type.startswith("text/"):
        # Anthropic's base64 documents are PDF only; plain text goes as a text source.
        try:
            text = base64.b64decode(data, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise InvalidRequestError(
                "document data is not base64 UTF-8 text", param=param
            ) from None
        source = {"type": "text", "media_type": "text/plain", "data": text}
    elif data is not None:
        raise InvalidRequestError(
            f"document type {media_type!r} is not supported by this model's API "
            "(PDF and plain text are)",
            param=param,
        )
    elif part.url:
        source = {"type": "url", "url": part.url}
    else:
        raise InvalidRequestError("document has neither data, text nor url", param=param)
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.title:
        block["title"] = part.title
    return _with_meta(block, part.meta)


def _render_tool_call(part: ToolCallPart, param: str) -> dict[str, Any]:
    # A custom call's arguments are raw text, wrapped as the tool was offered (._custom).
    tool_input = wrap(part.arguments) if part.kind == "custom" else parse_arguments(part.arguments)
    if tool_input is None:
        # Never guess what the caller meant; Anthropic needs an object (docs/protocols.md,
        # "Tool definitions and tool calls").
        raise InvalidRequestError(
            f"arguments of tool call {part.id!r} ({part.name}) are not a valid JSON object: "
            f"{part.arguments[:200]!r}",
            param=param,
        )
    block: dict[str, Any] = {
        "type": "tool_use",
        "id": sanitize_tool_id(part.id),
        "name": part.name,
        "input": tool_input,
    }
    return _with_meta(block, part.meta)


def _render_tool_result(part: ToolResultPart, param: str) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": sanitize_tool_id(part.tool_call_id),
    }
    content = part.content
    if len(content) == 1 and isinstance(content[0], TextPart) and not content[0].meta:
        if content[0].text.strip():
            block["content"] = content[0].text
    else:
        blocks = [
            b
            for j, p in enumerate(content)
            if (b := _render_part(p, f"{param}.content[{j}]")) is not None
        ]
        if blocks:
            block["content"] = blocks
    if part.is_error:
        block["is_error"] = True
    return _with_meta(block, part.meta)


def _render_unknown(part: UnknownPart | AudioPart, param: str) -> dict[str, Any]:
    if isinstance(part, AudioPart):
        raise InvalidRequestError(
            f"{param}: audio input is not supported by this model's API (Anthropic Messages)",
            param=param,
        )
    if part.dialect == NAME:
        return part.raw
    kind = part.raw.get("type")
    if kind == "input_audio" or "audio" in str(kind):
        message = "audio input is not supported by this model's API"
    else:
        message = f"content of type {kind!r} is not supported by this model's API"
    raise InvalidRequestError(message, param=param)


def _render_part(part: Part, param: str) -> dict[str, Any] | None:
    """One neutral part -> one Anthropic block, or None when it is dropped."""
    if isinstance(part, TextPart):
        # Anthropic rejects empty and whitespace-only text blocks (docs/protocols.md, "Traps").
        return render_text_block(part) if part.text and not part.text.isspace() else None
    if isinstance(part, ToolCallPart):
        return _render_tool_call(part, param)
    if isinstance(part, ToolResultPart):
        return _render_tool_result(part, param)
    if isinstance(part, ReasoningPart):
        if part.redacted is not None:
            return {"type": "redacted_thinking", "data": part.redacted}
        if part.signature:
            return {"type": "thinking", "thinking": part.text, "signature": part.signature}
        # Thinking without a signature (OpenAI-side reasoning_content) cannot be replayed:
        # Anthropic verifies signatures. Dropping it is what a history without it means.
        return None
    if isinstance(part, ImagePart):
        return _render_image(part, param)
    if isinstance(part, DocumentPart):
        return _render_document(part, param)
    if spoken_answer(part):  # an earlier spoken answer: Anthropic cannot quote its audio id
        return render_text_block(spoken_answer_text(part, param, "Anthropic Messages"))
    return _render_unknown(part, param)


def _render_parts(parts: tuple[Part, ...], param: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    calls = 0
    for j, part in enumerate(parts):
        if isinstance(part, ToolCallPart):
            # Named as the OpenAI client sees it: the parser's record of where the call
            # was, else the k-th tool call of message i.
            source = part.meta.get(SOURCE_PARAM)
            if not isinstance(source, str):
                source = f"{param}.tool_calls[{calls}].function.arguments"
            block = _render_part(part, source)
            calls += 1
        else:
            block = _render_part(part, f"{param}.content[{j}]")
        if block is not None:
            blocks.append(block)
    return blocks


def _tool_results_first(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool_result block before any other block of its user message.

    Anthropic refuses the message otherwise (docs/protocols.md, "Messages: content blocks").
    """
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if not results or len(results) == len(blocks) or blocks[: len(results)] == results:
        return blocks
    return results + [b for b in blocks if b.get("type") != "tool_result"]


def _render_messages(
    messages: tuple[Message, ...],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """-> (system blocks, messages). See :func:`render_request` for the rules."""
    system: list[dict[str, Any]] = []
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for i, msg in enumerate(messages):
        if msg.role == "system":
            system.extend(
                render_text_block(p)
                for p in msg.parts
                if isinstance(p, TextPart) and p.text and not p.text.isspace()
            )
            continue
        source = msg.meta.get(SOURCE_INDEX, i)  # the client's index, not the neutral one
        blocks = _render_parts(msg.parts, f"messages[{source}]")
        if not blocks:
            continue  # empty content is rejected on all but the final assistant turn
        if turns and turns[-1][0] == msg.role:
            turns[-1][1].extend(blocks)  # merge same-role turns (docs/protocols.md, "Traps")
        else:
            turns.append((msg.role, blocks))
    if not turns or turns[0][0] != "user":
        turns.insert(0, ("user", [{"type": "text", "text": FILLER_USER_TEXT}]))
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        if role == "user":
            blocks = _tool_results_first(blocks)
        if len(blocks) == 1 and len(blocks[0]) == 2 and blocks[0]["type"] == "text":
            out.append({"role": role, "content": blocks[0]["text"]})
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def _render_tool(spec: ToolSpec) -> dict[str, Any]:
    schema = spec.parameters
    if spec.kind == "custom":
        schema = custom_schema(spec)  # offered as a function of one string (._custom)
    elif not schema:
        schema = {"type": "object", "properties": {}}
    elif "type" not in schema:
        schema = {"type": "object", **schema}  # Anthropic requires a top-level object type
    tool: dict[str, Any] = {"name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["input_schema"] = schema
    if spec.strict:
        tool["strict"] = True
    return _with_meta(tool, spec.meta)


def _render_tool_choice(request: Request) -> dict[str, Any] | None:
    choice = request.tool_choice
    disable = request.parallel_tool_calls is False
    if choice is None:
        return {"type": "auto", "disable_parallel_tool_use": True} if disable else None
    if choice.mode == "none":
        return {"type": "none"}  # disable_parallel_tool_use is not valid with none
    out: dict[str, Any] = {"type": _CHOICE_TYPES[choice.mode]}
    if choice.mode == "tool":
        if not choice.name:
            raise InvalidRequestError("a named tool_choice needs a name", param="tool_choice")
        out["name"] = choice.name
    if disable:
        out["disable_parallel_tool_use"] = True
    return out


def _thinking_replayable(body: dict[str, Any]) -> bool:
    """Whether thinking can be turned on for a body built from another dialect.

    Anthropic rejects thinking with a forced tool choice, and, in the middle of a tool
    loop (the last user turn answers tool calls), unless the assistant turn before it
    starts with a signed thinking block -- which a history from another dialect never
    has. In both cases the request goes out without thinking instead of failing.
    """
    if body.get("tool_choice", {}).get("type") in ("any", "tool"):
        return False
    messages = body["messages"]
    if len(messages) < 2 or messages[-1]["role"] != "user":
        return True
    last, previous = messages[-1]["content"], messages[-2]["content"]
    in_tool_loop = isinstance(last, list) and last[0].get("type") == "tool_result"
    if not in_tool_loop:
        return True
    return isinstance(previous, list) and previous[0].get("type") in (
        "thinking",
        "redacted_thinking",
    )


def _render_thinking(request: Request, body: dict[str, Any], same: bool) -> None:
    reasoning = request.reasoning
    if reasoning is None:
        return
    if not reasoning.enabled or reasoning.effort == "none":
        body["thinking"] = {"type": "disabled"}
        return
    if not same and not _thinking_replayable(body):
        return  # thinking off for this request (docs/protocols.md, "Reasoning")
    raw = request.extra.get("_thinking") if same else None
    if isinstance(raw, dict) and raw.get("type") not in (None, "disabled"):
        body["thinking"] = raw  # the client's own config: adaptive, display, ...
        budget = raw.get("budget_tokens")
    else:
        budget = max(
            reasoning.budget_tokens or effort_to_budget(reasoning.effort), MIN_THINKING_BUDGET
        )
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if isinstance(budget, int) and body["max_tokens"] <= budget:
        # The budget must stay below max_tokens
        # (docs/protocols.md, "Messages: tools, tool_choice and thinking").
        body["max_tokens"] = budget + MIN_THINKING_BUDGET
    if not same:
        # Anthropic rejects temperature/top_k (and top_p < 0.95) with thinking on; for
        # a caller of another dialect these are tuning knobs, dropped per policy.
        body.pop("temperature", None)
        body.pop("top_k", None)
        if body.get("top_p", 1.0) < 0.95:
            del body["top_p"]


def _render_settings(request: Request, body: dict[str, Any], same: bool) -> None:
    if request.temperature is not None:
        # Anthropic's range is 0-1: clamp, do not rescale
        # (docs/protocols.md, "Sampling settings and output limits").
        body["temperature"] = min(max(float(request.temperature), 0.0), 1.0)
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.top_k is not None:
        body["top_k"] = request.top_k
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    metadata = dict(request.metadata or {}) if same else {}
    if request.user:
        metadata["user_id"] = request.user
    if metadata:
        body["metadata"] = metadata
    server_tools = request.extra.get("server_tools") if same else None
    tools = [_render_tool(t) for t in request.tools] + list(server_tools or ())
    if tools:
        body["tools"] = tools
        choice = _render_tool_choice(request)
        if choice is not None:
            body["tool_choice"] = choice
    _render_thinking(request, body, same)
    output_config: dict[str, Any] = {}
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_schema" and fmt.schema is not None:
        output_config["format"] = {"type": "json_schema", "schema": fmt.schema}
    if same and isinstance(request.extra.get("output_config"), dict):
        output_config.update(request.extra["output_config"])
    if output_config:
        body["output_config"] = output_config
    if request.stream:
        body["stream"] = True


_UNSUPPORTED = ("logprobs", "top_logprobs", "min_p", "repetition_penalty", "modalities")


def render_request(request: Request) -> dict[str, Any]:
    """The body for an Anthropic upstream (also serves OpenAI clients routed there).

    Policy (docs/protocols.md, "System prompts and roles" and "Traps"): system messages are
    hoisted, in order, into ``system`` (their position is lost); empty/whitespace text parts
    are dropped and then empty turns; consecutive same-role turns are merged; tool_result
    blocks go first in their user turn; a conversation that does not start with a user turn
    gets the user turn ``"."`` inserted (:data:`FILLER_USER_TEXT`); tool ids pass
    ``sanitize_tool_id`` on both call and result; unsigned reasoning is dropped;
    ``max_tokens`` defaults to 4096; temperature is clamped to [0, 1]; ``seed`` and other
    fields Anthropic lacks are dropped, except ``n > 1``, logprobs, ``min_p``,
    ``repetition_penalty`` and audio output, which are rejected
    (:func:`~.._common.refuse_unsupported`). ``json_object`` response format is dropped
    (Anthropic has only ``json_schema``). ``Request.extra`` is sent back only when the
    request came from an Anthropic client.
    """
    n = request.extra.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        raise InvalidRequestError("n > 1 is not supported by the upstream API", param="n")
    refuse_unsupported(request, _UNSUPPORTED, "Anthropic Messages")
    same = request.source_dialect == NAME
    system, messages = _render_messages(request.messages)
    max_tokens = request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS
    body: dict[str, Any] = {"model": request.model, "max_tokens": max_tokens}
    if system:
        if len(system) == 1 and len(system[0]) == 2:
            body["system"] = system[0]["text"]
        else:
            body["system"] = system
    body["messages"] = messages
    _render_settings(request, body, same)
    if same:
        for key, value in request.extra.items():
            if not key.startswith("_") and key not in ("server_tools", "output_config"):
                body.setdefault(key, value)
    return body


def render_count_tokens_request(request: Request) -> dict[str, Any]:
    """The body for an upstream ``/v1/messages/count_tokens``: no max_tokens etc.

    The rendered request cut to the fields count_tokens accepts (docs/protocols.md,
    "Messages: token counting"); a same-dialect request also keeps its unknown fields, as
    everywhere (newer count_tokens fields pass through).
    """
    body = render_request(request)
    same = request.source_dialect == NAME
    return {
        k: v
        for k, v in body.items()
        if k in _COUNT_TOKENS_FIELDS or (same and k in request.extra and not k.startswith("_"))
    }
