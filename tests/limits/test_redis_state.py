"""limits/redis_state.py and limits/shared.py against a real redis-server: limits shared by
replicas (each replica its own client and connections), the window's rules identical to
the in-memory one, leases that expire, the day counter, and the fallback to per-process
limits while Redis is away.

Times inside Redis are virtual where a test needs minutes to pass (the scripts take a
clock argument in place of ``TIME``); the failover tests run on real time, bounded by
deadlines, never asserting a duration.
"""

from __future__ import annotations

import asyncio
import logging
import math
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from interlingua.limits import (
    Limiter,
    MemoryLease,
    MemoryPeriodCounter,
    MemoryState,
    QueueRefused,
    RedisLease,
    RedisPeriodCounter,
    RedisState,
    SharedCounters,
)
from interlingua.limits.background import Background
from interlingua.limits.period import MONTH, until_midnight
from interlingua.limits.period import SECONDS_PER_DAY as DAY
from tests.redis_server import RedisServer, needs_redis_server, redis_server

pytestmark = needs_redis_server

REPO = Path(__file__).resolve().parents[2]


class Clock:
    """A virtual Unix clock in dyadic steps (so float and microsecond sums agree)."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


@pytest.fixture
async def counters(server: RedisServer) -> AsyncIterator[SharedCounters]:
    shared = SharedCounters(server.url, prefix=f"t-{uuid.uuid4().hex}")
    yield shared
    await shared.aclose()


def name() -> str:
    return f"upstream:{uuid.uuid4().hex[:8]}"


# -- shared exactly ------------------------------------------------------------------------


async def test_two_replicas_with_rpm_10_admit_10_together(server: RedisServer) -> None:
    prefix = f"t-{uuid.uuid4().hex}"
    # Two replicas: each its own client, its own connections.
    a, b = SharedCounters(server.url, prefix=prefix), SharedCounters(server.url, prefix=prefix)
    try:
        states = [a.limit_state("key:team-a", rpm=10), b.limit_state("key:team-a", rpm=10)]
        # 25 attempts at once, alternating replicas, racing on separate connections.
        got = await asyncio.gather(*(states[i % 2].acquire(0) for i in range(25)))
        leases = [g for g in got if isinstance(g, RedisLease)]
        waits = [g for g in got if isinstance(g, float)]
        assert len(leases) == 10 and len(waits) == 15
        assert all(0 < w <= 60 for w in waits)
        assert states[0].usage()[1] == 10 or states[1].usage()[1] == 10
    finally:
        await a.aclose()
        await b.aclose()


async def test_replicas_in_separate_processes_admit_exactly_rpm(server: RedisServer) -> None:
    prefix = f"t-{uuid.uuid4().hex}"
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from interlingua.limits import SharedCounters, RedisLease

        async def main():
            counters = SharedCounters({server.url!r}, prefix={prefix!r})
            state = counters.limit_state("key:team-a", rpm=10, tpm=1000)
            got = await asyncio.gather(*(state.acquire(10) for _ in range(15)))
            print(sum(isinstance(g, RedisLease) for g in got))
            await counters.aclose()

        asyncio.run(main())
        """
    )
    env = {"PYTHONPATH": f"{REPO / 'src'}", "PATH": "/usr/bin:/bin"}
    processes = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, cwd=REPO)
        for _ in range(2)
    ]
    admitted = [int(p.communicate(timeout=60)[0]) for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert sum(admitted) == 10


# -- the window's rules, as in memory ------------------------------------------------------

LIMITS = st.tuples(
    st.one_of(st.none(), st.integers(1, 5)),
    st.one_of(st.none(), st.integers(50, 300)),
    st.one_of(st.none(), st.integers(1, 3)),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, 150)),
        st.tuples(st.just("settle"), st.integers(0, 150)),
        st.tuples(st.just("release"), st.integers(0, 20)),
        st.tuples(st.just("advance"), st.sampled_from([0.25, 0.5, 5.0, 20.0, 59.75, 60.0, 61.0])),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(limits=LIMITS, ops=OPS)
