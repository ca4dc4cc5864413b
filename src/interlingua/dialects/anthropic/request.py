"""Anthropic Messages requests <-> neutral :class:`Request`.

Wire facts: docs/protocols.md, "Messages: request body", "Messages: content blocks",
"Messages: tools, tool_choice and thinking" and "Across the dialects".

Parsing validates as it converts and raises ``InvalidRequestError`` with ``param`` naming
the field in our bracket style (``messages[1].content[0].type``, where Anthropic itself
writes ``messages.1.content.0.type``) and Anthropic's message wording for missing fields
(``max_tokens: Field required``).

What has no neutral meaning is kept so an Anthropic upstream gets it back unchanged:
``cache_control`` in part ``meta["cache_control"]``; any other unknown key of a block in
``meta["anthropic"]`` (merged back into the block by the renderer); unknown block types as
``UnknownPart("anthropic", raw)``; unknown top-level fields in ``Request.extra``; server
tools in ``extra["server_tools"]``; the exact ``thinking`` object in ``extra["_thinking"]``
(keys starting with ``_`` are private to this codec and never sent as fields).

Rendering (neutral -> Anthropic body, for an Anthropic-speaking upstream) is in
``render.py``; the policy it follows is documented on its ``render_request``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...core import (
    DocumentPart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    ReasoningPart,
    Request,
    ResponseFormat,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
    UnknownPart,
)
from ...core.parts import Meta
from ...errors import InvalidRequestError
from .._common import SOURCE_INDEX, encode_body, expect_type, optional

NAME = "anthropic"
EXTRA_META = "anthropic"
"""Part ``meta`` key holding the block's unknown keys, re-emitted only to Anthropic."""

# Reasoning effort <-> thinking budget, one table for every path (docs/protocols.md,
# "Reasoning").
EFFORT_TO_BUDGET: dict[str, int] = {
    "minimal": 1024,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 32768,
    "max": 32768,
}

_KNOWN_FIELDS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "metadata",
        "stream",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
    }
)
_ROLES = ("user", "assistant", "system")
_TOOL_CHOICE_MODES: dict[str, ToolChoice] = {
    "auto": ToolChoice("auto"),
    "any": ToolChoice("required"),
    "none": ToolChoice("none"),
}

_TEXT_KEYS = frozenset({"type", "text"})
_IMAGE_KEYS = frozenset({"type", "source"})
_DOCUMENT_KEYS = frozenset({"type", "source", "title"})
_TOOL_USE_KEYS = frozenset({"type", "id", "name", "input"})
_TOOL_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error"})
_TOOL_KEYS = frozenset({"type", "name", "description", "input_schema", "strict"})


def budget_to_effort(budget: int) -> str:
    """The OpenAI-scale effort for an Anthropic thinking budget (<=2048 low, <=12288 medium)."""
    if budget <= 2048:
        return "low"
    if budget <= 12288:
        return "medium"
    return "high"


def effort_to_budget(effort: str | None) -> int:
    """The Anthropic thinking budget for an effort (unknown or absent -> medium's 8192)."""
    return EFFORT_TO_BUDGET.get(effort or "medium", EFFORT_TO_BUDGET["medium"])


def _required(obj: dict[str, Any], key: str, param: str) -> Any:
    value = obj.get(key)
    if value is None:
        raise InvalidRequestError(f"{param}: Field required", param=param)
    return value


def _str(obj: dict[str, Any], key: str, param: str) -> str:
    value: str = expect_type(_required(obj, key, param), str, param, "a string")
    return value


def _dict(value: Any, param: str) -> dict[str, Any]:
    result: dict[str, Any] = expect_type(value, dict, param, "an object")
    return result


def _list(value: Any, param: str) -> list[Any]:
    result: list[Any] = expect_type(value, list, param, "an array")
    return result


def _meta(block: dict[str, Any], known: frozenset[str]) -> Meta:
    """``cache_control`` -> ``meta["cache_control"]``; other unknown keys -> ``meta["anthropic"]``."""
    meta: Meta = {}
    if len(block) <= len(known) and all(k in known for k in block):
        return meta  # the common case: nothing to keep
    rest: dict[str, Any] = {}
    for key, value in block.items():
        if key in known:
            continue
        if key == "cache_control":
            meta["cache_control"] = value
        else:
            rest[key] = value
    if rest:
        meta[EXTRA_META] = rest
    return meta


# ---------------------------------------------------------------- content blocks


def parse_text_block(block: dict[str, Any], param: str) -> TextPart:
    """``{"type":"text","text":...}`` (``cache_control``/``citations`` kept in meta)."""
    return TextPart(_str(block, "text", f"{param}.text"), _meta(block, _TEXT_KEYS))


