"""The check on passthrough streams (dialects/relay.py): whole events, JSON, a proper end."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from interlingua.dialects.relay import (
    MAX_EVENT_BYTES,
    AnthropicRelayCheck,
    OpenAIChatRelayCheck,
    RelayCheck,
    ResponsesRelayCheck,
)

OPENAI = (
    b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}\n\n'
    b": keep-alive\n\n"
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
ANTHROPIC = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"h\xc3\xa9"}}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
RESPONSES = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
    b'"response":{"id":"resp_1","status":"in_progress","output":[]}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,'
    b'"delta":"h\xc3\xa9"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":2,'
    b'"response":{"id":"resp_1","status":"completed","output":[]}}\n\n'
)
CASES = [
    (OpenAIChatRelayCheck, OPENAI),
    (AnthropicRelayCheck, ANTHROPIC),
    (ResponsesRelayCheck, RESPONSES),
]
FIRST = {
    OpenAIChatRelayCheck: OPENAI,
    AnthropicRelayCheck: ANTHROPIC,
    ResponsesRelayCheck: RESPONSES,
}


def relay(check: RelayCheck, *chunks: bytes) -> bytes:
    return b"".join(check.feed(chunk) for chunk in chunks)


@pytest.mark.parametrize(("cls", "stream"), CASES)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(ANTHROPIC)), max_size=8))
def test_a_good_stream_is_relayed_unchanged_however_it_is_split(
    cls: type[RelayCheck], stream: bytes, cuts: list[int]
) -> None:
    points = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    check = cls()
    assert relay(check, *pieces) == stream
    assert check.finish() is None and check.ended


def test_a_partial_event_is_held_until_its_blank_line() -> None:
    check = OpenAIChatRelayCheck()
    first = b'data: {"choices":[]}\n\ndata: {"cho'
    assert check.feed(first) == b'data: {"choices":[]}\n\n'
    assert check.feed(b'ices":[]}\n') == b""
    assert check.feed(b"\n") == b'data: {"choices":[]}\n\n'


def test_a_stream_cut_inside_an_event_owes_an_error_and_relays_no_half_event() -> None:
    # The gateway's error event then starts on a line of its own, where the SDK sees it.
    check = OpenAIChatRelayCheck()
    out = relay(check, OPENAI[:70])
    assert out.endswith(b"\n\n") and out.count(b"data:") == 1
    assert check.flush() == b""  # the half event is not JSON: never relayed
    error = check.finish()
    assert error is not None and error.status == 502


@pytest.mark.parametrize(("cls", "stream"), CASES)
def test_a_last_event_missing_only_its_blank_line_is_completed(
    cls: type[RelayCheck], stream: bytes
) -> None:
    # As the SSE decoder's flush salvages it (the translated path accepts it too).
    check = cls()
    out = relay(check, stream[:-1])
    assert out + check.flush() == stream
    assert check.finish() is None


@pytest.mark.parametrize(("cls", "stream"), CASES)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(ANTHROPIC)), max_size=6))
def test_cr_only_framing_is_relayed_as_the_same_events(
    cls: type[RelayCheck], stream: bytes, cuts: list[int]
) -> None:
    cr = stream.replace(b"\n", b"\r")
    points = sorted({min(c, len(cr)) for c in cuts})
    pieces = [cr[a:b] for a, b in zip([0, *points], [*points, len(cr)], strict=True)]
    check = cls()
    assert relay(check, *pieces) + check.flush() == stream
    assert check.finish() is None


def test_events_with_fields_but_no_data_are_not_relayed() -> None:
    # WHATWG readers ignore them; the openai SDK parses their empty data as JSON and fails.
    noise = b"event: ping\n\nid: 7\n\ndata:  \n\n: a comment stays\n\n"
    check = OpenAIChatRelayCheck()
    first = OPENAI[: OPENAI.index(b"\n\n") + 2]
    assert (
        relay(check, first, noise, OPENAI[len(first) :])
        == first + (b": a comment stays\n\n") + OPENAI[len(first) :]
    )


def test_nothing_is_relayed_before_the_first_event_with_data() -> None:
    # A stream that opens with comments and then fails still gets a real status.
    check = OpenAIChatRelayCheck()
    assert relay(check, b": processing\n\n", b": still\n\n") == b""
    first = OPENAI[: OPENAI.index(b"\n\n") + 2]
    assert relay(check, first) == b": processing\n\n: still\n\n" + first


@pytest.mark.parametrize(
    ("cls", "error"),
    [
        (OpenAIChatRelayCheck, b'data: {"error":{"message":"busy","code":"overloaded"}}\n\n'),
        (AnthropicRelayCheck, b'event: error\ndata: {"type":"error","error":{"type":"x"}}\n\n'),
        (ResponsesRelayCheck, b'event: error\ndata: {"type":"error","code":"server_error"}\n\n'),
        (
            ResponsesRelayCheck,
            b'event: response.failed\ndata: {"type":"response.failed","response":'
            b'{"status":"failed","error":{"code":"server_error","message":"boom"}}}\n\n',
        ),
    ],
)
def test_an_error_as_the_first_event_is_noted(cls: type[RelayCheck], error: bytes) -> None:
    check = cls()
    relay(check, b": hi\n\n", error)
    assert check.first_error is not None and "error" in check.first_error[1]
    started = cls()
    relay(started, FIRST[cls][: FIRST[cls].index(b"\n\n") + 2], error)
    assert started.ended and started.first_error is None


def test_with_several_choices_each_must_finish_before_the_marker_may_be_skipped() -> None:
    check = OpenAIChatRelayCheck()
    relay(
        check,
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}},'
        b'{"index":1,"delta":{"content":"b"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    )
    assert check.finish() is not None  # choice 1 was cut


@pytest.mark.parametrize(
    ("cls", "body", "wrong"),
    [
        (OpenAIChatRelayCheck, {"choices": []}, False),
        (OpenAIChatRelayCheck, {"error": {"message": "provider error"}}, True),
        (OpenAIChatRelayCheck, {"hello": "world"}, True),
        (AnthropicRelayCheck, {"type": "message", "content": []}, False),
        (AnthropicRelayCheck, {"type": "error", "error": {"type": "api_error"}}, True),
        (AnthropicRelayCheck, {"hello": "world"}, True),
        (ResponsesRelayCheck, {"object": "response", "output": [], "error": None}, False),
        (ResponsesRelayCheck, {"error": {"message": "provider error"}}, True),
        (ResponsesRelayCheck, {"hello": "world"}, True),
    ],
)
def test_a_body_of_the_wrong_shape_is_told(
    cls: type[RelayCheck], body: dict[str, object], wrong: bool
) -> None:
    assert (cls.check_body(body) is not None) is wrong
    # the fast check never passes what the full one refuses
    assert cls.body_looks_right(orjson.dumps(body)) is not wrong


def test_a_big_event_split_into_many_reads_is_relayed_whole() -> None:
    event = b'data: {"choices":[{"delta":{"content":"' + b"x" * (2 << 20) + b'"}}]}\n\n'
    check = OpenAIChatRelayCheck()
    pieces = [event[i : i + 4096] for i in range(0, len(event), 4096)]
    assert relay(check, *pieces) == event


@pytest.mark.parametrize(("cls", "stream"), CASES)
def test_a_stream_that_stops_before_saying_why_owes_an_error(
    cls: type[RelayCheck], stream: bytes
) -> None:
    second = stream.index(b"\n\n", stream.index(b"\n\n") + 2) + 2
    check = cls()
    assert relay(check, stream[:second]) == stream[:second]
    error = check.finish()
    assert error is not None and "before it ended" in error.message


@pytest.mark.parametrize(
    ("cls", "stream", "marker"),
    [
        (OpenAIChatRelayCheck, OPENAI, b"data: [DONE]"),
        (AnthropicRelayCheck, ANTHROPIC, b"event: message_stop"),
    ],
)
def test_a_stream_that_said_why_may_skip_its_final_marker(
    cls: type[RelayCheck], stream: bytes, marker: bytes
) -> None:
    # The same leniency as the translating decoders' flush().
    check = cls()
    head = stream[: stream.index(marker)]
    assert relay(check, head) == head
    assert check.finish() is None


@pytest.mark.parametrize("bad", [b"data: {not json\n\n", b"data: [1, 2]\n\n", b"data: <html>\n\n"])
@pytest.mark.parametrize(("cls", "stream"), CASES)
def test_an_event_that_is_not_a_json_object_stops_the_relay_before_it(
    cls: type[RelayCheck], stream: bytes, bad: bytes
) -> None:
    cut = stream.index(b"\n\n") + 2
    check = cls()
    out = relay(check, stream[:cut] + bad + stream[cut:])
    assert out == stream[:cut]
    assert check.feed(stream) == b""
    error = check.finish()
    assert error is not None and error.status == 502 and "not a JSON object" in error.message


def test_an_html_page_is_never_relayed() -> None:
    check = OpenAIChatRelayCheck()
    assert relay(check, b"<html>\n<body>\n\nBad gateway\n\n</body></html>") == b""
    assert check.flush() == b""
    assert check.finish() is not None


@pytest.mark.parametrize(
    "payload",
    [b'data: {"error":{"message":"overloaded"}}\n\n'],
)
def test_an_in_band_openai_error_ends_the_stream_and_is_relayed(payload: bytes) -> None:
    check = OpenAIChatRelayCheck()
    assert relay(check, payload) == payload
    assert check.ended and check.finish() is None


def test_an_in_band_anthropic_error_ends_the_stream_and_is_relayed() -> None:
    error = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'
    start = ANTHROPIC[: ANTHROPIC.index(b"\n\n") + 2]
    check = AnthropicRelayCheck()
    assert relay(check, start[:30], start[30:] + error[:20], error[20:]) == start + error
    assert check.ended and check.finish() is None


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(OPENAI)), max_size=6))
def test_crlf_framing_is_relayed_as_the_same_events(cuts: list[int]) -> None:
    stream = OPENAI.replace(b"\n", b"\r\n")
    points = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    check = OpenAIChatRelayCheck()
    assert relay(check, *pieces) == OPENAI
    assert check.finish() is None


def test_bytes_after_the_end_are_passed_on_unchecked() -> None:
    check = OpenAIChatRelayCheck()
    assert relay(check, OPENAI, b"whatever") == OPENAI + b"whatever"
    assert check.finish() is None


def test_an_event_that_never_ends_is_not_buffered_without_bound() -> None:
    check = OpenAIChatRelayCheck()
    piece = b"data: " + b"x" * (MAX_EVENT_BYTES // 4)
    outs = [check.feed(piece) for _ in range(5)]
    assert outs == [b""] * 5
    error = check.finish()
    assert error is not None and "larger than" in error.message
