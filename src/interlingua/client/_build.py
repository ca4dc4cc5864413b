"""Call arguments -> neutral request fields (tools, tool choice, structured output, reasoning).

Each helper accepts the forms people already write for the official SDKs as well as the
neutral values, so code can move between them without rewriting its tool definitions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import (
    REFUSABLE_SETTINGS,
    Reasoning,
    Request,
    ResponseFormat,
    ToolChoice,
    ToolSpec,
    drop_settings,
)
from ..dialects import Dialect
from ..dialects.openai_chat.request import neutral_format
from ..errors import InvalidRequestError
from ._tools import tool_spec

__all__ = [
    "UnsupportedParameterError",
    "render_supported",
    "to_output_audio",
    "to_reasoning",
    "to_response_format",
    "to_stop",
    "to_tool_choice",
    "to_tools",
]

_NAME_BAD = re.compile(r"[^a-zA-Z0-9_-]")
_CHOICE_MODES = ("auto", "required", "none")
_EFFORTS = ("minimal", "low", "medium", "high", "xhigh", "max")


def to_tools(tools: Sequence[Any] | None) -> tuple[ToolSpec, ...]:
    """Tool definitions from ToolSpec values, OpenAI or Anthropic dicts, or functions.

    A custom (free-form) tool is OpenAI's ``{"type": "custom", "custom": {"name", ...}}``
    (Chat Completions) or ``{"type": "custom", "name", ...}`` (Responses), or a function
    marked with :func:`~interlingua.client.custom_tool`.

    >>> to_tools([{"name": "f", "input_schema": {"type": "object"}}])[0].parameters
    {'type': 'object'}
    >>> to_tools([{"type": "custom", "name": "apply_patch"}])[0].kind
    'custom'
    """
    if not tools:
        return ()
    out: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        if isinstance(tool, ToolSpec):
            out.append(tool)
        elif isinstance(tool, dict):
            out.append(_tool_from_dict(tool, i))
        elif callable(tool):
            out.append(tool_spec(getattr(tool, "__name__", f"tool_{i}"), tool))
        else:
            raise TypeError(f"tools[{i}]: expected a ToolSpec, a dict or a function, got {tool!r}")
    return tuple(out)


def _tool_from_dict(tool: dict[str, Any], i: int) -> ToolSpec:
    if tool.get("type") == "custom":
        return _custom_from_dict(tool, i)
    spec = tool.get("function") if tool.get("type") == "function" else tool
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise TypeError(f"tools[{i}]: a tool dict needs a 'name' (or 'function': {{'name'}})")
    parameters = spec.get("parameters", spec.get("input_schema"))
    return ToolSpec(
        name=spec["name"],
        description=spec.get("description"),
        parameters=parameters,
        strict=spec.get("strict"),
    )


def _custom_from_dict(tool: dict[str, Any], i: int) -> ToolSpec:
    """Chat Completions nests a custom tool under ``custom``; the Responses API writes it
    flat. Its ``format`` (a grammar in either API's shape) is kept in the neutral shape."""
    spec = tool.get("custom", tool)
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise TypeError(
            f"tools[{i}]: a custom tool needs a 'name' ({{'type': 'custom', 'name': ...}} or "
            "{'type': 'custom', 'custom': {'name': ...}})"
        )
    fmt = spec.get("format")
    return ToolSpec(
        name=spec["name"],
        description=spec.get("description"),
        kind="custom",
        format=neutral_format(fmt) if isinstance(fmt, dict) else None,
    )


def to_tool_choice(choice: Any) -> ToolChoice | None:
    """``"auto"|"required"|"none"``, a tool name, a ToolChoice, or an OpenAI/Anthropic dict."""
    if choice is None or isinstance(choice, ToolChoice):
        return choice
    if isinstance(choice, str):
        if choice in _CHOICE_MODES:
            return ToolChoice(mode=choice)  # type: ignore[arg-type]
        if choice == "any":  # Anthropic's word for "required"
            return ToolChoice(mode="required")
        return ToolChoice(mode="tool", name=choice)
    if isinstance(choice, dict):
        fn = choice.get("function", choice.get("custom"))  # Chat's function or custom tool
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return ToolChoice(mode="tool", name=fn["name"])
        if isinstance(choice.get("name"), str):
            return ToolChoice(mode="tool", name=choice["name"])
        if choice.get("type") in (*_CHOICE_MODES, "any"):
            return to_tool_choice(choice["type"])
    raise TypeError(f"tool_choice: cannot use {choice!r}")


def _schema_name(schema: dict[str, Any], fallback: str = "response") -> str:
    title = schema.get("title")
    name = _NAME_BAD.sub("_", title) if isinstance(title, str) and title else fallback
    return name[:64]


def to_response_format(value: Any) -> tuple[ResponseFormat | None, Any]:
    """(neutral format, pydantic model class or None) from what the caller passed.

    Accepts a pydantic model class, a bare JSON schema dict, OpenAI's
    ``{"type": "json_schema", "json_schema": {...}}`` / ``{"type": "json_object"}``, or a
    ResponseFormat.
    """
    if value is None or isinstance(value, ResponseFormat):
        return value, None
    if isinstance(value, type) and hasattr(value, "model_json_schema"):
        schema = value.model_json_schema()
        return ResponseFormat(
            "json_schema", name=_schema_name(schema, value.__name__), schema=schema
        ), value
    if isinstance(value, dict):
        kind = value.get("type")
        if kind in ("json_object", "text") and "properties" not in value:
            return ResponseFormat(kind), None
        spec = value.get("json_schema")
        if kind == "json_schema" and isinstance(spec, dict):
            return (
                ResponseFormat(
                    "json_schema",
                    name=spec.get("name"),
                    schema=spec.get("schema"),
                    strict=spec.get("strict"),
                    description=spec.get("description"),
                ),
                None,
            )
        return ResponseFormat("json_schema", name=_schema_name(value), schema=value), None
    raise TypeError(
        f"response_format: expected a JSON schema dict or a pydantic model class, got {value!r}"
    )


def to_reasoning(value: Any) -> Reasoning | None:
    """``"low"|"medium"|"high"|…`` effort, an int budget, True/False, or a Reasoning."""
    if value is None or isinstance(value, Reasoning):
        return value
    if isinstance(value, bool):
        return Reasoning(enabled=value)
    if isinstance(value, int):
        return Reasoning(budget_tokens=value)
    if isinstance(value, str):
        if value == "none":
            return Reasoning(enabled=False, effort="none")
        if value not in _EFFORTS:
            raise ValueError(f"reasoning: unknown effort {value!r}; use one of {_EFFORTS}")
        return Reasoning(effort=value)
    raise TypeError(
        f"reasoning: expected an effort string, a token budget or a bool, got {value!r}"
    )


def to_stop(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """One stop string or several -> a tuple."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    return tuple(stop)


def to_output_audio(
    modalities: Sequence[str] | None, audio: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The neutral audio-output settings: asked for by ``modalities`` containing
    ``"audio"`` (OpenAI's form), or by ``audio={...}`` settings alone."""
    if modalities is not None and "audio" not in modalities:
        return None
    if modalities is None and audio is None:
        return None
    return dict(audio or {})


class UnsupportedParameterError(ValueError):
    """The call asked for a setting the client's API dialect has no field for (``min_p``
    or ``logprobs`` toward the Anthropic Messages API, ...). ``param`` names it; pass
    ``drop_unsupported=True`` to send the request without it instead."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def render_supported(
    codec: Dialect, request: Request, drop: bool
) -> tuple[Request, dict[str, Any]]:
    """(the request, its body) by ``codec``; a refused setting (``REFUSABLE_SETTINGS``) is
    dropped when ``drop``, else raised as :class:`UnsupportedParameterError`."""
    for _ in range(len(REFUSABLE_SETTINGS) + 1):
        try:
            return request, codec.render_request(request)
        except InvalidRequestError as exc:
            param = exc.param
            if param not in REFUSABLE_SETTINGS:
                raise
            if not drop:
                raise UnsupportedParameterError(
                    f"{exc.message}; pass drop_unsupported=True to send the request without it",
                    param,
                ) from None
            request = drop_settings(request, (param,))
    raise AssertionError("unreachable: each round clears one setting")  # pragma: no cover
