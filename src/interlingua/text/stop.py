"""Stop sequences matched across chunk boundaries.

The local engine generates token by token, and a stop sequence may be split over any
number of tokens ("</" + "answer" + ">"). :class:`StopMatcher` releases text as soon as
it cannot be part of a stop sequence, holds back only the longest suffix that could still
start one, and reports which sequence matched: OpenAI reports only ``finish_reason:
"stop"``, but Anthropic's ``stop_sequence`` field names it
(docs/protocols.md, "Sampling settings and output limits"), so the matched string has to
be known exactly.

:func:`partial_suffix_len` is the hold-back rule shared by every processor in this
package (think tags and tool-call tags hold back the same way).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopMatcher", "partial_suffix_len"]


def partial_suffix_len(text: str, needles: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a *proper* prefix of a needle.

    This is exactly how much a stream processor must hold back: everything before it can
    never become part of a needle, whatever arrives next.

    >>> partial_suffix_len("a <thi", ["<think>"])
    4
    >>> partial_suffix_len("a <the", ["<think>"])
    0
    """
    n = len(text)
    best = 0
    for needle in needles:
        if not needle:
            continue
        first = needle[0]
        # Only a start position leaving fewer than len(needle) characters can be a
        # proper prefix; str.find keeps the common case (no candidate) in C.
        p = text.find(first, max(0, n - len(needle) + 1))
        while p != -1 and n - p > best:
            if needle.startswith(text[p:]):
                best = n - p
                break
            p = text.find(first, p + 1)
    return best


class StopMatcher:
    """Find the first stop sequence in streamed text; release everything before it.

    ``feed(text)`` returns ``(released, matched)``: text that is now safe to emit, and
    the stop sequence once one matched (then nothing after it is ever released and
    further feeds return ``("", matched)``). ``flush()`` returns the held-back rest at the
    end of the stream; a match decided only then is available as :attr:`matched`.

    The result does not depend on how the text was chunked: the match is the one with
    the earliest start position in the whole text, and among sequences starting at the
    same position the longest. To guarantee that, a complete match is accepted only when
    no sequence that could start at or before it is still incomplete.

    >>> m = StopMatcher(["</answer>"])
    >>> m.feed("42</ans")
    ('42', None)
    >>> m.feed("wer> more")
    ('', '</answer>')
    """

    __slots__ = ("_buf", "_matched", "_stops")

    def __init__(self, stops: Sequence[str]) -> None:
        # Longest first, so that a tie on position resolves to the longest sequence.
        unique = {s for s in stops if s}
        self._stops: tuple[str, ...] = tuple(sorted(unique, key=lambda s: (-len(s), s)))
        self._buf = ""
        self._matched: str | None = None

    @property
    def matched(self) -> str | None:
        """The stop sequence that matched, or None (so far)."""
        return self._matched

    def feed(self, text: str) -> tuple[str, str | None]:
        """Add streamed text; return ``(text safe to release, matched stop or None)``."""
        if self._matched is not None:
            return "", self._matched
        if not self._stops:
            return text, None
        buf = self._buf + text if self._buf else text
        pos, stop = self._find(buf)
        # Earliest position where a stop sequence may still be completing.
        pending = len(buf) - partial_suffix_len(buf, self._stops)
        if stop is not None and pos < pending:
            self._matched = stop
            self._buf = ""
            return buf[:pos], stop
        # No match yet, or one that an earlier (or equally early, longer) sequence still
        # in progress could override: release only what precedes every candidate.
        self._buf = buf[pending:]
        return buf[:pending], None

    def flush(self) -> str:
        """End of stream: resolve a deferred match and return the rest of the text."""
        if self._matched is not None:
            return ""
        buf, self._buf = self._buf, ""
        pos, stop = self._find(buf)
        if stop is not None:
            self._matched = stop
            return buf[:pos]
        return buf

    def _find(self, buf: str) -> tuple[int, str | None]:
        """(position, stop) of the earliest complete match, the longest on a tie."""
        best_pos = -1
        best: str | None = None
        for stop in self._stops:
            # Once a match is known, only positions before it (or equal, for a longer
            # sequence, which sorted order already preferred) are worth searching.
            end = len(buf) if best is None else best_pos + len(stop) - 1
            i = buf.find(stop, 0, end)
            if i != -1 and (best is None or i < best_pos):
                best_pos, best = i, stop
        return best_pos, best
