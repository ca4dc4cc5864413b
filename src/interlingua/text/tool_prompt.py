"""The prompt side of tool calls written as text: how a model without native tools
learns about them.

:func:`render_tools_prompt` writes the system-prompt text that lists the tools and the
``<tool_call>`` format (the Hermes / Qwen2.5 wording, which many open models were trained
on), :func:`render_tool_history` shows earlier calls and results as text, and
:func:`apply_text_tools` does both to a whole request. The answer is read back by
:class:`~.tool_calls.ToolCallTextParser`, which understands the format taught here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from ..core import (
    Message,
    Part,
    Request,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
)
from .events import TextProcessing
from .tool_calls import CLOSE_TAG, OPEN_TAG

__all__ = [
    "apply_text_tools",
    "parsed_tool_calls",
    "render_tool_call",
    "render_tool_history",
    "render_tool_result",
    "render_tools_prompt",
]

_TOOLS_INTRO = (
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_TOOLS_FORMAT = (
    "\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n'
    "To call several functions at once, write one <tool_call></tool_call> block per call, "
    "one after another."
)
_CHOICE_AUTO = "If no function is needed, answer the user directly, without any <tool_call> tag."
_CHOICE_REQUIRED = (
    "You must call at least one function now: answer only with <tool_call></tool_call> blocks."
)
_CHOICE_NONE = "Do not call any function now: answer the user directly in plain text."
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _tool_json(tool: ToolSpec) -> str:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.parameters if tool.parameters is not None else _EMPTY_SCHEMA
    return orjson.dumps({"type": "function", "function": function}).decode()


def render_tools_prompt(tools: Sequence[ToolSpec], tool_choice: ToolChoice | None = None) -> str:
    """The system-prompt text that describes ``tools`` and the ``<tool_call>`` format.

    The wording is the Hermes / Qwen2.5 chat template's, which open models trained on
    tool use recognize best; a sentence for ``tool_choice`` follows. A named choice lists
    only that tool (small models follow a one-tool prompt far more reliably). Returns
    ``""`` when there are no tools.
    """
    if not tools:
        return ""
    choice = tool_choice.mode if tool_choice is not None else "auto"
    if choice == "tool" and tool_choice is not None and tool_choice.name:
        named = [t for t in tools if t.name == tool_choice.name]
        tools = named or tools
        sentence = (
            f'You must call the function "{tool_choice.name}" now: answer only with a '
            "<tool_call></tool_call> block calling it."
        )
    elif choice == "required":
        sentence = _CHOICE_REQUIRED
    elif choice == "none":
        sentence = _CHOICE_NONE
    else:
        sentence = _CHOICE_AUTO
    listing = "\n".join(_tool_json(t) for t in tools)
    return f"{_TOOLS_INTRO}{listing}{_TOOLS_FORMAT}\n{sentence}"


def render_tool_call(name: str, arguments: str) -> str:
    """A previous call as the model would have written it (``<tool_call>`` block).

    ``arguments`` is JSON text; if it is not a JSON object it is embedded as a string.
    """
    try:
        args: Any = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        args = arguments
    body = orjson.dumps({"name": name, "arguments": args}).decode()
    return f"{OPEN_TAG}\n{body}\n{CLOSE_TAG}"


def render_tool_result(result: ToolResultPart) -> str:
    """A tool result as text, in the Hermes / Qwen ``<tool_response>`` block.

    Only the text content can be shown; an error result is prefixed with ``Error:``.
    """
    text = result.text
    if result.is_error:
        text = f"Error: {text}"
    return f"<tool_response>\n{text}\n</tool_response>"


def _render_parts(parts: tuple[Part, ...]) -> tuple[Part, ...]:
    """Replace tool calls/results by text; merge each run of text into one part."""
    out: list[Part] = []
    run: list[str] = []
    rendered_last = False

    def end_run() -> None:
        if run:
            out.append(TextPart("".join(run)))
            run.clear()

    for part in parts:
        if isinstance(part, ToolCallPart | ToolResultPart):
            if run:
                run.append("\n")
            if isinstance(part, ToolCallPart):
                run.append(render_tool_call(part.name, part.arguments))
            else:
                run.append(render_tool_result(part))
                extras = [p for p in part.content if not isinstance(p, TextPart)]
                if extras:
                    # Images and documents cannot be inlined in text: they follow the
                    # result's text so a vision-capable renderer can still place them.
                    end_run()
                    out.extend(extras)
            rendered_last = True
        elif isinstance(part, TextPart):
            if rendered_last and run and part.text:
                run.append("\n")
            run.append(part.text)
            rendered_last = False
        else:
            end_run()
            out.append(part)
            rendered_last = False
    end_run()
    return tuple(out)


def render_tool_history(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Rewrite tool calls and tool results in ``messages`` as text.

    Assistant :class:`ToolCallPart` values become ``<tool_call>`` blocks, user
    :class:`ToolResultPart` values become ``<tool_response>`` blocks, each joined to the
    surrounding text by a newline. Messages without tool parts are returned unchanged.
    """
    out: list[Message] = []
    for message in messages:
        if any(isinstance(p, ToolCallPart | ToolResultPart) for p in message.parts):
            out.append(replace(message, parts=_render_parts(message.parts)))
        else:
            out.append(message)
    return tuple(out)


def apply_text_tools(request: Request) -> Request:
    """Turn a request with tools into one for a model without native tool support.

    The tools prompt is appended to the first system message (or becomes one), the tool
    history is rendered as text, and ``tools``/``tool_choice`` are removed. Take the tool
    names for :class:`ToolCallTextParser` from the original request.
    """
    messages = render_tool_history(request.messages)
    prompt = render_tools_prompt(request.tools, request.tool_choice)
    if prompt:
        if messages and messages[0].role == "system":
            first = messages[0]
            sep = "\n\n" if any(isinstance(p, TextPart) and p.text for p in first.parts) else ""
            first = replace(first, parts=(*first.parts, TextPart(sep + prompt)))
            messages = (first, *messages[1:])
        else:
            messages = (Message("system", (TextPart(prompt),)), *messages)
    return replace(request, messages=messages, tools=(), tool_choice=None, parallel_tool_calls=None)


def parsed_tool_calls(request: Request, *, think_tags: bool) -> TextProcessing | None:
    """How to read the answer to ``request`` when its tools are described in the prompt,
    or None when no call may come back: no tools, or ``tool_choice`` "none" (a call the
    client ruled out must not reach it, even if the model writes one anyway)."""
    choice = request.tool_choice
    if not request.tools or (choice is not None and choice.mode == "none"):
        return None
    return TextProcessing(
        think_tags=think_tags,
        text_tool_calls=True,
        tool_names=[tool.name for tool in request.tools],
        tool_schemas={tool.name: tool.parameters for tool in request.tools},
    )
