"""The splice of a broken answer and its continuation, in neutral events (no I/O).

What the client gets of each attempt (:meth:`Splice.take`), what closes at a break
(:meth:`Splice.broke`), how a continuation is renumbered into the client's answer after
:meth:`Splice.resume`; and the request that asks for the continuation
(:func:`continuation_request`).
"""

from __future__ import annotations

import pytest

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
from interlingua.errors import UpstreamError
from interlingua.server.continuation.requests import continuation_request
from interlingua.server.continuation.splice import Splice, prefix_parts
from interlingua.upstreams.prefill import CONTINUE_INSTRUCTION, PREFILL

CUT = StreamError(UpstreamError("cut", status=502))
START = StreamStart("msg_1", "m", 1_700_000_000, Usage(input_tokens=40))
REQUEST = Request("m", (Message("user", (TextPart("hi"),)),))


def _end(output: int = 3, reason: StopReason = StopReason.END_TURN) -> StreamEnd:
    return StreamEnd(reason, usage=Usage(input_tokens=60, output_tokens=output))


def _text(index: int, *pieces: str) -> list[StreamEvent]:
    return [BlockStart(index, TextPart("")), *(TextDelta(index, p) for p in pieces)]


def _call(index: int, name: str, *pieces: str) -> list[StreamEvent]:
    start = BlockStart(index, ToolCallPart(f"call_{name}", name))
    return [start, *(ArgumentsDelta(index, p) for p in pieces), BlockStop(index)]


def _take(splice: Splice, *batches: list[StreamEvent]) -> list[StreamEvent]:
    """Every batch through ``splice``: what the client got (a break stops it)."""
    out: list[StreamEvent] = []
    for batch in batches:
        events, error = splice.take(batch)
        out.extend(events)
        if error is not None:
            break
    return out


def _broken(splice: Splice, *batches: list[StreamEvent], trimmed: str = "") -> list[StreamEvent]:
    """The attempt's batches, its break, and the resume: what the client got."""
    out = _take(splice, *batches)
    closing, _ = splice.broke(10)
    splice.resume(trimmed)
    return out + closing


def _starts(events: list[StreamEvent]) -> list[int]:
    return [e.index for e in events if isinstance(e, BlockStart)]


# -- text ---------------------------------------------------------------------------------


def test_a_continuations_first_text_goes_into_the_open_text_block() -> None:
    splice = Splice()
    first = _broken(splice, [START, *_text(0, "Half an ")], [TextDelta(0, "ans"), CUT])
    assert first == [START, *_text(0, "Half an "), TextDelta(0, "ans")]
    rest = _take(
        splice,
        [StreamStart("msg_2", "other"), *_text(0, "wer")],
        [TextDelta(0, ", whole."), BlockStop(0), _end()],
    )
    assert rest[:3] == [TextDelta(0, "wer"), TextDelta(0, ", whole."), BlockStop(0)]
    answer = fold(first + rest)
    assert answer.id == "msg_1"
    assert answer.parts == (TextPart("Half an answer, whole."),)
    assert splice.sent == first + rest


def test_whitespace_the_prefix_lost_is_not_said_twice() -> None:
    splice = Splice()
    first = _broken(splice, [START, *_text(0, "One line.\n\n"), CUT], trimmed="\n\n")
    rest = _take(splice, [START, *_text(0, "\n\nNext"), BlockStop(0), _end()])
    assert fold(first + rest).text == "One line.\n\nNext"


def test_a_trim_repeated_over_two_deltas_is_dropped_whole() -> None:
    splice = Splice()
    first = _broken(splice, [START, *_text(0, "Done. \n"), CUT], trimmed=" \n")
    rest = _take(splice, [START, *_text(0, " ", "\nNext", " more")], [BlockStop(0), _end()])
    assert [e.text for e in rest if isinstance(e, TextDelta)] == ["Next", " more"]
    assert fold(first + rest).text == "Done. \nNext more"


def test_a_continuation_that_does_not_repeat_the_trim_is_kept_whole() -> None:
    splice = Splice()
    first = _broken(splice, [START, *_text(0, "Hello "), CUT], trimmed=" ")
    rest = _take(splice, [START, *_text(0, "world", " again "), BlockStop(0), _end()])
    assert fold(first + rest).text == "Hello world again "


