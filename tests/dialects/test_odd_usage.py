"""Usage written oddly is read, not taken as 0: counts as numeric strings, reasoning
tokens at the top level, Anthropic's cache fields inside an OpenAI Chat usage (what
some proxies send) -- by every reader alike: the client's normalize_usage, each
dialect's parser (bodies and streams) and the gateway's relayed-bytes counters."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from interlingua.client import normalize_usage
from interlingua.core import Request, StreamEnd, Usage
from interlingua.dialects import EventDecoder, get_dialect
from interlingua.dialects.anthropic.response import usage_from_wire
from interlingua.dialects.loose_usage import loose_count
from interlingua.dialects.openai_chat.response import parse_usage as chat_usage
from interlingua.dialects.openai_responses.response import parse_usage as responses_usage
from interlingua.dialects.relay_usage import StreamUsage, body_counts, usage_counts

#: an OpenAI Chat usage of strings, with its neutral reading
STRINGS = {"prompt_tokens": "12", "completion_tokens": "3", "total_tokens": "15"}
STRINGS_USAGE = Usage(12, 3)
#: reasoning tokens at the top level, not in completion_tokens_details
TOP_REASONING = {"prompt_tokens": 20, "completion_tokens": 9, "reasoning_tokens": 4}
TOP_REASONING_USAGE = Usage(20, 9, reasoning_tokens=4)
#: a proxy's OpenAI usage carrying Anthropic's cache fields: prompt_tokens stays the whole
#: input (the Chat meaning, which LiteLLM keeps), the fields say what of it was cache
CACHE_FIELDS = {
    "prompt_tokens": 1100,
    "completion_tokens": 30,
    "cache_read_input_tokens": 1000,
    "cache_creation_input_tokens": 50,
}
CACHE_FIELDS_USAGE = Usage(1100, 30, cache_read_tokens=1000, cache_write_tokens=50)

CHAT_CASES = [
    (STRINGS, STRINGS_USAGE),
    (TOP_REASONING, TOP_REASONING_USAGE),
    (CACHE_FIELDS, CACHE_FIELDS_USAGE),
]


def test_loose_counts() -> None:
    assert [loose_count(v) for v in (7, "12", " 12 ", "12.0", 12.9, "1e3")] == [
        7,
        12,
        12,
        12,
        12,
        1000,
    ]
    assert [loose_count(v) for v in (None, True, -3, "-3", "abc", "", "nan", "inf", [])] == [0] * 9


@pytest.mark.parametrize(("usage", "want"), CHAT_CASES)
def test_the_client_reads_them(usage: dict[str, Any], want: Usage) -> None:
    assert normalize_usage(usage) == want
    assert normalize_usage({"id": "x", "usage": usage}) == want


@pytest.mark.parametrize(("usage", "want"), CHAT_CASES)
def test_the_chat_dialect_reads_them(usage: dict[str, Any], want: Usage) -> None:
    assert chat_usage(usage) == want


@pytest.mark.parametrize(("usage", "want"), CHAT_CASES)
def test_a_chat_stream_reads_them(usage: dict[str, Any], want: Usage) -> None:
    chunks = [
        {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]},
        {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "c", "model": "m", "choices": [], "usage": usage},
    ]
    data = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    events = EventDecoder(get_dialect("openai"), Request(model="m", messages=())).decode(data)
    end = events[-1]
    assert isinstance(end, StreamEnd) and end.usage == want


def test_the_messages_dialect_reads_strings_and_top_level_reasoning() -> None:
    usage = {"input_tokens": "10", "output_tokens": "2", "cache_read_input_tokens": "90"}
    assert usage_from_wire(usage) == Usage(100, 2, cache_read_tokens=90)
    assert usage_from_wire({"input_tokens": 5, "output_tokens": 8, "reasoning_tokens": 6}) == Usage(
        5, 8, reasoning_tokens=6
    )


def test_the_responses_dialect_reads_strings_and_top_level_reasoning() -> None:
    usage = {
        "input_tokens": "30",
        "output_tokens": 7.0,
        "input_tokens_details": {"cached_tokens": "8"},
    }
    assert responses_usage(usage) == Usage(30, 7, cache_read_tokens=8)
    assert responses_usage(
        {"input_tokens": 3, "output_tokens": 4, "reasoning_tokens": "2"}
    ) == Usage(3, 4, reasoning_tokens=2)


@pytest.mark.parametrize(("usage", "want"), CHAT_CASES)
def test_the_gateways_counters_read_them(usage: dict[str, Any], want: Usage) -> None:
    counts = (
        want.input_tokens,
        want.output_tokens,
        want.cache_read_tokens,
        want.reasoning_tokens,
        want.cache_write_tokens,
        0,
    )
    assert usage_counts(usage) == counts
    assert body_counts(orjson.dumps({"id": "x", "choices": [], "usage": usage})) == counts
    assert body_counts(orjson.dumps({"usage": usage, "id": "x"})) == counts  # the slow way


def test_a_relayed_stream_merges_string_counts() -> None:
    start = {
        "type": "message_start",
        "message": {"usage": {"input_tokens": "40", "output_tokens": "1"}},
    }
    delta = {"type": "message_delta", "usage": {"output_tokens": "25"}}
    stream = StreamUsage()
    for event in (start, delta):
        stream.feed(b"data: " + orjson.dumps(event) + b"\n\n")
    assert usage_counts(stream.counts) == (40, 25, 0, 0, 0, 0)
    assert stream.tokens == 65


@pytest.mark.parametrize("huge", [1e30, "1e30", 1e300, "123456789012345678901234567890"])
def test_a_count_too_large_to_be_one_is_none(huge: Any) -> None:
    """A float (or a string) far beyond any real count must not become an int no JSON
    encoder of the gateway can write: rendering the answer would fail (orjson refuses
    integers beyond 64 bits), turning one odd field into a failed request."""
    assert loose_count(huge) == 0
    body = {
        "id": "c",
        "model": "m",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": huge, "completion_tokens": 3},
    }
    request = Request(model="m", messages=())
    response = get_dialect("openai").parse_response(body, request)
    assert response.usage.input_tokens == 0 and response.usage.output_tokens == 3
    for name in ("openai", "anthropic", "responses"):
        orjson.dumps(get_dialect(name).render_response(response, request))
