"""A limiter with a waiting line: strict FIFO, bounded, with a timeout, cancel-safe.

:class:`Limiter` admits a request when the :class:`~.state.LimitState` says it fits (the
windows and the concurrency cap); otherwise the request waits in line. The line is
strictly first come, first served: only its head asks the state, so a later, smaller
request never overtakes an earlier one that waits for tokens to free. The head sleeps
until the window frees enough (the state says when) or until a release or settle here
wakes it.

Bounds (both optional; None = unbounded, as the client uses it):

* ``max_queue`` -- requests that may wait; one more is refused at once;
* ``queue_timeout`` -- seconds a request may wait; then it is refused. Every request
  waits the same timeout and the line is FIFO, so deadlines come in line order: only
  the head ever needs a timer.

A refusal is :class:`QueueRefused`, an :class:`~interlingua.errors.OverloadedError`
with status 429 (what OpenAI clients get; Anthropic clients get 529
``overloaded_error``, as the dialect renders the overloaded kind) and ``retry_after``:
the time until a slot is expected to free, at least 1 s -- from the window when a rate
limit holds the line, else from how long requests have been holding their slots.

Cancellation: a waiting request whose task is cancelled (its client hung up) leaves the
line, wherever it stands, and the next one becomes head; nothing was taken, so nothing
leaks. An admitted request holds a :class:`Ticket` until :meth:`Ticket.release`
(idempotent; call it in ``finally``).

Background work (a batch's lines) asks with :meth:`Limiter.acquire_background`: it gets
at most ``background_share`` of the limits, waits in a line of its own without bounds,
and never takes room while an interactive request waits here (:mod:`.share`).

>>> limiter = Limiter(requests_per_minute=40, max_concurrency=8, max_queue=128,
...                   queue_timeout=60, what="upstream 'nim'")
>>> async with limiter.slot(tokens=1200) as ticket:   # doctest: +SKIP
...     response = await send()
...     ticket.settle(response.usage.total_tokens)
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Literal

from ..errors import OverloadedError
from .share import BackgroundShare, nap
from .state import UNTIL_RELEASE, LimitState, MemoryState

__all__ = ["MIN_RETRY_AFTER", "Limiter", "QueueRefused", "Ticket"]

#: the least Retry-After a refusal carries, in seconds
MIN_RETRY_AFTER = 1.0
#: weight of the latest hold time in the running mean used for Retry-After
_HOLD_WEIGHT = 0.2


class QueueRefused(OverloadedError):
    """A request the limits could not admit: ``reason`` is ``queue_full`` (refused at
    once) or ``queue_timeout`` (waited its ``queue_timeout``). Status 429; rendered as
    529 ``overloaded_error`` to Anthropic clients; ``retry_after`` always set."""

    def __init__(
        self, message: str, *, reason: Literal["queue_full", "queue_timeout"], retry_after: float
    ) -> None:
        super().__init__(message, status=429, retry_after=retry_after)
        self.reason = reason


class Ticket:
    """One admitted request. :meth:`settle` with its actual tokens, :meth:`release` at
    its end (both safe to call more than once; a release ends the ticket)."""

    __slots__ = ("_limiter", "lease", "released", "started", "tokens")

    def __init__(self, limiter: Limiter, lease: object, tokens: int, started: float) -> None:
        self._limiter = limiter
        self.lease = lease
        #: tokens this admission counts for (the estimate, then the settled count)
        self.tokens = tokens
        self.started = started
        self.released = False

    def settle(self, tokens: int) -> None:
        """Count ``tokens`` (input + output, as used) instead of the estimate."""
        tokens = max(0, int(tokens))
        if tokens != self.tokens:
            self.tokens = tokens
            self._limiter.state.settle(self.lease, tokens)
            self._limiter._poke()

    def release(self) -> None:
        """Free the concurrency slot; the window keeps the admission for its minute."""
        if not self.released:
            self.released = True
            self._limiter._release(self)


class _BackgroundTicket(Ticket):
    """A background request's ticket: it also counts in the limiter's share."""

    __slots__ = ("entry", "share")

    def __init__(
        self, limiter: Limiter, lease: object, tokens: int, started: float, share: BackgroundShare
    ) -> None:
        super().__init__(limiter, lease, tokens, started)
        self.share = share
        window = share.window
        #: its admission in the share's window (None: no rpm/tpm)
        self.entry = window.admit(started, tokens) if window.limited else None
        share.in_flight += 1

    def settle(self, tokens: int) -> None:
        if self.entry is not None:
            self.share.window.settle(self.entry, max(0, int(tokens)))
        super().settle(tokens)

    def release(self) -> None:
        if not self.released:
            self.share.in_flight -= 1
        super().release()


class _Waiter:
    __slots__ = ("deadline", "tokens", "turn")

    def __init__(self, tokens: int, deadline: float | None, turn: asyncio.Future[None]) -> None:
        self.tokens = tokens
        self.deadline = deadline
        #: resolved when this waiter becomes the head of the line
        self.turn = turn


class Limiter:
    """Rate and concurrency limits with a FIFO waiting line (see the module docstring).

    ``what`` names the limited thing in refusals ("upstream 'nim'"). ``state`` replaces
    the in-process counters (a shared one when replicas share limits through Redis:
    :mod:`.redis_state`); ``background_share`` is the part of the limits background
    requests may use (:meth:`acquire_background`); ``clock`` (monotonic seconds) and
    ``sleep`` are seams for tests.
    """

    def __init__(
        self,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_concurrency: int | None = None,
        *,
        max_queue: int | None = None,
        queue_timeout: float | None = None,
        what: str = "the limiter",
        state: LimitState | None = None,
        background_share: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if max_queue is not None and max_queue < 0:
            raise ValueError(f"max_queue must be 0 or more, got {max_queue}")
        if queue_timeout is not None and not queue_timeout > 0:
            raise ValueError(f"queue_timeout must be positive, got {queue_timeout}")
        if not 0 < background_share <= 1:
            raise ValueError(f"background_share must be in (0, 1], got {background_share}")
        self.state: LimitState = state or MemoryState(
            requests_per_minute, tokens_per_minute, max_concurrency, clock=clock
        )
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.what = what
        self._described = _describe(requests_per_minute, tokens_per_minute, max_concurrency)
        self._clock = clock
        self._sleep = sleep
        self._line: deque[_Waiter] = deque()
        #: admitted, not yet released, oldest first (a dict keeps insertion order)
        self._live: dict[Ticket, None] = {}
        self._wake: asyncio.Future[None] | None = None  # the napping head's alarm
        self._head_until = 0.0  # when the head last expected to fit (inf: at a release)
        self._hold: float | None = None  # running mean of how long tickets are held
        self.background_share = background_share
        self._limits = (requests_per_minute, tokens_per_minute, max_concurrency)
        #: background requests' counters and line, built on the first one
        self._share: BackgroundShare | None = None

    @property
    def in_flight(self) -> int:
        """Tickets held now (admitted here, not yet released)."""
        return len(self._live)

    @property
    def waiting(self) -> int:
        """Interactive requests in line."""
        return len(self._line)

    @property
    def background_waiting(self) -> int:
        """Background requests in their line."""
        return 0 if self._share is None else len(self._share.line)

    @property
    def background_in_flight(self) -> int:
        """Background tickets held now."""
        return 0 if self._share is None else self._share.in_flight

    @asynccontextmanager
    async def slot(self, tokens: int = 0) -> AsyncIterator[Ticket]:
        """:meth:`acquire`, held for the block and released however it ends."""
        ticket = await self.acquire(tokens)
        try:
            yield ticket
        finally:
            ticket.release()

    async def acquire(self, tokens: int = 0) -> Ticket:
        """Wait for admission of a request estimated at ``tokens``; its ticket.

        Raises :class:`QueueRefused` when the line is full or the wait passes
        ``queue_timeout``; a cancellation while waiting leaves the line cleanly.
        """
        tokens = max(0, int(tokens))
        line = self._line
        wait: float | None = None
        if not line:
            got = await self.state.acquire(tokens)
            if not isinstance(got, float):
                return self._issue(got, tokens)
            wait = got
        if self.max_queue is not None and len(line) >= self.max_queue:
            if wait is not None:  # (max_queue 0: this request's own wait is the news)
                self._head_until = self._clock() + wait
            raise self._refused("queue_full")
        deadline = None if self.queue_timeout is None else self._clock() + self.queue_timeout
        waiter = _Waiter(tokens, deadline, asyncio.get_running_loop().create_future())
        line.append(waiter)
        try:
            if line[0] is not waiter:
                # (``wait`` is None here: the line was not empty, so nobody asked yet)
                await waiter.turn
            return await self._as_head(waiter, wait)
        finally:
            self._leave(waiter)

    async def _as_head(self, waiter: _Waiter, wait: float | None) -> Ticket:
        """The head's loop: ask the state, else nap until it may fit, a poke, or the
        deadline (then refuse)."""
        while True:
            if wait is None:
                got = await self.state.acquire(waiter.tokens)
                if not isinstance(got, float):
                    return self._issue(got, waiter.tokens)
                wait = got
            now = self._clock()
            self._head_until = now + wait
            if waiter.deadline is not None:
                left = waiter.deadline - now
                if left <= 0:
                    raise self._refused("queue_timeout")
                wait = min(wait, left)
            await self._nap(wait)
            wait = None

    async def acquire_background(self, tokens: int = 0) -> Ticket:
        """:meth:`acquire` for background work: within ``background_share`` of the
        limits, only while no interactive request waits, however long that takes (no
        ``queue_timeout``, not counted in ``max_queue``); a cancellation while waiting
        leaves the line cleanly."""
        tokens = max(0, int(tokens))
        share = self._share
        if share is None:
            share = self._share = BackgroundShare(self.background_share, *self._limits)
        # Always through the line, even when empty: only its head asks, so two requests
        # cannot both pass the share's check while one of them awaits a shared state.
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        share.line.append(turn)
        try:
            if share.line[0] is not turn:
                await turn
            while True:
                # Interactive requests waiting here come first: nap until the line empties.
                wait = UNTIL_RELEASE if self._line else share.fits(self._clock(), tokens)
                if wait == 0:
                    got = await self.state.acquire(tokens)
                    if not isinstance(got, float):
                        ticket = _BackgroundTicket(self, got, tokens, self._clock(), share)
                        self._live[ticket] = None
                        return ticket
                    wait = got
                await share.nap(wait, self._sleep)
        finally:
            share.leave(turn)

    async def _nap(self, seconds: float) -> None:
        """Sleep ``seconds`` (inf: indefinitely), or less if :meth:`_poke` is called."""
        wake = self._wake = asyncio.get_running_loop().create_future()
        try:
            await nap(wake, seconds, self._sleep)
        finally:
            if self._wake is wake:
                self._wake = None

    def _poke(self) -> None:
        """Wake the napping head: something it waits for may have changed."""
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)
        if self._share is not None:
            self._share.poke()

    def _leave(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of the line (admitted, refused or cancelled); if it was the
        head, the next one's turn begins."""
        line = self._line
        if line and line[0] is waiter:
            line.popleft()
            if line and not line[0].turn.done():
                line[0].turn.set_result(None)
        else:
            with suppress(ValueError):  # (already out: nothing to do)
                line.remove(waiter)
        if not line and self._share is not None:
            self._share.poke()  # background requests may ask again

    def _issue(self, lease: object, tokens: int) -> Ticket:
        ticket = Ticket(self, lease, tokens, self._clock())
        self._live[ticket] = None
        return ticket

    def _release(self, ticket: Ticket) -> None:
        self._live.pop(ticket, None)
        self.state.release(ticket.lease)
        held = self._clock() - ticket.started
        mean = self._hold
        self._hold = held if mean is None else mean + _HOLD_WEIGHT * (held - mean)
        self._poke()

    def retry_after(self) -> float:
        """Seconds until a slot is expected to free (at least :data:`MIN_RETRY_AFTER`):
        the head's wait when a window holds the line, else the mean hold time minus the
        age of the oldest request in flight."""
        now = self._clock()
        until = self._head_until
        if math.isinf(until):
            expected = 0.0
            if self._hold is not None and self._live:
                oldest = next(iter(self._live))
                expected = self._hold - (now - oldest.started)
        else:
            expected = until - now
        return max(MIN_RETRY_AFTER, expected)

    def _refused(self, reason: Literal["queue_full", "queue_timeout"]) -> QueueRefused:
        if reason == "queue_full":
            message = (
                f"{self.what} is at its limits ({self._described}) and {len(self._line)} "
                "requests already wait; try again later"
            )
        else:
            message = (
                f"{self.what} is at its limits ({self._described}): no turn within "
                f"{self.queue_timeout:g} s; try again later"
            )
        return QueueRefused(message, reason=reason, retry_after=self.retry_after())


def _describe(rpm: int | None, tpm: int | None, concurrency: int | None) -> str:
    """ "rpm 40, max_concurrency 8": the limits, for messages."""
    named = (("rpm", rpm), ("tpm", tpm), ("max_concurrency", concurrency))
    return ", ".join(f"{name} {value}" for name, value in named if value is not None) or "none"