def test_prefix_parts_trims_only_when_asked_and_joins_texts() -> None:
    splice = Splice()
    _take(splice, [START, *_text(0, "a "), BlockStop(0), *_text(1, "b \n"), CUT])
    answer = splice.answer()
    assert prefix_parts(answer, trim_end=False) == ((TextPart("a b \n"),), "")
    assert prefix_parts(answer, trim_end=True) == ((TextPart("a b"),), " \n")


# -- tool calls -----------------------------------------------------------------------------


def test_a_tool_call_is_held_until_its_block_stops_then_released_whole() -> None:
    splice = Splice()
    call = _call(1, "get", '{"ci', 'ty": ', '"Paris"}')
    assert splice.take([START, *_text(0, "Let me look."), BlockStop(0)])[0][-1] == BlockStop(0)
    assert splice.take([call[0], call[1]]) == ([], None)
    assert splice.take([call[2]]) == ([], None)
    out, error = splice.take([call[3], call[4], _end(reason=StopReason.TOOL_USE)])
    assert error is None
    assert out == [*call, _end(reason=StopReason.TOOL_USE)]


def test_parallel_calls_and_text_after_a_call_keep_their_order() -> None:
    splice = Splice()
    a = BlockStart(1, ToolCallPart("call_a", "a"))
    b = BlockStart(2, ToolCallPart("call_b", "b"))
    events: list[StreamEvent] = [
        START,
        *_text(0, "Two calls."),
        BlockStop(0),
        a,
        ArgumentsDelta(1, '{"x"'),
        b,
        ArgumentsDelta(2, "{}"),
        ArgumentsDelta(1, ": 1}"),
        BlockStop(1),
        *_text(3, "and "),
        BlockStop(2),
        TextDelta(3, "after"),
        BlockStop(3),
        _end(),
    ]
    got: list[StreamEvent] = []
    for n, event in enumerate(events):
        out, _ = splice.take([event])
        got.extend(out)
        if n in (4, 5, 6, 7, 8, 9, 10):
            assert out == [] or n == 10, (n, out)
    assert got == events
    assert _starts(got) == [0, 1, 2, 3]
    calls = fold(got).tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("a", '{"x": 1}'), ("b", "{}")]


def test_a_break_inside_a_held_call_drops_it_and_the_prefix_is_whole_blocks() -> None:
    splice = Splice()
    first = _broken(
        splice,
        [START, *_text(0, "Let me look."), BlockStop(0), *_call(1, "done", "{}")],
        [BlockStart(2, ToolCallPart("call_half", "half")), ArgumentsDelta(2, '{"a": '), CUT],
    )
    assert _starts(first) == [0, 1]
    parts, trimmed = prefix_parts(splice.answer(), trim_end=True)
    assert parts == (TextPart("Let me look."), ToolCallPart("call_done", "done", "{}"))
    assert trimmed == ""
    rest = _take(splice, [START, *_call(0, "again", '{"a": 2}'), _end()])
    assert _starts(rest) == [2]
    answer = fold(first + rest)
    assert [(c.id, c.arguments) for c in answer.tool_calls] == [
        ("call_done", "{}"),
        ("call_again", '{"a": 2}'),
    ]


# -- reasoning --------------------------------------------------------------------------------


def test_a_break_inside_reasoning_closes_it_and_the_answer_goes_on() -> None:
    splice = Splice()
    reasoning = BlockStart(0, ReasoningPart(""))
    out = _take(splice, [START, reasoning, ReasoningDelta(0, "Think"), CUT])
    closing, _ = splice.broke(10)
    assert closing == [BlockStop(0)]
    assert splice.sent == [*out, BlockStop(0)]
    assert prefix_parts(splice.answer(), trim_end=True) == ((), "")
    splice.resume("")
    rest = _take(splice, [START, *_text(0, "Answer"), BlockStop(0), _end()])
    assert _starts(rest) == [1]
    answer = fold(out + closing + rest)
    assert answer.reasoning == "Think" and answer.text == "Answer"


