"""Live traffic first, through a live gateway: requests made as background work (a batch's
lines) keep to ``batches.share`` of an upstream's ``max_concurrency`` and yield to
interactive requests waiting in its line.

The batch executor marks its calls with :data:`interlingua.limits.BACKGROUND`; here a
test-only ASGI wrapper sets it for requests carrying ``x-test-background: 1``, so the
background load goes through the same gateway, its routes and its limiter, over a socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from interlingua.config import parse_config
from interlingua.limits import BACKGROUND
from interlingua.upstreams import build_upstreams
from interlingua.upstreams.limited import LimitedUpstream

from ..live_server import live_server
from .test_upstream_limits import _app, ask, built, config, wait_for

Scope = dict[str, Any]
ASGI = Callable[[Scope, Any, Any], Awaitable[None]]
MARK = (b"x-test-background", b"1")


def background_marked(app: ASGI) -> ASGI:
    """``app``, serving a request that carries ``x-test-background: 1`` as background work."""

    async def marked(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or MARK not in scope["headers"]:
            await app(scope, receive, send)
            return
        token = BACKGROUND.set(True)
        try:
            await app(scope, receive, send)
        finally:
            BACKGROUND.reset(token)

    return marked


async def background(url: str, text: str) -> str:
    """One request served as background work; the answer's text."""
    body = {"model": "gpt", "messages": [{"role": "user", "content": text}]}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        answer = await http.post(
            "/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer k", MARK[0].decode(): "1"},
        )
    answer.raise_for_status()
    content: str = answer.json()["choices"][0]["message"]["content"]
    return content


async def test_an_interactive_request_is_admitted_before_the_next_batch_request() -> None:
    cfg = config({"max_concurrency": 4})  # batches.share: its default, 0.5
    upstreams, fakes = built(cfg, delay=2.0)
    fake, limited = fakes["oai"], upstreams["oai"]
    assert isinstance(limited, LimitedUpstream)
    limiter = limited.limiter
    with live_server(background_marked(_app(cfg, upstreams))) as url:
        batch = [asyncio.ensure_future(background(url, f"b{i}")) for i in range(6)]
        # Half of 4: two batch requests reach the upstream, four wait though slots are free.
        await wait_for(lambda: fake.in_flight == 2 and limiter.background_waiting == 4)
        live = [asyncio.ensure_future(ask(url, "openai", "gpt", False, f"i{i}")) for i in (0, 1)]
        await wait_for(lambda: fake.in_flight == 4)  # the other half is live traffic's
        third = asyncio.ensure_future(ask(url, "openai", "gpt", True, "i2"))
        await wait_for(lambda: limiter.waiting == 1)
        assert await asyncio.wait_for(third, 10) == "echo: i2"
        fake.delay = 0.0  # (the rest need not take seconds)
        answers = await asyncio.gather(*batch, *live)
    assert sorted(answers) == sorted([*(f"echo: b{i}" for i in range(6)), "echo: i0", "echo: i1"])
    seen = [r.messages[-1].parts[0].text for r in fake.requests]  # type: ignore[union-attr]
    # The slot the first batch request freed went to the waiting interactive request.
    assert all(text.startswith("b") for text in seen[:2])  # (in the order they came in)
    assert sorted(seen[2:4]) == ["i0", "i1"] and seen[4] == "i2"
    assert fake.max_in_flight == 4 and limiter.in_flight == 0
    assert limiter.background_in_flight == 0 and limiter.background_waiting == 0


def test_batches_share_reaches_every_limited_upstream() -> None:
    cfg = parse_config(
        {
            "upstreams": {
                "a": {"kind": "fake", "limits": {"max_concurrency": 8}},
                "b": {"kind": "fake", "limits": {"rpm": 10}},
                "free": {"kind": "fake"},
            },
            "models": [{"name": "m", "upstream": "a"}],
            "batches": {"share": 0.25},
        }
    )
    upstreams = build_upstreams(cfg, None)
    shares = {
        name: up.limiter.background_share
        for name, up in upstreams.items()
        if isinstance(up, LimitedUpstream)
    }
    assert shares == {"a": 0.25, "b": 0.25}  # an upstream without limits is not wrapped
