"""Background work's part of a limiter: its share of the limits and its own waiting line.

A batch runs thousands of requests through the same upstreams as the people typing; if
it took every slot the limits allow, each interactive request would wait behind it. So a
:class:`~.queue.Limiter` serves requests marked as background work
(:data:`~.priority.BACKGROUND`) apart, with :class:`BackgroundShare`:

* **a share of the limits** -- background requests hold at most ``share`` of
  ``max_concurrency`` (rounded down, at least 1) and use at most ``share`` of the rpm and
  tpm windows (a window of their own, counting only them, with the limits times
  ``share``, rounded down, at least 1). A background request must fit its share *and*
  the limiter's whole limits, which count every request;
* **interactive first** -- a background request never asks for room while an
  interactive request waits in the limiter's line; interactive requests are served
  first, first come first served among themselves, and background ones first come first
  served among themselves;
* **no giving up** -- a background request waits as long as it takes: no
  ``queue_timeout``, and it does not count toward ``max_queue`` (those bound how long a
  client waits and how many wait, and a batch is not a client that hangs up). A
  cancelled one leaves its line cleanly.

The share is counted in this process: with counters shared through Redis the whole
limits are the replicas' together, while the background share and the yielding are each
replica's own (docs/batch.md, "Live traffic first").

A limiter builds its share on its first background request: one that never serves
background work pays nothing.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable

from .window import Window

__all__ = ["BackgroundShare", "nap"]


class BackgroundShare:
    """The counters and the line of a limiter's background requests (module docstring).

    ``share`` is in (0, 1]; ``rpm``, ``tpm``, ``max_concurrency`` are the limiter's (None:
    not limited, so no share of it either).
    """

    __slots__ = ("cap", "in_flight", "line", "wake", "window")

    def __init__(
        self,
        share: float,
        rpm: int | None = None,
        tpm: int | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"the background share must be in (0, 1], got {share}")
        #: background requests that may be in flight at once
        self.cap = math.inf if max_concurrency is None else _part(share, max_concurrency)
        rpm_part = None if rpm is None else _part(share, rpm)
        tpm_part = None if tpm is None else _part(share, tpm)
        #: background admissions of the last minute, against their share of rpm and tpm
        self.window = Window(rpm_part, tpm_part)
        self.in_flight = 0
        #: the background requests waiting, first come first: each one's turn
        self.line: deque[asyncio.Future[None]] = deque()
        #: the napping head's alarm
        self.wake: asyncio.Future[None] | None = None

    def fits(self, now: float, tokens: int) -> float:
        """0.0 when one more background request of ``tokens`` fits the share now, else
        the seconds until it may (inf: until a background request ends)."""
        if self.in_flight >= self.cap:
            return math.inf
        window = self.window
        return window.wait_needed(now, tokens) if window.limited else 0.0

    def poke(self) -> None:
        """Wake the napping head: a release, a settle, or the interactive line emptied."""
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def leave(self, turn: asyncio.Future[None]) -> None:
        """Take a waiter out of the line (admitted or cancelled); if it was the head, the
        next one's turn begins."""
        line = self.line
        if line and line[0] is turn:
            line.popleft()
            if line and not line[0].done():
                line[0].set_result(None)
        elif turn in line:
            line.remove(turn)

    async def nap(self, seconds: float, sleep: Callable[[float], Awaitable[object]]) -> None:
        """Sleep ``seconds`` (inf: until poked), or less if :meth:`poke` is called."""
        wake = self.wake = asyncio.get_running_loop().create_future()
        try:
            await nap(wake, seconds, sleep)
        finally:
            if self.wake is wake:
                self.wake = None


async def nap(
    wake: asyncio.Future[None], seconds: float, sleep: Callable[[float], Awaitable[object]]
) -> None:
    """Wait for ``wake`` at most ``seconds`` (inf: without an alarm) slept with ``sleep``."""
    if math.isinf(seconds):
        await wake
        return
    alarm = asyncio.ensure_future(sleep(seconds))
    try:
        await asyncio.wait((wake, alarm), return_when=asyncio.FIRST_COMPLETED)
    finally:
        alarm.cancel()


def _part(share: float, limit: int) -> int:
    """``share`` of ``limit``, rounded down, at least 1 (a share always lets one in)."""
    return max(1, math.floor(share * limit + 1e-9))
