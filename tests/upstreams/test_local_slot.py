"""The local engine's slot: one holder, a bounded FIFO line, 429 when full, any thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from interlingua.errors import OverloadedError
from interlingua.upstreams.local.slot import Slot


async def test_free_slot_is_taken_at_once_and_released() -> None:
    slot = Slot(max_queue=0)
    await slot.acquire()
    assert slot.busy
    slot.release()
    assert not slot.busy
    await slot.acquire()
    assert slot.busy


async def test_full_line_is_refused_with_429_and_retry_after() -> None:
    slot = Slot(max_queue=1)
    await slot.acquire()
    waiter = asyncio.create_task(slot.acquire())
    await asyncio.sleep(0)
    assert slot.waiting == 1
    with pytest.raises(OverloadedError) as info:
        await slot.acquire()
    assert info.value.status == 429
    assert info.value.retry_after == 1.0
    assert info.value.message == "local model is busy: 1 requests waiting"
    slot.release()
    await waiter  # the waiter got the slot
    assert slot.busy and slot.waiting == 0


async def test_max_queue_zero_refuses_any_wait() -> None:
    slot = Slot(max_queue=0)
    await slot.acquire()
    with pytest.raises(OverloadedError, match="0 requests waiting"):
        await slot.acquire()


async def test_waiters_are_served_in_order() -> None:
    slot = Slot(max_queue=5)
    await slot.acquire()
    order: list[int] = []

    async def wait(i: int) -> None:
        await slot.acquire()
        order.append(i)
        slot.release()

    tasks = [asyncio.create_task(wait(i)) for i in range(4)]
    await asyncio.sleep(0)
    assert slot.waiting == 4
    slot.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3]
    assert not slot.busy


async def test_cancelled_waiter_leaves_the_line() -> None:
    slot = Slot(max_queue=2)
    await slot.acquire()
    waiter = asyncio.create_task(slot.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slot.waiting == 0
    slot.release()
    assert not slot.busy


async def test_waiter_cancelled_after_the_handover_passes_the_slot_on() -> None:
    slot = Slot(max_queue=2)
    await slot.acquire()
    first = asyncio.create_task(slot.acquire())
    second = asyncio.create_task(slot.acquire())
    await asyncio.sleep(0)
    slot.release()  # hands the slot to `first` (its wake-up is scheduled, not yet run)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)  # the slot was passed on, not lost
    assert slot.busy and slot.waiting == 0


async def test_release_from_another_thread_wakes_the_waiter() -> None:
    slot = Slot(max_queue=1)
    await slot.acquire()
    waiter = asyncio.create_task(slot.acquire())
    await asyncio.sleep(0)
    thread = threading.Thread(target=slot.release)
    thread.start()
    await asyncio.wait_for(waiter, 1)
    thread.join()
    assert slot.busy
