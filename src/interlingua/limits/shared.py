"""Counters shared by the replicas through Redis, and the fallback when Redis goes away.

With ``state: {url: redis://...}`` one :class:`SharedCounters` per process holds one
``redis.asyncio`` client (a connection pool) for every shared state of the process::

    counters = SharedCounters("redis://127.0.0.1:6379/0")
    await counters.start()                   # optional: says now if Redis is away
    upstream_state = counters.limit_state("upstream:nim", rpm=40, tpm=200_000, max_concurrency=8)
    key_state = counters.limit_state("key:team-a", rpm=5, tpm=100_000)
    key_day = counters.period_counter("key:team-a", 2_000_000)      # tokens a UTC day
    key_month = counters.period_counter("spend:team-a", 300 * 10**9, MONTH)  # nanodollars
    router.cooldowns = counters.cooldowns(router.cooldowns)
    ...
    await counters.aclose()

**Failover.** Each state is a :class:`SharedState`: Redis (:class:`~.redis_state.RedisState`)
while it answers, else a :class:`~.state.MemoryState` of this process with the same
limits, so the gateway keeps serving when Redis goes away -- with per-process limits,
which is what N replicas without Redis would enforce. The first failure (a refused
connection, a timeout: every call is bounded by ``timeout`` = 0.5 s and the client
never retries, so a dead Redis costs a request at most that) logs one warning and
starts one probe that tries Redis every ``retry_every`` seconds (a script that writes,
not per request); when it succeeds, one info line, and the states use Redis again. A
lease is released and settled by the backend that issued it. The period counters fall
back the same way, starting from the count Redis last reported.

``redis`` is imported when a :class:`SharedCounters` is built, not before: a gateway
without the ``redis`` extra never imports it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .background import Background
from .period import DAY, MemoryPeriodCounter, Period
from .redis_scripts import ALIVE
from .redis_state import BoundedScript, RedisLease, RedisPeriodCounter, RedisState
from .shared_cooldowns import LocalCooldowns, SharedCooldowns
from .state import MemoryState

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisHealth", "SharedCounters", "SharedPeriodCounter", "SharedState"]

log = logging.getLogger("interlingua.limits")


class RedisHealth:
    """Whether Redis answers: :attr:`up` until a call fails, then a probe every
    ``retry_every`` seconds until one succeeds. One warning when it goes, one info line
    when it is back. ``errors`` are the exceptions that mean "Redis is away"; any other
    one reported to :meth:`failed` is logged as a bug, and Redis still counts as up."""

    def __init__(
        self,
        probe: Callable[[], Awaitable[object]],
        errors: tuple[type[BaseException], ...],
        *,
        retry_every: float = 1.0,
        where: str = "Redis",
    ) -> None:
        self.up = True
        #: the process is shutting down: failures then are not an outage worth a warning
        self.closed = False
        self.errors = errors
        self.retry_every = retry_every
        self.where = where
        #: times Redis went away since start
        self.outages = 0
        self._probe = probe
        self._prober: asyncio.Task[Any] | None = None

    def failed(self, exc: BaseException) -> None:
        """A call to Redis raised ``exc``."""
        if not isinstance(exc, self.errors):
            log.error("shared state: unexpected error from %s: %r", self.where, exc)
            return
        if not self.up or self.closed:
            return
        self.up = False
        self.outages += 1
        log.warning(
            "shared state unavailable, limits are per process until Redis is back (%s: %s)",
            self.where,
            f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
        )
        # Kept here, not in ``background`` (a loop until Redis is back, not a call to wait
        # for); ``self._prober`` keeps it referenced.
        self._prober = asyncio.get_running_loop().create_task(self._until_back())

    async def _until_back(self) -> None:
        try:
            while not self.closed:
                await asyncio.sleep(self.retry_every)
                try:
                    await self._probe()
                except Exception:  # (still away, or not yet able to write: try again)
                    continue
                self.up = True
                log.info("shared state is back: limits are shared again (%s)", self.where)
                return
        finally:
            self._prober = None

    async def aclose(self) -> None:
        self.closed = True
        await _stop(self._prober)


class SharedState:
    """A :class:`~.state.LimitState` on Redis while it answers, else on this process's
    :class:`~.state.MemoryState` (see the module docstring)."""

    __slots__ = ("_health", "local", "shared")

    def __init__(self, shared: RedisState, local: MemoryState, health: RedisHealth) -> None:
        self.shared = shared
        self.local = local
        self._health = health

    async def acquire(self, tokens: int) -> object | float:
        health = self._health
        if health.up:
            try:
                return await self.shared.acquire(tokens)
            except health.errors as exc:
                health.failed(exc)
        return self.local.try_acquire(tokens)

    def release(self, lease: object) -> None:
        if isinstance(lease, RedisLease):
            self.shared.release(lease)
        else:
            self.local.release(lease)

    def settle(self, lease: object, tokens: int) -> None:
        if isinstance(lease, RedisLease):
            self.shared.settle(lease, tokens)
        else:
            self.local.settle(lease, tokens)

    def usage(self) -> tuple[int, int, int]:
        """The shared counters as last seen while Redis answers, else this process's."""
        return self.shared.usage() if self._health.up else self.local.usage()

    @property
    def is_shared(self) -> bool:
        """Whether admissions go through Redis now."""
        return self._health.up


