"""The neutral response, usage and stop reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from .frozen import quick_init
from .parts import Meta, Part, ReasoningPart, TextPart, ToolCallPart, _no_meta


class StopReason(StrEnum):
    """Why generation stopped, in neutral terms (Anthropic's vocabulary is the richest).

    OpenAI ``stop`` maps to END_TURN, or to STOP_SEQUENCE when the matched sequence is known.
    """

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    TOOL_USE = "tool_use"
    REFUSAL = "refusal"  # OpenAI content_filter
    PAUSE_TURN = "pause_turn"
    CONTEXT_WINDOW = "model_context_window_exceeded"


@quick_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts.

    ``input_tokens`` counts *all* input, cache reads and writes included (OpenAI's meaning);
    the Anthropic codec subtracts the cache counts because its ``input_tokens`` excludes them.
    ``output_tokens`` includes ``reasoning_tokens``. ``estimated`` is True when the upstream
    gave no count and the gateway estimated one.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@quick_init
@dataclass(frozen=True, slots=True)
class Response:
    """A complete model turn."""

    id: str
    model: str
    parts: tuple[Part, ...]
    stop_reason: StopReason = StopReason.END_TURN
    stop_sequence: str | None = None
    usage: Usage = field(default_factory=Usage)
    created: int = 0
    meta: Meta = field(default_factory=_no_meta, compare=False)

    @property
    def text(self) -> str:
        """The text content joined."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def reasoning(self) -> str:
        """The reasoning text joined."""
        return "".join(p.text for p in self.parts if isinstance(p, ReasoningPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolCallPart))
