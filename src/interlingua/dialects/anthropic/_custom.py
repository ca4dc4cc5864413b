"""Custom tools (free-form text input, e.g. Codex's ``apply_patch``) toward Anthropic.

Anthropic has function tools only, so a custom :class:`~interlingua.core.ToolSpec` is
offered as a tool with one required string parameter, ``input``, whose description
carries the client's format (the grammar is included whole: the model has nothing else
to go by). A custom call in history is a ``tool_use`` with ``{"input": <raw text>}``.
Going back, the response and stream decoders turn a ``tool_use`` of a tool the request
declared custom into a custom :class:`~interlingua.core.ToolCallPart` whose arguments
are the unwrapped text (:func:`unwrap`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from ...core import Request, ToolCallPart, ToolSpec

__all__ = ["custom_names", "custom_schema", "unwrap", "unwrap_call", "wrap"]

FIELD = "input"


def custom_names(request: Request | None) -> frozenset[str]:
    """The names of the request's custom tools (empty for almost every request)."""
    if request is None:
        return frozenset()
    return frozenset(t.name for t in request.tools if t.kind == "custom")


def _format_hint(fmt: dict[str, Any] | None) -> str:
    """The description of the ``input`` parameter: what the raw text must look like."""
    hint = "The raw input text for the tool (free-form text, not JSON)."
    if not fmt or fmt.get("type") != "grammar":
        return hint
    syntax = fmt.get("syntax") or "given"
    definition = fmt.get("definition")
    if not isinstance(definition, str):
        return hint
    return f"{hint} It must match this {syntax} grammar:\n{definition}"


def custom_schema(spec: ToolSpec) -> dict[str, Any]:
    """The ``input_schema`` a custom tool is offered with."""
    prop = {"type": "string", "description": _format_hint(spec.format)}
    return {"type": "object", "properties": {FIELD: prop}, "required": [FIELD]}


def wrap(arguments: str) -> dict[str, Any]:
    """A custom call's raw input -> the ``tool_use`` input object."""
    return {FIELD: arguments}


def unwrap(arguments: str) -> str:
    """The ``tool_use`` input JSON of a custom tool -> the raw text.

    A model that answered without the ``input`` string (it should not: the schema
    requires it) gets its JSON passed on as the text, rather than losing the call.

    >>> unwrap('{"input": "*** Begin Patch"}'), unwrap('{"other": 1}')
    ('*** Begin Patch', '{"other": 1}')
    """
    try:
        value = orjson.loads(arguments) if arguments else None
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(FIELD), str):
        text: str = value[FIELD]
        return text
    return arguments


def unwrap_call(part: ToolCallPart) -> ToolCallPart:
    """A parsed ``tool_use`` of a custom tool -> the custom call it stands for."""
    return replace(part, arguments=unwrap(part.arguments), kind="custom")
