"""upstreams/limited.py: limits around an upstream on every path, and what each settles."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import orjson
import pytest

from interlingua.config import LimitsConfig, UpstreamConfig
from interlingua.core import (
    Message,
    Request,
    Response,
    StopReason,
    TextPart,
    Usage,
    aclose_iterator,
)
from interlingua.core.tokens import estimate_request_tokens
from interlingua.errors import UpstreamError
from interlingua.limits import QueueRefused
from interlingua.upstreams import build_upstream
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.limited import LimitedUpstream

from ..limits.fake_time import FakeTime, settle


def request(text: str = "hi", *, stream: bool = False, max_tokens: int | None = None) -> Request:
    return Request(
        model="m",
        messages=(Message("user", (TextPart(text),)),),
        stream=stream,
        max_tokens=max_tokens,
    )


def answer(tokens_in: int, tokens_out: int) -> Response:
    return Response(
        id="r1",
        model="m",
        parts=(TextPart("ok"),),
        stop_reason=StopReason.END_TURN,
        usage=Usage(input_tokens=tokens_in, output_tokens=tokens_out),
    )


def limited(fake: FakeUpstream, time: FakeTime, **limits: object) -> LimitedUpstream:
    return LimitedUpstream(fake, LimitsConfig(**limits), clock=time, sleep=time.sleep)  # type: ignore[arg-type]


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


def test_built_behind_limits_only_when_limited() -> None:
    plain = build_upstream(UpstreamConfig(name="f", kind="fake", options={"wire": "openai"}), None)
    assert isinstance(plain, FakeUpstream)
    cfg = UpstreamConfig(
        name="f", kind="fake", options={"wire": "openai"}, limits=LimitsConfig(rpm=5)
    )
    wrapped = build_upstream(cfg, None)
    assert isinstance(wrapped, LimitedUpstream) and isinstance(wrapped.inner, FakeUpstream)
    # Same name and dialect: routing, logs and the passthrough path see no difference.
    assert wrapped.name == "f" and wrapped.dialect == "openai"
    assert wrapped.limiter.max_queue == 128 and wrapped.limiter.queue_timeout == 60


async def test_a_stream_holds_its_slot_until_it_ends(time: FakeTime) -> None:
    fake = FakeUpstream()
    up = limited(fake, time, max_concurrency=1)
    events = up.stream_batches(request(stream=True))
    await anext(events)
    waiting = asyncio.ensure_future(up.complete(request("next")))
    await settle()
    assert not waiting.done() and up.limiter.in_flight == 1
    async for _ in events:
        pass
    await settle()
    assert waiting.done() and (await waiting).parts
    assert up.limiter.in_flight == 0 and fake.max_in_flight == 1


async def test_a_stream_left_early_frees_its_slot(time: FakeTime) -> None:
    up = limited(FakeUpstream(), time, max_concurrency=1)
    events = up.stream(request(stream=True))
    await anext(events)
    assert up.limiter.in_flight == 1
    await aclose_iterator(events)  # what the gateway does when the client leaves
    assert up.limiter.in_flight == 0


async def test_a_refusal_comes_before_the_first_event(time: FakeTime) -> None:
    up = limited(FakeUpstream(), time, max_concurrency=1, max_queue=0)
    held = await up.limiter.acquire()
    with pytest.raises(QueueRefused):
        await anext(up.stream_batches(request(stream=True)))
    held.release()


async def test_an_upstream_error_frees_the_slot(time: FakeTime) -> None:
    fake = FakeUpstream()
    fake.enqueue(QueueRefused("no", reason="queue_full", retry_after=1))
    up = limited(fake, time, max_concurrency=1)
    with pytest.raises(QueueRefused):
        await up.complete(request())
    assert up.limiter.in_flight == 0


@pytest.mark.parametrize("path", ["complete", "stream", "passthrough"])
async def test_a_refused_request_counts_for_its_input_only(time: FakeTime, path: str) -> None:
    fake = FakeUpstream(wire="openai")
    fake.enqueue(UpstreamError("down", status=500))
    up = limited(fake, time, tpm=10_000)
    req = request("x" * 400, max_tokens=5000)
    if path == "passthrough":
        raw = body("openai", stream=False)
        relayed = await up.passthrough(raw, False, {})  # an error body, relayed
        assert relayed.status == 500
        expected = len(raw) // 4
    else:
        with pytest.raises(UpstreamError):
            if path == "complete":
                await up.complete(req)
            else:
                await anext(up.stream_batches(replace(req, stream=True)))
        expected = estimate_request_tokens(req)
    assert up.limiter.state.usage()[1:] == (1, expected)  # not the 5000 of output
    assert up.limiter.in_flight == 0


async def test_tokens_estimated_then_settled_non_stream(time: FakeTime) -> None:
    fake = FakeUpstream()
    up = limited(fake, time, tpm=10_000)
    seen: list[int] = []

    def reply(req: Request) -> Response:
        seen.append(up.limiter.state.usage()[2])  # what the window holds meanwhile
        return answer(30, 12)

    fake.enqueue(reply)
    req = request("x" * 400, max_tokens=500)
    await up.complete(req)
    assert seen == [estimate_request_tokens(req) + 500]
    assert up.limiter.state.usage()[1:] == (1, 42)


async def test_tokens_settled_from_the_stream_end(time: FakeTime) -> None:
    fake = FakeUpstream(wire="anthropic")
    fake.enqueue(answer(100, 7))
    up = limited(fake, time, tpm=10_000)
    async for _ in up.stream_batches(request(stream=True, max_tokens=1000)):
        pass
    assert up.limiter.state.usage()[1:] == (1, 107)


async def test_no_usage_keeps_the_estimate(time: FakeTime) -> None:
    fake = FakeUpstream()
    fake.enqueue(answer(0, 0))
    up = limited(fake, time, tpm=10_000)
    req = request(max_tokens=100)
    await up.complete(req)
    assert up.limiter.state.usage()[2] == estimate_request_tokens(req) + 100


def body(wire: str, stream: bool) -> bytes:
    if wire == "anthropic":
        payload = {
            "model": "m",
            "max_tokens": 1000,
            "messages": [{"role": "user", "content": "hi"}],
        }
    else:
        payload = {
            "model": "m",
            "max_completion_tokens": 1000,
            "messages": [{"role": "user", "content": "hi"}],
        }
    if stream:
        payload["stream"] = True
        if wire == "openai":
            payload["stream_options"] = {"include_usage": True}
    return orjson.dumps(payload)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_passthrough_body_settled_and_freed(time: FakeTime, wire: str) -> None:
    fake = FakeUpstream(wire=wire)
    up = limited(fake, time, tpm=10_000, max_concurrency=1)
    raw = body(wire, stream=False)
    seen: list[int] = []

    def reply(req: Request) -> Response:
        seen.append(up.limiter.state.usage()[2])  # the estimate, while it is answered
        return answer(20, 5)

    fake.enqueue(reply)
    relayed = await up.passthrough(raw, False, {})
    assert relayed.status == 200 and up.limiter.in_flight == 0
    assert seen == [len(raw) // 4 + 1000]
    assert up.limiter.state.usage()[1:] == (1, 25)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_passthrough_stream_held_until_closed_and_settled(time: FakeTime, wire: str) -> None:
    fake = FakeUpstream(wire=wire)
    fake.enqueue(answer(20, 5))
    up = limited(fake, time, tpm=10_000, max_concurrency=1)
    relayed = await up.passthrough(body(wire, stream=True), True, {})
    assert relayed.chunks is not None
    data = b"".join([chunk async for chunk in relayed.chunks])
    assert b'"usage"' in data
    assert up.limiter.in_flight == 1 and fake.in_flight == 1  # until the gateway closes it
    await relayed.aclose()
    assert up.limiter.in_flight == 0 and fake.in_flight == 0
    assert up.limiter.state.usage()[1:] == (1, 25)


async def test_passthrough_without_tpm_reads_nothing(time: FakeTime) -> None:
    fake = FakeUpstream(wire="openai")
    up = limited(fake, time, max_concurrency=1)
    relayed = await up.passthrough(body("openai", stream=True), True, {})
    assert relayed.chunks is not None
    chunks = relayed.chunks
    assert [c async for c in chunks]
    await relayed.aclose()
    assert up.limiter.in_flight == 0 and up.limiter.state.usage()[1:] == (0, 0)


async def test_count_tokens_is_not_limited(time: FakeTime) -> None:
    up = limited(FakeUpstream(), time, max_concurrency=1, max_queue=0)
    held = await up.limiter.acquire()
    assert await up.count_tokens(request()) is None  # not refused, not queued
    held.release()


def test_the_wrapper_forwards_the_inner_body_fix_ups() -> None:
    """A passthrough body reaches a limited o-series upstream with its limit moved to
    max_completion_tokens, as without limits (upstreams/base.py: wrappers forward)."""
    from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream

    inner = OpenAICompatibleUpstream("oai", "http://127.0.0.1:9/v1")
    limited = LimitedUpstream(inner, LimitsConfig(rpm=5))
    body = {"model": "o3-mini", "max_tokens": 50, "messages": []}
    limited.adjust_body(body)
    assert body == {"model": "o3-mini", "max_completion_tokens": 50, "messages": []}
