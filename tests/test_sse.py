"""Tests for interlingua.sse: spec conformance, incremental splitting, encoder round trips."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlingua.sse import (
    DONE,
    SSEDecoder,
    SSEEvent,
    comment,
    encode_event,
    encode_json_event,
)

MIXED = (
    b': keep-alive\r\nevent: message_stop\r\ndata: {"type":"message_stop"}\r\n\r\n'
    b"data: line1\ndata: line2\n\n"
)

# A stream exercising most of the grammar: every line-end style, comments, ids,
# retry, multi-byte text, a BOM, a no-colon field and an unknown field.
RICH = (
    "\ufeff: hello\r\n"
    "retry: 3000\n"
    "id: 1\r"
    "event: delta\r\n"
    "data: héllo 😀 世界\n"
    "data:  two spaces\r"
    "\r\n"
    "unknown: x\n"
    "data\n"
    "\n"
    "id\n"
    "data: \u2028 \x0c \x0b \x85 not breaks\r"
    "\r"
    "event: only-type\n"
    "\n"
    "data: tail\n\n"
).encode()


def decode_all(stream: bytes) -> list[SSEEvent]:
    dec = SSEDecoder()
    return dec.decode(stream) + dec.flush()


def decode_chunks(chunks: list[bytes], *, salvage: bool = True) -> list[SSEEvent]:
    dec = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(dec.decode(chunk))
    events.extend(dec.flush(salvage=salvage))
    return events


def byte_by_byte(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


def split_at(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(stream) + 1) for c in cuts})
    bounds = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def pairs(events: list[SSEEvent]) -> list[tuple[str, str]]:
    return [(e.event, e.data) for e in events]


# --- SSEEvent -----------------------------------------------------------------


def test_event_defaults_and_frozen() -> None:
    ev = SSEEvent()
    assert ev == SSEEvent("message", "", None, None)
    with pytest.raises(AttributeError):
        ev.data = "x"  # type: ignore[misc]
    assert not hasattr(ev, "__dict__")  # slots


# --- Basic parsing --------------------------------------------------------------


def test_mixed_line_ends_example() -> None:
    assert pairs(decode_all(MIXED)) == [
        ("message_stop", '{"type":"message_stop"}'),
        ("message", "line1\nline2"),
    ]


def test_rich_stream() -> None:
    events = decode_all(RICH)
    assert events == [
        SSEEvent("delta", "héllo 😀 世界\n two spaces", "1", 3000),
        SSEEvent("message", "", "1", None),
        SSEEvent("message", "\u2028 \x0c \x0b \x85 not breaks", "", None),
        SSEEvent("message", "tail", "", None),
    ]


def test_lone_cr_line_ends() -> None:
    assert pairs(decode_all(b"event: a\rdata: 1\rdata: 2\r\rdata: 3\r\r")) == [
        ("a", "1\n2"),
        ("message", "3"),
    ]


def test_cr_cr_lf_is_two_line_ends() -> None:
    # "\r\r\n" is a lone CR followed by a CRLF: two line ends -> blank line -> dispatch.
    assert pairs(decode_all(b"data: x\r\r\n")) == [("message", "x")]
    assert pairs(decode_chunks([b"data: x\r", b"\r", b"\n"], salvage=False)) == [("message", "x")]


def test_lf_cr_is_two_line_ends() -> None:
    assert pairs(decode_chunks([b"data: x\n\r"], salvage=False)) == [("message", "x")]


def test_colon_space_handling() -> None:
    assert [e.data for e in decode_all(b"data:x\n\ndata: x\n\ndata:  x\n\n")] == ["x", "x", " x"]


def test_tab_after_colon_is_kept() -> None:
    assert decode_all(b"data:\tx\n\n")[0].data == "\tx"
    assert decode_all(b"event:\tt\ndata: 1\n\n")[0].event == "\tt"


def test_only_first_colon_separates() -> None:
    events = decode_all(b'data: {"a": "b:c"}\n\n')
    assert json.loads(events[0].data) == {"a": "b:c"}
    assert decode_all(b"event: a:b\ndata: 1\n\n")[0].event == "a:b"


def test_field_without_colon() -> None:
    assert decode_all(b"data\n\n") == [SSEEvent("message", "")]
    assert decode_all(b"data\ndata\n\n") == [SSEEvent("message", "\n")]
    # "event" alone sets the type to "", i.e. the default.
    assert decode_all(b"event: x\nevent\ndata: 1\n\n")[0].event == "message"


def test_empty_data_lines() -> None:
    assert decode_all(b"data:\n\n")[0].data == ""
    assert decode_all(b"data: \ndata: \n\n")[0].data == "\n"
    assert decode_all(b"data: a\ndata:\ndata: b\n\n")[0].data == "a\n\nb"


def test_trailing_space_kept() -> None:
    assert decode_all(b"data: x  \n\n")[0].data == "x  "


def test_field_names_are_case_sensitive_and_exact() -> None:
    assert decode_all(b"Data: x\n DATA: y\ndata : z\n\n") == []


def test_comments_ignored() -> None:
    stream = b": ping\n:\n:data: nope\ndata: a\n: mid-event comment\ndata: b\n\n"
    assert decode_all(stream) == [SSEEvent("message", "a\nb")]


def test_comment_only_stream_emits_nothing() -> None:
    assert decode_all(b": keep-alive\n\n: keep-alive\n\n") == []


def test_unknown_fields_ignored() -> None:
    assert decode_all(b"foo: bar\nretryx: 5\ndata: 1\nbaz\n\n") == [SSEEvent("message", "1")]


def test_event_without_data_emits_nothing_and_resets_type() -> None:
    assert decode_all(b"event: ping\n\n") == []
    # The type buffer is reset at the blank line, so it does not leak.
    assert decode_all(b"event: ping\n\ndata: x\n\n") == [SSEEvent("message", "x")]


def test_event_type_reset_after_dispatch() -> None:
    events = decode_all(b"event: a\ndata: 1\n\ndata: 2\n\n")
    assert pairs(events) == [("a", "1"), ("message", "2")]


def test_event_field_last_wins() -> None:
    assert decode_all(b"event: a\nevent: b\ndata: 1\n\n")[0].event == "b"


def test_multiple_blank_lines() -> None:
    assert pairs(decode_all(b"\n\n\ndata: 1\n\n\n\ndata: 2\n\n")) == [
        ("message", "1"),
        ("message", "2"),
    ]


# --- id and retry ---------------------------------------------------------------


def test_id_persists_across_events() -> None:
    events = decode_all(b"id: 7\ndata: a\n\ndata: b\n\nid: 8\ndata: c\n\n")
    assert [e.id for e in events] == ["7", "7", "8"]


def test_id_none_until_set() -> None:
    assert decode_all(b"data: a\n\n")[0].id is None


def test_id_reset_to_empty() -> None:
    events = decode_all(b"id: 7\ndata: a\n\nid\ndata: b\n\nid:\ndata: c\n\n")
    assert [e.id for e in events] == ["7", "", ""]


def test_id_with_nul_ignored() -> None:
    dec = SSEDecoder()
    events = dec.decode(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n")
    assert [e.id for e in events] == ["1", "1"]
    assert dec.last_event_id == "1"


def test_id_in_block_without_data_still_updates_last_id() -> None:
    dec = SSEDecoder()
    assert dec.decode(b"id: 5\n\n") == []
    assert dec.last_event_id == "5"
    assert dec.decode(b"data: x\n\n")[0].id == "5"


def test_retry_digits_only() -> None:
    dec = SSEDecoder()
    events = dec.decode(
        b"retry: 1500\ndata: a\n\n"
        b"retry: -1\ndata: b\n\n"
        b"retry: 1.5\ndata: c\n\n"
        b"retry:  20\ndata: d\n\n"
        b"retry:\ndata: e\n\n"
        b"retry: 12a\ndata: f\n\n"
        b"retry: \xd9\xa3\ndata: g\n\n"  # ARABIC-INDIC DIGIT THREE: a digit, not ASCII
        b"retry:0042\ndata: h\n\n"
    )
    assert [e.retry for e in events] == [1500, None, None, None, None, None, None, 42]
    assert dec.retry == 42


def test_retry_persists_on_decoder_not_events() -> None:
    dec = SSEDecoder()
    events = dec.decode(b"retry: 100\n\ndata: a\n\n")
    assert events == [SSEEvent("message", "a", None, None)]
    assert dec.retry == 100


# --- BOM --------------------------------------------------------------------------


def test_bom_stripped_at_start() -> None:
    assert decode_all(b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent("message", "x")]


def test_bom_split_across_chunks() -> None:
    chunks = [b"\xef", b"\xbb", b"\xbf", b"data: x\n\n"]
    assert decode_chunks(chunks) == [SSEEvent("message", "x")]


def test_only_one_bom_stripped() -> None:
    # The second BOM is part of the field name "\ufeffdata", which is unknown.
    assert decode_all(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []


def test_bom_not_stripped_mid_stream() -> None:
    dec = SSEDecoder()
    assert dec.decode(b"data: a\n\n") == [SSEEvent("message", "a")]
    assert dec.decode(b"\xef\xbb\xbfdata: b\n\n") == []
    assert decode_all(b"data: \xef\xbb\xbfx\n\n")[0].data == "\ufeffx"


# --- Incremental decoding -----------------------------------------------------------


def test_cr_at_end_of_chunk_lf_at_start_of_next() -> None:
    dec = SSEDecoder()
    assert dec.decode(b"data: a\r") == []
    # The LF completes the CRLF; it must not count as a blank line.
    assert dec.decode(b"\ndata: b\r") == []
    assert dec.decode(b"\n") == []
    assert dec.decode(b"\r\n") == [SSEEvent("message", "a\nb")]
    assert dec.flush() == []


def test_cr_at_end_then_non_lf() -> None:
    dec = SSEDecoder()
    assert dec.decode(b"data: a\r") == []
    assert dec.decode(b"\r") == [SSEEvent("message", "a")]


def test_multibyte_split_inside_characters() -> None:
    text = "héllo 😀 世界"
    stream = f"event: t\ndata: {text}\n\n".encode()
    assert decode_chunks(byte_by_byte(stream)) == [SSEEvent("t", text)]
    emoji_at = stream.index("😀".encode())
    for offset in range(1, 4):
        cut = emoji_at + offset
        assert decode_chunks([stream[:cut], stream[cut:]]) == [SSEEvent("t", text)]


def test_invalid_utf8_replaced() -> None:
    assert decode_all(b"data: a\xffb\n\n")[0].data == "a\ufffdb"


def test_truncated_utf8_at_eof_replaced_on_flush() -> None:
    dec = SSEDecoder()
    assert dec.decode(b"data: x\xe4\xb8") == []
    assert dec.flush() == [SSEEvent("message", "x\ufffd")]


def test_long_line_split_over_many_chunks() -> None:
    payload = "x" * 10_000
    stream = f"data: {payload}\n\n".encode()
    chunks = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    assert decode_chunks(chunks) == [SSEEvent("message", payload)]


def test_empty_chunks_are_harmless() -> None:
    dec = SSEDecoder()
    assert dec.decode(b"") == []
    assert dec.decode(b"data: a\r") == []
    assert dec.decode(b"") == []
    assert dec.decode(b"\n\n") == [SSEEvent("message", "a")]


@pytest.mark.parametrize("stream", [MIXED, RICH])
def test_whole_vs_byte_by_byte(stream: bytes) -> None:
    assert decode_chunks(byte_by_byte(stream)) == decode_all(stream)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([MIXED, RICH]), st.lists(st.integers(min_value=0, max_value=10_000)))
def test_arbitrary_split_points(stream: bytes, cuts: list[int]) -> None:
    assert decode_chunks(split_at(stream, cuts)) == decode_all(stream)


_LINE_END = st.sampled_from([b"\n", b"\r", b"\r\n"])
_LINE = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12).map(
        lambda s: s.encode()
    ),
    st.sampled_from([b"data: x", b"data:y", b"event: e", b"id: 3", b"retry: 9", b": c", b""]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_LINE, _LINE_END), max_size=20),
    st.lists(st.integers(min_value=0, max_value=10_000)),
)
def test_random_streams_split_anywhere(lines: list[tuple[bytes, bytes]], cuts: list[int]) -> None:
    stream = b"".join(line + end for line, end in lines)
    whole = decode_all(stream)
    assert decode_chunks(split_at(stream, cuts)) == whole
    assert decode_chunks(byte_by_byte(stream)) == whole
    # Line-end style never matters: re-split with an independent regex oracle
    # and rejoin with LF only; the events must be the same.
    assert decode_all(b"\n".join(re.split(rb"\r\n|\r|\n", stream))) == whole


# --- End of stream -----------------------------------------------------------------


def test_flush_salvages_trailing_data_without_blank_line() -> None:
    dec = SSEDecoder()
    assert dec.decode(b'data: {"a":1}\n\ndata: {"b":2}') == [SSEEvent("message", '{"a":1}')]
    assert dec.flush() == [SSEEvent("message", '{"b":2}')]


def test_flush_salvages_terminated_line_without_blank_line() -> None:
    assert decode_chunks([b"event: done\nid: 9\ndata: {}\n"]) == [SSEEvent("done", "{}", "9")]
    assert decode_chunks([b"data: {}\r"]) == [SSEEvent("message", "{}")]


def test_flush_spec_mode_discards_pending_event() -> None:
    assert decode_chunks([b"data: a\n\ndata: b\n"], salvage=False) == [SSEEvent("message", "a")]
    assert decode_chunks([b"data: a\n\ndata: b"], salvage=False) == [SSEEvent("message", "a")]


def test_flush_without_pending_data_emits_nothing() -> None:
    assert decode_chunks([b"data: a\n\n"]) == [SSEEvent("message", "a")]
    assert decode_chunks([b"event: x\n"]) == []
    assert decode_chunks([b": comment"]) == []
    assert decode_chunks([]) == []


def test_decoder_reusable_after_flush_keeps_id_and_retry() -> None:
    dec = SSEDecoder()
    dec.decode(b"id: 4\nretry: 10\nevent: half\ndata: partial")
    dec.flush(salvage=False)
    assert dec.last_event_id == "4"
    assert dec.retry == 10
    # New stream: a BOM is stripped again and no state leaks except id.
    assert dec.decode(b"\xef\xbb\xbfdata: fresh\n\n") == [SSEEvent("message", "fresh", "4")]


# --- Encoder -------------------------------------------------------------------------


def test_encode_event_basic() -> None:
    assert encode_event("hi") == b"data: hi\n\n"
    assert encode_event(b"hi", event="x") == b"event: x\ndata: hi\n\n"
    assert encode_event("hi", event="x", id="1") == b"event: x\nid: 1\ndata: hi\n\n"
    assert encode_event("", retry=5) == b"retry: 5\ndata: \n\n"


def test_encode_event_splits_lines() -> None:
    assert encode_event("a\nb\r\nc\rd") == b"data: a\ndata: b\ndata: c\ndata: d\n\n"
    assert encode_event("a\n") == b"data: a\ndata: \n\n"
    # Only CR/LF are line ends; U+2028 and FF stay inside the data line.
    assert encode_event("a\u2028b\x0cc") == "data: a\u2028b\x0cc\n\n".encode()


def test_encode_event_rejects_injection() -> None:
    with pytest.raises(ValueError):
        encode_event("x", event="a\ndata: evil")
    with pytest.raises(ValueError):
        encode_event("x", id="1\r")
    with pytest.raises(ValueError):
        encode_event("x", id="1\x00")
    with pytest.raises(ValueError):
        encode_event("x", retry=-1)
    with pytest.raises(ValueError):
        encode_json_event(b"{}", event="a\nb")


def test_encode_json_event() -> None:
    payload = json.dumps({"type": "message_stop"}, separators=(",", ":")).encode()
    assert encode_json_event(payload) == b'data: {"type":"message_stop"}\n\n'
    assert encode_json_event(payload, "message_stop") == (
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    assert decode_all(encode_json_event(payload, "message_stop")) == [
        SSEEvent("message_stop", payload.decode())
    ]


def test_done_and_comment() -> None:
    assert DONE == b"data: [DONE]\n\n"
    assert decode_all(DONE) == [SSEEvent("message", "[DONE]")]
    assert comment("keep-alive") == b": keep-alive\n\n"
    assert comment("a\nb") == b": a\n: b\n\n"
    assert decode_all(comment("a\r\nb") + comment()) == []


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n")),
    st.one_of(st.none(), st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"))),
    st.one_of(
        st.none(), st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n\x00"))
    ),
)
def test_encode_round_trip_single_line(data: str, event: str | None, id: str | None) -> None:
    events = decode_all(encode_event(data, event=event, id=id))
    assert events == [SSEEvent(event or "message", data, id)]


@settings(max_examples=300, deadline=None)
@given(st.text(), st.lists(st.integers(min_value=0, max_value=10_000)))
def test_encode_round_trip_with_newlines(data: str, cuts: list[int]) -> None:
    wire = encode_event(data, event="e")
    # One data line per payload line, line ends normalised to LF.
    normalised = data.replace("\r\n", "\n").replace("\r", "\n")
    assert wire.count(b"\ndata: ") + wire.startswith(b"data: ") == normalised.count("\n") + 1
    assert decode_chunks(split_at(wire, cuts)) == [SSEEvent("e", normalised)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(),
            lambda children: st.lists(children) | st.dictionaries(st.text(), children),
            max_leaves=8,
        ),
        max_size=5,
    ),
    st.lists(st.integers(min_value=0, max_value=10_000)),
)
def test_json_events_round_trip(values: list[object], cuts: list[int]) -> None:
    wire = (
        b"".join(
            encode_json_event(json.dumps(v, separators=(",", ":")).encode(), "delta")
            for v in values
        )
        + DONE
    )
    events = decode_chunks(split_at(wire, cuts))
    assert [json.loads(e.data) for e in events[:-1]] == values
    assert all(e.event == "delta" for e in events[:-1])
    assert events[-1] == SSEEvent("message", "[DONE]")
