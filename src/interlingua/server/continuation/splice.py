"""One answer made of several upstream attempts, as its client sees it.

When a stream breaks after its first byte and its model continues broken streams, the
gateway asks another candidate to carry on with the same assistant turn, and the client
gets one answer: the first attempt's events, then the continuation's, as if one upstream
had said them all. :class:`Splice` is that in neutral events (no I/O, no dialect):

* **What the client got.** Every event handed on is kept (:attr:`Splice.sent`); at a
  break the answer so far is rebuilt from them (:func:`answer_so_far`): the finished
  blocks, the block still open, the usage the upstream announced at the start.
* **Whole tool calls only.** A tool call's block is held, and everything after it, until
  the call's block stops; then all of it goes out at once. A break inside a held call
  drops what was held: the client never sees half a call, and the continuation starts
  from the last whole block. Text and reasoning are not held (they stream at once).
* **The continuation's events, renumbered.** Its start is dropped (the client's answer
  began already); its first text block is poured into the text block the break left
  open (same index: the client sees one text); every other block gets the next free
  index. Whitespace the prefix lost on its way (Anthropic refuses a prefill that ends in
  whitespace: :func:`prefix_parts`) is taken off the continuation's first text, so it is
  not said twice. Its end carries the usage of every attempt, summed.
* **A break inside reasoning** closes the reasoning block (its signature went out already
  if the upstream gave one: a signature arrives just before its block stops); the
  continuation then carries on with the answer. A continuation's own reasoning is never
  shown: the client's answer has its thinking from the first attempt, and a candidate
  asked afresh (a break before any text) would otherwise be read thinking twice, or after
  the answer had begun. Its tokens still count in the usage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    SignatureDelta,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    Usage,
)
from ...core.parts import ReasoningPart, TextPart, ToolCallPart
from ...core.response import StopReason
from ...core.tokens import CHARS_PER_TOKEN
from ...errors import InterlinguaError

__all__ = ["AnswerSoFar", "Splice", "answer_so_far", "prefix_parts", "summed"]

#: a part of the answer a continuation request can carry as the assistant's words
PrefixPart = TextPart | ToolCallPart


@dataclass(slots=True)
class AnswerSoFar:
    """What a client has been sent of an answer (:func:`answer_so_far`)."""

    #: the finished blocks, by index, and the open ones' text so far
    parts: dict[int, TextPart | ReasoningPart | ToolCallPart] = field(default_factory=dict)
    #: the indices of the blocks still open, in the order they opened
    open: list[int] = field(default_factory=list)
    #: the next index free for a block
    next_index: int = 0
    #: the stream's start event (its id, and the input tokens announced there)
    start: StreamStart | None = None
    #: every text, reasoning and argument character sent (for the output estimate)
    said: int = 0

    def open_tool_call(self) -> bool:
        """Whether a tool call's block is open (only part of the call was sent)."""
        return any(isinstance(self.parts.get(index), ToolCallPart) for index in self.open)


def answer_so_far(events: list[StreamEvent]) -> AnswerSoFar:
    """The answer ``events`` (what a client got, in order) add up to."""
    answer = AnswerSoFar()
    parts = answer.parts
    for event in events:
        if isinstance(event, TextDelta | ReasoningDelta):
            part = parts.get(event.index)
            if isinstance(part, TextPart | ReasoningPart):
                parts[event.index] = replace(part, text=part.text + event.text)
            answer.said += len(event.text)
        elif isinstance(event, ArgumentsDelta):
            part = parts.get(event.index)
            if isinstance(part, ToolCallPart):
                parts[event.index] = replace(part, arguments=part.arguments + event.json)
            answer.said += len(event.json)
        elif isinstance(event, SignatureDelta):
            part = parts.get(event.index)
            if isinstance(part, ReasoningPart):
                signature = (part.signature or "") + event.signature
                parts[event.index] = replace(part, signature=signature)
        elif isinstance(event, BlockStart):
            if isinstance(event.part, TextPart | ReasoningPart | ToolCallPart):
                parts[event.index] = event.part
            answer.open.append(event.index)
            answer.next_index = max(answer.next_index, event.index + 1)
        elif isinstance(event, BlockStop):
            if event.index in answer.open:
                answer.open.remove(event.index)
        elif isinstance(event, StreamStart):
            answer.start = event
    return answer


