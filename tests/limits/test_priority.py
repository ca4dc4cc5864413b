"""limits/share.py through Limiter.acquire_background: background work (a batch's lines)
gets its share of the limits, yields to interactive requests waiting in line, and waits
without the line's bounds; on virtual time."""

from __future__ import annotations

import asyncio

import pytest

from interlingua.limits import Limiter, QueueRefused, Ticket
from interlingua.limits.share import BackgroundShare

from .fake_time import FakeTime, settle


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


def limiter(time: FakeTime, share: float = 0.5, **kwargs: object) -> Limiter:
    return Limiter(
        **kwargs,  # type: ignore[arg-type]
        what="upstream 'u'",
        background_share=share,
        clock=time,
        sleep=time.sleep,
    )


def start(
    lim: Limiter, tokens: int = 0, *, background: bool, log: list[str], name: str
) -> asyncio.Task[Ticket]:
    """The acquire as a task that writes ``name`` into ``log`` when admitted."""

    async def run() -> Ticket:
        ticket = await (lim.acquire_background(tokens) if background else lim.acquire(tokens))
        log.append(name)
        return ticket

    return asyncio.ensure_future(run())


async def test_an_interactive_request_is_admitted_before_the_next_background_one(
    time: FakeTime,
) -> None:
    lim = limiter(time, max_concurrency=4)
    log: list[str] = []
    batch = [start(lim, background=True, log=log, name=f"b{i}") for i in range(5)]
    await settle()
    # Half of 4: two background requests in flight, the others wait though slots are free.
    assert log == ["b0", "b1"] and lim.background_in_flight == 2
    assert lim.background_waiting == 3 and lim.in_flight == 2
    live = [start(lim, background=False, log=log, name=f"i{i}") for i in range(3)]
    await settle()
    assert log == ["b0", "b1", "i0", "i1"] and lim.waiting == 1  # i2 waits: 4 in flight
    (await batch[0]).release()
    await settle()
    # The freed slot goes to the waiting interactive request, not to b2.
    assert log[-1] == "i2" and lim.background_waiting == 3
    (await live[0]).release()
    await settle()
    assert log[-1] == "b2"  # no one interactive waits: the background line moves again
    for task in (batch[1], batch[2], live[1], live[2]):
        (await task).release()
        await settle()
    assert log[-2:] == ["b3", "b4"]
    for task in batch[3:]:
        (await task).release()
    assert lim.in_flight == 0 and lim.background_in_flight == 0 and lim.state.usage()[0] == 0


async def test_share_one_uses_everything_but_still_yields(time: FakeTime) -> None:
    lim = limiter(time, share=1.0, max_concurrency=4)
    log: list[str] = []
    batch = [start(lim, background=True, log=log, name=f"b{i}") for i in range(6)]
    await settle()
    assert log == ["b0", "b1", "b2", "b3"] and lim.background_waiting == 2
    live = [start(lim, background=False, log=log, name=f"i{i}") for i in range(2)]
    await settle()
    assert lim.waiting == 2
    (await batch[0]).release()
    await settle()
    (await batch[1]).release()
    await settle()
    # Both freed slots went to the interactive requests (first come first), before b4.
    assert log[4:] == ["i0", "i1"]
    (await batch[2]).release()
    await settle()
    assert log[-1] == "b4"
    for task in (*batch[3:5], *live):
        (await task).release()
    await settle()
    (await batch[5]).release()
    assert log[-1] == "b5" and lim.in_flight == 0


async def test_background_keeps_to_its_share_of_rpm(time: FakeTime) -> None:
    lim = limiter(time, requests_per_minute=10)
    log: list[str] = []
    batch = [start(lim, background=True, log=log, name=f"b{i}") for i in range(8)]
    await settle()
    assert len(log) == 5  # half of 10 a minute
    live = [start(lim, background=False, log=log, name=f"i{i}") for i in range(6)]
    await settle()
    # Interactive requests have the other half at once; the sixth waits for the window.
    assert log[5:] == [f"i{i}" for i in range(5)] and lim.waiting == 1
    await time.advance(60)
    # The window turned: the waiting interactive request first, then background's share.
    assert log[10:] == ["i5", "b5", "b6", "b7"]
    for task in (*batch, *live):
        (await task).release()


