"""Deployments, fallbacks, cooldowns and retries through a live gateway.

The official openai and anthropic SDKs (``max_retries=0``, so what is measured is the
gateway's behaviour, not theirs) call a gateway whose upstreams are scripted fakes, for
both client dialects, stream and not, translated (the fake speaks the other dialect) and
passthrough (the fake speaks the client's). ``len(fake.requests)`` is how many attempts
an upstream received.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from interlingua.config import parse_config
from interlingua.core import BlockStart, StreamError, StreamStart, TextDelta, TextPart, Usage
from interlingua.errors import InvalidRequestError, RateLimitError, UpstreamError
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from ..conformance.cases import reply
from ..live_server import live_server

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

#: Chat Completions, Messages and Responses, through the openai / anthropic SDKs
CLIENTS = ("openai", "anthropic", "responses")
#: the wire a fake speaks so that a client's request takes the path named
WIRE = {
    ("openai", "passthrough"): "openai",
    ("openai", "translated"): "anthropic",
    ("anthropic", "passthrough"): "anthropic",
    ("anthropic", "translated"): "openai",
    ("responses", "passthrough"): "responses",
    ("responses", "translated"): "openai",
}
ALL = [
    pytest.param(client, path, stream, id=f"{client}-{path}-{'stream' if stream else 'json'}")
    for client in CLIENTS
    for path in ("translated", "passthrough")
    for stream in (False, True)
]


@contextlib.contextmanager
def gateway(
    models: list[dict[str, Any]],
    wire: str,
    routing: dict[str, Any] | None = None,
    retries: dict[str, dict[str, Any]] | None = None,
) -> Iterator[tuple[str, dict[str, FakeUpstream]]]:
    """A live gateway over one fake per upstream named in ``models``."""
    names = sorted({m["upstream"] for m in models})
    upstreams = {n: {"kind": "fake", "retries": (retries or {}).get(n, {})} for n in names}
    raw: dict[str, Any] = {"upstreams": upstreams, "models": models}
    if routing is not None:
        raw["routing"] = routing
    fakes = {n: FakeUpstream(n, wire=wire, chunk_size=2) for n in names}
    try:
        with live_server(create_app(parse_config(raw), upstreams=fakes)) as url:
            yield url, fakes
    finally:
        # the SDK clients of this gateway, closed: one left to the garbage collector
        # surfaces as an unclosed-socket warning in whichever later test collects it
        for key in [k for k in _SDK_CLIENTS if k[0] == url]:
            _SDK_CLIENTS.pop(key).close()


_SDK_CLIENTS: dict[tuple[str, str], openai.OpenAI | anthropic.Anthropic] = {}


def sdk(url: str, client: str) -> openai.OpenAI | anthropic.Anthropic:
    """One SDK client per gateway and client kind (a new one per call costs more than
    the call); :func:`gateway` closes them."""
    found = _SDK_CLIENTS.get((url, client))
    if found is None:
        if client in ("openai", "responses"):
            found = openai.OpenAI(base_url=url + "/v1", api_key="sk", max_retries=0, timeout=20)
        else:
            found = anthropic.Anthropic(base_url=url, api_key="sk", max_retries=0, timeout=20)
        _SDK_CLIENTS[url, client] = found
    return found


def ask(url: str, client: str, model: str, stream: bool = False) -> str:
    """The answer's text through the official SDK (raises its errors)."""
    return _ask(sdk(url, client), client, model, stream)


