"""Tokens per UTC calendar day: a key's ``tokens_per_day``.

A :class:`DayCounter` answers one question before a request starts -- is the day's
allowance used up? -- and is told afterwards what the request cost. The check is a
coroutine (a shared counter, :class:`~.redis_state.RedisDayCounter`, answers over the
network) and ``add`` a plain call (a shared counter sends it without waiting), like
:class:`~.state.LimitState`'s ``acquire`` and ``settle``.

The allowance is soft at its edge, as the per-minute token windows are not: a request is
admitted while the day's count is under the limit, and its actual tokens count once it
ends, so the last request of a day may carry the count past the limit. (Reserving an
estimate, as the windows do, would refuse a whole day's last requests on a guess.)

Days are UTC calendar days: Unix time has no leap seconds, so day ``n`` is
``[n * 86400, (n + 1) * 86400)``.

>>> counter = MemoryDayCounter(1000, clock=lambda: 86_400 * 20_000 + 3600.0)
>>> counter.add(1000); counter.check_now()   # used up until midnight, 23 h away
82800.0
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["DAY", "DayCounter", "MemoryDayCounter", "until_midnight"]

DAY = 86_400
"""Seconds in a UTC calendar day (Unix time counts no leap seconds)."""


def until_midnight(now: float) -> float:
    """Seconds from ``now`` (Unix time) to the next UTC midnight (never 0: at midnight, a day).

    >>> until_midnight(86_400 * 3 + 86_399.5)
    0.5
    """
    return DAY - now % DAY


class DayCounter(Protocol):
    """A token allowance per UTC day (see the module docstring)."""

    @property
    def limit(self) -> int:
        """The day's allowance in tokens."""
        ...

    async def check(self) -> float:
        """0.0 while the day's count is under :attr:`limit`, else the seconds until UTC
        midnight (when the count starts again)."""
        ...

    def add(self, tokens: int) -> None:
        """Count ``tokens`` toward today (a request's actual usage)."""
        ...


class MemoryDayCounter:
    """The day's count in this process. ``clock`` is Unix time (``time.time``)."""

    __slots__ = ("_clock", "_day", "limit", "used")

    def __init__(self, limit: int, *, clock: Callable[[], float] = time.time) -> None:
        self.limit = limit
        self._clock = clock
        self._day = -1
        #: tokens counted today (as of the last call)
        self.used = 0

    async def check(self) -> float:
        return self.check_now()

    def check_now(self) -> float:
        """:meth:`check` without the coroutine."""
        now = self._clock()
        self._roll(now)
        return 0.0 if self.used < self.limit else until_midnight(now)

    def add(self, tokens: int) -> None:
        self._roll(self._clock())
        self.used += max(0, int(tokens))

    def observe(self, used: int, day: int) -> None:
        """Count at least ``used`` for UTC day ``day`` (what a shared counter last said,
        so a fallback to this process's count does not start the day afresh)."""
        self._roll(self._clock())
        if day == self._day:
            self.used = max(self.used, used)

    def _roll(self, now: float) -> None:
        day = int(now // DAY)
        if day != self._day:
            self._day = day
            self.used = 0