async def test_background_keeps_to_its_share_of_tpm_as_settled(time: FakeTime) -> None:
    lim = limiter(time, tokens_per_minute=1000)
    log: list[str] = []
    first = start(lim, 300, background=True, log=log, name="b0")
    second = start(lim, 300, background=True, log=log, name="b1")
    await settle()
    assert log == ["b0"]  # 600 of background's 500 would not fit
    interactive = await lim.acquire(400)  # the whole window still has room
    ticket = await first
    ticket.settle(100)  # the answer used less: the second fits now
    await settle()
    assert log == ["b0", "b1"]
    for held in (ticket, await second, interactive):
        held.release()
    assert lim.state.usage()[2] == 800


async def test_interactive_bounds_count_interactive_requests_only(time: FakeTime) -> None:
    lim = limiter(time, share=1.0, max_concurrency=1, max_queue=1, queue_timeout=5)
    held = await lim.acquire_background()
    log: list[str] = []
    batch = [start(lim, background=True, log=log, name=f"b{i}") for i in range(10)]
    waiting = start(lim, background=False, log=log, name="i0")
    await settle()
    assert lim.waiting == 1 and lim.background_waiting == 10
    # The line holds one interactive request: ten background ones do not fill it.
    with pytest.raises(QueueRefused) as refused:
        await lim.acquire()
    assert (
        refused.value.reason == "queue_full" and "1 requests already wait" in refused.value.message
    )
    await time.advance(5)
    with pytest.raises(QueueRefused) as timed_out:
        await waiting
    assert timed_out.value.reason == "queue_timeout"
    # Background requests wait past queue_timeout: a batch waits its turn.
    await time.advance(600)
    assert not any(task.done() for task in batch) and lim.background_waiting == 10
    held.release()
    for i, task in enumerate(batch):
        await settle()
        assert log[-1] == f"b{i}"
        (await task).release()
    assert lim.in_flight == 0 and lim.background_waiting == 0


async def test_a_cancelled_background_waiter_leaves_cleanly(time: FakeTime) -> None:
    lim = limiter(time, max_concurrency=2)
    held = await lim.acquire_background()  # background's one slot (half of 2)
    log: list[str] = []
    head = start(lim, background=True, log=log, name="b0")
    middle = start(lim, background=True, log=log, name="b1")
    last = start(lim, background=True, log=log, name="b2")
    await settle()
    assert lim.background_waiting == 3
    middle.cancel()
    head.cancel()
    await settle()
    assert head.cancelled() and middle.cancelled() and lim.background_waiting == 1
    held.release()
    await settle()
    assert log == ["b2"] and lim.background_in_flight == 1
    (await last).release()
    assert lim.in_flight == 0 and lim.background_in_flight == 0 and lim.state.usage()[0] == 0


async def test_an_interactive_waiter_cancelled_lets_background_go(time: FakeTime) -> None:
    lim = limiter(time, share=1.0, tokens_per_minute=1000)
    held = await lim.acquire(600)
    log: list[str] = []
    interactive = start(lim, 500, background=False, log=log, name="i0")
    background = start(lim, 100, background=True, log=log, name="b0")
    await settle()
    # 100 tokens would fit, but an interactive request waits: background holds back.
    assert log == [] and lim.background_waiting == 1
    interactive.cancel()
    await settle()
    assert log == ["b0"] and lim.waiting == 0  # nothing was released: the line emptied
    (await background).release()
    held.release()


def test_the_share_rounds_down_but_always_lets_one_in() -> None:
    share = BackgroundShare(0.5, rpm=3, tpm=1001, max_concurrency=1)
    assert share.cap == 1
    assert share.window.requests_per_minute == 1 and share.window.tokens_per_minute == 500
    assert BackgroundShare(0.3, max_concurrency=10).cap == 3
    assert BackgroundShare(1.0, max_concurrency=4).cap == 4
    with pytest.raises(ValueError, match="share"):
        BackgroundShare(0)
    with pytest.raises(ValueError, match="background_share"):
        Limiter(max_concurrency=1, background_share=1.5)
