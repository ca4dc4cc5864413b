"""Client keys: who is asking, which models they may use, and how much.

Two sources, one check. ``keys:`` (config/team.py) names each key, may restrict it to
some models (globs) and give it limits; ``server.api_keys`` are plain shared keys with
neither (their requests carry no key name); with an ``admin`` section and the usage log
on, keys an admin created live in the database too (usage/keys_store.py, kept current
in every process by server/stored_keys.py), side by side with the config's: a name the
config uses is the config's. When no key is configured and the database holds none
(nor could: no admin section), the gateway is open; once the database may hold keys it
is closed even while it holds none, so revoking the last key never opens it.

A key arrives as ``Authorization: Bearer <key>`` or ``x-api-key: <key>`` (the two SDKs'
ways). Only SHA-256 digests are kept in memory, in a dict keyed by digest: one lookup
per request however many keys there are. Why a dict lookup is as safe as comparing with
every digest in constant time (what this module did with a handful of config keys): the
timing of a lookup depends on the *digest* of what was presented -- its hash bucket, and
byte comparisons with the few digests in that bucket -- never directly on the presented
key. To learn anything about a stored digest from that timing an attacker would have to
choose presented keys whose SHA-256 shares a prefix with it, which is a preimage search
on SHA-256; and the bucket a digest lands in is a keyed (per-process random) hash of it.
What timing can tell is at most "this guess's digest collides with some stored digest's
hash bucket", which brings no guess closer to a key. So the lookup is O(1) and leaks
nothing usable; a key's value never leaves this module: logs, usage rows and metrics see
its name. A database key past its expiry is refused with 401 naming the expiry, a
revoked one with 401 naming the revocation (the holder of a revoked key knows it anyway;
these messages are built only on the refusal path).

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
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

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
from ..usage.keys_store import StoredKey
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
    """Every key clients may present (see the module docstring): the config's, then the
    database's (``stored``: the rows it was built from, revoked ones included);
    ``closed``: a key is required even when there is none."""

    def __init__(
        self,
        keys: Iterable[ClientKey],
        stored: Sequence[StoredKey] = (),
        *,
        closed: bool = False,
        configured: int | None = None,
    ) -> None:
        self.keys = tuple(keys)
        self.stored = tuple(stored)
        names = {key.name for key in self.keys}
        #: the config's keys, the first ``configured`` of ``keys`` (default: all of
        #: them); a database refresh keeps them as they are
        self.configured = self.keys[:configured]
        #: whether requests must present a key
        self.enabled = bool(self.keys) or closed
        self._by_digest = {key.digest: key for key in self.keys}
        #: digest -> expiry, of the keys that have one (checked when one is presented)
        self._expiring = {
            bytes.fromhex(row.sha256): row.expires_at
            for row in self.stored
            if row.expires_at is not None and row.revoked_at is None and row.name in names
        }
        #: digest -> why it is refused, of the revoked keys (the refusal's message)
        self._revoked = {
            bytes.fromhex(row.sha256): f"The API key '{row.name}' was revoked at "
            f"{_iso(row.revoked_at)}."
            for row in self.stored
            if row.revoked_at is not None
        }

    @classmethod
    def from_config(
        cls,
        config: Config,
        counters: Counters | None = None,
        previous: KeyRing | None = None,
        book: SpendBook | None = None,
        *,
        stored: Sequence[StoredKey] | None = None,
    ) -> KeyRing:
        """The ring of ``config``'s ``keys`` and ``server.api_keys`` (a ``key_env`` is
        read now: ConfigError when its variable is unset), and of the database's keys
        ``stored`` (None: keys do not live in the database; then an empty ring leaves the
        gateway open). A key of ``previous`` (the ring a reloaded config replaces) whose
        name, digest, models and limits are all unchanged is kept, the same object: its
        counts (a minute's requests, a day's tokens, its requests in flight) carry over;
        ``book`` keeps the budgets' spend (by key name: it carries over whatever
        changed)."""
        kept = {key.name: key for key in previous.keys if key.name} if previous else {}
        configured = [
            *(_named(key, counters, kept.get(key.name), book) for key in config.keys),
            *(
                ClientKey(None, hashlib.sha256(plain.encode()).digest())
                for plain in config.server.api_keys
            ),
        ]
        ring = cls(configured, closed=stored is not None)
        return ring.with_stored(stored, counters, book, kept) if stored is not None else ring

    def with_stored(
        self,
        stored: Sequence[StoredKey],
        counters: Counters | None = None,
        book: SpendBook | None = None,
        kept: Mapping[str, ClientKey] | None = None,
    ) -> KeyRing:
        """This ring's config keys beside the database's keys ``stored`` (a refresh):
        an unchanged database key is kept, the same object (its counts carry over). A
        stored key named like a config key is left out: the config's wins."""
        if kept is None:
            kept = {key.name: key for key in self.keys if key.name is not None}
        taken = {key.name for key in self.configured}
        usable = [row for row in stored if row.revoked_at is None and row.name not in taken]
        keys = [
            *self.configured,
            *(_stored(row, counters, kept.get(row.name), book) for row in usable),
        ]
        return KeyRing(keys, stored, closed=True, configured=len(self.configured))

    def budgeted(self) -> list[tuple[str, tuple[Budget, ...]]]:
        """Each named key with budgets, and its budgets (the status page's)."""
        return [(key.name, key.budgets) for key in self.keys if key.name and key.budgets]

    def authenticate(self, headers: Mapping[str, str]) -> ClientKey | None:
        """The key ``headers`` present; None when no keys are configured; else
        AuthenticationError (401)."""
        if not self.enabled:
            return None
        presented = presented_key(headers)
        found = None
        if presented is not None:
            digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
            found = self._by_digest.get(digest)  # (why a lookup is safe: module docstring)
            if found is not None and self._expiring:
                expires = self._expiring.get(digest)
                if expires is not None and time.time() >= expires:
                    raise _refused(f"The API key '{found.name}' expired at {_iso(expires)}.")
            elif found is None and digest in self._revoked:
                raise _refused(self._revoked[digest])
        if found is None:
            raise _refused("Invalid or missing API key.", "Send it")
        return found


def _refused(why: str, send: str = "Send a valid key") -> AuthenticationError:
    return AuthenticationError(
        f"{why} {send} as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
        code="invalid_api_key",
    )


def _iso(when: float | None) -> str:
    """Unix seconds as ``2026-05-01T12:00:00Z``."""
    return datetime.fromtimestamp(when or 0.0, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stored(
    row: StoredKey, counters: Counters | None, old: ClientKey | None, book: SpendBook | None
) -> ClientKey:
    """The ClientKey of a database row: ``old`` when its models and limits did not
    change, with the row's digest (a rotated key keeps its counts: a leaked key's
    replacement does not get a fresh minute or day; the old digest stops working
    because the new ring is keyed by the new one)."""
    digest = bytes.fromhex(row.sha256)
    if old is not None and (old.models, old.limits) == (row.models, row.limits):
        old.digest = digest
        return old
    return ClientKey(row.name, digest, row.models, row.limits, counters, book)


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