# Admissions of no tokens leaving the window freed 0 tokens, and the script's -0 was
# refused by Redis as "not an integer".
@example(limits=(None, 50, None), ops=[("acquire", 0), ("advance", 60.0), ("acquire", 0)])
def test_redis_state_answers_as_memory_state_does(
    server: RedisServer, limits: tuple[int | None, int | None, int | None], ops: list
) -> None:
    """Step for step, the script and :class:`MemoryState` admit the same requests and
    name the same waits (concurrency full: memory waits for a release, Redis polls)."""
    asyncio.run(_compare(server.url, limits, ops))


async def _compare(url: str, limits: tuple[int | None, int | None, int | None], ops: list) -> None:
    rpm, tpm, cap = limits
    clock = Clock()
    # Generous bounds (the default is 0.5 s): what is compared is the answers, and a
    # loaded machine (two test workers and more) can take longer to connect or reply.
    counters = SharedCounters(url, timeout=10)
    redis_state = RedisState(
        counters.client, name(), rpm, tpm, cap, lease_ttl=1e6, clock=clock, timeout=10
    )
    memory = MemoryState(rpm, tpm, cap, clock=clock)
    leases: list[tuple[RedisLease, MemoryLease]] = []
    held: list[tuple[RedisLease, MemoryLease]] = []
    background = redis_state._background
    try:
        for op, arg in ops:
            if op == "advance":
                clock.now += arg
            elif op == "acquire":
                shared, local = await redis_state.acquire(arg), memory.try_acquire(arg)
                if isinstance(local, float) and math.isinf(local):
                    assert isinstance(shared, float) and shared >= redis_state.poll / 2
                elif isinstance(local, float):
                    assert isinstance(shared, float) and shared == pytest.approx(local, abs=2e-6)
                else:
                    assert isinstance(shared, RedisLease)
                    leases.append((shared, local))
                    held.append((shared, local))
                in_flight, requests, tokens = memory.usage()
                assert redis_state.usage()[1:] == (requests, tokens)
                if cap is not None:
                    assert redis_state.usage()[0] == in_flight
            elif op == "settle" and leases:
                shared, local = leases[arg % len(leases)]
                redis_state.settle(shared, arg)
                memory.settle(local, arg)
            elif op == "release" and held:
                shared, local = held.pop(arg % len(held))
                redis_state.release(shared)
                memory.release(local)
            assert await background.drain(5)
    finally:
        await redis_state.aclose()
        await counters.aclose()


async def test_tokens_settle_and_an_oversized_request_goes_in_alone(
    counters: SharedCounters,
) -> None:
    clock = Clock()
    state = RedisState(counters.client, name(), tokens_per_minute=100, clock=clock)
    first = await state.acquire(80)
    assert isinstance(first, RedisLease)
    assert await state.acquire(30) == pytest.approx(60.0)
    state.settle(first, 10)  # it used 10, not the 80 reserved
    await state._background.drain(5)
    assert isinstance(await state.acquire(30), RedisLease)
    assert state.usage() == (0, 2, 40)
    clock.now += 60
    # An estimate larger than the whole limit: admitted once the window is empty...
    assert isinstance(await state.acquire(500), RedisLease)
    # ...and nothing else fits until it has left.
    assert await state.acquire(1) == pytest.approx(60.0)


async def test_concurrency_polls_then_admits_after_a_release(counters: SharedCounters) -> None:
    state = counters.limit_state(name(), max_concurrency=2)
    a, b = await state.acquire(0), await state.acquire(0)
    assert isinstance(a, RedisLease) and isinstance(b, RedisLease)
    wait = await state.acquire(0)
    assert isinstance(wait, float) and 0.05 <= wait <= 0.15  # a poll, not UNTIL_RELEASE
    state.release(a)
    state.release(a)  # a second release of one lease frees nothing more
    await counters.background.drain(5)
    c = await state.acquire(0)
    assert isinstance(c, RedisLease)
    assert isinstance(await state.acquire(0), float)
    state.release(b)
    state.release(c)
    await counters.background.drain(5)
    assert state.shared.held == 0


