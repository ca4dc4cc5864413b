"""limits.py: sliding-window request/token limits and the concurrency cap (fake clock)."""

from __future__ import annotations

import asyncio

import pytest

from interlingua.limits import WINDOW, RateLimit, RateLimiter

from .conftest import FakeClock


def max_in_any_window(times: list[float], window: float = WINDOW) -> int:
    times = sorted(times)
    best = 0
    for i, start in enumerate(times):
        best = max(best, sum(1 for t in times[i:] if t < start + window))
    return best


async def test_requests_per_minute_never_exceeded(clock: FakeClock) -> None:
    limiter = RateLimiter(requests_per_minute=5, clock=clock, sleep=clock.sleep)
    admitted: list[float] = []

    async def one() -> None:
        async with limiter.slot():
            admitted.append(clock())

    await asyncio.gather(*(one() for _ in range(23)))
    assert len(admitted) == 23
    assert max_in_any_window(admitted) == 5
    # full windows, back to back: 5 at t0, 5 at t0+60, ... 3 at t0+240
    assert sorted(admitted) == [1000.0 + 60 * (i // 5) for i in range(23)]


async def test_admission_is_fifo(clock: FakeClock) -> None:
    limiter = RateLimiter(requests_per_minute=1, clock=clock, sleep=clock.sleep)
    order: list[int] = []

    async def one(i: int) -> None:
        async with limiter.slot():
            order.append(i)

    await asyncio.gather(*(one(i) for i in range(6)))
    assert order == list(range(6))


async def test_tokens_reserved_then_settled(clock: FakeClock) -> None:
    limiter = RateLimiter(tokens_per_minute=100, clock=clock, sleep=clock.sleep)
    async with limiter.slot(tokens=40) as a:
        assert a.reserved == 40
        a.settle(10)  # it used far less than estimated
    assert limiter.window_usage() == (1, 10)
    async with limiter.slot(tokens=40):
        pass
    async with limiter.slot(tokens=40):  # 10 + 40 + 40 = 90: fits without waiting
        pass
    assert clock.slept == []
    async with limiter.slot(tokens=40):  # 130 > 100: waits for the first ones to expire
        pass
    assert clock.now == 1060.0
    assert limiter.window_usage() == (1, 40)


async def test_settle_upwards_delays_the_next(clock: FakeClock) -> None:
    limiter = RateLimiter(tokens_per_minute=100, clock=clock, sleep=clock.sleep)
    async with limiter.slot(tokens=10) as a:
        a.settle(95)
    async with limiter.slot(tokens=10):
        pass
    assert clock.now == 1060.0


async def test_oversized_request_goes_alone(clock: FakeClock) -> None:
    limiter = RateLimiter(tokens_per_minute=100, clock=clock, sleep=clock.sleep)
    async with limiter.slot(tokens=500):  # larger than the limit: admitted on an empty window
        pass
    assert clock.slept == []
    async with limiter.slot(tokens=1):
        pass
    assert clock.now == 1060.0


async def test_concurrency_cap() -> None:
    limiter = RateLimiter(max_concurrency=3)
    active = peak = 0

    async def one() -> None:
        nonlocal active, peak
        async with limiter.slot():
            active += 1
            peak = max(peak, active)
            assert limiter.in_flight == active
            await asyncio.sleep(0.001)
            active -= 1

    await asyncio.gather(*(one() for _ in range(20)))
    assert peak == 3
    assert limiter.in_flight == 0


async def test_slot_released_on_error() -> None:
    limiter = RateLimiter(max_concurrency=1)
    with pytest.raises(RuntimeError):
        async with limiter.slot():
            raise RuntimeError("boom")
    async with asyncio.timeout(1):
        async with limiter.slot():
            pass


def test_limits_validated() -> None:
    with pytest.raises(ValueError, match="requests_per_minute"):
        RateLimit(requests_per_minute=0)
    with pytest.raises(ValueError, match="max_concurrency"):
        RateLimit(max_concurrency=-1)
    assert RateLimiter().unlimited
    assert not RateLimiter(max_concurrency=2).unlimited