def _parse_image(block: dict[str, Any], param: str) -> ImagePart | UnknownPart:
    source = _dict(_required(block, "source", f"{param}.source"), f"{param}.source")
    kind = source.get("type")
    meta = _meta(block, _IMAGE_KEYS)
    if kind == "base64":
        return ImagePart(
            media_type=_str(source, "media_type", f"{param}.source.media_type"),
            data=_str(source, "data", f"{param}.source.data"),
            meta=meta,
        )
    if kind == "url":
        return ImagePart(url=_str(source, "url", f"{param}.source.url"), meta=meta)
    return UnknownPart(NAME, block)  # file ids and future sources: Anthropic-only


def _parse_document(block: dict[str, Any], param: str) -> DocumentPart | UnknownPart:
    source = _dict(_required(block, "source", f"{param}.source"), f"{param}.source")
    kind = source.get("type")
    title = block.get("title")
    title = expect_type(title, str, f"{param}.title", "a string") if title is not None else None
    meta = _meta(block, _DOCUMENT_KEYS)
    sp = f"{param}.source"
    if kind == "base64":
        return DocumentPart(
            media_type=_str(source, "media_type", f"{sp}.media_type"),
            data=_str(source, "data", f"{sp}.data"),
            title=title,
            meta=meta,
        )
    if kind == "text":
        media_type = source.get("media_type")
        return DocumentPart(
            media_type=media_type if isinstance(media_type, str) else "text/plain",
            text=_str(source, "data", f"{sp}.data"),
            title=title,
            meta=meta,
        )
    if kind == "url":
        return DocumentPart(url=_str(source, "url", f"{sp}.url"), title=title, meta=meta)
    return UnknownPart(NAME, block)  # "content" and "file" sources: Anthropic-only


def _parse_tool_use(block: dict[str, Any], param: str) -> ToolCallPart:
    raw_input = block.get("input")
    tool_input = {} if raw_input is None else _dict(raw_input, f"{param}.input")
    return ToolCallPart(
        id=_str(block, "id", f"{param}.id"),
        name=_str(block, "name", f"{param}.name"),
        arguments=encode_body(tool_input, f"{param}.input").decode(),
        meta=_meta(block, _TOOL_USE_KEYS),
    )


def _parse_tool_result(block: dict[str, Any], param: str) -> ToolResultPart:
    tool_use_id = _str(block, "tool_use_id", f"{param}.tool_use_id")
    is_error = block.get("is_error")
    if is_error is not None:
        expect_type(is_error, bool, f"{param}.is_error", "a boolean")
    meta = _meta(block, _TOOL_RESULT_KEYS)
    content = block.get("content")
    parts: list[TextPart | ImagePart | DocumentPart] = []
    if isinstance(content, str):
        parts.append(TextPart(content))
    elif content is not None:
        unsupported = False
        for j, item in enumerate(_list(content, f"{param}.content")):
            part = parse_block(item, f"{param}.content[{j}]")
            if isinstance(part, TextPart | ImagePart | DocumentPart):
                parts.append(part)
            else:
                unsupported = True
        if unsupported:
            # search_result and friends have no neutral form: keep the raw list so an
            # Anthropic upstream gets it verbatim (the renderer merges meta["anthropic"]).
            meta = {**meta, EXTRA_META: {**meta.get(EXTRA_META, {}), "content": content}}
    return ToolResultPart(tool_use_id, tuple(parts), bool(is_error), meta)


def _parse_thinking(block: dict[str, Any], param: str) -> ReasoningPart:
    signature = block.get("signature")
    if signature is not None:
        expect_type(signature, str, f"{param}.signature", "a string")
    return ReasoningPart(text=_str(block, "thinking", f"{param}.thinking"), signature=signature)


def _parse_redacted(block: dict[str, Any], param: str) -> ReasoningPart:
    return ReasoningPart(redacted=_str(block, "data", f"{param}.data"))


_BLOCK_PARSERS = {
    "text": parse_text_block,
    "image": _parse_image,
    "document": _parse_document,
    "tool_use": _parse_tool_use,
    "tool_result": _parse_tool_result,
    "thinking": _parse_thinking,
    "redacted_thinking": _parse_redacted,
}


def parse_block(block: Any, param: str) -> Part:
    """One content block -> a neutral part; unknown types -> ``UnknownPart("anthropic")``.

    Also used for response content (text, thinking, tool_use, server blocks).
    """
    block = _dict(block, param)
    kind = expect_type(_required(block, "type", f"{param}.type"), str, f"{param}.type", "a string")
    parser = _BLOCK_PARSERS.get(kind)
    if parser is None:
        return UnknownPart(NAME, block)
    return parser(block, param)


