"""Rate limits through a real client and server: the server never sees more than allowed."""

from __future__ import annotations

import asyncio

from interlingua.client import AsyncClient, RateLimit, RateLimiter
from interlingua.core import TextDelta

from .conftest import FakeClock, FakeServer, Stream, openai_chunks
from .test_limits import max_in_any_window


class CountingLimiter(RateLimiter):
    """Counts admissions, and lets fake time move only once every admitted request has
    reached the server: the fake clock jumps instantly, sockets do not."""

    def __init__(self, server: FakeServer, clock: FakeClock, **limits: int) -> None:
        super().__init__(**limits, clock=clock, sleep=self._sleep_after_arrivals)
        self.server = server
        self.fake_clock = clock
        self.admitted = 0

    async def _admit(self, tokens: int) -> object:  # type: ignore[override]
        entry = await super()._admit(tokens)
        self.admitted += 1
        return entry

    async def _sleep_after_arrivals(self, seconds: float) -> None:
        async with asyncio.timeout(5):
            while len(self.server.seen) < self.admitted:
                await asyncio.sleep(0.001)
        await self.fake_clock.sleep(seconds)


async def test_requests_per_minute_seen_by_the_server(server: FakeServer, clock: FakeClock) -> None:
    server.clock = clock
    limiter = CountingLimiter(server, clock, requests_per_minute=4)
    async with AsyncClient(server.url + "/v1", model="m", rate_limit=limiter) as c:
        results = await asyncio.gather(*(c.chat(f"q{i}") for i in range(10)))
    assert sorted(r.text for r in results) == sorted(f"echo: q{i}" for i in range(10))
    assert len(server.arrivals) == 10
    assert max_in_any_window(server.arrivals) == 4
    assert max(server.arrivals) - min(server.arrivals) == 120.0  # 4 + 4 + 2 over 3 windows


async def test_concurrency_never_above_the_cap(server: FakeServer) -> None:
    server.hold = 0.05
    limits = RateLimit(max_concurrency=3)
    async with AsyncClient(server.url + "/v1", model="m", rate_limit=limits) as c:
        await asyncio.gather(*(c.chat(f"q{i}") for i in range(12)))
        assert c.limiter.in_flight == 0
    assert server.max_in_flight == 3


async def test_a_stream_holds_its_slot_until_closed(server: FakeServer) -> None:
    server.push(Stream(openai_chunks(["a", "b"])))
    async with AsyncClient(server.url + "/v1", model="m", rate_limit={"max_concurrency": 1}) as c:
        async with c.stream("x") as stream:
            assert c.limiter.in_flight == 1
            assert [e async for e in stream if isinstance(e, TextDelta)]
        assert c.limiter.in_flight == 0


async def test_tokens_settled_with_actual_usage(server: FakeServer, clock: FakeClock) -> None:
    limiter = RateLimiter(tokens_per_minute=1000, clock=clock, sleep=clock.sleep)
    async with AsyncClient(server.url + "/v1", model="m", rate_limit=limiter) as c:
        await c.chat("hello", max_tokens=500)  # reserves ~500+, the answer used 7
    assert limiter.window_usage() == (1, 7)


async def test_shared_limiter_between_clients(server: FakeServer, clock: FakeClock) -> None:
    server.clock = clock
    limiter = CountingLimiter(server, clock, requests_per_minute=2)
    async with (
        AsyncClient(server.url + "/v1", model="m", rate_limit=limiter) as a,
        AsyncClient(server.url + "/v1", model="m", rate_limit=limiter) as b,
    ):
        await asyncio.gather(a.chat("1"), b.chat("2"), a.chat("3"), b.chat("4"))
    assert max_in_any_window(server.arrivals) == 2
