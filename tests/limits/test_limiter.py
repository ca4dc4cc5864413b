"""limits/queue.py: the FIFO line, its bounds, Retry-After, settling and cancellation,
on virtual time."""

from __future__ import annotations

import asyncio

import pytest

from interlingua.errors import ErrorKind
from interlingua.limits import Limiter, QueueRefused, Ticket

from .fake_time import FakeTime, settle


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


def limiter(time: FakeTime, **kwargs: object) -> Limiter:
    return Limiter(**kwargs, what="upstream 'u'", clock=time, sleep=time.sleep)  # type: ignore[arg-type]


def start(lim: Limiter, tokens: int = 0) -> asyncio.Task[Ticket]:
    return asyncio.ensure_future(lim.acquire(tokens))


async def test_the_line_is_served_in_order_as_the_window_frees(time: FakeTime) -> None:
    lim = limiter(time, requests_per_minute=2)
    order: list[int] = []
    tasks = [start(lim) for _ in range(6)]
    for i, task in enumerate(tasks):
        task.add_done_callback(lambda _, i=i: order.append(i))
    await settle()
    assert order == [0, 1] and lim.waiting == 4
    await time.advance(59.9)
    assert order == [0, 1]
    await time.advance(0.1)
    assert order == [0, 1, 2, 3]
    await time.advance(60)
    assert order == list(range(6)) and lim.waiting == 0
    assert [task.result().started for task in tasks] == [1000, 1000, 1060, 1060, 1120, 1120]


async def test_a_small_request_never_overtakes_a_large_one(time: FakeTime) -> None:
    lim = limiter(time, tokens_per_minute=100)
    first = await lim.acquire(90)
    large, small = start(lim, 50), start(lim, 5)  # 5 would fit now; 50 does not
    await settle()
    assert not large.done() and not small.done()
    await time.advance(60)
    assert large.done() and small.done()
    assert (await large).started == (await small).started == 1060
    first.release()


async def test_concurrency_cap_and_release_hands_the_slot_on(time: FakeTime) -> None:
    lim = limiter(time, max_concurrency=2)
    a, b = await lim.acquire(), await lim.acquire()
    c = start(lim)
    await settle()
    assert not c.done() and lim.in_flight == 2 and lim.state.usage()[0] == 2
    a.release()
    a.release()  # idempotent: the slot is not freed twice
    await settle()
    assert c.done() and lim.in_flight == 2
    b.release(), (await c).release()
    assert lim.in_flight == 0 and lim.state.usage()[0] == 0


async def test_a_full_line_refuses_at_once(time: FakeTime) -> None:
    lim = limiter(time, max_concurrency=1, max_queue=2)
    held = await lim.acquire()
    waiting = [start(lim), start(lim)]
    await settle()
    with pytest.raises(QueueRefused) as refused:
        await lim.acquire()
    error = refused.value
    assert error.reason == "queue_full" and error.status == 429
    assert error.kind is ErrorKind.OVERLOADED  # Anthropic clients: 529 overloaded_error
    assert error.retry_after is not None and error.retry_after >= 1
    assert "2 requests already wait" in error.message and "max_concurrency 1" in error.message
    held.release()
    await settle()
    (await waiting[0]).release()
    await settle()
    (await waiting[1]).release()


async def test_max_queue_zero_never_waits(time: FakeTime) -> None:
    lim = limiter(time, requests_per_minute=1, max_queue=0)
    (await lim.acquire()).release()
    with pytest.raises(QueueRefused) as refused:
        await lim.acquire()
    assert refused.value.reason == "queue_full"
    assert refused.value.retry_after == pytest.approx(60)  # the window frees in 60 s


async def test_queue_timeout_refuses_with_the_window_wait(time: FakeTime) -> None:
    lim = limiter(time, requests_per_minute=1, queue_timeout=5)
    await lim.acquire()
    late = start(lim)
    later = start(lim)
    await time.advance(4.9)
    assert not late.done()
    await time.advance(0.1)
    with pytest.raises(QueueRefused) as refused:
        await late
    error = refused.value
    assert error.reason == "queue_timeout" and "no turn within 5 s" in error.message
    assert error.retry_after == pytest.approx(55)  # the window frees at 1060
    # Every request waits the same timeout: the next one's comes right after.
    with pytest.raises(QueueRefused):
        await later
    assert lim.waiting == 0


