"""Neutral stream events.

A stream is: one :class:`StreamStart`, then content blocks, then one :class:`StreamEnd`
(or a :class:`StreamError` anywhere after the start). A block is opened with
:class:`BlockStart` (carrying an empty part that says its kind: text, reasoning or tool
call), receives deltas, and is closed with :class:`BlockStop`. ``index`` is the block's
position in the final response's ``parts``; blocks are opened in index order. Several
blocks may be open at once (OpenAI upstreams can interleave parallel tool calls); an
encoder for a dialect that allows one open block at a time buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from ..errors import InterlinguaError
from .frozen import quick_init
from .parts import AudioPart, ReasoningPart, TextPart, TokenLogprob, ToolCallPart, UnknownPart
from .response import StopReason, Usage


@quick_init
@dataclass(frozen=True, slots=True)
class StreamStart:
    """The message begins. ``usage`` holds what is known so far (often input tokens only)."""

    id: str
    model: str
    created: int = 0
    usage: Usage | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class BlockStart:
    """Open block ``index``; ``part`` is its initial (usually empty) value."""

    index: int
    part: TextPart | ReasoningPart | ToolCallPart | AudioPart | UnknownPart


@quick_init
@dataclass(frozen=True, slots=True)
class TextDelta:
    """Text appended to block ``index``; ``logprobs``: its tokens' log probabilities, when
    the request asked for them (a delta may carry tokens and no text: a token can end
    inside a UTF-8 character)."""

    index: int
    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    index: int
    text: str


@quick_init
@dataclass(frozen=True, slots=True)
class SignatureDelta:
    """Anthropic's thinking signature, sent once just before the thinking block stops."""

    index: int
    signature: str


@quick_init
@dataclass(frozen=True, slots=True)
class ArgumentsDelta:
    """A fragment of a tool call's JSON arguments text."""

    index: int
    json: str


@quick_init
@dataclass(frozen=True, slots=True)
class AudioDelta:
    """A piece of an audio answer (Chat's ``delta.audio``): base64 ``data`` (each piece
    encoded on its own: pieces are joined as bytes, not as text), ``transcript`` text,
    and the ``id`` / ``expires_at`` when this piece says them."""

    index: int
    data: str = ""
    transcript: str = ""
    id: str | None = None
    expires_at: int | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class BlockStop:
    index: int


@quick_init
@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The message ends. ``usage`` is the final, cumulative count."""

    stop_reason: StopReason
    stop_sequence: str | None = None
    usage: Usage = field(default_factory=Usage)


@quick_init
@dataclass(frozen=True, slots=True)
class StreamError:
    """An error after the stream started; encoders emit it in-band."""

    error: InterlinguaError


Delta: TypeAlias = TextDelta | ReasoningDelta | SignatureDelta | ArgumentsDelta | AudioDelta
StreamEvent: TypeAlias = StreamStart | BlockStart | Delta | BlockStop | StreamEnd | StreamError


async def aclose_iterator(events: object) -> None:
    """Close an async iterator (of events, batches or bytes) if it can be closed (an async generator can; a plain
    iterator has nothing to release). Call it in ``finally`` wherever a stream is left
    early, so the upstream's ``finally`` runs now rather than at garbage collection."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
