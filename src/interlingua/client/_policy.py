"""The client's call policy: rate-limit slots and retries around each attempt.

One :class:`Policy` per client, shared by its plain calls and its streams. An attempt
runs inside :meth:`Policy.slot` (a concurrency slot plus the token reservation of the
client's :class:`~interlingua.limits.RateLimiter`); :meth:`Policy.retrying` runs attempts
until one succeeds, the error is not retryable (:func:`interlingua.retry.should_retry`),
or ``max_retries`` retries are spent, sleeping between them *outside* the slot so a
waiting retry does not hold back other calls.

The delay comes from :func:`interlingua.retry.retry_delay` (``retry-after`` first, then
capped exponential backoff with full jitter). ``sleep`` and ``rand`` are seams for tests.

Logging, to the client's ``logger`` (``interlingua.client`` by default): the first retry
of a call at DEBUG (one retry is routine), every later one at WARNING, and a call that
fails for good at WARNING, once -- each line naming the status, the request id and the
attempts (also as the record's ``status``, ``request_id`` and ``attempts`` attributes,
for structured handlers). A caller that reports failures itself with more context (the
batch runner, per line) asks for no failure line.

Answers that are not answers (:class:`~._errors.AnswerError`, raised by a call with
``retry_on_empty``) are judged here too: an empty answer is retried like a 5xx, within
the same ``max_retries``; an unreadable body once per call (a server that answers
garbage twice will not mend on the third try). Both are counted apart
(``empty_retries``, ``unreadable_retries``) for the batch summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from logging import Logger, LoggerAdapter
from typing import Any, Generic, TypeVar, cast

from ..core import Request
from ..core.tokens import estimate_request_tokens
from ..limits import RateLimit, RateLimiter, Slot
from ..retry import INITIAL_DELAY, MAX_DELAY, retry_delay, should_retry
from ._errors import AnswerError, APIError, UnreadableAnswerError

__all__ = ["CLIENT_LOG", "AnyLogger", "Policy", "PolicyField", "facts", "limiter_for"]

#: where a client logs unless given a ``logger``
CLIENT_LOG = logging.getLogger("interlingua.client")

T = TypeVar("T")
#: a logger, or an adapter adding context to one
AnyLogger = Logger | LoggerAdapter[Any]


class Policy:
    """Retries and rate limits for one client's calls to ``where`` (a URL, for logs)."""

    __slots__ = (
        "_no_slot",
        "empty_retries",
        "limiter",
        "log",
        "max_retries",
        "rand",
        "retries",
        "retry_base",
        "retry_cap",
        "sleep",
        "unreadable_retries",
        "where",
    )

    def __init__(
        self, limiter: RateLimiter, max_retries: int, where: str, log: AnyLogger = CLIENT_LOG
    ) -> None:
        self.limiter = limiter
        self.log = log
        self.max_retries = max_retries
        self.retry_base, self.retry_cap = INITIAL_DELAY, MAX_DELAY
        self.where = where
        #: retries made so far (all calls), for progress displays
        self.retries = 0
        #: of which: empty answers and unreadable 2xx bodies (``retry_on_empty``)
        self.empty_retries = self.unreadable_retries = 0
        self._no_slot = _NoSlot(limiter, None)
        # Seams for tests: patch these instead of the wall clock or the RNG.
        self.sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self.rand: Callable[[], float] = random.random

    def estimate(self, request: Request) -> int:
        """Tokens to reserve with the rate limiter: input estimate + max output (OpenAI
        counts a request against its token limit the same way). 0 without a token limit."""
        if self.limiter.limits.tokens_per_minute is None:
            return 0
        return estimate_request_tokens(request) + (request.max_tokens or 0)

    def slot(self, estimate: int) -> AbstractAsyncContextManager[Slot]:
        """Hold a rate-limiter slot for one attempt (a no-op slot when unlimited)."""
        if self.limiter.unlimited:
            return self._no_slot  # entering it costs nothing, settling it is a no-op
        return self.limiter.slot(estimate)

    async def retrying(
        self, attempt: Callable[[], Awaitable[T]], what: str, log_failure: bool = True
    ) -> T:
        """Run ``attempt`` until it succeeds or fails for good, logging as the module says
        (``log_failure=False``: no line for the failure, the caller logs it).

        The error that ends the call carries ``attempts`` (how many were made)."""
        unreadable = 0
        for n in itertools.count():
            try:
                return await attempt()
            except APIError as exc:
                exc.attempts = n + 1
                if isinstance(exc, AnswerError):
                    again = exc.retry and not (
                        unreadable and isinstance(exc, UnreadableAnswerError)
                    )
                else:
                    again = should_retry(exc)
                if n >= self.max_retries or not again:
                    if log_failure:
                        self._failed(exc, what)
                    raise
                delay = retry_delay(n, exc.headers, self.retry_base, self.retry_cap, rand=self.rand)
                self.retries += 1
                if isinstance(exc, UnreadableAnswerError):
                    unreadable += 1
                    self.unreadable_retries += 1
                elif isinstance(exc, AnswerError):
                    self.empty_retries += 1
                self._retrying(exc, what, delay, n + 1)
                await self.sleep(delay)
            except Exception as exc:  # not retried (an answer that fails validation...)
                with contextlib.suppress(AttributeError):  # ...still says how many were sent
                    exc.attempts = n + 1  # type: ignore[attr-defined]
                raise
        raise AssertionError("unreachable")

    def _retrying(self, exc: APIError, what: str, delay: float, retry: int) -> None:
        level = logging.DEBUG if retry == 1 else logging.WARNING
        if not self.log.isEnabledFor(level):
            return
        self.log.log(
            level, "retrying %s to %s in %.2fs (retry %d of %d; %s): %s",
            what, self.where, delay, retry, self.max_retries, facts(exc), exc.message,
            extra=_fields(exc),
        )  # fmt: skip

    def _failed(self, exc: APIError, what: str) -> None:
        attempts = f"{exc.attempts} attempt" + ("s" if exc.attempts != 1 else "")
        self.log.warning(
            "%s to %s failed after %s (%s): %s",
            what, self.where, attempts, facts(exc), exc.message, extra=_fields(exc),
        )  # fmt: skip


