"""Client keys: who is asking, which models they may use, and how much.

Two sources, one check. ``keys:`` (config/team.py) names each key, may restrict it to
some models (globs) and give it limits; ``server.api_keys`` are plain shared keys with
neither (their requests carry no key name). When neither is configured, the gateway is
open.

A key arrives as ``Authorization: Bearer <key>`` or ``x-api-key: <key>`` (the two SDKs'
ways). Only SHA-256 digests are kept in memory, and the presented key's digest is
compared with *every* known digest in constant time, so neither the answer's timing nor
an early exit tells an attacker how much of a guess was right. A key's value never
leaves this module: logs, usage rows and metrics see its name.

:meth:`ClientKey.admit` enforces the key's limits on a request that passed
authentication and the model check: ``rpm``/``tpm``/``max_concurrency`` on a
:class:`~interlingua.limits.LimitState` (in process, or Redis when ``state.url`` is set),
``tokens_per_day`` on a day counter. A request over a limit is refused at once with 429
and Retry-After (a client's own limit is not a line to wait in: the client decides
whether to wait). The :class:`Admission` it returns is ended with the request's actual
token count when the answer has ended. A key whose counts all live in this process is
admitted without a coroutine or an admission object (:meth:`ClientKey.admit_now`, then
:meth:`ClientKey.end`): most keys, on every request.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import math
from collections.abc import Iterable, Mapping

from ..config import Config, KeyConfig, KeyLimits
from ..errors import AuthenticationError, PermissionDeniedError, RateLimitError
from ..limits import (
    UNTIL_RELEASE,
    Counters,
    Entry,
    LimitState,
    MemoryCounters,
    MemoryPeriodCounter,
    MemoryState,
    PeriodCounter,
)
from .budgets import Budget, SpendBook

__all__ = ["Admission", "ClientKey", "KeyRing", "presented_key"]

#: the Retry-After of a key refused for its concurrency (no release time is known)
CONCURRENCY_RETRY_AFTER = 1.0


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request presents (``x-api-key`` first, then a Bearer token)."""
    key = headers.get("x-api-key")
    if key is None:
        auth = headers.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    return key or None


class Admission:
    """A request admitted under a key's limits; :meth:`end` it once with its tokens."""

    __slots__ = ("_day", "_lease", "_state")

    def __init__(
        self, state: LimitState | None, lease: object | None, day: PeriodCounter | None
    ) -> None:
        self._state = state
        self._lease = lease
        self._day = day

    def end(self, tokens: int) -> None:
        """The answer has ended having cost ``tokens`` (0: unknown; the estimate stays)."""
        state, lease = self._state, self._lease
        if state is not None and lease is not None:
            self._lease = None
            if tokens > 0:
                state.settle(lease, tokens)
            state.release(lease)
        if self._day is not None and tokens > 0:
            self._day.add(tokens)
            self._day = None