def prefix_parts(answer: AnswerSoFar, trim_end: bool) -> tuple[tuple[PrefixPart, ...], str]:
    """The assistant's words so far, for a continuation request: text and whole tool
    calls in order (reasoning is not repeated: a model continues an answer, not its
    thinking), consecutive texts joined; and, with ``trim_end``, the whitespace cut off
    the end of the last text (returned, so that the continuation's repeat of it can be
    dropped)."""
    out: list[PrefixPart] = []
    for index in sorted(answer.parts):
        part = answer.parts[index]
        if isinstance(part, ToolCallPart):
            if index in answer.open:
                continue  # (never happens: a call is held until whole)
            out.append(part)
        elif isinstance(part, TextPart) and part.text and not part.meta.get("refusal"):
            if out and isinstance(out[-1], TextPart):
                out[-1] = TextPart(out[-1].text + part.text)
            else:
                out.append(TextPart(part.text))
    trimmed = ""
    if trim_end and out and isinstance(out[-1], TextPart):
        text = out[-1].text
        kept = text.rstrip()
        trimmed = text[len(kept) :]
        if kept:
            out[-1] = TextPart(kept)
        else:
            out.pop()
    return tuple(out), trimmed


def summed(a: Usage, b: Usage) -> Usage:
    """Two attempts' usage, added up."""
    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cache_read_tokens=a.cache_read_tokens + b.cache_read_tokens,
        cache_write_tokens=a.cache_write_tokens + b.cache_write_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
        estimated=a.estimated or b.estimated,
    )