async def test_a_dead_replicas_leases_expire_and_live_ones_are_refreshed(
    counters: SharedCounters,
) -> None:
    clock = Clock()
    where = name()
    dying = RedisState(counters.client, where, max_concurrency=1, lease_ttl=30, clock=clock)
    living = RedisState(counters.client, where, max_concurrency=1, lease_ttl=30, clock=clock)
    lease = await dying.acquire(0)
    assert isinstance(lease, RedisLease)
    clock.now += 20
    await dying.refresh()  # held here: its expiry moves to 20 + 30
    clock.now += 20
    assert isinstance(await living.acquire(0), float)
    await dying.aclose()  # the replica dies: nobody refreshes its lease again
    clock.now += 10.25
    assert isinstance(await living.acquire(0), RedisLease)
    await living.aclose()


async def test_the_refresher_runs_while_leases_are_held(counters: SharedCounters) -> None:
    state = RedisState(counters.client, name(), max_concurrency=1, lease_ttl=0.3)
    lease = await state.acquire(0)
    assert isinstance(lease, RedisLease)
    key = f"{{{state.prefix}}}:lease"
    first = await counters.client.zscore(key, lease.id)
    for _ in range(200):  # until the refresher has run (it sleeps 0.1 s between runs)
        await asyncio.sleep(0.05)
        if await counters.client.zscore(key, lease.id) != first:
            break
    else:
        raise AssertionError("the lease was never refreshed")
    state.release(lease)
    await state._background.drain(5)
    assert await counters.client.zscore(key, lease.id) is None
    await state.aclose()


async def test_idle_destinations_expire(counters: SharedCounters) -> None:
    state = counters.limit_state(name(), rpm=5, tpm=100, max_concurrency=2)
    lease = await state.acquire(10)
    prefix = state.shared.prefix
    for key in ("log", "tok", "lease"):
        ttl = await counters.client.pttl(f"{{{prefix}}}:{key}")
        assert 0 < ttl <= 65_000
    state.release(lease)


async def test_a_limiter_on_shared_state_queues_and_refuses(counters: SharedCounters) -> None:
    where = name()
    one = Limiter(max_concurrency=1, state=counters.limit_state(where, max_concurrency=1))
    other = Limiter(max_concurrency=1, state=counters.limit_state(where, max_concurrency=1))
    ticket = await one.acquire()
    waiting = asyncio.ensure_future(other.acquire())  # another replica, polling
    await asyncio.sleep(0.3)
    assert not waiting.done()
    ticket.release()
    second = await asyncio.wait_for(waiting, 10)
    second.release()

    refusing = Limiter(
        requests_per_minute=1, max_queue=0, state=counters.limit_state(name(), rpm=1)
    )
    (await refusing.acquire()).release()
    with pytest.raises(QueueRefused) as refused:
        await refusing.acquire()
    assert refused.value.retry_after > 50


# -- tokens per day ------------------------------------------------------------------------


def test_memory_day_counter_renews_at_utc_midnight() -> None:
    clock = Clock(DAY * 20_000 + DAY - 100)
    counter = MemoryPeriodCounter(1000, clock=clock)
    assert counter.check_now() == 0.0
    counter.add(600)
    counter.add(600)
    assert counter.check_now() == pytest.approx(100)
    counter.observe(5000, 19_999)  # yesterday's count: ignored
    assert counter.used == 1200
    clock.now += 100
    assert counter.check_now() == 0.0 and counter.used == 0
    assert until_midnight(clock.now) == DAY


async def test_redis_day_counter_counts_the_utc_day(counters: SharedCounters) -> None:
    clock = Clock(DAY * 20_000 + DAY - 100.0)
    background = Background()
    counter = RedisPeriodCounter(
        counters.client, f"day:{uuid.uuid4().hex}", 1000, background=background, clock=clock
    )
    other = RedisPeriodCounter(counters.client, counter.prefix, 1000, clock=clock)  # a replica
    assert await counter.check() == 0.0
    counter.add(600)
    counter.add(0)  # nothing to send
    await background.drain(5)
    assert await other.check() == 0.0
    other.add(600)
    await other._background.drain(5)
    assert await counter.check() == pytest.approx(100)
    assert counter.seen == (20_000, 1200)
    clock.now += 50  # still over: answered here, without asking Redis again
    assert await counter.check() == pytest.approx(50)
    clock.now += 50  # midnight (UTC): a new day
    assert await counter.check() == 0.0
    assert counter.seen == (20_001, 0)


