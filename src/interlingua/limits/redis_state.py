"""Limit counters in Redis, shared by every gateway replica: one Lua script per admission.

:class:`RedisState` is a :class:`~.state.LimitState` for one destination (an upstream, a
key) whose counters live under a key prefix such as ``interlingua:limit:upstream:nim``:
the sliding one-minute log of :mod:`.window` (a log, not a bucket, with the same rules:
a request whose estimate alone exceeds ``tpm`` goes in when the window is empty) and the
requests in flight. :meth:`RedisState.acquire` checks and takes rpm, tpm and a
concurrency slot in one script, atomically, on Redis's clock
(:mod:`.redis_scripts`), so two replicas with ``rpm: 10`` admit 10 requests a minute
between them, not 20.

What differs from :class:`~.state.MemoryState`, because the counters are shared:

* ``release`` and ``settle`` start a task and return (they are plain calls made from
  ``finally`` blocks); the calls of one lease are sent in order. An error is handed to
  ``on_error``, never raised.
* A concurrency slot is a *lease* that expires by itself ``lease_ttl`` seconds after it
  was taken or last refreshed; this process refreshes the leases it holds every
  ``lease_ttl / 3`` seconds, so only a replica that died (or lost Redis for that long)
  loses its slots, and the others get them back then.
* Full on concurrency, ``acquire`` answers a short polling wait (``poll`` seconds,
  jittered, or the windows' own wait if longer) instead of
  :data:`~.state.UNTIL_RELEASE`: a release by another replica is not heard here.
* ``usage()`` is what the latest ``acquire`` saw (a plain call cannot ask Redis).

:class:`RedisPeriodCounter` is the shared :class:`~.period.PeriodCounter`: a hash per key
and period kind whose field is the UTC period's number, counted with ``HINCRBY`` on
Redis's clock.

``redis`` is never imported here: the client is passed in (``SharedCounters`` in
:mod:`.shared` builds it), so the gateway without the ``redis`` extra imports this module.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .background import Background
from .period import DAY, Period
from .redis_scripts import ACQUIRE, PERIOD_ADD, PERIOD_CHECK, PERIOD_FLOOR, REFRESH, SETTLE
from .window import WINDOW

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["BoundedScript", "RedisLease", "RedisPeriodCounter", "RedisState"]

_US = 1_000_000
#: lease ids per refresh script call (Lua's unpack has a stack limit of about 8000)
_REFRESH_BATCH = 2000
#: while a day's allowance is used up, Redis is asked again at most this often (so an
#: operator's reset is seen), and answered from memory in between
_PERIOD_RECHECK = 10.0

ErrorHook = Callable[[BaseException], None]


class BoundedScript:
    """A Lua script registered on ``client``, each call bounded by ``timeout`` seconds
    (then :class:`TimeoutError`, which counts as "Redis is away").

    The bound is ``asyncio.timeout`` around the call, not the client's
    ``socket_timeout``: with a socket timeout, redis-py sends through
    ``asyncio.wait_for``, which on Python 3.11 swallows a cancellation that lands as the
    send completes -- a task cancelled then (a request whose client hung up) would carry
    on. (``shared._connect`` builds the client without one.)
    """

    __slots__ = ("_script", "timeout")

    def __init__(self, client: Redis, lua: str, timeout: float) -> None:
        self._script = client.register_script(lua)
        self.timeout = timeout

    async def __call__(self, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        async with asyncio.timeout(self.timeout):
            return await self._script(keys=keys, args=args)


class RedisLease:
    """A lease of :class:`RedisState`: its id (None: nothing was limited, nothing taken)
    and the last call sent for it (the next one waits for it: calls stay in order)."""

    __slots__ = ("id", "pending")

    def __init__(self, lease_id: str | None) -> None:
        self.id = lease_id
        self.pending: asyncio.Task[Any] | None = None


def _us(clock: Callable[[], float] | None) -> int | str:
    """The scripts' last argument: the test clock in microseconds, '' for Redis's own."""
    return "" if clock is None else round(clock() * _US)


class RedisState:
    """The counters of one destination in Redis (see the module docstring).

    ``client`` is a ``redis.asyncio.Redis`` (``decode_responses=False``) shared by all
    states of the process; ``prefix`` names the destination
    (``interlingua:limit:key:team-a``). ``background`` tracks the fire-and-forget calls
    (one per process is enough); ``on_error`` hears their failures. ``clock`` (Unix
    seconds) replaces Redis's clock in tests.
    """

    def __init__(
        self,
        client: Redis,
        prefix: str,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_concurrency: int | None = None,
        *,
        background: Background | None = None,
        on_error: ErrorHook | None = None,
        lease_ttl: float = 30.0,
        poll: float = 0.1,
        timeout: float = 0.5,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not lease_ttl > 0 or not poll > 0 or not timeout > 0:
            raise ValueError("lease_ttl, poll and timeout must be positive")
        self.prefix = prefix
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.max_concurrency = max_concurrency
        self.lease_ttl = lease_ttl
        self.poll = poll
        # A hash tag: a Redis Cluster keeps one destination's keys on one node.
        self._log, self._tok, self._lease = (f"{{{prefix}}}:{k}" for k in ("log", "tok", "lease"))
        self._limits = (requests_per_minute or 0, tokens_per_minute or 0, max_concurrency or 0)
        self._windowed = requests_per_minute is not None or tokens_per_minute is not None
        self._limited = self._windowed or max_concurrency is not None
        self.timeout = timeout
        self._acquire = BoundedScript(client, ACQUIRE, timeout)
        self._settle = BoundedScript(client, SETTLE, timeout)
        self._refresh = BoundedScript(client, REFRESH, timeout)
        self._release = client.zrem
        self._background = background if background is not None else Background()
        self._on_error = on_error
        self._clock = clock
        self._ttl_us = round(lease_ttl * _US)
        #: lease ids taken here and not yet released (the refresher keeps them alive)
        self._held: dict[str, None] = {}
        self._refresher: asyncio.Task[Any] | None = None
        self._closed = False
        self._usage = (0, 0, 0)
        self._usage_at = 0

    async def acquire(self, tokens: int) -> RedisLease | float:
        """One script: a lease, or the seconds to wait (raises what the client raises)."""
        if not self._limited:
            return RedisLease(None)
        lease_id = secrets.token_hex(8)  # random: forked workers share no counter
        args = (*self._limits, tokens, lease_id, round(WINDOW * _US), self._ttl_us)
        try:
            code, wait, in_flight, requests, total, at = await self._acquire(
                keys=(self._log, self._tok, self._lease), args=(*args, _us(self._clock))
            )
        except BaseException:
            # The script may have run (the call timed out, or its client hung up): give
            # back the slot it may hold rather than leave it to expire; a window entry
            # stays counted.
            if self.max_concurrency is not None:
                self._send(RedisLease(lease_id), lambda: self._release(self._lease, lease_id))
            raise
        if at >= self._usage_at:  # (concurrent calls may finish out of order)
            self._usage_at = at
            self._usage = (int(in_flight), int(requests), int(total))
        if code == 1:
            if self.max_concurrency is not None:
                self._hold(lease_id)
            return RedisLease(lease_id)
        seconds = float(wait) / _US
        if code == 2:  # full on concurrency: poll, jittered so replicas do not march in step
            return max(seconds, self.poll * (0.5 + random.random()))
        return seconds

    def release(self, lease: object) -> None:
        if not isinstance(lease, RedisLease) or lease.id is None or self.max_concurrency is None:
            return
        lease_id = lease.id
        self._held.pop(lease_id, None)
        self._send(lease, lambda: self._release(self._lease, lease_id))

    def settle(self, lease: object, tokens: int) -> None:
        if not isinstance(lease, RedisLease) or lease.id is None or not self._windowed:
            return
        lease_id = lease.id
        self._send(lease, lambda: self._settle(keys=(self._tok,), args=(lease_id, int(tokens))))

    def usage(self) -> tuple[int, int, int]:
        """(in flight, requests in the window, tokens in the window) as the latest
        ``acquire`` (by Redis's clock) saw them, all replicas included."""
        return self._usage

    @property
    def held(self) -> int:
        """Leases this process holds (taken here, not yet released)."""
        return len(self._held)

    async def aclose(self) -> None:
        """Stop refreshing leases (pending calls are the ``background``'s to finish)."""
        self._closed = True
        refresher = self._refresher
        if refresher is not None:
            refresher.cancel()
            await asyncio.wait((refresher,), timeout=2)

    def _send(self, lease: RedisLease, call: Callable[[], Awaitable[object]]) -> None:
        """Start ``call`` after the lease's previous call (a settle then a release go in
        that order, whatever connections the pool hands them)."""
        previous = lease.pending

        async def in_order() -> None:
            if previous is not None and not previous.done():
                await asyncio.wait((previous,))
            async with asyncio.timeout(self.timeout):  # (see BoundedScript)
                await call()

        lease.pending = self._background.spawn(in_order(), self._on_error)

    def _hold(self, lease_id: str) -> None:
        self._held[lease_id] = None
        if self._refresher is None and not self._closed:
            # Kept here, not in ``background``: a loop for as long as leases are held, not
            # a call to wait for (``self._refresher`` keeps it referenced).
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_while_held())

    async def refresh(self) -> None:
        """Push back the expiry of the leases held here, now (the refresher's step)."""
        ids = list(self._held)
        for i in range(0, len(ids), _REFRESH_BATCH):
            await self._refresh(
                keys=(self._lease,),
                args=(self._ttl_us, *ids[i : i + _REFRESH_BATCH], _us(self._clock)),
            )

    async def _refresh_while_held(self) -> None:
        """Every ``lease_ttl / 3`` s while leases are held here, :meth:`refresh`."""
        try:
            while self._held and not self._closed:
                await asyncio.sleep(self.lease_ttl / 3)
                try:
                    await self.refresh()
                except Exception as exc:  # (Redis away: keep trying while held)
                    if self._on_error is not None:
                        self._on_error(exc)
        finally:
            self._refresher = None


