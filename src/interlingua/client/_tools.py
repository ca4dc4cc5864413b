"""The agent loop: let the model call Python functions until it gives a final answer.

``run_tools(chat, messages, tools={"name": fn}, max_turns=8)``: each turn sends the
transcript with the tools' specs; if the answer has tool calls, every call runs --
parallel calls concurrently (``asyncio.gather``; sync functions in worker threads so one
slow function does not stall the others or the event loop) -- and the results go back as
tool results in a user turn; the first answer without tool calls is returned, with the
whole transcript in ``result.messages``.

A tool that raises becomes an ``is_error`` tool result carrying ``ExcType: message``, as
do invalid JSON arguments and unknown tool names: the model sees what went wrong and can
recover, which is what both providers recommend. Running out of turns raises
:class:`MaxTurnsError`, whose message shows the transcript.

Tool specs are derived from each function's signature and docstring (``str`` -> string,
``int`` -> integer, ``list[str]`` -> array of strings, ``Literal`` -> enum, defaults make
a parameter optional); pass ``specs`` to give them explicitly.
"""

from __future__ import annotations

import asyncio
import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson

from ..core import Message, Part, TextPart, ToolCallPart, ToolResultPart, ToolSpec
from ._outputs import ChatResult, ToolArgumentsError, ToolCall

__all__ = ["DEFAULT_MAX_TURNS", "MaxTurnsError", "run_tools", "tool_spec"]

DEFAULT_MAX_TURNS = 8
_SUMMARY_CHARS = 200

ChatFn = Callable[..., Awaitable[ChatResult]]


class MaxTurnsError(RuntimeError):
    """The model was still calling tools after ``max_turns`` turns.

    ``messages`` is the transcript so far; ``last`` the last answer.
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


def tool_spec(name: str, fn: Callable[..., Any]) -> ToolSpec:
    """The tool definition for ``fn``: description from the docstring's first paragraph.

    >>> def add(a: int, b: int = 0) -> int:
    ...     '''Add two numbers.'''
    >>> tool_spec("add", add).parameters["required"]
    ['a']
    """
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
    doc = inspect.getdoc(fn) or ""
    description = doc.split("\n\n", 1)[0].strip() or None
    parameters = {"type": "object", "properties": properties, "required": required}
    return ToolSpec(name=name, description=description, parameters=parameters)


# --- running calls -----------------------------------------------------------------------


def _result_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


async def _call(fn: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(**arguments)
    result = await asyncio.to_thread(fn, **arguments)
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
        arguments = call.arguments
        value = await _call(fn, arguments)
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
    result: ChatResult | None = None
    for _ in range(max_turns):
        result = await chat(tuple(transcript), tools=tool_specs, **chat_kwargs)
        transcript.append(Message("assistant", result.response.parts))
        calls = result.tool_calls
        if not calls:
            result.messages = tuple(transcript)
            return result
        outcomes = await asyncio.gather(*(_run_one(c, tools) for c in calls))
        transcript.append(Message("user", tuple(outcomes)))
    assert result is not None
    raise MaxTurnsError(
        f"no final answer after max_turns={max_turns} turns (the model kept calling tools); "
        f"raise max_turns or check the tools' results. Transcript:\n{_summary(transcript)}",
        messages=tuple(transcript),
        last=result,
    )