def _ask(sdk_client: Any, client: str, model: str, stream: bool) -> str:
    messages: Any = [{"role": "user", "content": "hi"}]
    if client == "responses":
        gpt = sdk_client
        assert isinstance(gpt, openai.OpenAI)
        if stream:
            events = list(gpt.responses.create(model=model, input="hi", stream=True))
            if events[-1].type != "response.completed":  # (the SDK raises for Chat only)
                raise openai.APIError(f"stream ended by {events[-1].type}", None, body=None)
            return "".join(e.delta for e in events if e.type == "response.output_text.delta")
        return gpt.responses.create(model=model, input="hi").output_text
    if client == "openai":
        gpt = sdk_client
        assert isinstance(gpt, openai.OpenAI)
        if stream:
            chunks = gpt.chat.completions.create(model=model, messages=messages, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        answer = gpt.chat.completions.create(model=model, messages=messages)
        return answer.choices[0].message.content or ""
    claude = sdk_client
    assert isinstance(claude, anthropic.Anthropic)
    if stream:
        with claude.messages.stream(model=model, max_tokens=50, messages=messages) as events:
            return "".join(events.text_stream)
    message = claude.messages.create(model=model, max_tokens=50, messages=messages)
    return "".join(b.text for b in message.content if b.type == "text")


def status_error(client: str) -> type[Exception]:
    return anthropic.APIStatusError if client == "anthropic" else openai.APIStatusError


def counts(fakes: dict[str, FakeUpstream]) -> dict[str, int]:
    return {name: len(fake.requests) for name, fake in fakes.items()}


@pytest.mark.parametrize(("client", "path", "stream"), ALL)
def test_500_then_fallback_answers(client: str, path: str, stream: bool) -> None:
    models = [
        {"name": "main", "upstream": "a", "fallbacks": ["backup"]},
        {"name": "backup", "upstream": "b"},
    ]
    with gateway(models, WIRE[client, path]) as (url, fakes):
        fakes["a"].enqueue(UpstreamError("a is down", status=500))
        fakes["b"].enqueue(reply("from the backup"))
        assert ask(url, client, "main", stream) == "from the backup"
        assert counts(fakes) == {"a": 1, "b": 1}


@pytest.mark.parametrize(("client", "path", "stream"), ALL)
def test_429_retry_after_is_waited_then_the_same_deployment_answers(
    client: str, path: str, stream: bool
) -> None:
    models = [
        {"name": "main", "upstream": "a", "fallbacks": ["backup"]},
        {"name": "backup", "upstream": "b"},
    ]
    retries = {"a": {"max": 2, "max_wait": 5}}
    with gateway(models, WIRE[client, path], retries=retries) as (url, fakes):
        fakes["a"].enqueue(RateLimitError("slow down", retry_after=0.3))
        fakes["a"].enqueue(reply("after the wait"))
        started = time.monotonic()
        assert ask(url, client, "main", stream) == "after the wait"
        assert time.monotonic() - started >= 0.3
        assert counts(fakes) == {"a": 2, "b": 0}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_retry_after_over_max_wait_moves_on_at_once(client: str) -> None:
    models = [
        {"name": "main", "upstream": "a", "fallbacks": ["backup"]},
        {"name": "backup", "upstream": "b"},
    ]
    retries = {"a": {"max": 3, "max_wait": 2}}
    with gateway(models, WIRE[client, "translated"], retries=retries) as (url, fakes):
        fakes["a"].enqueue(RateLimitError("come back in a minute", retry_after=60))
        fakes["b"].enqueue(reply("backup"))
        started = time.monotonic()
        assert ask(url, client, "main") == "backup"
        assert time.monotonic() - started < 1.0
        assert counts(fakes) == {"a": 1, "b": 1}


@pytest.mark.parametrize(("client", "path", "stream"), ALL)
def test_cooldown_skips_a_failing_deployment(client: str, path: str, stream: bool) -> None:
    # a is drawn first 100 times in 101: without cooldown it would see nearly every request.
    models = [
        {"name": "main", "upstream": "a", "weight": 100},
        {"name": "main", "upstream": "b", "weight": 1},
    ]
    routing = {"cooldown": {"failures": 1, "window": 60, "duration": 60}}
    with gateway(models, WIRE[client, path], routing=routing) as (url, fakes):
        for _ in range(6):
            fakes["a"].enqueue(UpstreamError("a is down", status=500))
        while counts(fakes)["a"] == 0:  # (a was drawn second: ask again)
            assert ask(url, client, "main", stream).startswith("echo: ")
        before = counts(fakes)["a"]
        for _ in range(5):
            assert ask(url, client, "main", stream).startswith("echo: ")
        assert counts(fakes)["a"] - before <= 1
        assert counts(fakes)["b"] >= 5


@pytest.mark.parametrize("client", CLIENTS)
def test_weighted_split_is_within_binomial_bounds(client: str) -> None:
    models = [
        {"name": "main", "upstream": "a", "weight": 3},
        {"name": "main", "upstream": "b", "weight": 1},
    ]
    with gateway(models, WIRE[client, "passthrough"]) as (url, fakes):
        n = 400
        for _ in range(n):
            ask(url, client, "main")
        # Binomial(400, 3/4): mean 300, sigma 8.66. Six sigma (a chance of about 2e-9 to
        # fail by luck) still tells 3:1 from 1:1 (200) or always-the-first (400).
        assert abs(counts(fakes)["a"] - 300) < 6 * 8.66
        assert sum(counts(fakes).values()) == n


@pytest.mark.parametrize(("client", "path", "stream"), ALL)
def test_all_cooling_tries_the_one_whose_cooldown_ends_first(
    client: str, path: str, stream: bool
) -> None:
    models = [{"name": "main", "upstream": "a"}, {"name": "main", "upstream": "b"}]
    routing = {"cooldown": {"failures": 1, "window": 60, "duration": 1}}
    with gateway(models, WIRE[client, path], routing=routing) as (url, fakes):
        fakes["a"].enqueue(RateLimitError("a: later", retry_after=40))
        fakes["b"].enqueue(RateLimitError("b: later", retry_after=20))
        with pytest.raises(status_error(client)) as caught:
            ask(url, client, "main", stream)
        assert caught.value.status_code == 429
        assert counts(fakes) == {"a": 1, "b": 1}
        # Both cooling: b's cooldown ends first, so b is tried (and answers).
        assert ask(url, client, "main", stream).startswith("echo: ")
        assert counts(fakes) == {"a": 1, "b": 2}


def _half_a_stream(error: UpstreamError) -> list[Any]:
    return [
        StreamStart("resp_1", "m", 1_700_000_000, Usage(input_tokens=5)),
        BlockStart(0, TextPart("")),
        TextDelta(0, "Half an ans"),
        StreamError(error),
    ]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", ["translated", "passthrough"])
def test_a_mid_stream_failure_is_not_retried(client: str, path: str) -> None:
    models = [
        {"name": "main", "upstream": "a", "fallbacks": ["backup"]},
        {"name": "backup", "upstream": "b"},
    ]
    retries = {"a": {"max": 3, "max_wait": 5}}
    with gateway(models, WIRE[client, path], retries=retries) as (url, fakes):
        fakes["a"].enqueue(_half_a_stream(UpstreamError("died mid-way", status=502)))
        base = anthropic.APIError if client == "anthropic" else openai.APIError
        with pytest.raises(base):
            ask(url, client, "main", stream=True)
        assert counts(fakes) == {"a": 1, "b": 0}


@pytest.mark.parametrize(("client", "path", "stream"), ALL)
def test_a_400_is_answered_at_once(client: str, path: str, stream: bool) -> None:
    models = [
        {"name": "main", "upstream": "a", "fallbacks": ["backup"]},
        {"name": "main", "upstream": "c"},
        {"name": "backup", "upstream": "b"},
    ]
    retries = {n: {"max": 3, "max_wait": 5} for n in "abc"}
    with gateway(models, WIRE[client, path], retries=retries) as (url, fakes):
        for name in "ac":
            fakes[name].enqueue(InvalidRequestError("your request is wrong", param="messages"))
        with pytest.raises(status_error(client)) as caught:
            ask(url, client, "main", stream)
        assert caught.value.status_code == 400
        assert "your request is wrong" in str(caught.value)
        assert sum(counts(fakes).values()) == 1  # one upstream saw it, once


@pytest.mark.parametrize(("client", "path", "stream"), ALL)
def test_the_last_upstreams_error_is_the_answer_with_retry_after(
    client: str, path: str, stream: bool
) -> None:
    models = [
        {"name": "main", "upstream": "a", "fallbacks": ["backup"]},
        {"name": "backup", "upstream": "b"},
    ]
    with gateway(models, WIRE[client, path]) as (url, fakes):
        fakes["a"].enqueue(UpstreamError("a is down", status=500))
        fakes["b"].enqueue(RateLimitError("b is busy", retry_after=7))
        with pytest.raises(status_error(client)) as caught:
            ask(url, client, "main", stream)
        error = caught.value
        assert error.status_code == 429
        assert "b is busy" in str(error) and "a is down" not in str(error)
        assert error.response.headers["retry-after"] == "7"
        assert counts(fakes) == {"a": 1, "b": 1}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [False, True])
