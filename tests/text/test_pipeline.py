"""TextProcessingStream / process_response: text processors over neutral events."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlingua.core import (
    ArgumentsDelta,
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
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallPart,
    Usage,
    fold,
    unfold,
)
from interlingua.errors import UpstreamError
from interlingua.text import TextProcessing, TextProcessingStream, new_call_id, process_response
from tests.text import chunks

NAMES = {"f", "get_weather"}
USAGE = Usage(input_tokens=10, output_tokens=20)


def counter_ids() -> Callable[[], str]:
    numbers = itertools.count()
    return lambda: f"call_{next(numbers)}"


def text_stream(
    pieces: Iterable[str], reason: StopReason = StopReason.END_TURN
) -> list[StreamEvent]:
    events: list[StreamEvent] = [StreamStart("msg_1", "m", 0), BlockStart(0, TextPart(""))]
    events.extend(TextDelta(0, p) for p in pieces)
    events += [BlockStop(0), StreamEnd(reason, None, USAGE)]
    return events


def run(
    events: Iterable[StreamEvent],
    id_factory: Callable[[], str] | None = None,
    **options: Any,
) -> list[StreamEvent]:
    """``events`` through a stream with the TextProcessing ``options``."""
    return feed_all(events, TextProcessing(**options), id_factory)


def feed_all(
    events: Iterable[StreamEvent],
    processing: TextProcessing,
    id_factory: Callable[[], str] | None = None,
) -> list[StreamEvent]:
    stream = TextProcessingStream(processing, id_factory=id_factory or counter_ids())
    out: list[StreamEvent] = []
    for event in events:
        out.extend(stream.feed(event))
    out.extend(stream.flush())
    return out


def check_well_formed(events: list[StreamEvent]) -> None:
    """Indices open in increasing order, each block opened and closed exactly once."""
    opened: list[int] = []
    open_now: set[int] = set()
    for event in events:
        if isinstance(event, BlockStart):
            assert event.index not in opened
            assert not opened or event.index > opened[-1]
            opened.append(event.index)
            open_now.add(event.index)
        elif isinstance(event, BlockStop):
            assert event.index in open_now
            open_now.remove(event.index)
        elif isinstance(event, TextDelta | ReasoningDelta | ArgumentsDelta | SignatureDelta):
            assert event.index in open_now
        elif isinstance(event, StreamEnd):
            assert event is events[-1]
    assert not open_now
    assert opened == list(range(len(opened)))


def response(text: str, reason: StopReason = StopReason.END_TURN) -> Response:
    return Response("msg_1", "m", (TextPart(text),), reason, usage=USAGE)


def test_think_and_tool_call_become_blocks() -> None:
    text = '<think>Need weather.</think>\n\nSure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    out = run(text_stream([text]), think_tags=True, text_tool_calls=True, tool_names=NAMES)
    check_well_formed(out)
    assert out[1:] == [
        BlockStart(0, ReasoningPart("")),
        ReasoningDelta(0, "Need weather."),
        BlockStop(0),
        BlockStart(1, TextPart("")),
        TextDelta(1, "Sure."),
        BlockStop(1),
        BlockStart(2, ToolCallPart("call_0", "get_weather", "")),
        ArgumentsDelta(2, '{"city":"Paris"}'),
        BlockStop(2),
        StreamEnd(StopReason.TOOL_USE, None, USAGE),
    ]


def test_parallel_calls_get_their_own_blocks() -> None:
    text = '<tool_call>{"name": "f"}</tool_call>\n<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    result = fold(run(text_stream(list(text)), text_tool_calls=True))
    assert result.parts == (
        ToolCallPart("call_0", "f", "{}"),
        ToolCallPart("call_1", "f", '{"a":1}'),
    )
    assert result.stop_reason is StopReason.TOOL_USE


def test_max_tokens_is_kept_even_with_tool_calls() -> None:
    text = '<tool_call>{"name": "f"}</tool_call> and then I ran out of'
    result = fold(run(text_stream([text], StopReason.MAX_TOKENS), text_tool_calls=True))
    assert result.stop_reason is StopReason.MAX_TOKENS
    assert [type(p) for p in result.parts] == [ToolCallPart, TextPart]


def test_stop_sequence_trims_and_reports() -> None:
    out = run(text_stream(["Answer: 4\n", "User: next"]), stops=["User:", "\n\n"])
    check_well_formed(out)
    result = fold(out)
    assert result.text == "Answer: 4\n"
    assert result.stop_reason is StopReason.STOP_SEQUENCE
    assert result.stop_sequence == "User:"


def test_stop_sequence_drops_later_blocks() -> None:
    events: list[StreamEvent] = [
        StreamStart("msg_1", "m"),
        BlockStart(0, TextPart("")),
        TextDelta(0, "ok STOP ignored"),
        BlockStop(0),
        BlockStart(1, ToolCallPart("native", "f", "")),
        ArgumentsDelta(1, "{}"),
        BlockStop(1),
        StreamEnd(StopReason.TOOL_USE),
    ]
    out = run(events, stops=["STOP"])
    check_well_formed(out)
    result = fold(out)
    assert result.parts == (TextPart("ok "),)
    assert (result.stop_reason, result.stop_sequence) == (StopReason.STOP_SEQUENCE, "STOP")


def test_stop_sequence_is_matched_on_raw_text_before_think_split() -> None:
    out = run(text_stream(["<think>a</thi", "nk>b<|end|>c"]), think_tags=True, stops=["<|end|>"])
    result = fold(out)
    assert (result.reasoning, result.text, result.stop_sequence) == ("a", "b", "<|end|>")


def test_stop_and_tool_call_gives_tool_use() -> None:
    out = run(
        text_stream(['<tool_call>{"name": "f"}</tool_call>\nObservation: x']),
        text_tool_calls=True,
        stops=["Observation:"],
    )
    result = fold(out)
    assert result.parts == (ToolCallPart("call_0", "f", "{}"),)
    assert (result.stop_reason, result.stop_sequence) == (StopReason.TOOL_USE, None)


def test_deferred_stop_decided_at_block_end() -> None:
    result = fold(run(text_stream(["xab"]), stops=["ab", "abc"]))
    assert (result.text, result.stop_sequence) == ("x", "ab")


def test_native_blocks_pass_through_with_new_indices() -> None:
    events: list[StreamEvent] = [
        StreamStart("msg_1", "m"),
        BlockStart(0, ReasoningPart("")),
        ReasoningDelta(0, "native"),
        SignatureDelta(0, "sig"),
        BlockStop(0),
        BlockStart(1, TextPart("")),
        TextDelta(1, "<think>inner</think>answer"),
        BlockStop(1),
        BlockStart(2, ToolCallPart("call_n", "f", "")),
        ArgumentsDelta(2, '{"a":'),
        ArgumentsDelta(2, "1}"),
        BlockStop(2),
        StreamEnd(StopReason.TOOL_USE),
    ]
    out = run(events, think_tags=True)
    check_well_formed(out)
    assert fold(out).parts == (
        ReasoningPart("native", signature="sig"),
        ReasoningPart("inner"),
        TextPart("answer"),
        ToolCallPart("call_n", "f", '{"a":1}'),
    )
    assert fold(out).stop_reason is StopReason.TOOL_USE


def test_interleaved_upstream_blocks() -> None:
    events: list[StreamEvent] = [
        StreamStart("msg_1", "m"),
        BlockStart(0, TextPart("")),
        TextDelta(0, "a<thi"),
        BlockStart(1, ToolCallPart("c1", "f", "")),
        TextDelta(0, "nk>r</think>b"),
        ArgumentsDelta(1, "{}"),
        BlockStop(1),
        BlockStop(0),
        StreamEnd(StopReason.TOOL_USE),
    ]
    out = run(events, think_tags=True)
    check_well_formed(out)
    kinds = [(type(p).__name__, getattr(p, "text", "")) for p in fold(out).parts]
    assert kinds == [
        ("TextPart", "a"),
        ("ToolCallPart", ""),
        ("ReasoningPart", "r"),
        ("TextPart", "b"),
    ]


def test_inactive_stream_is_identity() -> None:
    events = text_stream(["<think>x</think>"])
    stream = TextProcessingStream()
    assert not stream.active
    assert [e for ev in events for e in stream.feed(ev)] == events
    r = response("<think>x</think>")
    assert process_response(r) is r


def test_text_processing_value() -> None:
    value = TextProcessing(text_tool_calls=True, tool_names=["f", "f"], stops=["", "X"])
    assert value.tool_names == frozenset({"f"}) and value.stops == ("X",)
    assert value == TextProcessing(text_tool_calls=True, tool_names={"f"}, stops=("X",))
    assert hash(value) == hash(TextProcessing(text_tool_calls=True, tool_names={"f"}, stops=("X",)))
    assert not TextProcessing().active and not TextProcessing(stops=[""]).active
    assert TextProcessing(stops=["X"]).active and TextProcessing(think_tags=True).active
    with pytest.raises(ValueError, match="unknown tool-call formats"):
        TextProcessing(formats={"tags", "yaml"})
    with pytest.raises(AttributeError):
        value.think_tags = True  # type: ignore[misc]


def test_stream_error_releases_held_text_first() -> None:
    error = StreamError(UpstreamError("boom"))
    events: list[StreamEvent] = [
        StreamStart("msg_1", "m"),
        BlockStart(0, TextPart("")),
        TextDelta(0, "hi <thi"),
        error,
    ]
    out = run(events, think_tags=True)
    check_well_formed(out)
    assert out[-1] is error
    assert [e for e in out if isinstance(e, TextDelta)] == [
        TextDelta(0, "hi "),
        TextDelta(0, "<thi"),
    ]
    assert run([*events, TextDelta(0, "more")], think_tags=True) == out  # nothing after the end


def test_flush_closes_open_blocks_without_end() -> None:
    events: list[StreamEvent] = [
        StreamStart("msg_1", "m"),
        BlockStart(0, TextPart("")),
        TextDelta(0, "<think>unclosed"),
    ]
    out = run(events, think_tags=True)
    check_well_formed(out)
    assert out[-1] == BlockStop(0)
    assert fold(out).reasoning == "unclosed"


def test_default_ids() -> None:
    out = run(
        text_stream(['<tool_call>{"name": "f"}</tool_call>']),
        text_tool_calls=True,
        id_factory=new_call_id,
    )
    call = fold(out).tool_calls[0]
    assert call.id.startswith("call_") and len(call.id) == 29
    assert new_call_id() != new_call_id()


def test_process_response_keeps_metadata() -> None:
    r = Response(
        "msg_9",
        "model-x",
        (TextPart("<think>r</think>\n\nt"),),
        StopReason.END_TURN,
        usage=USAGE,
        created=123,
        meta={"k": 1},
    )
    out = process_response(r, TextProcessing(think_tags=True))
    assert out == Response(
        "msg_9", "model-x", (ReasoningPart("r"), TextPart("t")), usage=USAGE, created=123
    )
    assert out.meta == {"k": 1}


def test_bare_json_answer_in_a_response() -> None:
    r = response('```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```')
    tools = TextProcessing(text_tool_calls=True, tool_names=NAMES)
    out = process_response(r, tools, id_factory=counter_ids())
    assert out.parts == (ToolCallPart("call_0", "get_weather", '{"city":"Oslo"}'),)
    assert out.stop_reason is StopReason.TOOL_USE
    plain = process_response(response('{"answer": 1}'), tools)
    assert plain.parts == (TextPart('{"answer": 1}'),)
    assert plain.stop_reason is StopReason.END_TURN


def test_xml_call_typed_by_the_tool_schemas() -> None:
    text = "Checking.\n● <function=f><parameter=n>\n3\n</parameter><parameter=s>\n3\n</parameter>"
    schemas = {"f": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    tools = TextProcessing(text_tool_calls=True, tool_names=NAMES, tool_schemas=schemas)
    expected = (TextPart("Checking.\n"), ToolCallPart("call_0", "f", '{"n":3,"s":"3"}'))
    out = process_response(response(text), tools, id_factory=counter_ids())
    assert out.parts == expected and out.stop_reason is StopReason.TOOL_USE
    for size in (1, 2, 5):
        streamed = fold(feed_all(unfold(response(text), chunk_size=size), tools))
        assert streamed.parts == expected
    assert tools == TextProcessing(text_tool_calls=True, tool_names=NAMES, tool_schemas=schemas)
    assert tools != TextProcessing(text_tool_calls=True, tool_names=NAMES)
    hash(tools)  # still hashable: the schemas are compared, not hashed


PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        '{"name": "f", "arguments": {"x": 1}}',
        '[{"name": "get_weather"}]',
        "<th",
        "<tool",
        "hello ",
        "\n\n",
        "{",
        "STOP",
        "ST",
        "```json\n",
        "```",
        "● <function=f>",
        "<function=get_weather>",
        "<parameter=x>",
        "</parameter>",
        "</function>",
    ]
)


@given(
    st.lists(PIECES, max_size=20).map("".join),
    st.lists(st.integers(min_value=0), max_size=10),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([StopReason.END_TURN, StopReason.MAX_TOKENS]),
)
@settings(max_examples=300, deadline=None)
def test_stream_fold_equals_process_response(
    text: str,
    cuts: list[int],
    think: bool,
    tools: bool,
    use_stops: bool,
    reason: StopReason,
) -> None:
    options = TextProcessing(
        think_tags=think,
        text_tool_calls=tools,
        tool_names=NAMES,
        stops=["STOP"] if use_stops else [],
    )
    streamed = feed_all(text_stream(chunks(text, cuts), reason), options)
    check_well_formed(streamed)
    expected = process_response(response(text, reason), options, id_factory=counter_ids())
    assert fold(streamed) == expected
    # And the same via unfold with a small chunk size.
    again = feed_all(unfold(response(text, reason), chunk_size=3), options)
    assert fold(again) == expected
