"""The attempt loop in process: retry waits, what is judged retryable, and the router's
bookkeeping (in flight, cooldown) after answers, streams and failures. Waits are
recorded, not slept (the gateway's ``_pause`` is patched)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from interlingua.config import RetriesConfig, parse_config
from interlingua.dialects import get_dialect
from interlingua.errors import (
    InterlinguaError,
    InvalidRequestError,
    RateLimitError,
    UpstreamError,
)
from interlingua.routing import Router
from interlingua.server import gateway as gateway_module
from interlingua.server.asgi_io import BytesResponse, StreamResponse
from interlingua.server.attempts import _retry_wait
from interlingua.server.gateway import Gateway
from interlingua.upstreams.fake import FakeUpstream

CHAT = get_dialect("openai")


def test_retry_wait() -> None:
    retries = RetriesConfig(max=2, max_wait=10)
    assert _retry_wait(retries, 0, 3.0) == 3.0  # the upstream's wait, within max_wait
    assert _retry_wait(retries, 0, 11.0) is None  # over max_wait: move on at once
    assert _retry_wait(retries, 2, 1.0) is None  # retries spent
    assert _retry_wait(RetriesConfig(max=0), 0, 1.0) is None
    waits = [_retry_wait(retries, 1, None) for _ in range(200)]
    assert all(w is not None and 0 <= w <= 1.0 for w in waits)  # full jitter up to 0.5 * 2
    assert max(w or 0 for w in waits) > 0.5  # (a draw, not a constant)
    capped = RetriesConfig(max=9, max_wait=0.1)
    assert all((_retry_wait(capped, 8, None) or 0) <= 0.1 for _ in range(50))


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    recorded: list[float] = []

    async def pause(seconds: float, receive: Any) -> None:
        recorded.append(seconds)

    monkeypatch.setattr(gateway_module, "_pause", pause)
    return recorded


def _gateway(
    models: list[dict[str, Any]], retries: dict[str, Any] | None = None, **routing: Any
) -> tuple[Gateway, dict[str, FakeUpstream]]:
    names = sorted({m["upstream"] for m in models})
    upstreams = {n: {"kind": "fake", "retries": retries or {}} for n in names}
    raw: dict[str, Any] = {"upstreams": upstreams, "models": models}
    if routing:
        raw["routing"] = routing
    config = parse_config(raw)
    fakes = {n: FakeUpstream(n) for n in names}
    return Gateway(config, Router(config, fakes)), fakes


def _body(stream: bool = False) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


async def _drain(response: StreamResponse) -> bytes:
    """Run a stream response as the server would; its bytes."""
    sent: list[bytes] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays
        return {}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message.get("body", b""))

    await response({"type": "http"}, receive, send)
    return b"".join(sent)


async def test_backoff_without_retry_after_is_capped_by_max_wait(waits: list[float]) -> None:
    gateway, fakes = _gateway([{"name": "m", "upstream": "a"}], {"max": 3, "max_wait": 0.05})
    for _ in range(3):
        fakes["a"].enqueue(UpstreamError("down", status=500))
    answer = await gateway.generate(CHAT, _body(), {})
    assert isinstance(answer, BytesResponse) and answer.status == 200
    assert len(fakes["a"].requests) == 4
    assert len(waits) == 3 and all(0 <= w <= 0.05 for w in waits)


async def test_x_should_retry_false_is_obeyed(waits: list[float]) -> None:
    gateway, fakes = _gateway(
        [{"name": "m", "upstream": "a"}, {"name": "m", "upstream": "b"}], {"max": 3}
    )
    for fake in fakes.values():
        fake.enqueue(UpstreamError("no", status=503, headers={"x-should-retry": "false"}))
    with pytest.raises(InterlinguaError) as caught:
        await gateway.generate(CHAT, _body(), {})
    assert caught.value.status == 503
    assert sum(len(f.requests) for f in fakes.values()) == 1 and waits == []


@pytest.mark.parametrize("stream", [False, True])
async def test_in_flight_returns_to_zero(stream: bool, waits: list[float]) -> None:
    gateway, fakes = _gateway(
        [{"name": "m", "upstream": "a"}, {"name": "m", "upstream": "b"}],
        strategy="least-busy",
    )
    deployments = gateway.router._groups["m"].deployments
    fakes["a"].enqueue(RateLimitError("busy", retry_after=1))
    fakes["b"].enqueue(RateLimitError("busy", retry_after=1))
    with pytest.raises(RateLimitError):
        await gateway.generate(CHAT, _body(stream), {})
    assert [d.in_flight for d in deployments] == [0, 0]
    answer = await gateway.generate(CHAT, _body(stream), {})
    if stream:
        assert isinstance(answer, StreamResponse)
        # A stream is in flight until it is sent.
        assert sum(d.in_flight for d in deployments) == 1
        assert b"[DONE]" in await _drain(answer)
    assert [d.in_flight for d in deployments] == [0, 0]
    # Both were cooling; the one that answered is not any more.
    cooling = [gateway.router.cooldowns.cooling_until(d.key) is not None for d in deployments]
    assert sorted(cooling) == [False, True]


async def test_a_lone_deployment_counts_toward_its_cooldown(waits: list[float]) -> None:
    # A name with one deployment takes the hot path; its failures still cool it, which
    # matters where it is another name's fallback.
    gateway, fakes = _gateway(
        [
            {"name": "m", "upstream": "a", "fallbacks": ["solo"]},
            {"name": "solo", "upstream": "b"},
        ],
        cooldown={"failures": 1, "window": 60, "duration": 60},
    )
    fakes["b"].enqueue(UpstreamError("down", status=502))
    with pytest.raises(UpstreamError):
        await gateway.generate(CHAT, {**_body(), "model": "solo"}, {})
    (solo,) = gateway.router._groups["solo"].deployments
    assert gateway.router.cooldowns.cooling_until(solo.key) is not None
    # m's plan keeps the cooling fallback last; a success on it ends the cooldown.
    assert [d.key for d in gateway.router.plan("m")] == ["a/m", "b/solo"]
    await gateway.generate(CHAT, {**_body(), "model": "solo"}, {})
    assert gateway.router.cooldowns.cooling_until(solo.key) is None


def _refusal(message: str, code: str | None = None, retry: str = "false") -> InvalidRequestError:
    return InvalidRequestError(message, code=code, headers={"x-should-retry": retry})


CONTEXT_MODELS = [
    {"name": "m", "upstream": "a", "fallbacks": ["f"], "context_fallbacks": ["long"]},
    {"name": "m", "upstream": "b"},
    {"name": "f", "upstream": "c"},
    {"name": "long", "upstream": "d", "fallbacks": ["f"]},
    {"name": "long", "upstream": "e"},
]


def _counts(fakes: dict[str, FakeUpstream]) -> dict[str, int]:
    return {name: len(fake.requests) for name, fake in fakes.items()}


@pytest.mark.parametrize("retry", ["false", "true"])
async def test_a_content_filter_refusal_is_final(retry: str, waits: list[float]) -> None:
    # (x-should-retry: true does not make the same prompt acceptable)
    gateway, fakes = _gateway(CONTEXT_MODELS, {"max": 3})
    for fake in fakes.values():
        fake.enqueue(_refusal("filtered by policy", "content_filter", retry))
    with pytest.raises(InvalidRequestError) as caught:
        await gateway.generate(CHAT, _body(), {})
    assert (caught.value.code, caught.value.message) == ("content_filter", "filtered by policy")
    assert sum(_counts(fakes).values()) == 1 and waits == []
    assert all(gateway.router.cooldowns.cooling_until(f"{n}/m") is None for n in "ab")


@pytest.mark.parametrize("retry", ["false", "true"])
async def test_a_context_refusal_skips_retries_siblings_and_fallbacks(
    retry: str, waits: list[float]
) -> None:
    gateway, fakes = _gateway(CONTEXT_MODELS, {"max": 3})
    for name in "ab":
        fakes[name].enqueue(_refusal("prompt is too long: 9 tokens > 8 maximum", None, retry))
    answer = await gateway.generate(CHAT, _body(), {})
    assert isinstance(answer, BytesResponse) and answer.status == 200
    counts = _counts(fakes)
    assert counts["a"] + counts["b"] == 1 and counts["c"] == 0
    assert counts["d"] + counts["e"] == 1 and waits == []
    deployments = [d for g in gateway.router.configured().values() for d in g]
    assert all(d.in_flight == 0 for d in deployments)
    assert all(gateway.router.cooldowns.cooling_until(d.key) is None for d in deployments)


async def test_a_context_refusal_after_a_failover_still_reaches_the_context_fallbacks(
    waits: list[float],
) -> None:
    gateway, fakes = _gateway(CONTEXT_MODELS)
    for name in "ab":
        fakes[name].enqueue(UpstreamError("down", status=500))
    fakes["c"].enqueue(_refusal("too long", "context_length_exceeded"))
    answer = await gateway.generate(CHAT, _body(), {})
    assert isinstance(answer, BytesResponse) and answer.status == 200
    assert _counts(fakes) | {"d": 0, "e": 0} == {"a": 1, "b": 1, "c": 1, "d": 0, "e": 0}
    assert sum(_counts(fakes)[n] for n in "de") == 1


async def test_a_relay_only_request_is_not_sent_to_the_context_fallbacks(
    waits: list[float],
) -> None:
    # (a Responses conversation only its own upstream holds: a context fallback that
    # translated it would answer without the conversation)
    config = parse_config(
        {
            "upstreams": {n: {"kind": "fake", "wire": "openai"} for n in "ad"},
            "models": [
                {"name": "m", "upstream": "a", "context_fallbacks": ["long"]},
                {"name": "long", "upstream": "d"},
            ],
        }
    )
    fakes = {n: FakeUpstream(n, wire="openai") for n in "ad"}
    gateway = Gateway(config, Router(config, fakes))
    fakes["a"].enqueue(_refusal("prompt is too long: 9 tokens > 8 maximum"))
    answer = await gateway.generate(CHAT, _body(), {}, relay_only=True)
    # (the passthrough path relays the upstream's own error body)
    assert isinstance(answer, BytesResponse) and answer.status == 400
    assert b"prompt is too long" in answer.body
    assert _counts(fakes) == {"a": 1, "d": 0}


async def test_the_context_fallbacks_are_followed_once(waits: list[float]) -> None:
    # The context fallback refuses too (and is down): its answer is the client's, its
    # own fallbacks are not followed, nothing loops.
    gateway, fakes = _gateway(CONTEXT_MODELS)
    for name in "abab":
        fakes[name].enqueue(_refusal("too long", "context_length_exceeded"))
    fakes["d"].enqueue(UpstreamError("down", status=500))
    fakes["e"].enqueue(UpstreamError("down", status=500))
    fakes["d"].enqueue(_refusal("still too long", "context_length_exceeded"))
    fakes["e"].enqueue(_refusal("still too long", "context_length_exceeded"))
    with pytest.raises(InterlinguaError) as caught:
        await gateway.generate(CHAT, _body(), {})
    assert caught.value.status == 500  # the last failure, as for any plan
    with pytest.raises(InvalidRequestError) as refused:
        await gateway.generate(CHAT, _body(), {})
    assert refused.value.message == "still too long"
    counts = _counts(fakes)
    # one of m's deployments per request; long's two, then one of them
    assert (counts["a"] + counts["b"], counts["c"], counts["d"] + counts["e"]) == (2, 0, 3)
