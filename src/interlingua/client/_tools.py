"""The agent loop: let the model call Python functions until it gives a final answer.

``run_tools(chat, messages, tools={"name": fn}, max_turns=8)``: each turn sends the
transcript with the tools' specs; if the answer has tool calls, every call runs --
parallel calls concurrently (``asyncio.gather``; sync functions in worker threads so one
slow function does not stall the others or the event loop) -- and the results go back as
tool results in a user turn; the first answer without tool calls is returned, with the
whole transcript in ``result.messages`` and each turn's own result in ``result.turns``
(whose usage and latency ``total_usage`` / ``total_latency`` add up, over
``round_trips`` calls).

A tool that raises becomes an ``is_error`` tool result carrying ``ExcType: message``, as
do invalid JSON arguments and unknown tool names: the model sees what went wrong and can
recover, which is what both providers recommend. Running out of turns raises
:class:`MaxTurnsError`, whose message shows the transcript.

Tool specs are derived from each function's signature and docstring (``str`` -> string,
``int`` -> integer, ``list[str]`` -> array of strings, ``Literal`` -> enum, defaults make
a parameter optional); pass ``specs`` to give them explicitly.

A custom (free-form) tool -- OpenAI's ``custom`` tools, such as Codex's ``apply_patch``,
whose input is raw text, optionally held to a grammar -- is a function marked with
:func:`custom_tool` (or a custom spec in ``specs``). A custom call runs its function with
the raw input as the one positional argument, never parsed as JSON, and the result goes
back as the answer to that call (a ``custom_tool_call_output`` on the Responses API).
"""

from __future__ import annotations

import asyncio
import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from ..core import Message, Part, TextPart, ToolCallPart, ToolResultPart, ToolSpec
from ..dialects.openai_chat.request import neutral_format
from ._outputs import ChatResult, ToolArgumentsError, ToolCall

__all__ = ["DEFAULT_MAX_TURNS", "MaxTurnsError", "custom_tool", "run_tools", "tool_spec"]

DEFAULT_MAX_TURNS = 8
_SUMMARY_CHARS = 200
#: the attribute :func:`custom_tool` sets on a function: a 1-tuple of its format (or None)
_CUSTOM_MARK = "__interlingua_custom_tool__"

ChatFn = Callable[..., Awaitable[ChatResult]]


class MaxTurnsError(RuntimeError):
    """The model was still calling tools after ``max_turns`` turns.

    ``messages`` is the transcript so far; ``last`` the last answer, whose ``turns``,
    ``total_usage`` and ``total_latency`` cover the whole loop.
    """

    def __init__(self, message: str, *, messages: tuple[Message, ...], last: ChatResult) -> None:
        super().__init__(message)
        self.messages = messages
        self.last = last


# --- specs from signatures ---------------------------------------------------------------

_SIMPLE: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}


def _schema(annotation: Any) -> dict[str, Any]:
    """A JSON schema for a type annotation (unknown types: no constraint)."""
    if annotation in _SIMPLE:
        return {"type": _SIMPLE[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _schema(options[0])
        return {"anyOf": [_schema(a) for a in options]}
    if origin in (list, tuple, set, Sequence) and args:
        return {"type": "array", "items": _schema(args[0])}
    if origin in (dict, Mapping):
        return {"type": "object"}
    if origin is not None and origin in _SIMPLE:
        return {"type": _SIMPLE[origin]}
    if hasattr(annotation, "model_json_schema"):  # a pydantic model as a parameter
        schema: dict[str, Any] = annotation.model_json_schema()
        return schema
    return {}


def custom_tool(
    fn: Callable[..., Any] | None = None, *, format: dict[str, Any] | None = None
) -> Any:
    """Mark ``fn`` as a custom (free-form) tool: the model writes its input as raw text,
    which ``run_tools`` passes as the one positional argument. Used bare or with a
    ``format``: ``{"type": "text"}``, or a grammar in either OpenAI shape (``{"type":
    "grammar", "syntax": "lark" | "regex", "definition": ...}``). The description is the
    docstring's first paragraph. The function itself is returned, marked.

    >>> @custom_tool
    ... def apply_patch(patch: str) -> str:
    ...     '''Apply a patch in the V4A format.'''
    ...     return "done"
    >>> tool_spec("apply_patch", apply_patch).kind
    'custom'
    """
    fmt = neutral_format(format) if format is not None else None

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        try:
            setattr(f, _CUSTOM_MARK, (fmt,))
        except (AttributeError, TypeError):  # a bound method, a builtin: no attributes
            raise TypeError(
                f"custom_tool: cannot mark {f!r}; wrap it in a function (def) first"
            ) from None
        return f

    return mark if fn is None else mark(fn)


def _description(fn: Callable[..., Any]) -> str | None:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0].strip() or None


def tool_spec(name: str, fn: Callable[..., Any]) -> ToolSpec:
    """The tool definition for ``fn``: description from the docstring's first paragraph
    (a function marked with :func:`custom_tool` gives a custom tool, without parameters).

    >>> def add(a: int, b: int = 0) -> int:
    ...     '''Add two numbers.'''
    >>> tool_spec("add", add).parameters["required"]
    ['a']
    """
    custom = getattr(fn, _CUSTOM_MARK, None)
    if custom is not None:
        return ToolSpec(name=name, description=_description(fn), kind="custom", format=custom[0])
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to no constraints
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        properties[pname] = _schema(hints.get(pname, param.annotation))
        if param.default is param.empty:
            required.append(pname)
    parameters = {"type": "object", "properties": properties, "required": required}
    return ToolSpec(name=name, description=_description(fn), parameters=parameters)


# --- running calls -----------------------------------------------------------------------


def _result_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):  # a sync wrapper returning a coroutine
        return await result
    return result