def _parse_system_content(content: Any, param: str) -> tuple[TextPart, ...]:
    """A system prompt: a string or an array of text blocks."""
    if isinstance(content, str):
        return (TextPart(content),) if content else ()
    parts = []
    for j, block in enumerate(_list(content, param)):
        bp = f"{param}[{j}]"
        block = _dict(block, bp)
        if block.get("type") != "text":
            raise InvalidRequestError(f"{bp}.type: Input should be 'text'", param=f"{bp}.type")
        parts.append(parse_text_block(block, bp))
    return tuple(parts)


def _parse_message(raw: Any, param: str) -> list[Message]:
    """One wire message -> one neutral message, or several when it holds
    ``mid_conv_system`` blocks (each becomes a system message in place)."""
    msg = _dict(raw, param)
    role = _required(msg, "role", f"{param}.role")
    if role not in _ROLES:
        raise InvalidRequestError(
            f"{param}.role: Input should be 'user', 'assistant' or 'system'",
            param=f"{param}.role",
        )
    content = _required(msg, "content", f"{param}.content")
    if role == "system":
        return [Message("system", _parse_system_content(content, f"{param}.content"))]
    if isinstance(content, str):
        return [Message(role, (TextPart(content),))]
    out: list[Message] = []
    parts: list[Part] = []
    for j, block in enumerate(_list(content, f"{param}.content")):
        bp = f"{param}.content[{j}]"
        if isinstance(block, dict) and block.get("type") == "mid_conv_system":
            if parts:
                out.append(Message(role, tuple(parts)))
                parts = []
            sys_content = _required(block, "content", f"{bp}.content")
            out.append(Message("system", _parse_system_content(sys_content, f"{bp}.content")))
            continue
        parts.append(parse_block(block, bp))
    if parts or not out:
        out.append(Message(role, tuple(parts)))
    return out


def _parse_messages(body: dict[str, Any]) -> list[Message]:
    messages: list[Message] = []
    system = body.get("system")
    if system is not None:
        parts = _parse_system_content(system, "system")
        if parts:
            messages.append(Message("system", parts))
    raw = _list(_required(body, "messages", "messages"), "messages")
    if not raw:
        raise InvalidRequestError(
            "messages: List should have at least 1 item after validation, not 0",
            param="messages",
        )
    for i, item in enumerate(raw):
        # Record the client's own index: the top-level system prompt shifts neutral
        # positions by one, and renderers name the client's position in errors.
        for message in _parse_message(item, f"messages[{i}]"):
            messages.append(replace(message, meta={**message.meta, SOURCE_INDEX: i}))
    return messages


# ---------------------------------------------------------------- tools and settings


def _parse_tools(raw: Any) -> tuple[tuple[ToolSpec, ...], list[dict[str, Any]]]:
    """Client tools -> ToolSpec; typed server tools (web_search_..., bash_...) kept raw."""
    specs: list[ToolSpec] = []
    server: list[dict[str, Any]] = []
    for i, item in enumerate(_list(raw, "tools")):
        p = f"tools[{i}]"
        tool = _dict(item, p)
        kind = tool.get("type")
        if kind is not None and kind != "custom":
            server.append(tool)
            continue
        description = tool.get("description")
        if description is not None:
            expect_type(description, str, f"{p}.description", "a string")
        strict = tool.get("strict")
        if strict is not None:
            expect_type(strict, bool, f"{p}.strict", "a boolean")
        schema = _dict(_required(tool, "input_schema", f"{p}.input_schema"), f"{p}.input_schema")
        specs.append(
            ToolSpec(
                name=_str(tool, "name", f"{p}.name"),
                description=description,
                parameters=schema,
                strict=strict,
                meta=_meta(tool, _TOOL_KEYS),
            )
        )
    return tuple(specs), server


def _parse_tool_choice(raw: Any) -> tuple[ToolChoice, bool | None]:
    """-> (choice, parallel_tool_calls): ``disable_parallel_tool_use`` -> False."""
    choice = _dict(raw, "tool_choice")
    kind = _required(choice, "type", "tool_choice.type")
    if kind == "tool":
        result = ToolChoice("tool", _str(choice, "name", "tool_choice.name"))
    else:
        found = _TOOL_CHOICE_MODES.get(kind) if isinstance(kind, str) else None
        if found is None:
            raise InvalidRequestError(
                "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'",
                param="tool_choice.type",
            )
        result = found
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None:
        expect_type(disable, bool, "tool_choice.disable_parallel_tool_use", "a boolean")
    return result, (False if disable else None)


