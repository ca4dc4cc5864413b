"""Random answers broken at random events, continued (and sometimes broken again), spliced
as the gateway splices them, then through every client dialect's real stream encoder and
read back: the client always folds a valid message, never a partial tool call, and its
text is what the client had at each break followed by the rest, exactly once.

The oracle of what the client had at a break is independent of the splice: everything an
attempt said up to its break, except from the first tool call still open (and whatever
came after it), which is held until the call is whole and so never sent.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlingua.core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    Message,
    ReasoningDelta,
    ReasoningPart,
    Request,
    SignatureDelta,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallPart,
    Usage,
    fold,
)
from interlingua.dialects import EventDecoder, get_dialect
from interlingua.errors import UpstreamError
from interlingua.server.continuation.splice import Splice, prefix_parts

DIALECTS = ("openai", "anthropic", "responses")
REQUEST = Request("client-model", (Message("user", (TextPart("go"),)),))
CUT = StreamError(UpstreamError("cut", status=502))

_WORDS = st.text(alphabet="abé \n", min_size=1, max_size=6)
_FIRST = st.text(alphabet="xyz", min_size=1, max_size=3)  # a block's first piece: no blank
_Sliced = TypeVar("_Sliced", str, list[StreamEvent])
_BLANK = st.sampled_from([" ", "\n\n", " \n", ""])  # a block's last piece, often
_VALUES = st.one_of(st.integers(-9, 99), st.text(alphabet='ab "\\é', max_size=4), st.booleans())
_ARGUMENTS = st.dictionaries(st.sampled_from(["a", "city", "n"]), _VALUES, max_size=3)


@dataclass
class Attempt:
    """One upstream attempt: its whole answer's events, said up to ``cut`` if it breaks."""

    events: list[StreamEvent]
    #: the whole tool calls it sent: (id, name, arguments)
    calls: set[tuple[str, str, str]] = field(default_factory=set)
    cut: int | None = None

    def said(self) -> list[StreamEvent]:
        """The events up to its break (all of them when it did not break)."""
        return self.events if self.cut is None else self.events[: self.cut]


def _split(draw: st.DrawFn, whole: _Sliced, most: int) -> list[_Sliced]:
    """``whole`` cut in up to ``most`` + 1 slices at random places (none empty)."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(whole) - 1)), max_size=most)))
    bounds = [0, *(c for c in cuts if c < len(whole)), len(whole)]
    return [whole[a:b] for a, b in itertools.pairwise(bounds) if a < b]  # type: ignore[misc]


def _pieces(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` split at random places (never an empty piece)."""
    return _split(draw, text, 3)


def _interleaved(draw: st.DrawFn, runs: list[list[StreamEvent]]) -> list[StreamEvent]:
    """Parallel tool calls: their events merged at random, each call's in order, the
    calls started in index order."""
    out: list[StreamEvent] = []
    at = [0] * len(runs)
    while any(n < len(run) for n, run in zip(at, runs, strict=True)):
        ready = [
            i
            for i, run in enumerate(runs)
            if at[i] < len(run) and (at[i] > 0 or all(at[j] > 0 for j in range(i)))
        ]
        i = draw(st.sampled_from(ready))
        out.append(runs[i][at[i]])
        at[i] += 1
    return out


@st.composite
def answers(draw: st.DrawFn, tag: str, min_blocks: int = 0) -> Attempt:
    """A whole upstream answer: text, reasoning (a signature or not) and groups of
    parallel tool calls whose arguments come in pieces."""
    kinds = draw(st.lists(st.sampled_from(["text", "reasoning", "calls"]), min_size=min_blocks))
    events: list[StreamEvent] = [StreamStart(f"resp_{tag}", "m", 0, Usage(input_tokens=7))]
    attempt = Attempt(events)
    index = 0
    for kind in kinds[:5]:
        if kind == "calls":
            runs = []
            for _ in range(draw(st.integers(1, 3))):
                call = ToolCallPart(f"call_{tag}{index}", f"tool{index}")
                arguments = json.dumps(draw(_ARGUMENTS), ensure_ascii=False)
                attempt.calls.add((call.id, call.name, arguments))
                deltas = [ArgumentsDelta(index, p) for p in _pieces(draw, arguments)]
                runs.append([BlockStart(index, call), *deltas, BlockStop(index)])
                index += 1
            events.extend(_interleaved(draw, runs))
            continue
        pieces = [draw(_FIRST), *draw(st.lists(_WORDS, max_size=3)), draw(_BLANK)]
        if kind == "text":
            events.append(BlockStart(index, TextPart("")))
            events.extend(TextDelta(index, p) for p in pieces if p)
        else:
            events.append(BlockStart(index, ReasoningPart("")))
            events.extend(ReasoningDelta(index, p) for p in pieces if p)
            if draw(st.booleans()):
                events.append(SignatureDelta(index, f"sig{tag}{index}"))
        events.append(BlockStop(index))
        index += 1
    reason = StopReason.TOOL_USE if attempt.calls else StopReason.END_TURN
    events.append(StreamEnd(reason, usage=Usage(input_tokens=9, output_tokens=len(events))))
    return attempt