async def test_queue_timeout_retry_after_from_hold_times(time: FakeTime) -> None:
    lim = limiter(time, max_concurrency=1, queue_timeout=3)
    first = await lim.acquire()
    await time.advance(10)
    first.release()  # requests hold their slot about 10 s
    await lim.acquire()
    late = start(lim)
    await time.advance(3)
    with pytest.raises(QueueRefused) as refused:
        await late
    assert refused.value.retry_after == pytest.approx(7)  # 10 s mean, held for 3 already


async def test_retry_after_is_at_least_one_second(time: FakeTime) -> None:
    lim = limiter(time, max_concurrency=1, queue_timeout=2)
    await lim.acquire()  # never released, no history
    late = start(lim)
    await time.advance(2)
    with pytest.raises(QueueRefused) as refused:
        await late
    assert refused.value.retry_after == 1.0


async def test_admission_at_the_deadline_wins_over_refusal(time: FakeTime) -> None:
    lim = limiter(time, requests_per_minute=1, queue_timeout=60)
    await lim.acquire()
    late = start(lim)
    await time.advance(60)
    assert (await late).started == 1060


async def test_a_cancelled_waiter_leaves_the_line(time: FakeTime) -> None:
    lim = limiter(time, max_concurrency=1, max_queue=2)
    held = await lim.acquire()
    head, second = start(lim), start(lim)
    await settle()
    head.cancel()  # its client hung up
    await settle()
    assert head.cancelled() and lim.waiting == 1
    third = start(lim)  # the place is free again: not refused as a full line
    await settle()
    assert lim.waiting == 2
    second.cancel()
    await settle()
    held.release()
    await settle()
    assert third.done() and lim.in_flight == 1
    (await third).release()
    assert lim.in_flight == 0 and lim.state.usage()[0] == 0


async def test_cancelled_as_the_slot_was_handed_over_does_not_leak(time: FakeTime) -> None:
    lim = limiter(time, max_concurrency=1)
    held = await lim.acquire()
    waiter, after = start(lim), start(lim)
    await settle()
    held.release()  # the waiter's turn: it will take the slot when it runs...
    waiter.cancel()  # ...but it is cancelled before it does
    await settle()
    assert waiter.cancelled()
    assert after.done() and lim.in_flight == 1 and lim.state.usage()[0] == 1
    (await after).release()
    assert lim.in_flight == 0 and lim.state.usage()[0] == 0


async def test_cancelled_while_holding_releases(time: FakeTime) -> None:
    lim = limiter(time, max_concurrency=1)
    entered = asyncio.Event()

    async def work() -> None:
        async with lim.slot():
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(work())
    await entered.wait()
    assert lim.in_flight == 1
    task.cancel()
    await settle()
    assert lim.in_flight == 0
    (await lim.acquire()).release()


async def test_tokens_settled_with_actual_usage(time: FakeTime) -> None:
    lim = limiter(time, tokens_per_minute=100)
    a = await lim.acquire(80)
    waiting = start(lim, 50)
    await settle()
    assert not waiting.done()
    a.settle(10)  # it used far less: the waiting one fits now, no time passes
    await settle()
    assert waiting.done() and time.now == 1000
    assert lim.state.usage()[1:] == (2, 60)
    a.release()
    (await waiting).settle(95)  # upwards: the next must wait for the window
    nxt = start(lim, 10)
    await settle()
    assert not nxt.done()
    await time.advance(60)
    assert nxt.done() and lim.state.usage()[1:] == (1, 10)


async def test_a_request_larger_than_the_limit_goes_alone(time: FakeTime) -> None:
    lim = limiter(time, tokens_per_minute=100)
    (await lim.acquire(500)).release()
    nxt = start(lim, 1)
    await settle()
    assert not nxt.done()
    await time.advance(60)
    assert nxt.done()


def test_bounds_validated() -> None:
    with pytest.raises(ValueError, match="max_queue"):
        Limiter(max_concurrency=1, max_queue=-1)
    with pytest.raises(ValueError, match="queue_timeout"):
        Limiter(max_concurrency=1, queue_timeout=0)