async def _run_one(call: ToolCall, tools: Mapping[str, Callable[..., Any]]) -> ToolResultPart:
    """Run one call; every failure becomes an ``is_error`` result the model can read."""
    fn = tools.get(call.name)
    if fn is None:
        text = f"unknown tool {call.name!r}; available: {', '.join(sorted(tools))}"
        return ToolResultPart(call.id, (TextPart(text),), is_error=True)
    try:
        if call.kind == "custom":  # raw text, as the model wrote it
            value = await _call(fn, (call.input,), {})
        else:
            value = await _call(fn, (), call.arguments)
    except ToolArgumentsError as exc:
        return ToolResultPart(call.id, (TextPart(str(exc)),), is_error=True)
    except Exception as exc:
        return ToolResultPart(call.id, (TextPart(f"{type(exc).__name__}: {exc}"),), is_error=True)
    return ToolResultPart(call.id, (TextPart(_result_text(value)),))


def _summary(messages: Sequence[Message]) -> str:
    lines = []
    for m in messages:
        for p in m.parts:
            lines.append(f"  {m.role}: {_describe(p)}")
    return "\n".join(lines)


def _describe(part: Part) -> str:
    if isinstance(part, TextPart):
        text = part.text
    elif isinstance(part, ToolCallPart):
        text = f"call {part.name}({part.arguments})"
    elif isinstance(part, ToolResultPart):
        text = f"result{' (error)' if part.is_error else ''}: {part.text}"
    else:
        text = f"[{type(part).__name__}]"
    return text if len(text) <= _SUMMARY_CHARS else text[:_SUMMARY_CHARS] + "…"


async def run_tools(
    chat: ChatFn,
    messages: Sequence[Message],
    tools: Mapping[str, Callable[..., Any]],
    *,
    max_turns: int = DEFAULT_MAX_TURNS,
    specs: Sequence[ToolSpec] | None = None,
    **chat_kwargs: Any,
) -> ChatResult:
    """Run the tool loop (see module doc). ``chat`` is a client's ``chat`` method."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    tool_specs = (
        tuple(specs) if specs is not None else tuple(tool_spec(n, f) for n, f in tools.items())
    )
    transcript = list(messages)
    turns: list[ChatResult] = []
    for _ in range(max_turns):
        result = await chat(tuple(transcript), tools=tool_specs, **chat_kwargs)
        # Each turn's own result, kept before the loop's totals are hung on the last one
        # (a copy: the last answer does not hold itself).
        turns.append(replace(result))
        result.turns = tuple(turns)
        transcript.append(Message("assistant", result.response.parts))
        calls = result.tool_calls
        if not calls:
            result.messages = tuple(transcript)
            return result
        outcomes = await asyncio.gather(*(_run_one(c, tools) for c in calls))
        transcript.append(Message("user", tuple(outcomes)))
    raise MaxTurnsError(
        f"no final answer after max_turns={max_turns} turns (the model kept calling tools); "
        f"raise max_turns or check the tools' results. Transcript:\n{_summary(transcript)}",
        messages=tuple(transcript),
        last=result,
    )
