"""unfold(): a Response -> the stream of events that folds back into it.

The inverse of :func:`~interlingua.core.fold`: used by upstreams that produce whole
answers (scripted fakes, a cached reply) when the client asked for a stream. Text is sent
in one delta per part; ``chunk_size`` splits it further to mimic token streaming.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from .events import (
    ArgumentsDelta,
    AudioDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    SignatureDelta,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
)
from .parts import AudioPart, ReasoningPart, TextPart, ToolCallPart
from .response import Response, Usage


def _pieces(text: str, size: int | None) -> Iterator[str]:
    if not text:
        return
    if not size:
        yield text
        return
    for i in range(0, len(text), size):
        yield text[i : i + size]


def _text_deltas(index: int, part: TextPart, chunk_size: int | None) -> Iterator[TextDelta]:
    """A text part's deltas: one per token when it carries token logprobs that spell its
    text (as a server streams them), else pieces with every logprob on the first."""
    logprobs = part.logprobs
    if logprobs and "".join(t.token for t in logprobs) == part.text:
        for token in logprobs:
            yield TextDelta(index, token.token, (token,))
        return
    if logprobs is not None and not part.text:
        yield TextDelta(index, "", logprobs)
    for piece in _pieces(part.text, chunk_size):
        yield TextDelta(index, piece, logprobs)
        logprobs = None  # fold concatenates them


def unfold(response: Response, chunk_size: int | None = None) -> Iterator[StreamEvent]:
    """Yield the events of ``response``; ``fold(unfold(r)) == r``."""
    start_usage = Usage(
        input_tokens=response.usage.input_tokens,
        cache_read_tokens=response.usage.cache_read_tokens,
        cache_write_tokens=response.usage.cache_write_tokens,
    )
    yield StreamStart(response.id, response.model, response.created, start_usage)
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            yield BlockStart(index, replace(part, text="", logprobs=None))
            yield from _text_deltas(index, part, chunk_size)
        elif isinstance(part, ReasoningPart):
            yield BlockStart(index, replace(part, text="", signature=None))
            for piece in _pieces(part.text, chunk_size):
                yield ReasoningDelta(index, piece)
            if part.signature:
                yield SignatureDelta(index, part.signature)
        elif isinstance(part, ToolCallPart):
            yield BlockStart(index, replace(part, arguments=""))
            for piece in _pieces(part.arguments, chunk_size):
                yield ArgumentsDelta(index, piece)
        elif isinstance(part, AudioPart):
            yield BlockStart(index, replace(part, data="", transcript="", expires_at=None))
            yield AudioDelta(index, part.data, part.transcript, expires_at=part.expires_at)
        else:
            # Tool results, images, documents and unknown parts never appear in a model's
            # answer; an UnknownPart (e.g. a server-tool block) travels whole.
            yield BlockStart(index, part)  # type: ignore[arg-type]
        yield BlockStop(index)
    yield StreamEnd(response.stop_reason, response.stop_sequence, response.usage)
