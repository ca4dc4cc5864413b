"""In-memory client-side rate limits: requests/minute, tokens/minute, max concurrency.

One :class:`RateLimiter` is shared by every call made through one client (or several
clients, if passed to each), so a batch of thousands of concurrent calls stays inside the
provider's limits instead of collecting 429s::

    limiter = RateLimiter(requests_per_minute=500, tokens_per_minute=200_000, max_concurrency=64)
    async with limiter.slot(tokens=estimate) as slot:
        response = await send()
        slot.settle(response.usage.total_tokens)

The per-minute limits are *sliding windows* over the last 60 s (a log of admissions),
not token buckets: a bucket of capacity N refilling at N/minute lets 2N through in some
60 s window, a window log never lets more than N through, which is what "N per minute"
promises. Tokens are reserved at admission with the caller's estimate (OpenAI counts
``max_tokens`` the same way) and settled with the actual usage afterwards, so the window
tracks reality; a request whose estimate alone exceeds the whole limit is admitted when
the window is empty rather than never.

Order matters: a concurrency slot is taken *before* rate admission, so the admission time
is (almost) the send time; the other way round, requests admitted over a minute could
all be released by the concurrency gate at once and exceed the window.

Time is injectable (``clock`` and ``sleep``), so tests run minutes of traffic instantly.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

__all__ = ["WINDOW", "RateLimit", "RateLimiter", "Slot"]

WINDOW = 60.0
"""The per-minute window in seconds."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Limits for one client; ``None`` means unlimited.

    >>> RateLimit(requests_per_minute=60, max_concurrency=8)
    RateLimit(requests_per_minute=60, tokens_per_minute=None, max_concurrency=8)
    """

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "tokens_per_minute", "max_concurrency"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


class _Entry:
    """One admission in the window: when, and how many tokens it currently counts for."""

    __slots__ = ("at", "live", "tokens")

    def __init__(self, at: float, tokens: int) -> None:
        self.at = at
        self.tokens = tokens
        self.live = True  # still inside the window (counted in the running total)


class Slot:
    """A held admission. Call :meth:`settle` with the actual token count once known."""

    __slots__ = ("_entry", "_limiter")

    def __init__(self, limiter: RateLimiter, entry: _Entry | None) -> None:
        self._limiter = limiter
        self._entry = entry

    @property
    def reserved(self) -> int:
        """Tokens this admission currently counts for in the window."""
        return self._entry.tokens if self._entry is not None else 0

    def settle(self, actual_tokens: int) -> None:
        """Replace the reserved estimate by ``actual_tokens`` (input + output)."""
        if self._entry is not None:
            self._limiter._settle(self._entry, max(0, int(actual_tokens)))


class RateLimiter:
    """Sliding-window request and token limits plus a concurrency cap (see module doc).

    ``clock`` returns seconds (monotonic); ``sleep`` waits that many seconds. Fair: waiters
    are admitted in arrival order.
    """

    def __init__(
        self,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_concurrency: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.limits = RateLimit(requests_per_minute, tokens_per_minute, max_concurrency)
        self._clock = clock
        self._sleep = sleep
        self._window: deque[_Entry] = deque()
        self._tokens = 0
        self._in_flight = 0
        # Created lazily: asyncio primitives bind to the loop that first uses them, and a
        # limiter may be built outside any loop (the sync client builds it in its thread).
        self._semaphore: asyncio.Semaphore | None = None
        self._lock: asyncio.Lock | None = None

    @classmethod
    def from_limits(cls, limits: RateLimit, **kwargs: object) -> RateLimiter:
        """A limiter enforcing ``limits`` (``clock``/``sleep`` may be passed through)."""
        return cls(
            limits.requests_per_minute,
            limits.tokens_per_minute,
            limits.max_concurrency,
            **kwargs,  # type: ignore[arg-type]
        )

    @property
    def in_flight(self) -> int:
        """Slots currently held."""
        return self._in_flight

    @property
    def unlimited(self) -> bool:
        """True when no limit is set (the client then skips the limiter entirely)."""
        limits = self.limits
        return (
            limits.requests_per_minute is None
            and limits.tokens_per_minute is None
            and limits.max_concurrency is None
        )

    def window_usage(self) -> tuple[int, int]:
        """(requests, tokens) counted in the current window."""
        self._expire(self._clock())
        return len(self._window), self._tokens

    @asynccontextmanager
    async def slot(self, tokens: int = 0) -> AsyncIterator[Slot]:
        """Wait for a concurrency slot and rate admission; hold the slot inside the block."""
        cap = self.limits.max_concurrency
        if cap is not None and self._semaphore is None:
            self._semaphore = asyncio.Semaphore(cap)
        if self._semaphore is not None:
            await self._semaphore.acquire()
        self._in_flight += 1
        try:
            entry = await self._admit(max(0, int(tokens)))
            yield Slot(self, entry)
        finally:
            self._in_flight -= 1
            if self._semaphore is not None:
                self._semaphore.release()

    async def _admit(self, tokens: int) -> _Entry | None:
        limits = self.limits
        if limits.requests_per_minute is None and limits.tokens_per_minute is None:
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        # The lock makes admission FIFO; holding it while sleeping is right, since whoever
        # is next in line could not be admitted before the current head anyway.
        async with self._lock:
            while True:
                now = self._clock()
                self._expire(now)
                wait = self._wait_needed(now, tokens)
                if wait <= 0:
                    entry = _Entry(now, tokens)
                    self._window.append(entry)
                    self._tokens += tokens
                    return entry
                await self._sleep(wait)

    def _expire(self, now: float) -> None:
        window = self._window
        while window and window[0].at <= now - WINDOW:
            entry = window.popleft()
            entry.live = False
            self._tokens -= entry.tokens

    def _wait_needed(self, now: float, tokens: int) -> float:
        """Seconds until the head of the window expires enough to admit, or 0 if now."""
        limits = self.limits
        window = self._window
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        wait = 0.0
        if rpm is not None and len(window) >= rpm:
            # The (len - rpm + 1)-th oldest admission must leave the window first.
            wait = window[len(window) - rpm].at + WINDOW - now
        if tpm is not None and window and self._tokens + tokens > tpm:
            excess = self._tokens + tokens - tpm
            freed = 0
            for entry in window:
                freed += entry.tokens
                if freed >= excess:
                    wait = max(wait, entry.at + WINDOW - now)
                    break
            else:
                wait = max(wait, window[-1].at + WINDOW - now)
        # A small floor so float rounding cannot spin on a wait of 1e-12.
        return wait if wait <= 0 else max(wait, 1e-6)

    def _settle(self, entry: _Entry, actual: int) -> None:
        if entry.live:
            self._tokens += actual - entry.tokens
        entry.tokens = actual