def _parse_thinking_config(raw: Any, effort: str | None) -> Reasoning:
    thinking = _dict(raw, "thinking")
    kind = _required(thinking, "type", "thinking.type")
    if kind == "disabled":
        return Reasoning(enabled=False)
    if kind == "enabled":
        budget = _required(thinking, "budget_tokens", "thinking.budget_tokens")
        budget = expect_type(budget, int, "thinking.budget_tokens", "an integer")
        return Reasoning(effort=budget_to_effort(budget), budget_tokens=budget)
    # "adaptive" (and newer model-decided modes such as "between_tools"): the model picks
    # its own budget; output_config.effort says how hard to think.
    expect_type(kind, str, "thinking.type", "a string")
    return Reasoning(effort=effort or "medium")


def _parse_output_config(raw: Any, extra: dict[str, Any]) -> ResponseFormat | None:
    """``output_config.format`` -> ResponseFormat; the rest (effort...) stays in extra."""
    config = _dict(raw, "output_config")
    effort = config.get("effort")
    if effort is not None:
        # Becomes OpenAI's reasoning_effort: unchecked, an object here was reported by an
        # OpenAI upstream as a bad 'reasoning_effort', a field this client never sent.
        expect_type(effort, str, "output_config.effort", "a string")
    rest = {k: v for k, v in config.items() if k != "format"}
    if rest:
        extra["output_config"] = rest
    fmt = config.get("format")
    if fmt is None:
        return None
    fmt = _dict(fmt, "output_config.format")
    if fmt.get("type") != "json_schema":
        raise InvalidRequestError(
            "output_config.format.type: Input should be 'json_schema'",
            param="output_config.format.type",
        )
    schema = _dict(
        _required(fmt, "schema", "output_config.format.schema"), "output_config.format.schema"
    )
    return ResponseFormat("json_schema", schema=schema)


def _parse_settings(body: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Everything but messages, as keyword arguments for :class:`Request`."""
    kw: dict[str, Any] = {
        "temperature": optional(body, "temperature", (int, float), "a number"),
        "top_p": optional(body, "top_p", (int, float), "a number"),
        "top_k": optional(body, "top_k", int, "an integer"),
    }
    stop = body.get("stop_sequences")
    if stop is not None:
        kw["stop"] = tuple(
            expect_type(s, str, f"stop_sequences[{i}]", "a string")
            for i, s in enumerate(_list(stop, "stop_sequences"))
        )
    metadata = body.get("metadata")
    if metadata is not None:
        kw["metadata"] = _dict(metadata, "metadata")
        user = metadata.get("user_id")
        if user is not None:
            kw["user"] = expect_type(user, str, "metadata.user_id", "a string")
    if body.get("tools") is not None:
        kw["tools"], server_tools = _parse_tools(body["tools"])
        if server_tools:
            extra["server_tools"] = server_tools
    if body.get("tool_choice") is not None:
        kw["tool_choice"], kw["parallel_tool_calls"] = _parse_tool_choice(body["tool_choice"])
    output_config = body.get("output_config")
    if output_config is not None:
        kw["response_format"] = _parse_output_config(output_config, extra)
    if body.get("thinking") is not None:
        effort = extra.get("output_config", {}).get("effort")
        kw["reasoning"] = _parse_thinking_config(body["thinking"], effort)
        extra["_thinking"] = body["thinking"]
    return kw


def parse_request(body: Any, *, count_tokens: bool = False) -> Request:
    """Validate and convert a ``POST /v1/messages`` body.

    With ``count_tokens=True`` (``/v1/messages/count_tokens``) ``max_tokens`` is not
    required and ``stream`` is not read.
    """
    body = _dict(body, "body")
    model = _str(body, "model", "model")
    max_tokens = None
    if not count_tokens or body.get("max_tokens") is not None:
        max_tokens = expect_type(
            _required(body, "max_tokens", "max_tokens"), int, "max_tokens", "an integer"
        )
        # 0 is legal: it only warms the prompt cache
        # (docs/protocols.md, "Messages: request body").
        if max_tokens < 0:
            raise InvalidRequestError(
                "max_tokens: Input should be greater than or equal to 0", param="max_tokens"
            )
    stream = False
    if not count_tokens and body.get("stream") is not None:
        stream = expect_type(body["stream"], bool, "stream", "a boolean")
    extra = {k: v for k, v in body.items() if k not in _KNOWN_FIELDS}
    if count_tokens:
        extra.pop("stream", None)
    messages = _parse_messages(body)
    settings = _parse_settings(body, extra)
    return Request(
        model=model,
        messages=tuple(messages),
        max_tokens=max_tokens,
        stream=stream,
        source_dialect=NAME,
        extra=extra,
        **settings,
    )


def parse_count_tokens_request(body: Any) -> Request:
    """Validate and convert a ``POST /v1/messages/count_tokens`` body.

    Its fields: docs/protocols.md, "Messages: token counting".
    """
    encode_body(body)  # too deep to write back: a 400 here, not a 500 in the estimate
    return parse_request(body, count_tokens=True)


# ---------------------------------------------------------------- rendering
