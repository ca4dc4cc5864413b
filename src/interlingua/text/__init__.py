"""Stream-safe text processors for model output.

Models served without the matching server-side parsers write reasoning, stop sequences
and tool calls into their text. These processors recover them from a stream of text
chunks split anywhere, holding back only what could still be the start of a tag or a
stop sequence:

- :class:`ThinkSplitter` -- ``<think>...</think>`` spans -> reasoning segments;
- :class:`StopMatcher` -- stop sequences across chunk boundaries, reporting the match;
- :class:`ToolCallTextParser` -- ``<tool_call>`` tags, bare JSON calls and XML calls
  (Qwen3-Coder's ``<function=...>``, :mod:`.xml_calls`) -> tool calls;
  :mod:`.tool_prompt` (:func:`render_tools_prompt`, :func:`render_tool_history`,
  :func:`apply_text_tools`) is the prompt side that teaches a model that format;
- :class:`TextProcessingStream` / :func:`process_response` -- all of the above applied
  to neutral events or whole responses, as one :class:`TextProcessing` value says
  (per-model options ``think_tags`` and ``text_tool_calls``, the request's tools and stops).

Every processor has ``feed()`` / ``flush()`` and gives the same result for any chunking
of its input.
"""

from .events import TextProcessing, TextProcessingStream, new_call_id, process_response
from .stop import StopMatcher, partial_suffix_len
from .think import ThinkKind, ThinkSegment, ThinkSplitter
from .tool_calls import (
    DEFAULT_FORMATS,
    Segment,
    TextSegment,
    ToolCallSegment,
    ToolCallTextParser,
    parse_tool_calls,
)
from .tool_prompt import (
    apply_text_tools,
    parsed_tool_calls,
    render_tool_call,
    render_tool_history,
    render_tool_result,
    render_tools_prompt,
)

__all__ = [
    "DEFAULT_FORMATS",
    "Segment",
    "StopMatcher",
    "TextProcessing",
    "TextProcessingStream",
    "TextSegment",
    "ThinkKind",
    "ThinkSegment",
    "ThinkSplitter",
    "ToolCallSegment",
    "ToolCallTextParser",
    "apply_text_tools",
    "new_call_id",
    "parse_tool_calls",
    "parsed_tool_calls",
    "partial_suffix_len",
    "process_response",
    "render_tool_call",
    "render_tool_history",
    "render_tool_result",
    "render_tools_prompt",
]
