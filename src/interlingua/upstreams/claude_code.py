"""Claude Code's expectations of an answer, met for models that do not meet them.

Claude Code is written against Anthropic's models; other models served to it through
the gateway trip over three things, each fixed by an opt-in model option (all off by
default, docs/config.md):

* ``force_background_tasks_off``: a subagent launched with ``run_in_background: true``
  runs detached and its result comes back later as a notification that a non-Anthropic
  model never acts on, so the work is lost. Calls of the subagent tool (``Task``; named
  ``Agent`` since Claude Code 2.1.63) get ``"run_in_background": false`` in their
  arguments: when the offered tool's schema declares that parameter, or the call sets it
  (a schema without it would refuse an unknown key). In a stream the arguments arrive in
  pieces; they are held and sent whole, rewritten, just before the call's block stops
  (the Anthropic encoder sends a call's input at its stop anyway).
* ``fill_empty_answer``: an answer with no text and no tool call (nothing at all, or
  only reasoning) leaves Claude Code with nothing to show or act on; it gets one empty
  text block, after whatever it had.
* ``estimate_input_tokens``: Claude Code reads context use from ``message_start``, whose
  usage is 0 when the upstream reports counts only at the end (every OpenAI-compatible
  server); the stream's first event then carries the gateway's estimate
  (:func:`~interlingua.core.tokens.estimate_request_tokens`), marked estimated. The
  upstream's final count still comes with the end.

:class:`ClaudeCodeStream` does all three to a stream of neutral events, keyed by block
index; :func:`claude_code_response` does the same to a whole answer, so a stream folds
to what the non-stream answer is. Applied by :mod:`.text_options`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson

from ..config import ModelOptions
from ..core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    Request,
    Response,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextPart,
    ToolCallPart,
    Usage,
)
from ..core.tokens import estimate_request_tokens

__all__ = ["AGENT_TOOLS", "ClaudeCodeQuirks", "ClaudeCodeStream", "claude_code_response"]

#: Claude Code's subagent tool, by its names old and new
AGENT_TOOLS = frozenset({"Task", "Agent"})
BACKGROUND = "run_in_background"


@dataclass(frozen=True, slots=True)
class ClaudeCodeQuirks:
    """What to fix in answers to one request (built per request: it reads the tools)."""

    #: agent tool name -> whether its schema declares ``run_in_background``
    agent_tools: dict[str, bool]
    fill_empty_answer: bool = False
    #: the estimated input tokens for the first event, or None
    input_estimate: int | None = None

    @classmethod
    def of(
        cls, options: ModelOptions, request: Request, sent: Request | None = None
    ) -> ClaudeCodeQuirks | None:
        """The quirks ``options`` turn on for ``request``, or None when there is nothing
        to do (no option on, or only ``force_background_tasks_off`` without agent tools).

        ``request`` is the request as the client made it: its tools are the ones offered,
        even when ``text_tool_calls`` describes them in the prompt of ``sent``, the request
        the upstream gets (default ``request``), whose size the input estimate is of.
        """
        agents: dict[str, bool] = {}
        if options.force_background_tasks_off:
            for tool in request.tools:
                if tool.name in AGENT_TOOLS and tool.kind == "function":
                    props = (tool.parameters or {}).get("properties")
                    agents[tool.name] = isinstance(props, dict) and BACKGROUND in props
        estimate = (
            estimate_request_tokens(sent or request) if options.estimate_input_tokens else None
        )
        if not agents and not options.fill_empty_answer and estimate is None:
            return None
        return cls(agents, options.fill_empty_answer, estimate)

    def arguments(self, name: str, arguments: str) -> str:
        """A call's arguments with ``run_in_background`` false where it applies; the
        text unchanged (byte for byte) when nothing needs changing."""
        declared = self.agent_tools.get(name)
        if declared is None:
            return arguments
        try:
            value: Any = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            return arguments  # not ours to repair; the client reports it
        if not isinstance(value, dict) or value.get(BACKGROUND) is False:
            return arguments
        if not declared and BACKGROUND not in value:
            return arguments
        value[BACKGROUND] = False
        return orjson.dumps(value).decode()


def _has_content(part: object) -> bool:
    return isinstance(part, TextPart | ToolCallPart)


def claude_code_response(response: Response, quirks: ClaudeCodeQuirks) -> Response:
    """``response`` with the quirks fixed (the first event's estimate has no place here:
    a whole answer carries the upstream's final counts)."""
    parts = response.parts
    if quirks.agent_tools:
        parts = tuple(
            replace(p, arguments=quirks.arguments(p.name, p.arguments))
            if isinstance(p, ToolCallPart) and p.name in quirks.agent_tools
            else p
            for p in parts
        )
    if quirks.fill_empty_answer and not any(_has_content(p) for p in parts):
        parts = (*parts, TextPart(""))
    return response if parts == response.parts else replace(response, parts=parts)


class ClaudeCodeStream:
    """The quirks over a stream of neutral events: :meth:`feed` each event, in order."""

    __slots__ = ("_content", "_held", "_next_index", "_quirks")

    def __init__(self, quirks: ClaudeCodeQuirks) -> None:
        self._quirks = quirks
        self._held: dict[int, tuple[str, list[str]]] = {}  # agent calls: name, fragments
        self._content = False
        self._next_index = 0

    def feed(self, event: StreamEvent) -> list[StreamEvent]:
        """The events to send for ``event`` (none while an agent call is held)."""
        if isinstance(event, ArgumentsDelta):
            held = self._held.get(event.index)
            if held is None:
                return [event]
            held[1].append(event.json)
            return []
        if isinstance(event, BlockStart):
            return [self._start(event)]
        if isinstance(event, BlockStop):
            return self._stop(event)
        if isinstance(event, StreamStart):
            return [self._first(event)]
        if isinstance(event, StreamEnd) and self._quirks.fill_empty_answer and not self._content:
            index = self._next_index
            self._content = True
            return [BlockStart(index, TextPart("")), BlockStop(index), event]
        return [event]

    def _first(self, event: StreamStart) -> StreamStart:
        estimate = self._quirks.input_estimate
        usage = event.usage
        if estimate is None or (usage is not None and usage.input_tokens):
            return event
        usage = Usage(input_tokens=estimate, estimated=True) if usage is None else usage
        return replace(event, usage=replace(usage, input_tokens=estimate, estimated=True))

    def _start(self, event: BlockStart) -> BlockStart:
        part = event.part
        self._next_index = max(self._next_index, event.index + 1)
        if _has_content(part):
            self._content = True
        if isinstance(part, ToolCallPart) and part.name in self._quirks.agent_tools:
            self._held[event.index] = (part.name, [part.arguments])
            return BlockStart(event.index, replace(part, arguments=""))
        return event

    def _stop(self, event: BlockStop) -> list[StreamEvent]:
        held = self._held.pop(event.index, None)
        if held is None:
            return [event]
        name, fragments = held
        arguments = self._quirks.arguments(name, "".join(fragments))
        return [ArgumentsDelta(event.index, arguments), event] if arguments else [event]
