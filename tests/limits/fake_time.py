"""Virtual time for limiter tests: ``sleep`` waits until :meth:`FakeTime.advance` passes
its deadline, so a test says exactly when time moves (unlike an instant-advancing clock,
timers and timeouts keep their order)."""

from __future__ import annotations

import asyncio
import heapq
import itertools


class FakeTime:
    """A clock (call it) and a ``sleep`` driven by :meth:`advance`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), future))
        await future

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking sleepers in deadline order."""
        target = self.now + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            at, _, future = heapq.heappop(self._sleepers)
            if future.done():
                continue
            self.now = max(self.now, at)
            future.set_result(None)
            await settle()
        self.now = target
        await settle()


async def settle(rounds: int = 20) -> None:
    """Let every ready task run until things are quiet."""
    for _ in range(rounds):
        await asyncio.sleep(0)