# -- months (budgets) ----------------------------------------------------------------------

#: month boundaries the calendar gets wrong first: leap days, years ending, 2100 (no leap)
MONTH_EDGES = [
    datetime(2024, 2, 29, 23, 59, 59, tzinfo=UTC),
    datetime(2024, 3, 1, tzinfo=UTC),
    datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2027, 1, 1, tzinfo=UTC),
    datetime(2100, 2, 28, 12, tzinfo=UTC),
    datetime(2000, 2, 29, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
]


@settings(max_examples=60, deadline=None)
@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 12, 31)))
@example(MONTH_EDGES[0].replace(tzinfo=None))
async def test_redis_months_are_the_calendar_s(server: RedisServer, when: datetime) -> None:
    """The month Redis's script computes (from a day number, without a calendar) is the
    one Python's calendar names, and so is its end."""
    clock = Clock(when.replace(tzinfo=UTC).timestamp())
    counters = SharedCounters(server.url, prefix=f"t-{uuid.uuid4().hex}")
    try:
        counter = RedisPeriodCounter(
            counters.client, f"m:{uuid.uuid4().hex}", 1, period=MONTH, clock=clock
        )
        counter.add(1)
        await counter._background.drain(5)
        wait = await counter.check()
        index = MONTH.index(clock.now)
        assert counter.seen == (index, 1)
        assert clock.now + wait == pytest.approx(MONTH.end(index), abs=1e-5)
    finally:
        await counters.aclose()