def facts(exc: APIError) -> str:
    """``HTTP 503, request id req_1`` (what a person quotes to the server's operator)."""
    status = "no answer" if exc.status is None else f"HTTP {exc.status}"
    return f"{status}, request id {exc.request_id or 'none'}"


def _fields(exc: APIError) -> dict[str, Any]:
    """The record attributes a structured log handler reads."""
    return {"status": exc.status, "request_id": exc.request_id, "attempts": exc.attempts}


class _NoSlot(Slot):
    """The slot of an unlimited client, its own async context: a plain object, not an
    ``asynccontextmanager`` generator per call (a batch of 10,000 calls made 10,000)."""

    __slots__ = ()

    async def __aenter__(self) -> Slot:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def limiter_for(value: RateLimit | Mapping[str, int | None] | RateLimiter | None) -> RateLimiter:
    """The limiter for a client's ``rate_limit`` argument (a limiter is shared as is)."""
    if isinstance(value, RateLimiter):
        return value
    if value is None:
        return RateLimiter()
    if isinstance(value, RateLimit):
        return RateLimiter.from_limits(value)
    return RateLimiter.from_limits(RateLimit(**dict(value)))


V = TypeVar("V")


class PolicyField(Generic[V]):
    """An attribute of the client that lives on its :class:`Policy` (read and written there).

    ``max_retries``, ``retry_base``, ``retry_cap``, ``retries`` and ``limiter`` have always
    been client attributes (the batch runner reads ``retries``, tests set ``retry_base``
    and the ``_sleep``/``_rand`` seams); the policy owns them now, streams included.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, client: Any, owner: type | None = None) -> V:
        return cast("V", getattr(client._policy, self.name))

    def __set__(self, client: Any, value: V) -> None:
        setattr(client._policy, self.name, value)
