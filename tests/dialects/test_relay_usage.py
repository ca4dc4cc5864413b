"""dialects/relay_usage.py: token usage read from relayed bytes of every dialect."""

from __future__ import annotations

import json

import orjson
import pytest

from interlingua.core import Response, StopReason, TextPart, Usage
from interlingua.dialects import get_dialect
from interlingua.dialects.relay_usage import (
    OUTPUT_LIMIT_FIELDS,
    StreamUsage,
    body_tokens,
    estimate_body_tokens,
    estimate_tokens,
    usage_tokens,
)
from interlingua.upstreams.fake import FakeUpstream

BODIES = {
    "openai": {"messages": [{"role": "user", "content": "hi"}]},
    "anthropic": {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
    "responses": {"input": "hi"},
}


async def relayed(wire: str, stream: bool) -> bytes:
    fake = FakeUpstream(wire=wire)
    fake.enqueue(
        Response(
            id="r",
            model="m",
            parts=(TextPart("hello there"),),
            stop_reason=StopReason.END_TURN,
            usage=Usage(input_tokens=20, output_tokens=5, cache_read_tokens=8),
        )
    )
    payload: dict[str, object] = {"model": "m", **BODIES[wire]}
    if stream:
        payload["stream"] = True
        if wire == "openai":
            payload["stream_options"] = {"include_usage": True}
    answer = await fake.passthrough(orjson.dumps(payload), stream, {})
    if answer.chunks is None:
        return answer.body
    data = b"".join([chunk async for chunk in answer.chunks])
    await answer.aclose()
    return data


@pytest.mark.parametrize("wire", ["openai", "anthropic", "responses"])
async def test_a_whole_body(wire: str) -> None:
    # 20 input tokens (8 of them cache reads) + 5 output, in every dialect's own terms
    assert body_tokens(await relayed(wire, stream=False)) == 25


@pytest.mark.parametrize("wire", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("piece", [1, 7, 10_000])
async def test_a_stream_however_it_is_split(wire: str, piece: int) -> None:
    data = await relayed(wire, stream=True)
    usage = StreamUsage()
    for start in range(0, len(data), piece):
        usage.feed(data[start : start + piece])
    assert usage.tokens == 25


def test_null_usage_and_other_lines_are_skipped() -> None:
    usage = StreamUsage()
    usage.feed(b'data: {"choices":[],"usage":null}\n\n')
    usage.feed(b': comment "usage": {"total_tokens": 9}\n\n')  # not a data line
    usage.feed(b'data: {"usage": {"total_tokens": 1\n\n')  # cut JSON
    assert usage.tokens == 0
    usage.feed(b'data: {"usage": {"prompt_tokens": 3, "completion_tokens": 4}}\n\n')
    assert usage.tokens == 7


def test_usage_shapes() -> None:
    assert usage_tokens({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}) == 7
    assert usage_tokens({"input_tokens": 2, "cache_read_input_tokens": 5, "output_tokens": 1}) == 8
    assert usage_tokens({"input_tokens": None, "output_tokens": "x"}) == 0
    assert body_tokens(b"not json") == 0 and body_tokens(b'{"usage": null}') == 0


def test_compact_and_spaced_json_alike() -> None:
    # Compact JSON takes a substring search, any other spacing the pattern: same counts.
    # Messages: input in message_start, cumulative output in each message_delta.
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 10}}}
    deltas = [{"type": "message_delta", "usage": {"output_tokens": n}} for n in (2, 5)]
    for separators in ((",", ":"), (", ", ": ")):
        usage = StreamUsage()
        for event in (start, *deltas):
            usage.feed(b"data: " + json.dumps(event, separators=separators).encode() + b"\n\n")
        assert usage.counts == {"input_tokens": 10, "output_tokens": 5}
        assert usage.tokens == 15


def test_the_output_limit_fields_are_every_dialects() -> None:
    each = {f for name in BODIES for f in get_dialect(name).output_limit_fields}
    assert set(OUTPUT_LIMIT_FIELDS) == each


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": [], "max_tokens": 40},
        {"model": "m", "messages": [], "max_completion_tokens": 40},
        {"model": "m", "input": "hi there", "max_output_tokens": 40},
        {"model": "m", "input": "no limit"},
        {"model": "m", "max_tokens": True, "max_output_tokens": 0},  # no counts
    ],
)
def test_one_estimate_rule_for_bytes_and_decoded_bodies(body: dict[str, object]) -> None:
    raw = orjson.dumps(body)
    tokens_in, reserved = estimate_body_tokens(raw)
    assert tokens_in == len(raw) // 4
    assert estimate_tokens(len(raw), body) == reserved
    limit = next((v for v in body.values() if type(v) is int and v > 0), 0)
    assert reserved == tokens_in + limit
