"""A key's ``tokens_per_day``: tokens counted per UTC calendar day, in this process."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["MemoryDayCounter", "seconds_to_midnight"]

DAY = 86400.0


def seconds_to_midnight(now: float) -> float:
    """Seconds from ``now`` (Unix time) to the next UTC midnight."""
    return DAY - now % DAY


class MemoryDayCounter:
    """Tokens used today (UTC) against ``limit``; the count starts again at midnight."""

    __slots__ = ("_clock", "_day", "limit", "used")

    def __init__(self, limit: int, *, clock: Callable[[], float] = time.time) -> None:
        self.limit = limit
        self._clock = clock
        self._day = -1
        self.used = 0

    def _today(self) -> float:
        now = self._clock()
        day = int(now // DAY)
        if day != self._day:
            self._day, self.used = day, 0
        return now

    async def check(self) -> float:
        """0 while under the limit, else the seconds until midnight (UTC)."""
        now = self._today()
        return 0.0 if self.used < self.limit else seconds_to_midnight(now)

    def add(self, tokens: int) -> None:
        self._today()
        self.used += tokens
