"""EventDecoder: upstream stream bytes -> neutral events, SSE and dialect decoder composed.

Byte splits anywhere give the same events; ``flush`` delivers the salvaged last SSE event
before what the dialect decoder owes; ``ended`` and ``started`` say how far a stream got;
an error ends a list.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from interlingua.core import (
    BlockStop,
    Request,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    fold,
)
from interlingua.dialects import EventDecoder, get_dialect
from interlingua.errors import OverloadedError
from interlingua.sse import SSEDecoder

FIXTURES = Path(__file__).parent.parent / "fixtures"
TRANSCRIPTS = [
    ("openai", "openai_parallel_tools.sse"),
    ("openai", "deepseek_reasoning.sse"),
    ("anthropic", "anthropic_thinking_tool_use.sse"),
]
REQUEST = Request("m", ())


def decoder(dialect: str) -> EventDecoder:
    return EventDecoder(get_dialect(dialect), REQUEST)


def run(dialect: str, chunks: list[bytes]) -> list[StreamEvent]:
    events = decoder(dialect)
    out: list[StreamEvent] = []
    for chunk in chunks:
        out.extend(events.decode(chunk))
    out.extend(events.flush())
    assert events.ended
    return out


def openai_chunk(text: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if text is None else {"content": text}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + orjson.dumps({"id": "c1", "model": "m", "choices": [choice]}) + b"\n\n"


def anthropic_event(kind: str, **data: object) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


ANTHROPIC_START = anthropic_event(
    "message_start",
    message={
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 1, "output_tokens": 0},
    },
)


# --- byte splits ----------------------------------------------------------------------


@pytest.mark.parametrize(("dialect", "name"), TRANSCRIPTS)
def test_every_two_way_split_gives_the_same_events(dialect: str, name: str) -> None:
    raw = (FIXTURES / name).read_bytes()
    whole = run(dialect, [raw])
    for cut in range(1, len(raw)):
        assert run(dialect, [raw[:cut], raw[cut:]]) == whole, cut


@pytest.mark.parametrize(("dialect", "name"), TRANSCRIPTS)
def test_byte_by_byte_gives_the_same_events_and_answer(dialect: str, name: str) -> None:
    raw = (FIXTURES / name).read_bytes()
    whole = run(dialect, [raw])
    singles = run(dialect, [raw[i : i + 1] for i in range(len(raw))])
    assert singles == whole
    assert fold(singles) == fold(whole)


def test_a_character_split_across_reads_is_whole() -> None:
    raw = openai_chunk("héllo ☃") + b"data: [DONE]\n\n"
    snowman = raw.index("☃".encode())
    out = run("openai", [raw[: snowman + 1], raw[snowman + 1 :]])
    assert "".join(e.text for e in out if isinstance(e, TextDelta)) == "héllo ☃"


def test_one_list_per_chunk_and_none_for_a_partial_event() -> None:
    events = decoder("openai")
    raw = openai_chunk("a") + openai_chunk("b")
    assert events.decode(raw[:10]) == []
    assert not events.started
    batch = events.decode(raw[10:])
    assert [e.text for e in batch if isinstance(e, TextDelta)] == ["a", "b"]
    assert isinstance(batch[0], StreamStart)
    assert events.started and not events.ended


# --- flush ----------------------------------------------------------------------------


def test_flush_salvages_an_unterminated_last_event_before_the_decoders_own_end() -> None:
    # No blank line after the last chunk and no [DONE]: the SSE decoder salvages the
    # chunk, then the OpenAI decoder hands over the StreamEnd it held back.
    events = decoder("openai")
    events.decode(openai_chunk("Hi"))
    last = openai_chunk("!", finish="length").rstrip(b"\n")
    assert events.decode(last) == []
    tail = events.flush()
    assert [type(e) for e in tail] == [TextDelta, BlockStop, StreamEnd]
    assert isinstance(tail[0], TextDelta) and tail[0].text == "!"
    assert isinstance(tail[-1], StreamEnd) and tail[-1].stop_reason is StopReason.MAX_TOKENS
    assert events.ended


def test_flush_of_a_finished_stream_is_empty() -> None:
    events = decoder("openai")
    events.decode(openai_chunk("Hi", finish="stop") + b"data: [DONE]\n\n")
    assert events.ended
    assert events.flush() == []


def test_a_cut_anthropic_stream_ends_in_an_error_not_an_end() -> None:
    events = decoder("anthropic")
    assert events.decode(ANTHROPIC_START)
    tail = events.flush()
    assert len(tail) == 1 and isinstance(tail[0], StreamError)
    assert events.started and not events.ended


def test_nothing_at_all_is_neither_started_nor_ended() -> None:
    events = decoder("anthropic")
    assert events.decode(b": ping\n\n") == []
    assert events.flush() == []
    assert not events.started and not events.ended


# --- ended, errors --------------------------------------------------------------------


def test_ended_is_set_when_the_end_passes() -> None:
    events = decoder("anthropic")
    events.decode(ANTHROPIC_START)
    assert not events.ended
    batch = events.decode(
        anthropic_event("message_delta", delta={"stop_reason": "end_turn"}, usage={})
        + anthropic_event("message_stop")
    )
    assert isinstance(batch[-1], StreamEnd)
    assert events.ended


def test_an_in_band_error_ends_the_list() -> None:
    events = decoder("anthropic")
    error = {"type": "overloaded_error", "message": "Overloaded"}
    batch = events.decode(
        ANTHROPIC_START + anthropic_event("error", error=error) + anthropic_event("message_stop")
    )
    assert isinstance(batch[-1], StreamError)
    assert isinstance(batch[-1].error, OverloadedError)
    assert not events.ended


AFTER_THE_END = {
    "openai": [openai_chunk("a"), b'data: {"error": {"message": "boom"}}\n\n', openai_chunk("b")],
    "anthropic": [
        anthropic_event("message_start", message={"id": "m1", "model": "m", "usage": {}}),
        anthropic_event("error", error={"type": "api_error", "message": "boom"}),
        anthropic_event("message_stop"),
    ],
}


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_nothing_follows_an_error_in_one_chunk_or_later(dialect: str) -> None:
    """The contract EventDecoder relies on (dialects.base.StreamDecoder): an error is the
    last event of its list and the decoder says nothing after it."""
    events = decoder(dialect)
    batch = events.decode(b"".join(AFTER_THE_END[dialect]))
    assert isinstance(batch[-1], StreamError)
    assert sum(isinstance(e, StreamError) for e in batch) == 1
    assert events.decode(AFTER_THE_END[dialect][-1]) == []
    assert events.flush() == [] and not events.ended


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_every_end_or_error_a_decoder_emits_is_last_in_its_list(dialect: str) -> None:
    for name in [t for d, t in TRANSCRIPTS if d == dialect]:
        stream = (FIXTURES / name).read_bytes()
        raw = get_dialect(dialect).stream_decoder(REQUEST)
        sse = SSEDecoder()
        lists = [raw.feed(event) for event in [*sse.decode(stream), *sse.flush()]]
        lists.append(raw.flush())
        for events in lists:
            ends = [i for i, e in enumerate(events) if isinstance(e, StreamEnd | StreamError)]
            assert ends in ([], [len(events) - 1])