class ClientKey:
    """One configured key: its name (None for a plain ``server.api_keys`` key), the
    models it may use and its limits."""

    __slots__ = (
        "_day",
        "_local",
        "_local_budgets",
        "_local_day",
        "_local_state",
        "_state",
        "budgets",
        "counts_tokens",
        "digest",
        "limited",
        "limits",
        "models",
        "name",
    )

    def __init__(
        self,
        name: str | None,
        digest: bytes,
        models: tuple[str, ...] = (),
        limits: KeyLimits | None = None,
        counters: Counters | None = None,
        book: SpendBook | None = None,
    ) -> None:
        """``counters`` keep the limits' counts (default: this process's); ``book``
        keeps the budgets' (the process's, which the accounting charges: needed when
        the limits set a budget)."""
        self.name = name
        self.digest = digest
        self.models = models
        self.limits = limits or KeyLimits()
        self._state: LimitState | None = None
        self._day: PeriodCounter | None = None
        lim = self.limits
        counters = counters or MemoryCounters()
        if lim.rpm is not None or lim.tpm is not None or lim.max_concurrency is not None:
            self._state = counters.limit_state(f"key:{name}", lim.rpm, lim.tpm, lim.max_concurrency)
        if lim.tokens_per_day is not None:
            self._day = counters.period_counter(f"key:{name}", lim.tokens_per_day)
        #: the key's budgets in dollars (server/budgets.py), each with its spend counter
        self.budgets: tuple[Budget, ...] = ()
        if lim.budget_per_day is not None or lim.budget_per_month is not None:
            if book is None or name is None:
                raise ValueError("a key with a budget needs a name and the process's SpendBook")
            self.budgets = book.budgets(name, lim)
        # (plain attributes, not properties: read on every request, and Python 3.11
        # calls a property's function with a frame of its own each time)
        #: whether any limit is set (then each request is admitted under them)
        self.limited = self._state is not None or self._day is not None or bool(self.budgets)
        #: whether admission needs the request's token estimate (a ``tpm`` is set)
        self.counts_tokens = lim.tpm is not None
        local_budgets = all(type(b.counter) is MemoryPeriodCounter for b in self.budgets)
        #: whether every count is this process's (then admit_now decides alone)
        self._local = (
            (self._state is None or type(self._state) is MemoryState)
            and (self._day is None or type(self._day) is MemoryPeriodCounter)
            and local_budgets
        )
        # (the same counters, typed as what admit_now and end call when _local)
        self._local_state = self._state if type(self._state) is MemoryState else None
        self._local_day = self._day if type(self._day) is MemoryPeriodCounter else None
        self._local_budgets: tuple[tuple[Budget, MemoryPeriodCounter], ...] = tuple(
            (b, b.counter) for b in self.budgets if type(b.counter) is MemoryPeriodCounter
        )

    def allows(self, model: str) -> bool:
        """Whether this key may use ``model`` (every model when no globs are set)."""
        models = self.models
        return not models or any(fnmatch.fnmatchcase(model, pattern) for pattern in models)

    def check_model(self, model: str) -> None:
        """PermissionDeniedError (403) when this key may not use ``model``."""
        if not self.allows(model):
            raise PermissionDeniedError(
                f"The model '{model}' is not available to key '{self.name}'.",
                code="model_not_allowed",
                param="model",
            )

    async def admit(self, tokens: int) -> Admission:
        """Take a place under this key's limits for a request of about ``tokens``, or
        raise RateLimitError (429, with Retry-After) when one is reached. (Any key's
        way; :meth:`admit_now` is the faster one of a key counted in this process.)"""
        if self._day is not None:
            wait = await self._day.check()
            if wait > 0:
                raise self._refused("tokens_per_day", wait)
        for budget in self.budgets:
            wait = await budget.counter.check()
            if wait > 0:
                raise budget.refused(self.name, wait)
        lease = None
        if self._state is not None:
            lease = self._leased(await self._state.acquire(tokens))
        return Admission(self._state, lease, self._day)

    def admit_now(self, tokens: int) -> Entry | None:
        """:meth:`admit` without a coroutine or an admission object when this key's
        counts live in this process: the request's window entry (an int, -1 without a
        window), to give to :meth:`end` with the actual tokens once the answer has ended;
        None when the counts are shared (await :meth:`admit`). Raises RateLimitError
        as :meth:`admit` does."""
        if not self._local:
            return None
        day = self._local_day
        if day is not None:
            wait = day.check_now()
            if wait > 0:
                raise self._refused("tokens_per_day", wait)
        for budget, counter in self._local_budgets:
            wait = counter.check_now()
            if wait > 0:
                raise budget.refused(self.name, wait)
        state = self._local_state
        if state is None:
            return -1
        got = state.admit(tokens)
        if isinstance(got, float):
            raise self._refused_after(got)
        return got

    def end(self, entry: Entry, tokens: int) -> None:
        """The answer of a request :meth:`admit_now` admitted (``entry``) has ended
        having cost ``tokens`` (0: unknown; the estimate stays)."""
        state = self._local_state
        if state is not None:
            state.end(entry, tokens)
        day = self._local_day
        if day is not None and tokens > 0:
            day.add(tokens)

    def _leased(self, got: object) -> object:
        """The lease of an acquire's answer, or its wait refused."""
        if isinstance(got, float):
            raise self._refused_after(got)
        return got

    def _refused_after(self, wait: float) -> RateLimitError:
        """The refusal of an acquire that answered ``wait``."""
        reason = "max_concurrency" if wait == UNTIL_RELEASE else "rpm/tpm"
        return self._refused(reason, CONCURRENCY_RETRY_AFTER if math.isinf(wait) else wait)

    def _refused(self, what: str, wait: float) -> RateLimitError:
        limits = self.limits
        shown = {
            "tokens_per_day": f"tokens_per_day {limits.tokens_per_day}",
            "max_concurrency": f"max_concurrency {limits.max_concurrency}",
            "rpm/tpm": ", ".join(
                f"{name} {value}"
                for name, value in (("rpm", limits.rpm), ("tpm", limits.tpm))
                if value is not None
            ),
        }[what]
        return RateLimitError(
            f"Rate limit reached for key '{self.name}' ({shown}). "
            f"Try again in {max(wait, 0.001):.3g} s.",
            code="rate_limit_exceeded",
            retry_after=max(wait, 0.001),
        )


