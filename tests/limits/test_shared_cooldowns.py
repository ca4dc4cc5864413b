"""limits/shared_cooldowns.py against a real redis-server: routing's cooldown rules
counted across replicas, each replica answering from memory between reads.

Two replicas are two clients with their own monotonic clocks (far apart on purpose: only
durations cross between them); Redis's clock is virtual so that cooldowns can end.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from interlingua.config import CooldownConfig
from interlingua.limits import SharedCooldowns, SharedCounters
from interlingua.routing import Cooldowns
from tests.redis_server import RedisServer, needs_redis_server, redis_server

pytestmark = needs_redis_server

RULES = CooldownConfig(failures=3, window=60, duration=30)
KEY = "nim/llama-3.1-8b"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Replica:
    """One gateway replica's cooldowns: its own client, its own monotonic clock."""

    def __init__(self, url: str, prefix: str, redis_clock: Clock, start: float) -> None:
        self.counters = SharedCounters(url, prefix=prefix)
        self.clock = Clock(start)
        self.cooldowns = SharedCooldowns(
            self.counters.client,
            f"{prefix}:cooldown",
            Cooldowns(RULES, clock=self.clock),
            health=self.counters.health,
            background=self.counters.background,
            redis_clock=redis_clock,
        )

    async def sent(self) -> None:
        assert await self.counters.background.drain(5)

    async def aclose(self) -> None:
        await self.cooldowns.aclose()
        await self.counters.aclose()


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


@pytest.fixture
def redis_clock() -> Clock:
    return Clock(1_700_000_000.0)


@pytest.fixture
async def replicas(server: RedisServer, redis_clock: Clock) -> AsyncIterator[list[Replica]]:
    prefix = f"t-{uuid.uuid4().hex}"
    pair = [
        Replica(server.url, prefix, redis_clock, 100.0),
        Replica(server.url, prefix, redis_clock, 5000.0),
    ]
    yield pair
    for replica in pair:
        await replica.aclose()


def advance(seconds: float, redis_clock: Clock, replicas: list[Replica]) -> None:
    redis_clock.now += seconds
    for replica in replicas:
        replica.clock.now += seconds


async def test_failures_on_two_replicas_add_up_to_one_cooldown(
    replicas: list[Replica], redis_clock: Clock
) -> None:
    a, b = replicas
    a.cooldowns.record_failure(KEY)
    a.cooldowns.record_failure(KEY)
    await a.sent()
    assert a.cooldowns.cooling_until(KEY) is None  # 2 of 3 here
    b.cooldowns.record_failure(KEY)  # the third, on another replica
    await b.sent()
    # B tipped it: its script's answer says so at once (on B's clock).
    assert b.cooldowns.cooling_until(KEY) == pytest.approx(5030.0)
    # A answers from memory until its next read, then knows (on A's clock).
    assert a.cooldowns.cooling_until(KEY) is None
    await a.cooldowns.refresh()
    assert a.cooldowns.cooling_until(KEY) == pytest.approx(130.0)
    advance(30, redis_clock, replicas)
    await a.cooldowns.refresh()
    await b.cooldowns.refresh()
    assert a.cooldowns.cooling_until(KEY) is None
    assert b.cooldowns.cooling_until(KEY) is None


async def test_failures_older_than_the_window_do_not_count(
    replicas: list[Replica], redis_clock: Clock
) -> None:
    a, b = replicas
    a.cooldowns.record_failure(KEY)
    a.cooldowns.record_failure(KEY)
    await a.sent()
    advance(61, redis_clock, replicas)
    b.cooldowns.record_failure(KEY)
    await b.sent()
    assert b.cooldowns.cooling_until(KEY) is None


async def test_a_retry_after_on_one_replica_spares_the_others(
    replicas: list[Replica], redis_clock: Clock
) -> None:
    a, b = replicas
    assert a.cooldowns.record_failure(KEY, retry_after=120) == pytest.approx(220.0)
    await a.sent()
    await b.cooldowns.refresh()
    assert b.cooldowns.cooling_until(KEY) == pytest.approx(5120.0)


async def test_a_success_anywhere_ends_the_cooldown_everywhere(
    replicas: list[Replica], redis_clock: Clock
) -> None:
    a, b = replicas
    b.cooldowns.record_failure(KEY, retry_after=120)  # cooling on B, here and in Redis
    await b.sent()
    await a.cooldowns.refresh()
    assert a.cooldowns.cooling_until(KEY) is not None
    a.cooldowns.record_success(KEY)
    assert a.cooldowns.cooling_until(KEY) is None
    await a.sent()
    await b.cooldowns.refresh()
    assert b.cooldowns.cooling_until(KEY) is None  # B's own record is cleared too
    # ...and its failure count: two more failures on B do not cool it.
    b.cooldowns.record_failure(KEY)
    b.cooldowns.record_failure(KEY)
    await b.sent()
    assert b.cooldowns.cooling_until(KEY) is None


async def test_a_cooldown_a_replica_ended_leaves_it_on_probation(
    replicas: list[Replica], redis_clock: Clock
) -> None:
    a, _ = replicas
    for _ in range(3):
        a.cooldowns.record_failure(KEY)
    await a.sent()
    a.clock.now += 31
    redis_clock.now += 31
    await a.cooldowns.refresh()  # Redis shows nothing for it any more
    assert a.cooldowns.cooling_until(KEY) is None
    # The probe fails: cooling again at once, not after three more failures.
    assert a.cooldowns.record_failure(KEY) == pytest.approx(a.clock.now + 30)


async def test_a_plain_success_costs_no_round_trip(replicas: list[Replica]) -> None:
    a, _ = replicas
    a.cooldowns.record_success(KEY)
    a.cooldowns.cooling_until(KEY)
    assert a.counters.background.pending == 0


async def test_a_read_does_not_undo_a_success_it_may_predate(
    replicas: list[Replica], redis_clock: Clock
) -> None:
    a, b = replicas
    b.cooldowns.record_failure(KEY, retry_after=120)
    await b.sent()
    await a.cooldowns.refresh()
    assert a.cooldowns.cooling_until(KEY) is not None
    # A success sent just before a read (not yet in Redis when the read runs)...
    a.cooldowns.record_success(KEY)
    await a.cooldowns.refresh()
    assert a.cooldowns.cooling_until(KEY) is None
    # ...and one sent while a read is under way: neither read brings the cooldown back.
    b.cooldowns.record_failure(KEY, retry_after=120)
    await b.sent()
    await a.cooldowns.refresh()
    reading = asyncio.ensure_future(a.cooldowns.refresh())
    await asyncio.sleep(0)  # the read is sent
    a.cooldowns.record_success(KEY)
    await reading
    assert a.cooldowns.cooling_until(KEY) is None
    await a.sent()
    await a.cooldowns.refresh()
    assert a.cooldowns.cooling_until(KEY) is None


async def test_with_redis_away_the_local_rules_still_apply(tmp_path) -> None:
    server = RedisServer(tmp_path)  # never started
    counters = SharedCounters(server.url, prefix="t", timeout=0.2)
    clock = Clock(100.0)
    try:
        assert not await counters.start()
        cooldowns = counters.cooldowns(Cooldowns(RULES, clock=clock))
        for _ in range(3):
            cooldowns.record_failure(KEY)
        assert cooldowns.cooling_until(KEY) == pytest.approx(130.0)
        assert counters.background.pending == 0  # nothing sent to a Redis that is away
    finally:
        await counters.aclose()
