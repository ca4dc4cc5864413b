"""Rate limits shared by the actors of a Ray batch: one named actor keeps the count.

Each map actor of :mod:`.ray` has its own client, and each client its own
:class:`~interlingua.limits.RateLimiter` -- its waiting line stays in the actor -- but
``--rpm`` and ``--tpm`` hold for the whole job, so the counters behind every limiter
live in one place: a :class:`LimitKeeper` actor (named ``interlingua-batch-limits-<run>``,
so it can be found in the Ray dashboard and by name), or Redis when ``--state-url`` is
given (the gateway's :class:`~interlingua.limits.SharedCounters`, which other jobs and
gateway replicas can share).

A :class:`KeeperState` is the :class:`~interlingua.limits.LimitState` a limiter asks: one
actor call per admission (the keeper checks and takes in one step: an actor runs one call
at a time), releases and settlements sent without waiting. The keeper holds the sliding
windows only; concurrency is each actor's own (``--concurrency``), so nothing is lost
when an actor dies holding a lease -- its window entries simply age out.

Only this module and :mod:`.ray` import ``ray``; :func:`start_keeper` is called in the
driver, :class:`KeeperState` is built in the actors.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ..limits import MemoryState

__all__ = ["POLL", "KeeperState", "LimitKeeper", "start_keeper"]

POLL = 0.05
"""Seconds a limiter waits before asking again when only a release could make room (a
remote counter cannot wake it the way a release in the same process does)."""


class LimitKeeper:
    """The job's sliding windows (a :class:`~interlingua.limits.MemoryState`), behind
    plain methods for a Ray actor. Leases are numbered: a number crosses processes.

    ``speed`` makes its minute pass that many times faster (waits are still answered in
    real seconds): a seam for tests, which cannot wait out minutes.
    """

    def __init__(
        self, requests_per_minute: int | None, tokens_per_minute: int | None, speed: float = 1.0
    ) -> None:
        self._speed = speed
        self._state = MemoryState(requests_per_minute, tokens_per_minute, clock=self._clock)
        self._leases: dict[int, object] = {}
        self._next = 0
        #: admissions so far (tests and the dashboard read it through :meth:`admitted`)
        self._admitted = 0

    def acquire(self, tokens: int) -> int | float:
        """A lease number if a request of ``tokens`` may start now, else seconds to wait."""
        got = self._state.try_acquire(tokens)
        if isinstance(got, float):
            return got / self._speed
        number, self._next = self._next, self._next + 1
        self._leases[number] = got
        self._admitted += 1
        return number

    def release(self, number: int) -> None:
        """The leased request ended."""
        lease = self._leases.pop(number, None)
        if lease is not None:
            self._state.release(lease)

    def settle(self, number: int, tokens: int) -> None:
        """The leased request cost ``tokens`` (instead of its estimate)."""
        lease = self._leases.get(number)
        if lease is not None:
            self._state.settle(lease, tokens)

    def _clock(self) -> float:
        return time.monotonic() * self._speed

    def admitted(self) -> int:
        """Admissions so far."""
        return self._admitted

    def usage(self) -> tuple[int, int, int]:
        """(requests in flight, requests in the window, tokens in the window)."""
        return self._state.usage()


class _Lease:
    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number


class KeeperState:
    """A :class:`~interlingua.limits.LimitState` whose counters are a :class:`LimitKeeper`
    actor (``keeper``: its handle)."""

    def __init__(self, keeper: Any) -> None:
        self._keeper = keeper
        self._seen = (0, 0, 0)

    async def acquire(self, tokens: int) -> object | float:
        got = await self._keeper.acquire.remote(tokens)
        if isinstance(got, float):
            return got if got != float("inf") else POLL
        return _Lease(int(got))

    def release(self, lease: object) -> None:
        if isinstance(lease, _Lease):
            self._keeper.release.remote(lease.number)

    def settle(self, lease: object, tokens: int) -> None:
        if isinstance(lease, _Lease):
            self._keeper.settle.remote(lease.number, tokens)

    def usage(self) -> tuple[int, int, int]:
        return self._seen  # (not asked remotely: usage is for displays)


def start_keeper(
    requests_per_minute: int | None, tokens_per_minute: int | None, *, speed: float = 1.0
) -> Any:
    """Start this run's :class:`LimitKeeper` actor (no CPU reserved: it only counts); its
    handle. It lives as long as the driver holds the handle."""
    import ray

    name = f"interlingua-batch-limits-{uuid.uuid4().hex[:12]}"
    actor = ray.remote(LimitKeeper).options(name=name, num_cpus=0, max_restarts=0)
    return actor.remote(requests_per_minute, tokens_per_minute, speed)