class SharedPeriodCounter:
    """A :class:`~.period.PeriodCounter` on Redis while it answers, else on this
    process's :class:`~.period.MemoryPeriodCounter`, which starts from the period's count
    Redis last reported and adds what this process counts while Redis is away. (Those
    amounts stay here: Redis does not learn them afterwards; nor an ``add`` lost in
    flight.)"""

    __slots__ = ("_health", "_seeded", "local", "shared")

    def __init__(
        self, shared: RedisPeriodCounter, local: MemoryPeriodCounter, health: RedisHealth
    ) -> None:
        self.shared = shared
        self.local = local
        self._health = health
        self._seeded = False

    @property
    def limit(self) -> int:
        return self.shared.limit

    @limit.setter
    def limit(self, limit: int) -> None:
        self.shared.limit = self.local.limit = limit

    @property
    def period(self) -> Period:
        return self.shared.period

    async def check(self) -> float:
        health = self._health
        if health.up:
            try:
                wait = await self.shared.check()
            except health.errors as exc:
                health.failed(exc)
            else:
                self._seeded = False
                return wait
        self._fall_back()
        return self.local.check_now()

    def add(self, amount: int) -> None:
        if self._health.up:
            self.shared.add(amount)
        else:
            self._fall_back()
            self.local.add(amount)

    async def spent(self) -> int:
        health = self._health
        if health.up:
            try:
                return await self.shared.spent()
            except health.errors as exc:
                health.failed(exc)
        self._fall_back()
        return await self.local.spent()

    async def seed(self, used: int, index: int) -> None:
        """Count at least ``used`` for period ``index`` (rebuilt from the usage log on
        start), in Redis when it answers and here in any case."""
        self.local.observe(used, index)
        health = self._health
        if health.up:
            try:
                await self.shared.floor(used, index)
            except health.errors as exc:
                health.failed(exc)

    def _fall_back(self) -> None:
        """Once per outage: count from what Redis last said (or this process's count
        from an earlier outage this period, if more)."""
        if not self._seeded:
            self._seeded = True
            seen = self.shared.seen
            if seen is not None:
                self.local.observe(seen[1], seen[0])