def test_a_signature_sent_before_the_break_is_kept() -> None:
    splice = Splice()
    events = [
        START,
        BlockStart(0, ReasoningPart("")),
        ReasoningDelta(0, "Hm"),
        SignatureDelta(0, "sig"),
    ]
    out = _broken(splice, [*events, CUT])
    assert out == [*events, BlockStop(0)]
    assert fold(out).parts == (ReasoningPart("Hm", signature="sig"),)


def test_a_continuation_starting_with_a_call_closes_the_open_text() -> None:
    splice = Splice()
    first = _broken(splice, [START, *_text(0, "Hal"), CUT])
    rest = _take(splice, [START, *_call(0, "f", "{}"), *_text(1, "f."), BlockStop(1), _end()])
    assert rest[0] == BlockStop(0)
    assert _starts(rest) == [1, 2]
    answer = fold(first + rest)
    assert answer.text == "Half."
    assert len(answer.parts) == 3


@pytest.mark.parametrize("thought_before", [False, True], ids=["mid-text", "mid-reasoning"])
def test_a_continuations_reasoning_is_not_shown(thought_before: bool) -> None:
    # A candidate asked afresh after a break inside reasoning thinks again: the client
    # must not read a second thinking (nor one after its answer began); the text goes on.
    splice = Splice()
    if thought_before:
        said = [BlockStart(0, ReasoningPart("")), ReasoningDelta(0, "Hm")]
    else:
        said = _text(0, "Hal")
    first = _broken(splice, [START, *said, CUT])
    thinking = [BlockStart(0, ReasoningPart("")), ReasoningDelta(0, "again"), BlockStop(0)]
    rest = _take(splice, [START, *thinking, *_text(1, "f."), BlockStop(1), _end()])
    answer = fold(first + rest)
    assert answer.reasoning == ("Hm" if thought_before else "")
    assert answer.text == ("f." if thought_before else "Half.")


# -- usage and a second break ---------------------------------------------------------------


def test_usage_sums_the_attempts_announced_input_else_the_estimate() -> None:
    splice = Splice()
    _take(splice, [START, *_text(0, "12345678"), CUT])
    closing, usage = splice.broke(999)
    assert closing == []
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (40, 2, True)
    splice.resume("")
    rest = _take(splice, [StreamStart("x", "m"), *_text(0, "abcd"), BlockStop(0), _end(5)])
    assert isinstance(rest[-1], StreamEnd)
    assert rest[-1].usage == Usage(input_tokens=100, output_tokens=7, estimated=True)

    unannounced = Splice()
    _take(unannounced, [StreamStart("y", "m"), *_text(0, "1234"), CUT])
    assert unannounced.broke(33)[1].input_tokens == 33


def test_a_continuation_that_breaks_too_is_continued_after_it() -> None:
    splice = Splice()
    first = _broken(splice, [START, *_text(0, "One, "), CUT])
    second = _take(splice, [StreamStart("msg_2", "m"), *_text(0, "two, "), CUT])
    closing, usage = splice.broke(10)
    assert closing == [] and usage.input_tokens == 10  # (its start announced none)
    assert prefix_parts(splice.answer(), trim_end=False)[0] == (TextPart("One, two, "),)
    splice.resume("")
    third = _take(splice, [START, *_text(0, "three."), BlockStop(0), _end(1)])
    events = first + second + third
    assert _starts(events) == [0]
    answer = fold(events)
    assert answer.text == "One, two, three."
    assert answer.usage.input_tokens == 40 + 10 + 60


# -- the continuation request -----------------------------------------------------------------


def _said(text: str) -> Splice:
    splice = Splice()
    _take(splice, [START, *_text(0, text), CUT])
    return splice


def test_prefill_adds_the_assistants_words_marked() -> None:
    ask, trimmed = continuation_request(REQUEST, _said("Half ").answer(), "prefill", "openai")
    assert trimmed == ""
    assert ask.messages == (*REQUEST.messages, Message("assistant", (TextPart("Half "),)))
    assert ask.extra.get(PREFILL) is True


