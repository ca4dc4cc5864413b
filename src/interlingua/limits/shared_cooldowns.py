"""Deployment cooldowns shared by the replicas, without a Redis round trip per request.

``routing.Cooldowns`` cools a deployment after ``failures`` failures within ``window``
seconds (for ``duration``, or for the Retry-After a 429 named). With replicas, each one
counting alone would need ``failures`` failures *each* before it stops sending to a
failing deployment, and one replica's 429 with Retry-After would not spare the others.
:class:`SharedCooldowns` keeps the same interface (``record_failure``,
``record_success``, ``cooling_until``: all the router uses) and the same rules, counted
in Redis across replicas:

* a failure is recorded by one script (fire and forget: failures are the rare case); its
  answer tells this replica at once when the shared count tipped the deployment into a
  cooldown;
* what the other replicas cooled is read by one script every ``refresh_every`` seconds
  (1 s), not per request: ``cooling_until`` answers from memory;
* a success is sent to Redis only for a deployment Redis has failures or a cooldown
  for (as of the last read): the common success costs nothing;
* the process's own :class:`routing.Cooldowns` (``local``) counts too, and answers
  alone while Redis is away: a replica never waits for Redis to stop using a deployment
  that fails under its own eyes;
* a deployment this replica cooled itself stays on probation here when its cooldown
  ends (``local.probing``: its next failure cools it again at once), although Redis then
  shows nothing for it, as it does after another replica's success; one it only learnt
  of from the others counts its next failures as usual.

Times are on ``local.clock``'s scale (monotonic): Redis's times become "that many
seconds from now" on arrival, so replica clocks do not matter. This module cannot
import ``routing`` (limits sits below it): ``local`` is anything with its interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from .background import Background
from .redis_scripts import COOL_FAIL, COOL_READ, COOL_SUCCEED
from .redis_state import BoundedScript

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["CooldownRules", "Health", "LocalCooldowns", "SharedCooldowns"]

_US = 1_000_000


class CooldownRules(Protocol):
    """``config.CooldownConfig``'s fields."""

    failures: int
    window: float
    duration: float


class Health(Protocol):
    """``shared.RedisHealth``: whether Redis answers, and where its failures go."""

    @property
    def up(self) -> bool: ...

    def failed(self, exc: BaseException) -> None: ...


class LocalCooldowns(Protocol):
    """``routing.Cooldowns``: the in-process cooldowns this class shares."""

    config: Any  # CooldownRules (a frozen dataclass's fields read as properties)
    clock: Callable[[], float]

    def record_failure(self, key: str, retry_after: float | None = None) -> float | None: ...

    def record_success(self, key: str) -> None: ...

    def cooling_until(self, key: str) -> float | None: ...

    def probing(self, key: str) -> bool: ...