class SharedCounters:
    """The process's Redis client and the shared states built on it (module docstring).

    ``url`` is a redis-py URL (``redis://``, ``rediss://``, ``unix://``); ``prefix``
    begins every key; ``timeout`` bounds connecting and each reply; ``retry_every`` is the
    probe's period while Redis is away; ``lease_ttl`` and ``poll`` go to each
    :class:`~.redis_state.RedisState`; ``connections`` bounds the client's pool.
    ``client`` replaces the one built from ``url`` (tests). Build it inside the event loop that will use it (an app's lifespan).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "interlingua",
        timeout: float = 0.5,
        retry_every: float = 1.0,
        lease_ttl: float = 30.0,
        poll: float = 0.1,
        connections: int = 64,
        client: Redis | None = None,
    ) -> None:
        errors = _redis_errors()
        self.client = client if client is not None else _connect(url, timeout, connections)
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self.poll = poll
        self.background = Background()
        self.timeout = timeout
        self._alive = BoundedScript(self.client, ALIVE, timeout)
        self.health = RedisHealth(
            self._probe,
            errors,
            retry_every=retry_every,
            where=_where(url),
        )
        self._states: list[RedisState] = []
        self._cooldowns: list[SharedCooldowns] = []

    async def start(self) -> bool:
        """Try Redis once: True if it answers; else the warning is logged now and the
        states start per process (the probe brings them back)."""
        try:
            await self._probe()
        except self.health.errors as exc:
            self.health.failed(exc)
            return False
        return True

    def limit_state(
        self,
        name: str,
        rpm: int | None = None,
        tpm: int | None = None,
        max_concurrency: int | None = None,
    ) -> SharedState:
        """The shared counters of destination ``name`` (by convention ``upstream:<name>``
        or ``key:<name>``), for a :class:`~.queue.Limiter`'s ``state``."""
        shared = RedisState(
            self.client,
            f"{self.prefix}:limit:{name}",
            rpm,
            tpm,
            max_concurrency,
            background=self.background,
            on_error=self.health.failed,
            lease_ttl=self.lease_ttl,
            poll=self.poll,
            timeout=self.timeout,
        )
        self._states.append(shared)
        return SharedState(shared, MemoryState(rpm, tpm, max_concurrency), self.health)

    def period_counter(self, name: str, limit: int, period: Period = DAY) -> SharedPeriodCounter:
        """The shared count of ``name`` (``key:<name>`` for tokens, ``spend:<name>`` for
        dollars) per UTC ``period``, against ``limit``."""
        shared = RedisPeriodCounter(
            self.client,
            f"{self.prefix}:{period.name}:{name}",
            limit,
            period=period,
            background=self.background,
            on_error=self.health.failed,
            timeout=self.timeout,
        )
        return SharedPeriodCounter(shared, MemoryPeriodCounter(limit, period=period), self.health)

    def cooldowns(self, local: LocalCooldowns, *, refresh_every: float = 1.0) -> SharedCooldowns:
        """``local`` (the router's ``routing.Cooldowns``) shared with the other replicas:
        the same interface, read from Redis every ``refresh_every`` seconds."""
        shared = SharedCooldowns(
            self.client,
            f"{self.prefix}:cooldown",
            local,
            health=self.health,
            background=self.background,
            refresh_every=refresh_every,
            timeout=self.timeout,
        )
        self._cooldowns.append(shared)
        return shared

    async def aclose(self) -> None:
        """Stop the probe, the lease refreshers and the cooldown readers, let the last
        releases go out (1 s at most), close the client."""
        await self.health.aclose()
        for state in self._states:
            await state.aclose()
        for cooldowns in self._cooldowns:
            await cooldowns.aclose()
        await self.background.aclose()
        await self.client.aclose()

    async def _probe(self) -> None:
        await self._alive(keys=(f"{self.prefix}:alive",))


async def _stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel a loop task and wait for it (2 s at most: its loop also checks a flag, in
    case a library swallows the cancellation)."""
    if task is not None:
        task.cancel()
        await asyncio.wait((task,), timeout=2)


def _redis_errors() -> tuple[type[BaseException], ...]:
    """What a call raises when Redis is away: the client's errors (connection, timeout,
    a Redis still loading, read-only or out of memory) and the OS's."""
    try:
        from redis.exceptions import RedisError
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            "state.url needs the Redis client: pip install 'interlingua[redis]'"
        ) from exc
    return (RedisError, OSError, TimeoutError)


def _connect(url: str, timeout: float, connections: int) -> Redis:
    """A client that fails fast -- connecting is bounded by ``timeout``, replies by the
    callers (:class:`~.redis_state.BoundedScript`: no socket timeout here, which would
    make redis-py swallow some cancellations on Python 3.11), and nothing is retried
    (redis-py retries three times with backoff by default; a request must not wait for
    that) -- over at most ``connections`` connections: a burst of calls (a thousand
    streams ending at once, each sending its release) waits its turn for one instead of
    opening a connection each (Redis refuses clients past ``maxclients``). A call that
    waits more than 2 s for a connection fails like a dead Redis."""
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=connections,
        timeout=max(2.0, timeout),
        decode_responses=False,
        socket_connect_timeout=timeout,
        socket_timeout=None,
        retry=Retry(NoBackoff(), 0),
    )
    return Redis.from_pool(pool)


def _where(url: str) -> str:
    """``url`` without its credentials, for logs."""
    parts = urlsplit(url)
    host = parts.hostname or parts.path or "?"
    port = f":{parts.port}" if parts.port else ""
    path = parts.path if parts.hostname else ""
    return f"{parts.scheme}://{host}{port}{path}"