def test_an_anthropic_prefill_loses_its_trailing_whitespace() -> None:
    ask, trimmed = continuation_request(REQUEST, _said("Half \n").answer(), "prefill", "anthropic")
    assert trimmed == " \n"
    assert ask.messages[-1] == Message("assistant", (TextPart("Half"),))
    ask, _ = continuation_request(REQUEST, _said("Half \n").answer(), "instruct", "anthropic")
    assert ask.messages[-2] == Message("assistant", (TextPart("Half \n"),))


def test_instruct_adds_the_words_and_a_user_turn_asking_to_go_on() -> None:
    ask, trimmed = continuation_request(REQUEST, _said("Half").answer(), "instruct", "openai")
    assert trimmed == ""
    assert ask.messages[len(REQUEST.messages) :] == (
        Message("assistant", (TextPart("Half"),)),
        Message("user", (TextPart(CONTINUE_INSTRUCTION),)),
    )
    assert PREFILL not in ask.extra


def test_with_no_words_yet_the_request_is_the_clients_own() -> None:
    splice = Splice()
    _take(splice, [START, BlockStart(0, ReasoningPart("")), ReasoningDelta(0, "Hm"), CUT])
    for mode, dialect in (("prefill", "anthropic"), ("prefill", "openai"), ("instruct", None)):
        assert continuation_request(REQUEST, splice.answer(), mode, dialect) == (REQUEST, "")
    assert continuation_request(REQUEST, _said("   ").answer(), "prefill", "anthropic") == (
        REQUEST,
        "   ",
    )


def test_the_trim_is_dropped_from_a_first_text_that_opens_a_block_of_its_own() -> None:
    # the text before a held call that broke is closed: the continuation's text is a new
    # block, and its repeat of the whitespace the prefix lost is still the client's twice
    splice = Splice()
    opening = [START, *_text(0, "Let me check. "), BlockStop(0)]
    first = _broken(splice, [*opening, *_call(1, "f", '{"a"')[:2], CUT], trimmed=" ")
    assert prefix_parts(splice.answer(), trim_end=True) == ((TextPart("Let me check."),), " ")
    rest = _take(splice, [START, *_text(0, " Now."), BlockStop(0), _end()])
    assert _starts(rest) == [1]
    assert fold(first + rest).text == "Let me check. Now."


def test_a_continuation_that_breaks_counts_the_input_it_announced() -> None:
    # its request holds the prefix too: what its upstream counted beats the estimate
    splice = Splice()
    _broken(splice, [START, *_text(0, "One, "), CUT])
    announced = StreamStart("msg_2", "m", 0, Usage(input_tokens=77))
    _take(splice, [announced, *_text(0, "two, "), CUT])
    assert splice.broke(10)[1].input_tokens == 77
    assert splice.prior.input_tokens == 40 + 77


def test_an_answer_that_called_a_tool_before_the_break_stops_for_the_tool() -> None:
    # The whole call went out; the continuation only adds text and ends its own turn. The
    # client's answer holds the call, so it must stop for it, or its client never runs it.
    splice = Splice()
    got = _broken(splice, [START, *_text(0, "Checking."), BlockStop(0), *_call(1, "w", "{}"), CUT])
    got += _take(splice, [START, *_text(0, "Done."), BlockStop(0), _end()])
    assert isinstance(got[-1], StreamEnd) and got[-1].stop_reason == StopReason.TOOL_USE
    assert [p.arguments for p in fold(got).parts if isinstance(p, ToolCallPart)] == ["{}"]


def test_a_broken_attempts_usage_keeps_the_cache_counts_its_start_announced() -> None:
    # (Messages' message_start: the prompt cache's reads and writes are known at once, and
    # the broken attempt's row prices them as such, not as plain input)
    start = StreamStart("msg_1", "m", 0, Usage(input_tokens=900, cache_read_tokens=500,
                                               cache_write_tokens=300))  # fmt: skip
    splice = Splice()
    _take(splice, [start, *_text(0, "12345678"), CUT])
    _, usage = splice.broke(10)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        900,
        500,
        300,
    )
    assert (usage.output_tokens, usage.estimated) == (2, True)
