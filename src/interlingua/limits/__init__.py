"""Rate limits: requests and tokens per minute (sliding windows), concurrency, a waiting line.

Two users, one engine:

* the client (:class:`RateLimiter`) keeps a batch of thousands of calls inside a
  provider's limits instead of collecting 429s: every call waits its turn, however long;
* the gateway (``upstreams/limited.py``) paces itself toward each upstream with
  ``limits:`` from the config: a :class:`Limiter` with a bounded line (``max_queue``) and
  a ``queue_timeout``, refusing with :class:`QueueRefused` (429 / Anthropic 529) and
  Retry-After beyond them.

Modules: :mod:`.window` the sliding one-minute log (pure), :mod:`.state` the counters
behind an interface (in memory; a shared Redis state replaces :class:`MemoryState` when
replicas must share limits), :mod:`.queue` the FIFO line with its bounds and
cancellation, :mod:`.rate` the client's API over it, :mod:`.period` counts per UTC day or month
(a key's tokens per day, its budgets). Background work (a batch's lines, marked by the
:data:`BACKGROUND` context variable of :mod:`.priority`) gets a share of a limiter's limits
and yields to interactive requests: :mod:`.share`.
Shared by replicas through Redis (``state.url``): :mod:`.redis_state` (one Lua script per
admission, :mod:`.redis_scripts`), :mod:`.shared` (one client per process, the
fallback to per-process counters while Redis is away) and :mod:`.shared_cooldowns`
(routing's cooldowns across replicas); ``redis`` itself is imported only
when a :class:`SharedCounters` is built. Imports nothing of ours but ``errors``.
"""

from __future__ import annotations

from .period import DAY, MONTH, MemoryPeriodCounter, Period, PeriodCounter
from .priority import BACKGROUND
from .queue import MIN_RETRY_AFTER, Limiter, QueueRefused, Ticket
from .rate import RateLimit, RateLimiter, Slot
from .redis_state import RedisLease, RedisPeriodCounter, RedisState
from .shared import SharedCounters, SharedPeriodCounter, SharedState
from .shared_cooldowns import SharedCooldowns
from .state import (
    UNTIL_RELEASE,
    Counters,
    LimitState,
    MemoryCounters,
    MemoryLease,
    MemoryState,
)
from .window import WINDOW, Entry, Window

__all__ = [
    "BACKGROUND",
    "DAY",
    "MIN_RETRY_AFTER",
    "MONTH",
    "UNTIL_RELEASE",
    "WINDOW",
    "Counters",
    "Entry",
    "LimitState",
    "Limiter",
    "MemoryCounters",
    "MemoryLease",
    "MemoryPeriodCounter",
    "MemoryState",
    "Period",
    "PeriodCounter",
    "QueueRefused",
    "RateLimit",
    "RateLimiter",
    "RedisLease",
    "RedisPeriodCounter",
    "RedisState",
    "SharedCooldowns",
    "SharedCounters",
    "SharedPeriodCounter",
    "SharedState",
    "Slot",
    "Ticket",
    "Window",
]