@pytest.mark.parametrize("when", MONTH_EDGES, ids=lambda d: d.isoformat()[:19])
def test_memory_month_counter_renews_on_the_first(when: datetime) -> None:
    clock = Clock(when.timestamp())
    counter = MemoryPeriodCounter(10, period=MONTH, clock=clock)
    counter.add(10)
    wait = counter.check_now()
    first = datetime(when.year + when.month // 12, when.month % 12 + 1, 1, tzinfo=UTC)
    assert clock.now + wait == pytest.approx(first.timestamp())
    clock.now = first.timestamp()
    assert counter.check_now() == 0.0 and counter.used == 0


async def test_a_count_rebuilt_on_start_floors_the_shared_one(counters: SharedCounters) -> None:
    """What a replica rebuilt from its usage log raises Redis's count, never lowers it,
    and only for the period it was read for."""
    clock = Clock(datetime(2026, 11, 28, 12, tzinfo=UTC).timestamp())
    counter = RedisPeriodCounter(
        counters.client, f"s:{uuid.uuid4().hex}", 100, period=MONTH, clock=clock
    )
    index = MONTH.index(clock.now)
    await counter.floor(70, index)
    assert counter.seen == (index, 70)
    await counter.floor(40, index)  # less than counted: kept
    assert counter.seen == (index, 70)
    await counter.floor(500, index - 1)  # last month's: not this month's count
    assert counter.seen == (index, 70)
    counter.add(30)
    await counter._background.drain(5)
    assert await counter.check() > 0  # 100 of 100


# -- failover ------------------------------------------------------------------------------


async def test_redis_away_means_per_process_limits_then_shared_again(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, logger="interlingua.limits")
    server = RedisServer(tmp_path)
    server.start()
    counters = SharedCounters(server.url, prefix="t", retry_every=0.1)
    try:
        state = counters.limit_state("key:team-a", rpm=3, max_concurrency=5)
        day = counters.period_counter("key:team-a", 100)
        assert await counters.start()
        before = await state.acquire(0)
        assert isinstance(before, RedisLease)
        day.shared.add(70)  # another replica's tokens: in Redis, not in this process
        await counters.background.drain(5)
        assert await day.check() == 0.0

        server.kill()
        got = [await state.acquire(0) for _ in range(5)]
        # Redis is away: this process's limits (rpm 3 of its own), no exception.
        assert [type(g) for g in got] == [MemoryLease] * 3 + [float] * 2
        state.release(before)  # a Redis lease, released while Redis is away: no raise
        await counters.background.drain(5)
        day.add(40)  # 40 here: over 100 with the 70 Redis last reported
        assert day.local.used == 110
        assert await day.check() > 0
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "shared state unavailable, limits are per process" in warnings[0].getMessage()
        assert not state.is_shared

        server.start()  # the same port
        for _ in range(200):
            if state.is_shared:
                break
            await asyncio.sleep(0.05)
        assert state.is_shared
        infos = [r for r in caplog.records if "shared state is back" in r.getMessage()]
        assert len(infos) == 1
        after = await state.acquire(0)
        assert isinstance(after, RedisLease)  # a fresh Redis: its window is empty
        # Leases go back to the backend that issued them.
        for lease in got[:3]:
            state.release(lease)
        assert state.local.usage()[0] == 0
        state.release(after)
        await counters.background.drain(5)
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    finally:
        await counters.aclose()
        server.stop()


async def test_a_redis_that_stops_answering_costs_a_request_one_timeout(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path)
    server.start()
    counters = SharedCounters(server.url, prefix="t", retry_every=0.1, timeout=0.3)
    try:
        state = counters.limit_state("key:team-a", rpm=3)
        assert isinstance(await state.acquire(0), RedisLease)
        server.pause()  # connections open, no answers: only the timeout can tell
        assert isinstance(await state.acquire(0), MemoryLease)
        assert not state.is_shared
        assert isinstance(await state.acquire(0), MemoryLease)  # no second wait
        server.resume()
        for _ in range(200):
            if state.is_shared:
                break
            await asyncio.sleep(0.05)
        # Shared again: the first admission (and maybe the one that timed out, which
        # Redis ran when it thawed) counts toward rpm 3.
        assert isinstance(await state.acquire(0), RedisLease)
        assert state.usage()[1] in (2, 3)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "TimeoutError" in warnings[0].getMessage()
    finally:
        await counters.aclose()
        server.stop()


async def test_starting_without_redis_serves_per_process(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path)  # never started: nothing listens on its port
    counters = SharedCounters(server.url, prefix="t", retry_every=0.1, timeout=0.2)
    try:
        assert not await counters.start()
        state = counters.limit_state("upstream:nim", rpm=1)
        assert isinstance(await state.acquire(0), MemoryLease)
        assert isinstance(await state.acquire(0), float)
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
        assert counters.health.outages == 1
    finally:
        await counters.aclose()


async def test_an_unexpected_error_is_logged_and_not_taken_for_an_outage(
    counters: SharedCounters, caplog: pytest.LogCaptureFixture
) -> None:
    counters.health.failed(ValueError("a bug"))
    assert counters.health.up
    ours = [r.levelno for r in caplog.records if r.name == "interlingua.limits"]
    assert ours == [logging.ERROR]


async def test_a_cancelled_acquire_is_cancelled(counters: SharedCounters) -> None:
    """A request whose client hangs up mid-call is cancelled, whatever the call was
    doing (redis-py's socket timeout on Python 3.11 once swallowed such cancellations:
    the loop below then ran on)."""
    state = counters.limit_state(name(), rpm=10**9, max_concurrency=10**6)

    async def hammer() -> None:
        while True:
            lease = await state.acquire(0)
            state.release(lease)

    for _ in range(8):
        task = asyncio.ensure_future(hammer())
        await asyncio.sleep(0.01)
        task.cancel()
        done, _ = await asyncio.wait((task,), timeout=5)
        assert done and task.cancelled()
    assert counters.health.up


def test_without_the_extra_nothing_imports_redis() -> None:
    code = (
        "import sys, interlingua.limits, interlingua.upstreams, interlingua.routing;"
        "assert 'redis' not in sys.modules, [m for m in sys.modules if 'redis' in m]"
    )
    env = {"PYTHONPATH": f"{REPO / 'src'}", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=REPO, timeout=60)
