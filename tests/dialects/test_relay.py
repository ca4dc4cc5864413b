"""The check on passthrough streams (dialects/relay.py): whole events, JSON, a proper end."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interlingua.dialects.relay import (
    MAX_EVENT_BYTES,
    AnthropicRelayCheck,
    OpenAIChatRelayCheck,
    RelayCheck,
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
CASES = [(OpenAIChatRelayCheck, OPENAI), (AnthropicRelayCheck, ANTHROPIC)]


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
    error = check.finish()
    assert error is not None and error.status == 502 and "middle of an event" in error.message


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
    assert relay(check, b"<html>\n<body>\n\nBad gateway\n\n</body></html>") == (
        b"<html>\n<body>\n\nBad gateway\n\n"  # no data lines: nothing any reader acts on
    )
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
