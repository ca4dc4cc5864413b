"""Split ``<think>...</think>`` spans out of streamed model text.

Reasoning models served without a reasoning parser (older llama.cpp builds, raw vLLM,
local GGUF models) write their reasoning into the text itself, between think tags
(older llama.cpp builds wrote ``<think>`` into ``content`` while streaming:
docs/protocols.md, "Chat Completions: server extensions").
:class:`ThinkSplitter` turns that text back into reasoning and text segments.

Chunks may split a tag anywhere ("<thi" + "nk>"), so the splitter holds back only the
longest suffix that is a proper prefix of the tag it is waiting for, and releases text
that merely starts like a tag ("<th" + "e") as soon as it cannot be one.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from .stop import partial_suffix_len

__all__ = ["ThinkKind", "ThinkSegment", "ThinkSplitter"]

ThinkKind: TypeAlias = Literal["text", "reasoning"]
ThinkSegment: TypeAlias = tuple[ThinkKind, str]

# Qwen3 / DeepSeek-R1 answer "...</think>\n\n" before the visible answer; that blank
# line is formatting, not content.
_AFTER_CLOSE = "\r\n"


class ThinkSplitter:
    """Stream-safe splitter of think tags into ``("reasoning", ...)`` segments.

    ``start_inside=True`` is for models whose chat template already opened the think
    tag in the prompt (DeepSeek-R1, Qwen3 thinking templates): their output starts inside
    the reasoning and only the closing tag appears. If such a model writes the opening
    tag anyway, at the very start, it is dropped.

    Rules: text after a closing tag has its leading newlines stripped (the answer after
    ``</think>`` conventionally starts with a blank line); reasoning is kept verbatim; an
    unclosed think span at the end of the stream is flushed as reasoning; several spans
    are fine. Adjacent segments of one kind are merged within one ``feed()`` result, and
    no segment is empty.

    >>> s = ThinkSplitter()
    >>> s.feed("<thi")
    []
    >>> s.feed("nk>hmm</think>\\n\\nHi")
    [('reasoning', 'hmm'), ('text', 'Hi')]
    """

    __slots__ = ("_buf", "_close", "_inside", "_lead", "_open", "_strip")

    def __init__(
        self,
        open_tag: str = "<think>",
        close_tag: str = "</think>",
        start_inside: bool = False,
    ) -> None:
        if not open_tag or not close_tag:
            raise ValueError("think tags must be non-empty")
        self._open = open_tag
        self._close = close_tag
        self._inside = start_inside
        self._lead = start_inside  # may still drop a redundant opening tag at the start
        self._strip = False  # strip newlines from text right after a closing tag
        self._buf = ""

    @property
    def inside(self) -> bool:
        """True while the stream is inside a think span."""
        return self._inside

    def feed(self, text: str) -> list[ThinkSegment]:
        """Add streamed text; return the segments that are now certain."""
        buf = self._buf + text if self._buf else text
        out: list[ThinkSegment] = []
        if self._lead:
            if len(buf) < len(self._open) and self._open.startswith(buf):
                self._buf = buf
                return out
            self._lead = False
            if buf.startswith(self._open):
                buf = buf[len(self._open) :]
        while True:
            tag = self._close if self._inside else self._open
            i = buf.find(tag)
            if i == -1:
                break
            self._emit(buf[:i], out)
            buf = buf[i + len(tag) :]
            if self._inside:
                self._strip = True
            self._inside = not self._inside
        keep = len(buf) - partial_suffix_len(buf, (tag,))
        self._emit(buf[:keep], out)
        self._buf = buf[keep:]
        return out

    def flush(self) -> list[ThinkSegment]:
        """End of stream: release what was held back (an unclosed span stays reasoning)."""
        out: list[ThinkSegment] = []
        self._lead = False
        buf, self._buf = self._buf, ""
        self._emit(buf, out)
        return out

    def _emit(self, text: str, out: list[ThinkSegment]) -> None:
        kind: ThinkKind = "reasoning" if self._inside else "text"
        if kind == "text" and self._strip:
            text = text.lstrip(_AFTER_CLOSE)
            if text:
                self._strip = False
        if not text:
            return
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