class RedisPeriodCounter:
    """A count per UTC period in Redis (a :class:`~.period.PeriodCounter`): a key's
    tokens per day, its spend per day or month.

    ``check`` is one script (the period and the time to its end on Redis's clock); once
    the allowance is used up, the answer is kept here and Redis asked again only every
    10 s (so requests refused until the period ends cost no round trip, and an operator
    who resets the count is heard). ``add`` is sent without waiting. :attr:`seen` is the
    last (period number, count) Redis reported.
    """

    def __init__(
        self,
        client: Redis,
        prefix: str,
        limit: int,
        *,
        period: Period = DAY,
        background: Background | None = None,
        on_error: ErrorHook | None = None,
        timeout: float = 0.5,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.limit = limit
        self.period = period
        self.prefix = prefix
        self._key = f"{{{prefix}}}:{period.name}"
        self._check = BoundedScript(client, PERIOD_CHECK, timeout)
        self._add = BoundedScript(client, PERIOD_ADD, timeout)
        self._floor = BoundedScript(client, PERIOD_FLOOR, timeout)
        self._background = background if background is not None else Background()
        self._on_error = on_error
        self._clock = clock
        self._local = clock or time.monotonic
        self._ends = 0.0  # when the used-up allowance renews (local clock)
        self._recheck = 0.0  # when to ask Redis again meanwhile
        self._refused_at = 0  # the limit the kept refusal was for
        self.seen: tuple[int, int] | None = None

    async def check(self) -> float:
        now = self._local()
        if now < self._recheck and self._refused_at == self.limit:
            return self._ends - now
        index, used, until = await self._check(
            keys=(self._key,), args=(self.period.name, _us(self._clock))
        )
        self.seen = (int(index), int(used))
        if used < self.limit:
            self._recheck = 0.0
            return 0.0
        wait = float(until) / _US
        self._ends = now + wait
        self._recheck = now + min(wait, _PERIOD_RECHECK)
        self._refused_at = self.limit
        return wait

    async def spent(self) -> int:
        index, used, _ = await self._check(
            keys=(self._key,), args=(self.period.name, _us(self._clock))
        )
        self.seen = (int(index), int(used))
        return int(used)

    def add(self, amount: int) -> None:
        amount = int(amount)
        if amount > 0:
            self._background.spawn(self._count(amount), self._on_error)

    async def floor(self, used: int, index: int) -> None:
        """Count at least ``used`` for period ``index`` if it is still the current one
        (a count the usage log rebuilt on start; the replicas' count may be higher)."""
        got = await self._floor(
            keys=(self._key,), args=(self.period.name, index, int(used), _us(self._clock))
        )
        self.seen = (int(got[0]), int(got[1]))

    async def _count(self, amount: int) -> None:
        index, used = await self._add(
            keys=(self._key,), args=(self.period.name, amount, _us(self._clock))
        )
        self.seen = (int(index), int(used))
