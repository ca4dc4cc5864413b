"""Upstream ``limits:`` through a live gateway, seen by the official SDKs (no retries).

Scripted fakes stand for the upstreams (``oai`` speaks OpenAI, ``ant`` Anthropic); each
model name exists twice, once taking the passthrough path for its own dialect's clients
and once (``-t``, a text option on) translated, and both count against the one limiter
of their upstream. The one-minute windows are real here, so the rpm case checks the
refusal side (a short ``queue_timeout``); waiting until a window frees is covered on
virtual time in tests/limits/.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from interlingua.config import Config, parse_config
from interlingua.upstreams import build_upstreams
from interlingua.upstreams.base import Upstream
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.limited import LimitedUpstream

from ..live_server import live_server
from .responses.socket_helpers import guarded_gateway

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


def config(limits: dict[str, Any]) -> Config:
    options = {"think_tags": True}  # any option: the route is then translated
    return parse_config(
        {
            "upstreams": {
                "oai": {"kind": "fake", "wire": "openai", "limits": limits},
                "ant": {"kind": "fake", "wire": "anthropic", "limits": limits},
            },
            "models": [
                {"name": "gpt", "upstream": "oai"},
                {"name": "gpt-t", "upstream": "oai", "options": options},
                {"name": "claude", "upstream": "ant"},
                {"name": "claude-t", "upstream": "ant", "options": options},
            ],
        }
    )


def built(cfg: Config, delay: float = 0.0) -> tuple[dict[str, Upstream], dict[str, FakeUpstream]]:
    """The upstreams as ``serve`` builds them (behind their limits), and the fakes inside."""
    upstreams = build_upstreams(cfg, None)
    fakes = {}
    for name, upstream in upstreams.items():
        assert isinstance(upstream, LimitedUpstream) and isinstance(upstream.inner, FakeUpstream)
        upstream.inner.delay = delay
        fakes[name] = upstream.inner
    return upstreams, fakes


@pytest.fixture
def rpm_gateway() -> Iterator[str]:
    cfg = config({"rpm": 5, "queue_timeout": 0.5})
    upstreams, _ = built(cfg)
    with live_server(_app(cfg, upstreams)) as url:
        yield url


def _app(cfg: Config, upstreams: dict[str, Upstream]) -> Any:
    from interlingua.server import create_app

    return create_app(cfg, upstreams=upstreams)


async def ask(url: str, dialect: str, model: str, stream: bool, text: str = "hi") -> str:
    """One request through the SDK of ``dialect``; the answer's text."""
    if dialect == "openai":
        gpt = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        async with gpt:
            messages: Any = [{"role": "user", "content": text}]
            if not stream:
                done = await gpt.chat.completions.create(model=model, messages=messages)
                return done.choices[0].message.content or ""
            chunks = await gpt.chat.completions.create(model=model, messages=messages, stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    claude = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
    async with claude:
        args: Any = {
            "model": model,
            "max_tokens": 50,
            "messages": [{"role": "user", "content": text}],
        }
        if not stream:
            message = await claude.messages.create(**args)
            return "".join(b.text for b in message.content if b.type == "text")
        async with claude.messages.stream(**args) as events:
            return await events.get_final_text()


CASES = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
IDS = ["openai", "openai-stream", "anthropic", "anthropic-stream"]


@pytest.mark.parametrize(("dialect", "stream"), CASES, ids=IDS)
async def test_rpm_the_sixth_request_is_refused_after_queue_timeout(
    rpm_gateway: str, dialect: str, stream: bool
) -> None:
    model = "gpt" if dialect == "openai" else "claude"
    for i in range(5):  # passthrough and translated requests share the upstream's window
        name = model if i % 2 == 0 else model + "-t"
        assert await ask(rpm_gateway, dialect, name, stream, f"q{i}") == f"echo: q{i}"
    started = time.monotonic()
    with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as refused:
        await ask(rpm_gateway, dialect, model, stream)
    waited = time.monotonic() - started
    assert 0.5 <= waited < 2.5  # it waited its queue_timeout, then was refused
    error = refused.value
    headers = error.response.headers
    # The window frees a minute after the first request: that is the Retry-After.
    assert 50 <= int(headers["retry-after"]) <= 60
    assert 50_000 <= int(headers["retry-after-ms"]) <= 60_000
    if dialect == "openai":
        assert isinstance(error, openai.RateLimitError) and error.status_code == 429
    else:
        assert isinstance(error, anthropic.OverloadedError) and error.status_code == 529
        assert error.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert "upstream 'oai'" in str(error) or "upstream 'ant'" in str(error)


class StillClock:
    """The limiter's clock in the next test: it stands still until the test moves it, so
    how long the first requests take (a loaded machine) cannot move the window."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        """Return once the test has moved the clock ``seconds`` on."""
        until = self.now + seconds
        while self.now < until:
            await asyncio.sleep(0.005)


@pytest.mark.parametrize(("dialect", "stream"), CASES, ids=IDS)
async def test_rpm_the_sixth_request_waits_for_the_window(dialect: str, stream: bool) -> None:
    # The limiter's one-minute window passes when the test moves its clock.
    cfg = config({"rpm": 5, "queue_timeout": 120})
    fakes = {
        "oai": FakeUpstream("oai", wire="openai"),
        "ant": FakeUpstream("ant", wire="anthropic"),
    }
    clock = StillClock()
    upstreams: dict[str, Upstream] = {
        name: LimitedUpstream(fake, cfg.upstreams[name].limits, clock=clock, sleep=clock.sleep)
        for name, fake in fakes.items()
    }
    model = "gpt" if dialect == "openai" else "claude"
    with live_server(_app(cfg, upstreams)) as url:
        for i in range(5):
            assert await ask(url, dialect, model if i % 2 else model + "-t", stream, f"q{i}")
        limited = upstreams["oai" if dialect == "openai" else "ant"]
        assert isinstance(limited, LimitedUpstream)
        sixth = asyncio.ensure_future(ask(url, dialect, model, stream, "sixth"))
        await wait_for(lambda: limited.limiter.waiting == 1)  # it waits in line...
        clock.now += 59
        await asyncio.sleep(0.1)  # (time for a wrongly woken request to be answered)
        assert not sixth.done() and limited.limiter.waiting == 1
        # ...until the first request left the window: a minute on the limiter's clock.
        clock.now += 1.5
        assert await asyncio.wait_for(sixth, 10) == "echo: sixth"


@pytest.mark.parametrize(("dialect", "stream"), CASES, ids=IDS)
async def test_max_concurrency_is_never_exceeded_at_the_upstream(
    dialect: str, stream: bool
) -> None:
    cfg = config({"max_concurrency": 2})
    upstreams, fakes = built(cfg, delay=0.1)
    fake = fakes["oai" if dialect == "openai" else "ant"]
    model = "gpt" if dialect == "openai" else "claude"
    with live_server(_app(cfg, upstreams)) as url:
        answers = await asyncio.gather(
            *(
                ask(url, dialect, model if i % 2 else model + "-t", stream, f"q{i}")
                for i in range(8)
            )
        )
    assert sorted(answers) == sorted(f"echo: q{i}" for i in range(8))  # none refused
    assert len(fake.requests) == 8
    assert fake.max_in_flight == 2 and fake.in_flight == 0
    limiter = upstreams["oai" if dialect == "openai" else "ant"]
    assert isinstance(limiter, LimitedUpstream) and limiter.limiter.in_flight == 0


async def wait_for(check: Any, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("dialect", "stream"),
    [("openai", False), ("anthropic", True)],
    ids=["openai", "anthropic-stream"],
)
async def test_a_client_that_hangs_up_while_queued_leaves_the_line(
    dialect: str, stream: bool
) -> None:
    # One slot, one place in line. A holds the slot for a second; B queues and hangs up;
    # C must get B's place (not a "queue full" refusal), and B never reaches the upstream.
    cfg = config({"max_concurrency": 1, "max_queue": 1, "queue_timeout": 5})
    upstreams, fakes = built(cfg, delay=1.0)
    name = "oai" if dialect == "openai" else "ant"
    fake, limited = fakes[name], upstreams[name]
    assert isinstance(limited, LimitedUpstream)
    model = "gpt" if dialect == "openai" else "claude"
    with guarded_gateway(cfg, upstreams) as (url, _):
        first = asyncio.ensure_future(ask(url, dialect, model, stream, "A"))
        await wait_for(lambda: fake.in_flight == 1)
        path = "/v1/chat/completions" if dialect == "openai" else "/v1/messages"
        body = {
            "model": model,
            "max_tokens": 10,
            "stream": stream,
            "messages": [{"role": "user", "content": "B"}],
        }
        async with httpx.AsyncClient(base_url=url, timeout=0.5) as http:
            second = asyncio.ensure_future(http.post(path, json=body, headers={"x-api-key": "k"}))
            await wait_for(lambda: limited.limiter.waiting == 1)  # B is in line...
            with pytest.raises(httpx.ReadTimeout):  # ...and gives up there
                await second
        await wait_for(lambda: limited.limiter.waiting == 0)
        third = asyncio.ensure_future(ask(url, dialect, model, stream, "C"))
        assert await first == "echo: A"
        assert await third == "echo: C"
    assert [r.messages[-1].parts[0].text for r in fake.requests] == ["A", "C"]  # type: ignore[union-attr]
    assert limited.limiter.in_flight == 0 and fake.in_flight == 0
