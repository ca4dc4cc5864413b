"""Apply the text processors to a neutral event stream (and to whole responses).

An upstream's stream may carry think tags, stop sequences and text-written tool calls
inside its text blocks. A :class:`TextProcessing` value says which of them to look for,
and :class:`TextProcessingStream` rewrites the stream accordingly: every upstream text
block's content goes through, in order, a :class:`~.stop.StopMatcher` (on the raw text,
as a server would apply ``stop``), a :class:`~.think.ThinkSplitter` and a
:class:`~.tool_calls.ToolCallTextParser` (on the non-reasoning text only: a model
*thinking about* a call is not making one). The result becomes reasoning, text and tool
call blocks.

Block indices are ours: each output block gets the next index when it opens (state is
keyed by index: CONTRIBUTING.md, "Stream state is keyed by index"), upstream blocks that
are not text (native reasoning, native tool calls) pass through under a new index, and
every output block is opened and closed exactly once. Each upstream text block is
processed on its own and flushed when it stops: an upstream block is a complete unit of
text, and the alternative (one text channel across blocks) would move text held back in
one block after blocks that follow it.

After a stop sequence matches, generation is over: the rest of that block and every
later upstream block are dropped. The end's stop reason becomes ``TOOL_USE`` when a tool
call was parsed (unless the upstream ran out of tokens without a stop match), else
``STOP_SEQUENCE`` with the matched string when a stop sequence matched.

:func:`process_response` does the same to a whole response by unfolding it, feeding the
events and folding them back, so streaming and non-streaming agree by construction.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..core import (
    ArgumentsDelta,
    AudioDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    ReasoningPart,
    Response,
    SignatureDelta,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    TextDelta,
    TextPart,
    TokenLogprob,
    ToolCallPart,
    fold,
    unfold,
)
from .stop import StopMatcher
from .think import ThinkSplitter
from .tool_calls import DEFAULT_FORMATS, Segment, ToolCallTextParser

__all__ = ["TextProcessing", "TextProcessingStream", "new_call_id", "process_response"]


def new_call_id() -> str:
    """A fresh tool call id, ``call_`` + 24 hex digits (valid for every dialect)."""
    return "call_" + secrets.token_hex(12)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextProcessing:
    """Which text processors to run over an answer: one value per request or upstream.

    - ``think_tags``: ``<think>...</think>`` spans become reasoning blocks;
      ``think_start_inside``: the answer starts inside such a span (a chat template that
      opened ``<think>`` in the prompt);
    - ``text_tool_calls``: tool calls written as text become tool call blocks, in the
      ``formats`` given (:data:`~.tool_calls.DEFAULT_FORMATS`); ``tool_names`` are the
      offered tools, which the bare-JSON and XML formats need to tell a call from an
      answer; ``tool_schemas`` their parameters' JSON schemas by name, which type the
      values of XML calls (a value is a string when its tool has none);
    - ``stops``: stop sequences matched on the raw text (empty strings are ignored).

    The collections are normalized once here (frozensets, a tuple), so every stream built
    from the value shares them and the value is hashable (the schemas, plain JSON, are
    compared but not hashed: they come with the names, which are).

    >>> TextProcessing(text_tool_calls=True, tool_names=["f"]).tool_names
    frozenset({'f'})
    >>> TextProcessing(stops=["", "END"]).stops
    ('END',)
    """

    think_tags: bool = False
    think_start_inside: bool = False
    text_tool_calls: bool = False
    tool_names: Collection[str] = frozenset()
    tool_schemas: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)
    formats: Collection[str] = DEFAULT_FORMATS
    stops: Sequence[str] = ()

    def __post_init__(self) -> None:
        formats = frozenset(self.formats)
        if not formats <= DEFAULT_FORMATS:  # fail when the value is built, not mid-stream
            raise ValueError(f"unknown tool-call formats: {sorted(formats - DEFAULT_FORMATS)}")
        # Frozen: dataclasses' own way to set a field in __post_init__.
        object.__setattr__(self, "tool_names", frozenset(self.tool_names))
        object.__setattr__(self, "formats", formats)
        object.__setattr__(self, "stops", tuple(s for s in self.stops if s))

    @property
    def active(self) -> bool:
        """False when every option is off: a stream passes through untouched."""
        return self.think_tags or self.text_tool_calls or bool(self.stops)


_NO_PROCESSING = TextProcessing()


class _Channel:
    """Processing state of one upstream text block."""

    __slots__ = ("done", "index", "kind", "logprobs", "part", "stop", "think", "tools")

    def __init__(
        self,
        part: TextPart,
        stop: StopMatcher | None,
        think: ThinkSplitter | None,
        tools: ToolCallTextParser | None,
    ) -> None:
        self.part = part  # the upstream's (empty) part: its meta rides on our text blocks
        self.stop = stop
        self.think = think
        self.tools = tools
        self.kind: str | None = None  # kind of our open output block: text | reasoning
        self.index = -1  # its output index
        self.done = False  # stopped by a stop sequence: later content is dropped
        # token logprobs of text taken in and not yet given out: they go with the next
        # text this channel emits (text held back by a matcher, or turned into reasoning
        # or a tool call, takes its tokens along to the answer text that follows, if any)
        self.logprobs: list[TokenLogprob] | None = None


class TextProcessingStream:
    """Rewrite a neutral event stream through the text processors (module docstring).

    ``feed(event)`` returns the events to emit now; ``flush()`` ends an input that
    stopped without a :class:`StreamEnd` (it closes every open block). With every
    option of ``processing`` off the stream is passed through unchanged. ``id_factory``
    makes tool call ids (``call_...`` random ids by default; tests inject a deterministic
    one).

    >>> s = TextProcessingStream(TextProcessing(think_tags=True))
    >>> s.feed(BlockStart(0, TextPart("")))
    []
    >>> s.feed(TextDelta(0, "<think>hm</think>Hi"))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    [BlockStart(index=0, part=ReasoningPart(...)), ReasoningDelta(index=0, text='hm'),
     BlockStop(index=0), BlockStart(index=1, part=TextPart(...)), TextDelta(index=1, text='Hi')]
    """

    __slots__ = (
        "_channels",
        "_ended",
        "_id_factory",
        "_map",
        "_matched",
        "_next",
        "_options",
        "_tool_calls",
        "active",
    )

    def __init__(
        self,
        processing: TextProcessing = _NO_PROCESSING,
        *,
        id_factory: Callable[[], str] = new_call_id,
    ) -> None:
        self._options = processing
        self._id_factory = id_factory
        self.active = processing.active
        """False when every option is off: events pass through untouched."""
        self._next = 0  # next output block index
        self._map: dict[int, int] = {}  # upstream index -> output index (pass-through)
        self._channels: dict[int, _Channel] = {}  # upstream text blocks being processed
        self._matched: str | None = None
        self._tool_calls = 0
        self._ended = False

    @property
    def matched_stop(self) -> str | None:
        """The stop sequence that ended generation, if one matched."""
        return self._matched

    def feed(self, event: StreamEvent) -> list[StreamEvent]:
        """One upstream event -> the events to emit now."""
        if not self.active:
            return [event]
        if self._ended:
            return []
        out: list[StreamEvent] = []
        if isinstance(event, TextDelta):
            channel = self._channels.get(event.index)
            if channel is not None:
                if event.logprobs is not None:
                    channel.logprobs = [*(channel.logprobs or ()), *event.logprobs]
                self._process(channel, event.text, out)
            elif event.index in self._map:
                out.append(replace(event, index=self._map[event.index]))
        elif isinstance(event, ReasoningDelta | SignatureDelta | ArgumentsDelta | AudioDelta):
            if event.index in self._map:
                out.append(replace(event, index=self._map[event.index]))
        elif isinstance(event, BlockStart):
            self._start(event, out)
        elif isinstance(event, BlockStop):
            self._stop(event.index, out)
        elif isinstance(event, StreamEnd):
            self._close_all(out)
            out.append(self._end(event))
        elif isinstance(event, StreamError):
            self._close_all(out)  # what was held back is still output: emit it first
            out.append(event)
        else:  # StreamStart
            out.append(event)
        return out

    def flush(self) -> list[StreamEvent]:
        """The input ended without a StreamEnd: release held text, close open blocks."""
        out: list[StreamEvent] = []
        if self.active and not self._ended:
            self._close_all(out)
        return out

    # --- blocks ---------------------------------------------------------------------

    def _alloc(self) -> int:
        index = self._next
        self._next += 1
        return index

    def _start(self, event: BlockStart, out: list[StreamEvent]) -> None:
        if self._matched is not None:
            return  # generation already ended at a stop sequence
        part = event.part
        if isinstance(part, TextPart):
            o = self._options
            self._channels[event.index] = _Channel(
                part,
                StopMatcher(o.stops) if o.stops else None,
                ThinkSplitter(start_inside=o.think_start_inside) if o.think_tags else None,
                (
                    ToolCallTextParser(o.tool_names, o.formats, schemas=o.tool_schemas)
                    if o.text_tool_calls
                    else None
                ),
            )
        else:
            index = self._map[event.index] = self._alloc()
            out.append(BlockStart(index, part))

    def _stop(self, upstream: int, out: list[StreamEvent]) -> None:
        channel = self._channels.pop(upstream, None)
        if channel is not None:
            self._finish(channel, out)
        elif upstream in self._map:
            out.append(BlockStop(self._map.pop(upstream)))

    def _close_all(self, out: list[StreamEvent]) -> None:
        """Finish every channel and close every pass-through block (end of input)."""
        for upstream in sorted(self._channels):
            self._finish(self._channels[upstream], out)
        self._channels.clear()
        for index in sorted(self._map.values()):
            out.append(BlockStop(index))
        self._map.clear()
        self._ended = True

    def _end(self, end: StreamEnd) -> StreamEnd:
        reason, sequence = end.stop_reason, end.stop_sequence
        if self._tool_calls and (self._matched is not None or reason != StopReason.MAX_TOKENS):
            reason, sequence = StopReason.TOOL_USE, None
        elif self._matched is not None:
            reason, sequence = StopReason.STOP_SEQUENCE, self._matched
        if reason == end.stop_reason and sequence == end.stop_sequence:
            return end
        return replace(end, stop_reason=reason, stop_sequence=sequence)

    # --- text -----------------------------------------------------------------------

    def _process(self, channel: _Channel, text: str, out: list[StreamEvent]) -> None:
        if channel.done or self._matched is not None:
            return
        matched = None
        if channel.stop is not None:
            text, matched = channel.stop.feed(text)
        self._pipe(channel, text, out)
        if matched is not None:
            self._matched = matched
            self._finish(channel, out)
            channel.done = True

    def _finish(self, channel: _Channel, out: list[StreamEvent]) -> None:
        """Flush a channel's processors in pipeline order and close its open block."""
        if channel.done:
            return
        if channel.stop is not None:
            self._pipe(channel, channel.stop.flush(), out)
            if channel.stop.matched is not None:
                self._matched = channel.stop.matched
        if channel.think is not None:
            for kind, piece in channel.think.flush():
                self._route(channel, kind, piece, out)
        if channel.tools is not None:
            for segment in channel.tools.flush():
                self._segment(channel, segment, out)
        self._close_run(channel, out)

    def _pipe(self, channel: _Channel, text: str, out: list[StreamEvent]) -> None:
        """Raw (stop-checked) text -> think splitter -> tool parser -> blocks."""
        if not text:
            return
        if channel.think is None:
            self._route(channel, "text", text, out)
            return
        for kind, piece in channel.think.feed(text):
            self._route(channel, kind, piece, out)

    def _route(self, channel: _Channel, kind: str, text: str, out: list[StreamEvent]) -> None:
        if kind == "text" and channel.tools is not None:
            for segment in channel.tools.feed(text):
                self._segment(channel, segment, out)
        else:
            self._run(channel, kind, text, out)

    def _segment(self, channel: _Channel, segment: Segment, out: list[StreamEvent]) -> None:
        if segment[0] == "text":
            self._run(channel, "text", segment[1], out)
            return
        self._close_run(channel, out)
        index = self._alloc()
        out.append(BlockStart(index, ToolCallPart(self._id_factory(), segment[1], "")))
        out.append(ArgumentsDelta(index, segment[2]))
        out.append(BlockStop(index))
        self._tool_calls += 1

    def _run(self, channel: _Channel, kind: str, text: str, out: list[StreamEvent]) -> None:
        """Append ``text`` to the channel's open block of ``kind``, opening one if needed."""
        if not text:
            return
        if channel.kind != kind:
            self._close_run(channel, out)
            channel.kind, channel.index = kind, self._alloc()
            part = channel.part if kind == "text" else ReasoningPart("")
            out.append(BlockStart(channel.index, part))
        if kind == "text":
            logprobs, channel.logprobs = channel.logprobs, None
            out.append(
                TextDelta(channel.index, text, None if logprobs is None else tuple(logprobs))
            )
        else:
            out.append(ReasoningDelta(channel.index, text))

    def _close_run(self, channel: _Channel, out: list[StreamEvent]) -> None:
        if channel.kind is not None:
            out.append(BlockStop(channel.index))
            channel.kind = None


def process_response(
    response: Response,
    processing: TextProcessing = _NO_PROCESSING,
    *,
    id_factory: Callable[[], str] = new_call_id,
) -> Response:
    """The non-streaming twin of :class:`TextProcessingStream`: unfold, feed, fold.

    Returns ``response`` itself when every option of ``processing`` is off.
    """
    if not processing.active:
        return response
    stream = TextProcessingStream(processing, id_factory=id_factory)
    events: list[StreamEvent] = []
    for event in unfold(response):
        events.extend(stream.feed(event))
    events.extend(stream.flush())
    return replace(fold(events), meta=response.meta)
