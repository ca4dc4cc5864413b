"""Structural validation of a Messages body for the passthrough path.

The twin of :mod:`interlingua.dialects.openai_chat.validate` (read its docstring for the
why): :func:`looks_valid` is an allocation-free yes/no walk; on no, :func:`parse_request`
runs and raises the translated path's own error (message and ``param``), so the two paths
cannot disagree on wording. ``looks_valid`` may be stricter than the parser (rare shapes
such as ``mid_conv_system`` take the slow path), never more lenient; generated bodies in
tests/fuzz/test_validator_property.py hold it to that.

Unknown top-level fields, unknown block types and server tools pass: the upstream, which
speaks this dialect, is the judge of those.
"""

from __future__ import annotations

from typing import Any

from .._common import opt_str, top_level_ok
from .request import parse_request

__all__ = ["looks_valid", "validate_request"]

_NUMBER = (int, float)
_ROLES = ("user", "assistant")  # "system" messages are rare: the parser decides
_TOOL_CHOICE_TYPES = ("auto", "any", "none")


def validate_request(body: dict[str, Any]) -> None:
    """Raise the translated path's ``InvalidRequestError`` if ``body`` is malformed.

    >>> validate_request({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    >>> validate_request({"model": "m", "max_tokens": 5, "messages": [{"role": "bot", "content": "hi"}]})
    Traceback (most recent call last):
    interlingua.errors.InvalidRequestError: messages[0].role: Input should be 'user', 'assistant' or 'system'
    """
    if not looks_valid(body):
        parse_request(body)  # raises the precise error, or accepts a shape we skipped


def looks_valid(body: Any) -> bool:
    """True only if :func:`parse_request` would accept ``body`` (False: ask it)."""
    if type(body) is not dict or type(body.get("model")) is not str:
        return False
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is not int or max_tokens < 0:
        return False
    return top_level_ok(body, _SCALARS, _FIELDS) and _messages_ok(body.get("messages"))


def _stop_ok(v: Any) -> bool:
    return type(v) is list and all(type(s) is str for s in v)


def _metadata_ok(v: Any) -> bool:
    return type(v) is dict and opt_str(v.get("user_id"))


def _system_ok(v: Any) -> bool:
    if type(v) is str:
        return True
    if type(v) is not list:
        return False
    for block in v:
        if type(block) is not dict or block.get("type") != "text":
            return False
        if type(block.get("text")) is not str:
            return False
    return True


def _tools_ok(v: Any) -> bool:
    if type(v) is not list:
        return False
    for tool in v:
        if type(tool) is not dict:
            return False
        kind = tool.get("type")
        if kind is not None and kind != "custom":
            continue  # server tools (web_search_..., bash_...) are relayed as they are
        strict = tool.get("strict")
        if not opt_str(tool.get("description")) or not (strict is None or type(strict) is bool):
            return False
        if type(tool.get("input_schema")) is not dict or type(tool.get("name")) is not str:
            return False
    return True


def _tool_choice_ok(v: Any) -> bool:
    if type(v) is not dict:
        return False
    kind = v.get("type")
    if kind == "tool":
        if type(v.get("name")) is not str:
            return False
    elif kind not in _TOOL_CHOICE_TYPES:
        return False
    disable = v.get("disable_parallel_tool_use")
    return disable is None or type(disable) is bool


def _thinking_ok(v: Any) -> bool:
    if type(v) is not dict:
        return False
    kind = v.get("type")
    if kind == "enabled":
        return type(v.get("budget_tokens")) is int
    return type(kind) is str


def _output_config_ok(v: Any) -> bool:
    if type(v) is not dict or not opt_str(v.get("effort")):
        return False
    fmt = v.get("format")
    if fmt is None:
        return True
    return (
        type(fmt) is dict and fmt.get("type") == "json_schema" and type(fmt.get("schema")) is dict
    )


# Top-level keys the parser type-checks (max_tokens is checked above); others are relayed.
# Plain types are looked up inline: a function call per key costs more than the check.
_SCALARS: dict[str, tuple[type, ...]] = {
    "stream": (bool,),
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "top_k": (int,),
}
_FIELDS = {
    "stop_sequences": _stop_ok,
    "metadata": _metadata_ok,
    "system": _system_ok,
    "tools": _tools_ok,
    "tool_choice": _tool_choice_ok,
    "thinking": _thinking_ok,
    "output_config": _output_config_ok,
}


# ------------------------------------------------------------------------- messages


def _messages_ok(msgs: Any) -> bool:
    if type(msgs) is not list or not msgs:
        return False
    for m in msgs:
        if type(m) is not dict or m.get("role") not in _ROLES:
            return False
        content = m.get("content")
        if type(content) is not str and not _blocks_ok(content):
            return False
    return True


def _blocks_ok(blocks: Any) -> bool:
    if type(blocks) is not list:
        return False
    for block in blocks:
        if type(block) is not dict:
            return False
        kind = block.get("type")
        if type(kind) is not str:
            return False
        check = _BLOCKS.get(kind)
        if check is None:
            if kind == "mid_conv_system":
                return False  # splits the message: the parser decides
            continue  # unknown and server blocks are relayed
        if not check(block):
            return False
    return True


def _text_ok(block: dict[str, Any]) -> bool:
    return type(block.get("text")) is str


def _source_ok(source: Any, document: bool) -> bool:
    if type(source) is not dict:
        return False
    kind = source.get("type")
    if kind == "base64":
        return type(source.get("media_type")) is str and type(source.get("data")) is str
    if kind == "url":
        return type(source.get("url")) is str
    if kind == "text" and document:
        return type(source.get("data")) is str
    return True  # file ids, content sources: Anthropic-only, relayed


def _image_ok(block: dict[str, Any]) -> bool:
    return _source_ok(block.get("source"), document=False)


def _document_ok(block: dict[str, Any]) -> bool:
    return opt_str(block.get("title")) and _source_ok(block.get("source"), document=True)


def _tool_use_ok(block: dict[str, Any]) -> bool:
    tool_input = block.get("input")
    return (
        (tool_input is None or type(tool_input) is dict)
        and type(block.get("id")) is str
        and type(block.get("name")) is str
    )


def _tool_result_ok(block: dict[str, Any]) -> bool:
    is_error = block.get("is_error")
    if type(block.get("tool_use_id")) is not str or not (
        is_error is None or type(is_error) is bool
    ):
        return False
    content = block.get("content")
    if content is None or type(content) is str:
        return True
    if type(content) is not list:
        return False
    for item in content:
        # The parser reads nested blocks with the same rules, but a nested
        # mid_conv_system is just an unknown block there.
        if type(item) is not dict or type(item.get("type")) is not str:
            return False
        check = _BLOCKS.get(item["type"])
        if check is not None and not check(item):
            return False
    return True


def _thinking_block_ok(block: dict[str, Any]) -> bool:
    return opt_str(block.get("signature")) and type(block.get("thinking")) is str


def _redacted_ok(block: dict[str, Any]) -> bool:
    return type(block.get("data")) is str


_BLOCKS = {
    "text": _text_ok,
    "image": _image_ok,
    "document": _document_ok,
    "tool_use": _tool_use_ok,
    "tool_result": _tool_result_ok,
    "thinking": _thinking_block_ok,
    "redacted_thinking": _redacted_ok,
}
