"""fold(): a stream of neutral events -> the Response it describes.

This is the test oracle that streaming equals non-streaming, and also how an upstream
that only streams answers a non-streaming request.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import replace

from ..errors import UpstreamError
from .events import (
    ArgumentsDelta,
    AudioDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    SignatureDelta,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
)
from .parts import AudioPart, Part, ReasoningPart, TextPart, TokenLogprob, ToolCallPart
from .response import Response, StopReason, Usage


class Folder:
    """Incremental fold: ``feed()`` events, then ``result()``."""

    def __init__(self) -> None:
        self.start: StreamStart | None = None
        self.end: StreamEnd | None = None
        self._parts: dict[int, Part] = {}
        self._chunks: dict[int, list[str]] = {}
        self._signatures: dict[int, list[str]] = {}
        #: per block, only when some delta carried them: token logprobs / audio pieces
        self._logprobs: dict[int, list[TokenLogprob]] = {}
        self._audio: dict[int, list[AudioDelta]] = {}

    def feed(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self._chunks[event.index].append(event.text)
            if event.logprobs is not None:
                self._logprobs.setdefault(event.index, []).extend(event.logprobs)
        elif isinstance(event, ReasoningDelta):
            self._chunks[event.index].append(event.text)
        elif isinstance(event, ArgumentsDelta):
            self._chunks[event.index].append(event.json)
        elif isinstance(event, BlockStart):
            self._parts[event.index] = event.part
            self._chunks[event.index] = []
            self._signatures[event.index] = []
        elif isinstance(event, SignatureDelta):
            self._signatures[event.index].append(event.signature)
        elif isinstance(event, AudioDelta):
            self._audio.setdefault(event.index, []).append(event)
        elif isinstance(event, StreamStart):
            self.start = event
        elif isinstance(event, StreamEnd):
            self.end = event
        elif isinstance(event, StreamError):
            raise event.error
        elif isinstance(event, BlockStop):
            pass

    def _finished(self, index: int) -> Part:
        part = self._parts[index]
        joined = "".join(self._chunks[index])
        if isinstance(part, TextPart):
            logprobs = self._logprobs.get(index)
            if logprobs is None:
                return replace(part, text=part.text + joined)
            return replace(
                part, text=part.text + joined, logprobs=(*(part.logprobs or ()), *logprobs)
            )
        if isinstance(part, ReasoningPart):
            sig = "".join(self._signatures[index])
            return replace(
                part, text=part.text + joined, signature=(part.signature or "") + sig or None
            )
        if isinstance(part, ToolCallPart):
            return replace(part, arguments=part.arguments + joined)
        if isinstance(part, AudioPart):
            return _audio(part, self._audio.get(index, ()))
        return part

    def result(self) -> Response:
        if self.start is None:
            raise UpstreamError("upstream stream ended before it started")
        end = self.end or StreamEnd(StopReason.END_TURN)
        parts = tuple(self._finished(i) for i in sorted(self._parts))
        usage = end.usage
        if self.start.usage is not None and usage.input_tokens == 0:
            usage = replace(usage, input_tokens=self.start.usage.input_tokens)
        return Response(
            id=self.start.id,
            model=self.start.model,
            parts=parts,
            stop_reason=end.stop_reason,
            stop_sequence=end.stop_sequence,
            usage=usage if isinstance(usage, Usage) else Usage(),
            created=self.start.created,
        )


def _audio(part: AudioPart, pieces: Iterable[AudioDelta]) -> AudioPart:
    """An audio block with its pieces: the data joined as bytes (each piece is base64 of
    its own, padding included), the transcript as text, the last id/expiry said."""
    data = [part.data] if part.data else []
    transcript = [part.transcript]
    audio_id, expires = part.id, part.expires_at
    for piece in pieces:
        if piece.data:
            data.append(piece.data)
        transcript.append(piece.transcript)
        audio_id = piece.id or audio_id
        expires = piece.expires_at if piece.expires_at is not None else expires
    if len(data) > 1:
        joined = b"".join(base64.b64decode(d + "=" * (-len(d) % 4)) for d in data)
        data = [base64.b64encode(joined).decode("ascii")]
    return replace(
        part,
        data=data[0] if data else "",
        transcript="".join(transcript),
        id=audio_id,
        expires_at=expires,
    )


def fold(events: Iterable[StreamEvent]) -> Response:
    """Fold a whole event stream into the response it describes.

    >>> fold([StreamStart("m1", "x"), BlockStart(0, TextPart("")), TextDelta(0, "hi"),
    ...       BlockStop(0), StreamEnd(StopReason.END_TURN)]).text
    'hi'
    """
    folder = Folder()
    for event in events:
        folder.feed(event)
    return folder.result()