def _repeating(draw: st.DrawFn, attempt: Attempt, trimmed: str) -> str:
    """Maybe make ``attempt`` repeat ``trimmed`` at the start of its first block (when
    that is a text, as the splice drops it from); the repeat it says, or ""."""
    events = attempt.events
    if not trimmed or type(events[1]) is not BlockStart or type(events[1].part) is not TextPart:
        return ""
    if not draw(st.booleans()):
        return ""
    index = events[1].index
    events[2:2] = [TextDelta(index, p) for p in _pieces(draw, trimmed)]
    return trimmed


def _break_at(draw: st.DrawFn, n: int) -> int:
    """Where an answer of ``n`` events breaks: after its start and before its end (counted
    from either end, so that small draws, which hypothesis favours, reach both)."""
    k = draw(st.integers(0, n - 2))
    return n - 1 - k if draw(st.booleans()) else 1 + k


def _reads(draw: st.DrawFn, events: list[StreamEvent]) -> list[list[StreamEvent]]:
    """``events`` in random reads."""
    return _split(draw, events, 6)


def _shown(events: list[StreamEvent]) -> tuple[str, list[str]]:
    """The text and the ids of the whole calls a client got of an attempt that broke
    after ``events``: all but what came from the first call still open (held)."""
    pending: set[int] = set()
    held_from: int | None = None
    for n, event in enumerate(events):
        if type(event) is BlockStart and type(event.part) is ToolCallPart:
            held_from = n if held_from is None else held_from
            pending.add(event.index)
        elif type(event) is BlockStop and event.index in pending:
            pending.discard(event.index)
            held_from = held_from if pending else None
    shown = events if held_from is None else events[:held_from]
    text = "".join(e.text for e in shown if type(e) is TextDelta)
    calls = [e.part.id for e in shown if type(e) is BlockStart and type(e.part) is ToolCallPart]
    return text, calls


def _run(splice: Splice, reads: list[list[StreamEvent]]) -> list[StreamEvent]:
    """An attempt's reads through ``splice`` as the runner hands them on; at a break, the
    closing events too."""
    out: list[StreamEvent] = []
    for batch in reads:
        events, error = splice.take(batch)
        out.extend(events)
        if error is not None:
            closing, _ = splice.broke(50)
            return out + closing
    return out


@st.composite
def spliced(draw: st.DrawFn) -> tuple[list[StreamEvent], str, list[str], set[tuple[str, ...]]]:
    """The events a client gets of two or three attempts; the text and call ids the
    oracle expects of them; every whole call the upstreams sent."""
    attempts = [draw(answers("a", min_blocks=2))]
    if draw(st.booleans()):
        attempts.append(draw(answers("b", min_blocks=2)))
    attempts.append(draw(answers("c")))
    splice = Splice()
    client: list[StreamEvent] = []
    text, calls, trimmed = "", [], ""
    for n, attempt in enumerate(attempts):
        repeat = _repeating(draw, attempt, trimmed) if n else ""
        if n < len(attempts) - 1:
            attempt.cut = _break_at(draw, len(attempt.events))
        said = attempt.said()
        client += _run(splice, _reads(draw, said + ([CUT] if attempt.cut else [])))
        got, ids = _shown(said)
        if got.startswith(repeat):
            text += got[len(repeat) :]
        else:  # (a break inside the repeat: all of it dropped)
            assert repeat.startswith(got)
        calls += ids
        if attempt.cut:
            _, trimmed = prefix_parts(splice.answer(), trim_end=draw(st.booleans()))
            splice.resume(trimmed)
    whole = set().union(*(a.calls for a in attempts))
    return client, text, calls, whole


def _well_formed(events: list[StreamEvent]) -> None:
    """One start, one end; each block opened once, said only while open, closed once."""
    assert type(events[0]) is StreamStart and type(events[-1]) is StreamEnd
    assert not any(type(e) in (StreamStart, StreamEnd, StreamError) for e in events[1:-1])
    open_: set[int] = set()
    done: set[int] = set()
    for event in events[1:-1]:
        index = event.index  # type: ignore[union-attr]
        if type(event) is BlockStart:
            assert index not in open_ | done, event
            open_.add(index)
        else:
            assert index in open_, event
            if type(event) is BlockStop:
                open_.discard(index)
                done.add(index)
    assert not open_, open_


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spliced())
def test_a_spliced_stream_folds_to_one_valid_answer_in_every_dialect(
    case: tuple[list[StreamEvent], str, list[str], set[tuple[str, ...]]],
) -> None:
    events, text, calls, whole = case
    starts = [e.index for e in events if type(e) is BlockStart]
    assert starts == sorted(set(starts)), starts
    assert type(events[0]) is StreamStart and events[0].id == "resp_a"
    _well_formed(events)
    neutral = fold(events)
    assert neutral.text == text
    assert [c.id for c in neutral.tool_calls] == calls
    for name in DIALECTS:
        dialect = get_dialect(name)
        encoder = dialect.stream_encoder(REQUEST)
        data = b"".join(encoder.encode(event) for event in events)
        decoder = EventDecoder(dialect, REQUEST)
        back = [*decoder.decode(data), *decoder.flush()]
        assert decoder.ended, name
        assert not any(type(e) is StreamError for e in back), name
        answer = fold(back)
        assert answer.text == text, name
        assert sorted(c.id for c in answer.tool_calls) == sorted(calls), name
        for call in answer.tool_calls:
            # (Anthropic streams a call without arguments as no input_json_delta at all)
            arguments = call.arguments or ("{}" if name == "anthropic" else "")
            json.loads(arguments)
            assert (call.id, call.name, arguments) in whole, (name, call)