def test_passthrough_retries_an_upstream_503(client: str, stream: bool) -> None:
    models = [{"name": "main", "upstream": "a"}]
    with gateway(models, WIRE[client, "passthrough"], retries={"a": {"max": 1}}) as (url, fakes):
        fakes["a"].enqueue(UpstreamError("overloaded right now", status=503))
        fakes["a"].enqueue(reply("second time lucky"))
        assert ask(url, client, "main", stream) == "second time lucky"
        assert counts(fakes) == {"a": 2}


def test_without_retries_one_deployment_fails_once() -> None:
    # The default (retries max 0, one deployment): exactly what the gateway did before.
    with gateway([{"name": "main", "upstream": "a"}], "openai") as (url, fakes):
        fakes["a"].enqueue(UpstreamError("overloaded right now", status=503))
        with pytest.raises(openai.APIStatusError) as caught:
            ask(url, "openai", "main")
        assert caught.value.status_code == 503
        assert counts(fakes) == {"a": 1}


@pytest.mark.parametrize("client", CLIENTS)
def test_each_attempt_is_logged_with_the_request_id(
    client: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="interlingua.routing")
    models = [
        {"name": "main", "upstream": "a", "model": "a-model", "fallbacks": ["backup"]},
        {"name": "backup", "upstream": "b", "model": "b-model"},
    ]
    retries = {"a": {"max": 1, "max_wait": 5}}
    with gateway(models, WIRE[client, "translated"], retries=retries) as (url, fakes):
        fakes["a"].enqueue(RateLimitError("slow down", retry_after=0.2))
        fakes["a"].enqueue(UpstreamError("a is down", status=502))
        messages: Any = [{"role": "user", "content": "hi"}]
        sdk_client = sdk(url, client)
        if client == "openai":
            assert isinstance(sdk_client, openai.OpenAI)
            made = sdk_client.chat.completions.create(model="main", messages=messages)
            request_id = made._request_id
        elif client == "responses":
            assert isinstance(sdk_client, openai.OpenAI)
            request_id = sdk_client.responses.create(model="main", input="hi")._request_id
        else:
            assert isinstance(sdk_client, anthropic.Anthropic)
            message = sdk_client.messages.create(model="main", max_tokens=9, messages=messages)
            request_id = message._request_id
    lines = [r.getMessage() for r in caplog.records if r.name == "interlingua.routing"]
    assert request_id and len(lines) == 3, lines
    assert all(line.startswith(f"{request_id} model=main attempt=") for line in lines)
    first, second, third = lines
    assert "attempt=1 deployment=a/a-model" in first
    assert 'outcome="429 rate_limit"' in first and 'next="same" wait_s=0.20' in first
    assert 'outcome="502 upstream_error"' in second and 'next="b/b-model"' in second
    assert "attempt=3 deployment=b/b-model" in third and 'outcome="200 ok"' in third
    assert all("latency_ms=" in line for line in lines)