class KeyRing:
    """Every key clients may present (see the module docstring)."""

    def __init__(self, keys: Iterable[ClientKey]) -> None:
        self.keys = tuple(keys)

    @classmethod
    def from_config(
        cls,
        config: Config,
        counters: Counters | None = None,
        previous: KeyRing | None = None,
        book: SpendBook | None = None,
    ) -> KeyRing:
        """The ring of ``config``'s ``keys`` and ``server.api_keys`` (a ``key_env`` is
        read now: ConfigError when its variable is unset). A key of ``previous`` (the
        ring a reloaded config replaces) whose name, digest, models and limits are all
        unchanged is kept, the same object: its counts (a minute's requests, a day's
        tokens, its requests in flight) carry over; ``book`` keeps the budgets'
        spend (by key name: it carries over whatever changed)."""
        kept = {key.name: key for key in previous.keys if key.name} if previous else {}
        return cls(
            [
                *(_named(key, counters, kept.get(key.name), book) for key in config.keys),
                *(
                    ClientKey(None, hashlib.sha256(plain.encode()).digest())
                    for plain in config.server.api_keys
                ),
            ]
        )

    def budgeted(self) -> list[tuple[str, tuple[Budget, ...]]]:
        """Each named key with budgets, and its budgets (the status page's)."""
        return [(key.name, key.budgets) for key in self.keys if key.name and key.budgets]

    @property
    def enabled(self) -> bool:
        """Whether requests must present a key."""
        return bool(self.keys)

    def authenticate(self, headers: Mapping[str, str]) -> ClientKey | None:
        """The key ``headers`` present; None when no keys are configured; else
        AuthenticationError (401)."""
        if not self.keys:
            return None
        presented = presented_key(headers)
        found = None
        if presented is not None:
            digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
            for key in self.keys:  # every digest, no early exit
                if hmac.compare_digest(digest, key.digest):
                    found = key
        if found is None:
            raise AuthenticationError(
                "Invalid or missing API key. Send it as 'Authorization: Bearer <key>' or "
                "'x-api-key: <key>'.",
                code="invalid_api_key",
            )
        return found


def _named(
    key: KeyConfig, counters: Counters | None, old: ClientKey | None, book: SpendBook | None
) -> ClientKey:
    digest = bytes.fromhex(key.digest())
    if (
        old is not None
        and old.digest == digest
        and old.models == key.models
        and old.limits == key.limits
    ):
        return old
    return ClientKey(key.name, digest, key.models, key.limits, counters, book)