class SharedCooldowns:
    """``local``'s cooldowns, shared through Redis (see the module docstring).

    ``prefix`` begins the keys (``interlingua:cooldown``); ``health`` says whether Redis
    answers (and hears failures); ``redis_clock`` (Unix seconds) replaces Redis's clock
    in tests.
    """

    def __init__(
        self,
        client: Redis,
        prefix: str,
        local: LocalCooldowns,
        *,
        health: Health,
        background: Background,
        refresh_every: float = 1.0,
        timeout: float = 0.5,
        redis_clock: Callable[[], float] | None = None,
    ) -> None:
        self.local = local
        self.config = local.config
        self.clock = local.clock
        self.refresh_every = refresh_every
        self._tag = f"{{{prefix}}}"
        self._cool, self._failing = f"{self._tag}:cool", f"{self._tag}:failing"
        self._fail = BoundedScript(client, COOL_FAIL, timeout)
        self._succeed = BoundedScript(client, COOL_SUCCEED, timeout)
        self._read = BoundedScript(client, COOL_READ, timeout)
        self._health = health
        self._background = background
        self._redis_clock = redis_clock
        #: deployment -> when its shared cooldown ends (local clock), as last read
        self._remote: dict[str, float] = {}
        #: deployments Redis has failures recorded for, as last read or sent
        self._failing_keys: set[str] = set()
        #: deployments with failures counted here and sent to Redis: cleared here when
        #: Redis shows neither failures nor a cooldown for them (another replica's success)
        self._shared_keys: set[str] = set()
        #: per deployment, the number of its latest call sent or answered, and its calls
        #: in flight: a read that began before the latest, or ends while one is in
        #: flight, may predate it, so that read leaves the deployment as it is here
        self._touched: dict[str, int] = {}
        self._in_flight: dict[str, int] = {}
        self._sent = 0
        self._reader: asyncio.Task[Any] | None = None
        self._closed = False

    def record_failure(self, key: str, retry_after: float | None = None) -> float | None:
        """Count a failure here and in Redis; when ``key`` cools (as known now)."""
        until = self.local.record_failure(key, retry_after)
        self._start_reading()
        if self._health.up:
            self._failing_keys.add(key)
            self._shared_keys.add(key)
            self._send(key, self._send_failure(key, retry_after))
        return self._later(until, self._remote_until(key))

    def record_success(self, key: str) -> None:
        """``key`` answered: forget its failures here, and in Redis if it has any there."""
        self.local.record_success(key)
        self._shared_keys.discard(key)
        if key in self._remote or key in self._failing_keys:
            self._remote.pop(key, None)
            self._failing_keys.discard(key)
            if self._health.up:
                self._send(key, self._succeed(keys=self._keys(key), args=(key,)))

    def cooling_until(self, key: str) -> float | None:
        """When ``key``'s cooldown ends (here or as shared), or None (no round trip)."""
        self._start_reading()
        return self._later(self.local.cooling_until(key), self._remote_until(key))

    async def refresh(self) -> None:
        """Read the shared cooldowns now (the reader's step, every ``refresh_every``):
        what other replicas cooled cools here; what another replica's success cleared
        is cleared here too."""
        since = self._sent
        now, cooling, failing = await self._read(
            keys=(self._cool, self._failing), args=(self._redis_now(),)
        )
        here = self.clock()
        late = {k for k, n in self._touched.items() if n > since} | self._in_flight.keys()
        remote = {k: v for k, v in self._remote.items() if k in late}
        for i in range(0, len(cooling), 2):
            key = cooling[i].decode()
            if key not in late:
                remote[key] = here + (int(cooling[i + 1]) - int(now)) / _US
        failing_keys = {k.decode() for k in failing}
        for key in list(self._shared_keys):
            if key not in late and key not in remote and key not in failing_keys:
                self._shared_keys.discard(key)
                if not self.local.probing(key):  # (an ended cooldown, not a success)
                    self.local.record_success(key)
        self._remote = remote
        self._failing_keys = (failing_keys - late) | (self._failing_keys & late)
        self._touched = {k: n for k, n in self._touched.items() if n > since}

    def _touch(self, key: str) -> None:
        self._sent += 1
        self._touched[key] = self._sent

    def _send(self, key: str, call: Coroutine[Any, Any, object]) -> None:
        """Send ``call`` about ``key`` without waiting, tracked as in flight."""
        self._touch(key)
        self._in_flight[key] = self._in_flight.get(key, 0) + 1

        async def tracked() -> None:
            try:
                await call
            finally:
                left = self._in_flight.pop(key) - 1
                if left:
                    self._in_flight[key] = left
                self._touch(key)

        if self._background.spawn(tracked(), self._health.failed) is None:
            call.close()  # (no loop: never sent)
            self._in_flight.pop(key, None)

    async def aclose(self) -> None:
        self._closed = True
        reader = self._reader
        if reader is not None:
            reader.cancel()
            await asyncio.wait((reader,), timeout=2)

    def _keys(self, key: str) -> tuple[str, str, str]:
        return (self._cool, f"{self._tag}:fail:{key}", self._failing)

    async def _send_failure(self, key: str, retry_after: float | None) -> None:
        rules = self.config
        args = (
            key,
            rules.failures,
            round(rules.window * _US),
            round(rules.duration * _US),
            round(retry_after * _US) if retry_after and retry_after > 0 else 0,
            secrets.token_hex(8),
            self._redis_now(),
        )
        until, now = await self._fail(keys=self._keys(key), args=args)
        if until:  # the shared count tipped it (or it was cooling): known here at once
            self._remote[key] = max(
                self._remote.get(key, 0.0), self.clock() + (int(until) - int(now)) / _US
            )

    def _start_reading(self) -> None:
        """Start the reader on first use (the router's calls run in the event loop)."""
        if self._reader is None and not self._closed:
            # (no loop: a sync caller; the next call made in one starts it)
            with contextlib.suppress(RuntimeError):
                self._reader = asyncio.get_running_loop().create_task(self._read_forever())

    async def _read_forever(self) -> None:
        while not self._closed:
            if self._health.up:
                try:
                    await self.refresh()
                except Exception as exc:
                    self._health.failed(exc)
            await asyncio.sleep(self.refresh_every)

    def _remote_until(self, key: str) -> float | None:
        until = self._remote.get(key)
        return until if until is not None and until > self.clock() else None

    def _redis_now(self) -> int | str:
        clock = self._redis_clock
        return "" if clock is None else round(clock() * _US)

    @staticmethod
    def _later(a: float | None, b: float | None) -> float | None:
        if a is None:
            return b
        return a if b is None else max(a, b)