def test_a_client_that_hangs_up_during_a_wait_ends_the_attempts() -> None:
    retries = {"a": {"max": 2, "max_wait": 10}}
    with gateway([{"name": "main", "upstream": "a"}], "anthropic", retries=retries) as (
        url,
        fakes,
    ):
        fakes["a"].enqueue(RateLimitError("slow down", retry_after=1.5))
        body = {"model": "main", "messages": [{"role": "user", "content": "hi"}]}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/chat/completions", json=body, timeout=0.5)
        time.sleep(2.0)  # past the wait: a second attempt would have been made by now
        assert counts(fakes) == {"a": 1}


def test_a_passthrough_attempt_then_a_translated_one() -> None:
    # One request may take both paths: a's body changes (its model) must not reach b's.
    config = parse_config(
        {
            "upstreams": {"a": {"kind": "fake"}, "b": {"kind": "fake"}},
            "models": [
                {"name": "main", "upstream": "a", "model": "a-model", "fallbacks": ["backup"]},
                {"name": "backup", "upstream": "b", "model": "b-model"},
            ],
        }
    )
    fakes = {"a": FakeUpstream("a", wire="openai"), "b": FakeUpstream("b", wire="anthropic")}
    fakes["a"].enqueue(UpstreamError("a is down", status=500))
    fakes["b"].enqueue(reply("translated"))
    with (
        live_server(create_app(config, upstreams=dict(fakes))) as url,
        openai.OpenAI(base_url=url + "/v1", api_key="sk", max_retries=0) as gpt,
    ):
        answer = gpt.chat.completions.create(
            model="main", messages=[{"role": "user", "content": "hi"}]
        )
    assert answer.choices[0].message.content == "translated"
    assert answer.model == "main"  # the translated path echoes the name asked for
    assert fakes["a"].wire_requests[0]["model"] == "a-model"
    assert fakes["b"].wire_requests[0]["model"] == "b-model"
