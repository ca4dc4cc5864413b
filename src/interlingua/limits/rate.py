"""Client-side rate limits: requests/minute, tokens/minute, max concurrency.

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

Admission checks the concurrency cap and the windows at once (:class:`~.queue.Limiter`,
the same engine the gateway puts in front of its upstreams, with an unbounded line and no
timeout here), so the admission time is the send time, and waiters go in arrival order.

Time is injectable (``clock`` and ``sleep``), so tests run minutes of traffic instantly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from .queue import Limiter, Ticket
from .state import LimitState

__all__ = ["RateLimit", "RateLimiter", "Slot"]


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


class Slot:
    """A held admission. Call :meth:`settle` with the actual token count once known."""

    __slots__ = ("_limiter", "_ticket")

    def __init__(self, limiter: RateLimiter, ticket: Ticket | None) -> None:
        self._limiter = limiter
        self._ticket = ticket  # None: a no-op slot (the client's, when unlimited)

    @property
    def reserved(self) -> int:
        """Tokens this admission currently counts for in the window."""
        return self._ticket.tokens if self._ticket is not None else 0

    def settle(self, actual_tokens: int) -> None:
        """Replace the reserved estimate by ``actual_tokens`` (input + output)."""
        if self._ticket is not None:
            self._ticket.settle(actual_tokens)


class RateLimiter:
    """Sliding-window request and token limits plus a concurrency cap (see module doc).

    ``clock`` returns seconds (monotonic); ``sleep`` waits that many seconds. Fair: waiters
    are admitted in arrival order. ``state`` replaces the in-process counters by shared
    ones (a :class:`~.shared.SharedState` on Redis, or the batch runner's Ray actor), so
    clients in several processes keep one limit together; the line stays in this process.
    """

    def __init__(
        self,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_concurrency: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        state: LimitState | None = None,
    ) -> None:
        self.limits = RateLimit(requests_per_minute, tokens_per_minute, max_concurrency)
        # Waiting futures are made on the loop that waits (in ``acquire``), never here:
        # a limiter may be built outside any loop (the sync client builds it in its thread).
        self._limiter = Limiter(
            requests_per_minute,
            tokens_per_minute,
            max_concurrency,
            what="the client's rate limiter",
            state=state,
            clock=clock,
            sleep=sleep,
        )

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
        return self._limiter.in_flight

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
        _, requests, tokens = self._limiter.state.usage()
        return requests, tokens

    @asynccontextmanager
    async def slot(self, tokens: int = 0) -> AsyncIterator[Slot]:
        """Wait for admission (concurrency and windows); hold the slot inside the block."""
        ticket = await self._admit(tokens)
        try:
            yield Slot(self, ticket)
        finally:
            ticket.release()

    async def _admit(self, tokens: int) -> Ticket:
        """Wait for admission (a seam: tests count admissions here)."""
        return await self._limiter.acquire(tokens)
