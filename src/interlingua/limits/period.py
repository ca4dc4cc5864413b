"""Counts per UTC calendar period: a key's ``tokens_per_day`` and its budgets in dollars.

A :class:`PeriodCounter` answers one question before a request starts -- is this
period's allowance used up? -- and is told afterwards what the request cost. The check
is a coroutine (a shared counter, :class:`~.redis_state.RedisPeriodCounter`, answers over
the network) and ``add`` a plain call (a shared counter sends it without waiting), like
:class:`~.state.LimitState`'s ``acquire`` and ``settle``. What is counted is an integer:
tokens, or nanodollars for a budget (the gateway's ``server/budgets.py``).

The allowance is soft at its edge, as the per-minute token windows are not: a request is
admitted while the period's count is under the limit, and its actual cost counts once it
ends, so the last request of a period may carry the count past the limit. (Reserving an
estimate, as the windows do, would refuse a period's last requests on a guess; and a
request's cost in money is known only when its answer has ended.)

Periods are UTC calendar days and months (:data:`DAY`, :data:`MONTH`). Unix time has no
leap seconds, so day ``n`` is ``[n * 86400, (n + 1) * 86400)``; month ``12 * year +
month - 1`` runs from its first midnight to the next month's.

>>> counter = MemoryPeriodCounter(1000, clock=lambda: 86_400 * 20_000 + 3600.0)
>>> counter.add(1000); counter.check_now()   # used up until midnight, 23 h away
82800.0
>>> MONTH.index(1_772_323_200.0), MONTH.end(MONTH.index(1_772_323_200.0))  # 2026-03-01: ends 04-01
(24314, 1775001600.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

__all__ = [
    "DAY",
    "MONTH",
    "SECONDS_PER_DAY",
    "MemoryPeriodCounter",
    "Period",
    "PeriodCounter",
    "until_midnight",
]

SECONDS_PER_DAY = 86_400
"""Seconds in a UTC calendar day (Unix time counts no leap seconds)."""


@dataclass(frozen=True)
class Period:
    """A UTC calendar period: ``day`` or ``month`` (the name the Redis scripts take)."""

    name: str

    def index(self, now: float) -> int:
        """The number of the period ``now`` (Unix time) falls in."""
        if self.name == "day":
            return int(now // SECONDS_PER_DAY)
        when = datetime.fromtimestamp(now, UTC)
        return 12 * when.year + when.month - 1

    def start(self, index: int) -> float:
        """When period ``index`` begins (Unix time)."""
        if self.name == "day":
            return float(index * SECONDS_PER_DAY)
        return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC).timestamp()

    def end(self, index: int) -> float:
        """When period ``index`` ends: the next one's start (Unix time)."""
        return self.start(index + 1)

    def remaining(self, now: float) -> float:
        """Seconds from ``now`` to the end of its period (never 0: at a period's first
        instant, the whole period)."""
        return self.end(self.index(now)) - now


DAY = Period("day")
MONTH = Period("month")


def until_midnight(now: float) -> float:
    """Seconds from ``now`` (Unix time) to the next UTC midnight (never 0: at midnight, a day).

    >>> until_midnight(86_400 * 3 + 86_399.5)
    0.5
    """
    return SECONDS_PER_DAY - now % SECONDS_PER_DAY


class PeriodCounter(Protocol):
    """An allowance per UTC calendar period (see the module docstring). ``limit`` may be
    set anew (a reloaded key's), the count staying."""

    limit: int

    @property
    def period(self) -> Period:
        """The kind of period counted."""
        ...

    async def check(self) -> float:
        """0.0 while the period's count is under :attr:`limit`, else the seconds until
        the period ends (when the count starts again)."""
        ...

    def add(self, amount: int) -> None:
        """Count ``amount`` toward the current period (a request's actual cost)."""
        ...

    async def seed(self, used: int, index: int) -> None:
        """Count at least ``used`` for period ``index`` if it is the current one (what
        the usage log adds up to, read when a process starts)."""
        ...

    async def spent(self) -> int:
        """What the current period has counted (for a person: the status page)."""
        ...


class MemoryPeriodCounter:
    """The period's count in this process. ``clock`` is Unix time (``time.time``)."""

    __slots__ = ("_clock", "_ends", "_index", "_starts", "limit", "period", "used")

    def __init__(
        self, limit: int, *, period: Period = DAY, clock: Callable[[], float] = time.time
    ) -> None:
        self.limit = limit
        self.period = period
        self._clock = clock
        self._index = -1
        # the current period's bounds: a call within them needs no calendar (a month's
        # number from a datetime cost each request thousands of instructions)
        self._starts = self._ends = 0.0
        #: counted in the current period (as of the last call)
        self.used = 0

    async def check(self) -> float:
        return self.check_now()

    def check_now(self) -> float:
        """:meth:`check` without the coroutine."""
        now = self._clock()
        if not self._starts <= now < self._ends:  # (inline: once per request, each call counts)
            self._roll(now)
        return 0.0 if self.used < self.limit else self._ends - now

    def add(self, amount: int) -> None:
        now = self._clock()
        if not self._starts <= now < self._ends:
            self._roll(now)
        if amount > 0:
            self.used += int(amount)

    async def seed(self, used: int, index: int) -> None:
        self.observe(used, index)

    async def spent(self) -> int:
        self._roll(self._clock())
        return self.used

    def observe(self, used: int, index: int) -> None:
        """Count at least ``used`` for period ``index`` (what a shared counter last
        said, or what the usage log adds up to on start, so neither a fallback to this
        process's count nor a restart begins the period afresh)."""
        self._roll(self._clock())
        if index == self._index:
            self.used = max(self.used, used)

    def _roll(self, now: float) -> None:
        if self._starts <= now < self._ends:
            return
        period = self.period
        index = period.index(now)
        self._starts, self._ends = period.start(index), period.end(index)
        if index != self._index:
            self._index = index
            self.used = 0
