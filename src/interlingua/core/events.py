"""Neutral stream events.

A stream is: one :class:`StreamStart`, then content blocks, then one :class:`StreamEnd`
(or a :class:`StreamError` anywhere after the start). A block is opened with
:class:`BlockStart` (carrying an empty part that says its kind: text, reasoning or tool
call), receives deltas, and is closed with :class:`BlockStop`. ``index`` is the block's
position in the final response's ``parts``; blocks are opened in index order. Several
blocks may be open at once (OpenAI upstreams can interleave parallel tool calls); an
encoder for a dialect that allows one open block at a time buffers.

Every event also has :attr:`~EventBase.raw`: the wire data it was decoded from, kept
only when the reader asks for it (the client's streams do, the gateway does not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..errors import InterlinguaError
from .frozen import quick_init
from .parts import AudioPart, ReasoningPart, TextPart, TokenLogprob, ToolCallPart, UnknownPart
from .response import StopReason, Usage


class EventBase:
    """What every stream event has besides its fields: :attr:`raw`.

    A slot, not a field: events compare, print and copy by their fields alone, and an
    event made without it (every event the gateway makes) costs nothing more to build.
    """

    __slots__ = ("_raw",)
    _raw: Any

    @property
    def raw(self) -> Any:
        """The decoded wire data this event came from -- the JSON of its SSE event -- when
        the reader kept it (:func:`set_raw`), else None."""
        try:
            return self._raw
        except AttributeError:
            return None


#: ``set_raw(event, data)``: attach the wire data to an event (frozen: the slot's own setter)
set_raw: Callable[[EventBase, Any], None] = EventBase.__dict__["_raw"].__set__


@quick_init
@dataclass(frozen=True, slots=True)
class StreamStart(EventBase):
    """The message begins. ``usage`` holds what is known so far (often input tokens only)."""

    id: str
    model: str
    created: int = 0
    usage: Usage | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class BlockStart(EventBase):
    """Open block ``index``; ``part`` is its initial (usually empty) value."""

    index: int
    part: TextPart | ReasoningPart | ToolCallPart | AudioPart | UnknownPart


@quick_init
@dataclass(frozen=True, slots=True)
class TextDelta(EventBase):
    """Text appended to block ``index``; ``logprobs``: its tokens' log probabilities, when
    the request asked for them (a delta may carry tokens and no text: a token can end
    inside a UTF-8 character)."""

    index: int
    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class ReasoningDelta(EventBase):
    index: int
    text: str


@quick_init
@dataclass(frozen=True, slots=True)
class SignatureDelta(EventBase):
    """Anthropic's thinking signature, sent once just before the thinking block stops."""

    index: int
    signature: str


@quick_init
@dataclass(frozen=True, slots=True)
class ArgumentsDelta(EventBase):
    """A fragment of a tool call's JSON arguments text."""

    index: int
    json: str


@quick_init
@dataclass(frozen=True, slots=True)
class AudioDelta(EventBase):
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
class BlockStop(EventBase):
    index: int


@quick_init
@dataclass(frozen=True, slots=True)
class StreamEnd(EventBase):
    """The message ends. ``usage`` is the final, cumulative count."""

    stop_reason: StopReason
    stop_sequence: str | None = None
    usage: Usage = field(default_factory=Usage)


@quick_init
@dataclass(frozen=True, slots=True)
class StreamError(EventBase):
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
