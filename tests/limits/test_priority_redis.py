"""Background work on limits shared through Redis: what is shared and what is each
replica's own (docs/batch.md, "Live traffic first").

Shared: the whole limits (every replica's requests, background or not, count in Redis).
Each replica's own: the background share and the yielding -- a replica counts its own
background requests against ``share`` of the limits and holds them back while *its*
interactive requests wait. Real time; a replica polls Redis when full (0.1 s).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from interlingua.limits import Limiter, SharedCounters, Ticket
from tests.redis_server import RedisServer, needs_redis_server, redis_server

pytestmark = needs_redis_server


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


@pytest.fixture
async def replicas(server: RedisServer) -> AsyncIterator[tuple[Limiter, Limiter]]:
    """Two replicas' limiters of one upstream (max_concurrency 4, share 0.5), each with
    its own Redis client."""
    prefix = f"t-{uuid.uuid4().hex}"
    counters = [SharedCounters(server.url, prefix=prefix) for _ in range(2)]
    limiters = tuple(
        Limiter(
            max_concurrency=4,
            background_share=0.5,
            state=shared.limit_state("upstream:u", max_concurrency=4),
        )
        for shared in counters
    )
    yield limiters  # type: ignore[misc]
    for shared in counters:
        await shared.aclose()


async def released(*tickets: Ticket) -> None:
    """Release, and give the fire-and-forget releases time to reach Redis."""
    for ticket in tickets:
        ticket.release()
    await asyncio.sleep(0.05)


async def test_whole_limits_shared_share_and_yielding_per_replica(
    replicas: tuple[Limiter, Limiter],
) -> None:
    a, b = replicas
    batch = [asyncio.ensure_future(a.acquire_background()) for _ in range(3)]
    await asyncio.sleep(0.3)
    # A's background share: 2 of 4, though Redis has room for more.
    assert [task.done() for task in batch] == [True, True, False]
    live_b = [await asyncio.wait_for(b.acquire(), 5) for _ in range(2)]
    # The whole limits count both replicas: 4 in flight, A's interactive request waits.
    waiting = asyncio.ensure_future(a.acquire())
    await asyncio.sleep(0.3)
    assert not waiting.done() and a.waiting == 1
    await released(batch[0].result())
    # A's background line has room in its share again, but A's interactive request
    # waits: it gets the slot.
    interactive = await asyncio.wait_for(waiting, 5)
    await asyncio.sleep(0.3)
    assert not batch[2].done()
    await released(*live_b)
    third = await asyncio.wait_for(batch[2], 5)
    assert a.background_in_flight == 2
    await released(interactive)
    # Not shared: B counts its own background requests against its own share, so the
    # replicas' batches together may hold the whole limits.
    batch_b = [await asyncio.wait_for(b.acquire_background(), 5) for _ in range(2)]
    assert a.background_in_flight + b.background_in_flight == 4
    late = asyncio.ensure_future(b.acquire())
    await asyncio.sleep(0.3)
    assert not late.done()  # ... and the whole limits still hold across them
    await released(batch[1].result(), third, *batch_b)
    (await asyncio.wait_for(late, 5)).release()