class Splice:
    """The events of one answer's attempts, as its client is to get them (module
    docstring). :meth:`take` each upstream read; at a break :meth:`broke`, then
    :meth:`resume` before the next attempt's reads."""

    __slots__ = (
        "_announced",
        "_first",
        "_map",
        "_merge",
        "_next",
        "_pending",
        "_queue",
        "_trim",
        "_trimmed_block",
        "attempt_from",
        "prior",
        "sent",
    )

    def __init__(self) -> None:
        #: every event handed on to the client, in order
        self.sent: list[StreamEvent] = []
        #: where in :attr:`sent` the current attempt's events begin
        self.attempt_from = 0
        #: the usage of the attempts before the current one, summed
        self.prior = Usage()
        self._queue: list[StreamEvent] = []  # held: a tool call not yet whole, and after
        self._pending: set[int] = set()  # the held tool calls' indices not yet stopped
        self._map: dict[int, int] | None = None  # a continuation's index -> the client's
        self._merge: int | None = None  # the open text block its first text goes into
        self._next = 0  # the client's next free block index (a continuation's)
        self._first = True  # no block of the continuation seen yet
        self._trim = ""  # whitespace its first text repeats (prefix_parts)
        self._trimmed_block: int | None = None  # the block that first text is in
        self._announced: Usage | None = None  # the usage a continuation's start announced

    def take(self, batch: list[StreamEvent]) -> tuple[list[StreamEvent], InterlinguaError | None]:
        """The events of one upstream read the client gets now, and the error that
        broke the attempt if the read ended with one."""
        if self._map is None and not self._queue:
            # The healthy stream's read (the first attempt, nothing held): passed on as it
            # came unless it holds an error or a tool call's start. One look per event.
            for event in batch:
                kind = type(event)
                if kind is StreamError or (
                    kind is BlockStart and type(event.part) is ToolCallPart  # type: ignore[union-attr]
                ):
                    break
            else:
                self.sent.extend(batch)
                return batch, None
        out: list[StreamEvent] = []
        remap = self._map is not None
        for event in batch:
            if type(event) is StreamError:
                return self._sent(out), event.error
            if remap:
                self._remap(event, out)
            else:
                self._pass(event, out)
        return self._sent(out), None

    def _sent(self, out: list[StreamEvent]) -> list[StreamEvent]:
        if out:
            self.sent.extend(out)
        return out

    def _pass(self, event: StreamEvent, out: list[StreamEvent]) -> None:
        """``event`` to ``out``, or held while a tool call is not whole."""
        queue = self._queue
        if not queue and (type(event) is not BlockStart or type(event.part) is not ToolCallPart):
            out.append(event)
            return
        kind = type(event)
        if kind is BlockStart and type(event.part) is ToolCallPart:  # type: ignore[union-attr]
            self._pending.add(event.index)  # type: ignore[union-attr]
        queue.append(event)
        if kind is BlockStop:
            self._pending.discard(event.index)  # type: ignore[union-attr]
        if not self._pending or kind is StreamEnd:
            out.extend(queue)
            queue.clear()
            self._pending.clear()

    def broke(self, request_tokens: int) -> tuple[list[StreamEvent], Usage]:
        """The attempt broke: what is held is dropped, and the events that close what
        must not stay open (a reasoning block, anything but text) are returned for the
        client (and counted as sent); with the attempt's usage (announced input tokens,
        else ``request_tokens``; its output estimated from what it said), which joins
        :attr:`prior`."""
        self._queue.clear()
        self._pending.clear()
        answer = answer_so_far(self.sent)
        closing: list[StreamEvent] = []
        for index in answer.open:
            if not isinstance(answer.parts.get(index), TextPart):
                closing.append(BlockStop(index))
        self.sent.extend(closing)
        mine = answer_so_far(self.sent[self.attempt_from :])
        if self.attempt_from == 0:
            start = answer.start
            announced = start.usage if start is not None and start.usage else None
        else:  # (a continuation's start is not sent: its count was kept aside)
            announced = self._announced
        said = (mine.said + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
        if announced is not None and announced.input_tokens:
            # (its prompt cache's reads and writes as announced: Messages' message_start)
            usage = replace(announced, output_tokens=said, reasoning_tokens=0, estimated=True)
        else:
            usage = Usage(input_tokens=request_tokens, output_tokens=said, estimated=True)
        self.prior = summed(self.prior, usage)
        return closing, usage

    def answer(self) -> AnswerSoFar:
        """What the client has been sent so far."""
        return answer_so_far(self.sent)

    def resume(self, trimmed: str) -> None:
        """The next attempt's reads follow (its request's prefix lost ``trimmed`` at its
        end: see the module docstring)."""
        answer = answer_so_far(self.sent)
        texts = [i for i in answer.open if isinstance(answer.parts.get(i), TextPart)]
        self._merge = texts[-1] if texts else None
        self._next = answer.next_index
        self._map = {}
        self._first = True
        self._trim = trimmed
        self._trimmed_block = None
        self._announced = None
        self.attempt_from = len(self.sent)

    def _remap(self, event: StreamEvent, out: list[StreamEvent]) -> None:
        """A continuation's ``event`` in the client's numbering, to :meth:`_pass`."""
        mapping = self._map
        assert mapping is not None
        if isinstance(event, StreamStart):  # the client's answer began: only its count kept
            self._announced = event.usage
            return
        if isinstance(event, StreamError):
            return  # (an error never comes here: take() stops at it)
        if isinstance(event, StreamEnd):
            if self._merge is not None:
                self._pass(BlockStop(self._merge), out)
                self._merge = None
            stop = event.stop_reason
            if stop == StopReason.END_TURN and _called_a_tool(self.sent + out):
                stop = StopReason.TOOL_USE  # (an earlier attempt's calls: the client must run them)
            usage = summed(self.prior, event.usage)
            self._pass(replace(event, usage=usage, stop_reason=stop), out)
            return
        if isinstance(event, BlockStart):
            if isinstance(event.part, ReasoningPart):
                return  # not shown: its block unmapped, its deltas and stop dropped too
            first, self._first = self._first, False
            opens_text = first and isinstance(event.part, TextPart)
            if opens_text and self._merge is not None:
                mapping[event.index] = self._trimmed_block = self._merge
                return
            if self._merge is not None:  # the open text ends: something else follows
                self._pass(BlockStop(self._merge), out)
                self._merge = None
            mapping[event.index] = new = self._next
            self._next = new + 1
            if opens_text:  # (a text after the closed one the prefix ended with: trimmed too)
                self._trimmed_block = new
            self._pass(replace(event, index=new), out)
            return
        target = mapping.get(event.index)
        if target is None:
            return  # (a block it never opened: nothing to say)
        if isinstance(event, BlockStop):
            if target == self._merge:
                self._merge = None
            self._pass(BlockStop(target), out)
            return
        if isinstance(event, TextDelta) and self._trim and target == self._trimmed_block:
            text = self._trimmed(event.text)
            if not text:
                return
            event = replace(event, text=text)
        self._pass(replace(event, index=target), out)

    def _trimmed(self, text: str) -> str:
        """``text`` without the leading whitespace the prefix lost (once)."""
        trim = self._trim
        n = 0
        while n < len(text) and n < len(trim) and text[n] == trim[n]:
            n += 1
        if n == len(text):
            self._trim = trim[n:]
            return ""
        self._trim = ""
        return text[n:]


def _called_a_tool(events: list[StreamEvent]) -> bool:
    """Whether ``events`` open a tool call's block."""
    return any(isinstance(e, BlockStart) and isinstance(e.part, ToolCallPart) for e in events)
