"""Where the counters live: the seam a shared (Redis) implementation replaces.

A :class:`LimitState` holds what several requests toward one destination share -- the
sliding windows (:mod:`.window`) and the number of requests in flight -- and answers one
question atomically: may a request of ``tokens`` start *now*? If so it records the
admission and hands back a *lease*; if not it says how long until asking again makes
sense. The waiting line (:mod:`.queue`) stays in the process: only the counters are
shared, so a Redis state for replicas that share limits (:mod:`.redis_state`) is one
more class with these four methods, its ``acquire`` a Lua script that checks and takes
in one round trip.

``acquire`` is a coroutine (a shared state answers over the network); ``release`` and
``settle`` are plain calls made from ``finally`` blocks and stream closers, so a
networked state sends them without waiting (a lease there should also expire on its
own, in case a replica dies holding it). :data:`UNTIL_RELEASE` means "full until a lease
is released here": a shared state, which cannot hear other replicas release, returns a
short polling interval instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

from .period import DAY, MemoryPeriodCounter, Period, PeriodCounter
from .window import Entry, Window

__all__ = [
    "UNTIL_RELEASE",
    "Counters",
    "LimitState",
    "MemoryCounters",
    "MemoryLease",
    "MemoryState",
]

UNTIL_RELEASE = math.inf
"""The wait :meth:`LimitState.acquire` returns when only a release can make room."""


class LimitState(Protocol):
    """The shared counters of one limited destination (see the module docstring)."""

    async def acquire(self, tokens: int) -> object | float:
        """A lease (any object but a float) when a request of ``tokens`` may start now,
        else the seconds to wait before asking again (:data:`UNTIL_RELEASE`: until a
        release)."""
        ...

    def release(self, lease: object) -> None:
        """The leased request ended: free its concurrency slot (its window entry stays)."""
        ...

    def settle(self, lease: object, tokens: int) -> None:
        """The leased request turned out to cost ``tokens`` (its estimate is replaced)."""
        ...

    def usage(self) -> tuple[int, int, int]:
        """(requests in flight, requests in the window, tokens in the window)."""
        ...


class MemoryLease:
    """A lease of :class:`MemoryState`: its window entry (None without rpm/tpm)."""

    __slots__ = ("entry",)

    def __init__(self, entry: Entry | None) -> None:
        self.entry = entry


class MemoryState:
    """The counters in this process: one :class:`~.window.Window` and an in-flight count.

    >>> import asyncio
    >>> state = MemoryState(max_concurrency=1)
    >>> lease = asyncio.run(state.acquire(0)); asyncio.run(state.acquire(0))
    inf
    >>> state.release(lease); state.usage()
    (0, 0, 0)
    """

    __slots__ = ("_cap", "_clock", "_window", "in_flight", "max_concurrency")

    def __init__(
        self,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_concurrency: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = Window(requests_per_minute, tokens_per_minute)
        self._clock = clock
        self.max_concurrency = max_concurrency
        # (no count reaches it when unset: one comparison per admission)
        self._cap = math.inf if max_concurrency is None else max_concurrency
        self.in_flight = 0

    async def acquire(self, tokens: int) -> MemoryLease | float:
        return self.try_acquire(tokens)

    def try_acquire(self, tokens: int) -> MemoryLease | float:
        """:meth:`acquire` without the coroutine (it never waits in memory)."""
        got = self.admit(tokens)
        if isinstance(got, float):
            return got
        return MemoryLease(got if got >= 0 else None)

    def admit(self, tokens: int) -> Entry | float:
        """:meth:`try_acquire` for a caller that keeps its own record of the admission
        (a client key's): the window entry, an int (-1: no window), or the wait, a
        float; end it with :meth:`end`. No lease object: a key is admitted on every
        request."""
        if self.in_flight >= self._cap:
            return UNTIL_RELEASE
        window = self._window
        entry = window.take(self._clock(), tokens) if window.limited else -1
        if isinstance(entry, float):
            return entry
        self.in_flight += 1
        return entry

    def end(self, entry: Entry, tokens: int) -> None:
        """:meth:`settle` (when ``tokens`` > 0) and :meth:`release` of an :meth:`admit`."""
        self.in_flight -= 1
        if tokens > 0 and entry >= 0:
            self._window.settle(entry, tokens)

    def release(self, lease: object) -> None:
        self.in_flight -= 1

    def settle(self, lease: object, tokens: int) -> None:
        entry = lease.entry if isinstance(lease, MemoryLease) else None
        if entry is not None:
            self._window.settle(entry, tokens)

    def usage(self) -> tuple[int, int, int]:
        requests, tokens = self._window.usage(self._clock())
        return self.in_flight, requests, tokens


class Counters(Protocol):
    """Where the counts of named destinations live: this process
    (:class:`MemoryCounters`) or Redis (:class:`~.shared.SharedCounters`)."""

    def limit_state(
        self,
        name: str,
        rpm: int | None = None,
        tpm: int | None = None,
        max_concurrency: int | None = None,
    ) -> LimitState: ...

    def period_counter(self, name: str, limit: int, period: Period = DAY) -> PeriodCounter: ...


class MemoryCounters:
    """:class:`Counters` in this process: a fresh state per name (nothing is shared)."""

    def limit_state(
        self,
        name: str,
        rpm: int | None = None,
        tpm: int | None = None,
        max_concurrency: int | None = None,
    ) -> LimitState:
        return MemoryState(rpm, tpm, max_concurrency)

    def period_counter(self, name: str, limit: int, period: Period = DAY) -> PeriodCounter:
        return MemoryPeriodCounter(limit, period=period)
