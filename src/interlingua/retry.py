"""Retry policy: pure functions plus constants (no I/O, no sleeping).

The rules are the ones both official SDKs share (their ``_base_client.py``;
docs/protocols.md, "Retries and relayed headers"), so a caller gets the same behaviour
through interlingua as direct:

* ``x-should-retry: true|false`` from the server wins over everything else;
* otherwise retry 408, 409, 429 and every 5xx (529 included), plus transport failures
  (cannot connect, connection dropped, timed out) -- but never once a streamed answer
  has delivered its first byte, since the caller may already have acted on it (that rule
  lives with the caller, which alone knows whether bytes went out);
* wait ``retry-after-ms``, else ``retry-after`` (seconds or an HTTP date), capped at
  :data:`MAX_RETRY_AFTER`; without either, capped exponential backoff with *full jitter*
  (a uniform draw in ``[0, min(cap, base * 2**attempt)]``), which spreads a crowd of
  clients that failed together instead of having them retry in lock-step.

>>> should_retry(429), should_retry(400), should_retry(400, {"x-should-retry": "true"})
(True, False, True)
>>> retry_delay(0, {"retry-after": "3"})
3.0
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from .errors import parse_retry_after

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "INITIAL_DELAY",
    "MAX_DELAY",
    "MAX_RETRY_AFTER",
    "RETRYABLE_STATUSES",
    "retry_delay",
    "should_retry",
]

DEFAULT_MAX_RETRIES = 2
"""Retries after the first attempt (the SDKs' default): three attempts in all."""
INITIAL_DELAY = 0.5
"""Backoff base in seconds: attempt n waits up to ``INITIAL_DELAY * 2**n``."""
MAX_DELAY = 8.0
"""Backoff cap in seconds (the SDKs use 8 s)."""
MAX_RETRY_AFTER = 60.0
"""A server-suggested wait longer than this is clamped to it. The SDKs ignore such
values and fall back to a short backoff, which only hammers a server that asked for
patience; clamping keeps the wait long while bounding a bogus header."""
RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Retryable 4xx statuses; every status >= 500 is retryable too."""


class Headers(Protocol):
    """What is read of response headers: a dict, aiohttp's or the pool's case-insensitive
    mapping, or httpx's ``Headers`` all fit."""

    def get(self, name: str, /) -> object: ...


def _header(headers: Headers | None, name: str) -> str | None:
    """A header value by lowercase ``name`` from a dict or a case-insensitive mapping."""
    if not headers:
        return None
    value = headers.get(name)
    if value is None and isinstance(headers, dict):
        # Plain dicts may carry the server's capitalization (``Retry-After``).
        for key, candidate in headers.items():
            if isinstance(key, str) and key.lower() == name:
                return str(candidate)
    return None if value is None else str(value)


def _lowered(headers: Headers) -> Headers:
    if isinstance(headers, dict):
        return {str(k).lower(): v for k, v in headers.items()}
    return headers


def should_retry(failure: int | BaseException, headers: Headers | None = None) -> bool:
    """Whether a failed attempt is worth repeating.

    ``failure`` is an HTTP status, or the exception the attempt raised: one with an int
    ``status`` attribute (every API error) is judged by that status and its ``headers``
    attribute; otherwise builtin :class:`TimeoutError` / :class:`ConnectionError` and any
    exception whose class sets ``retryable = True`` (the client's connection and timeout
    errors) are retryable, everything else is not (a bug is not fixed by repeating it).
    """
    if isinstance(failure, BaseException):
        status = getattr(failure, "status", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return should_retry(status, headers or getattr(failure, "headers", None))
        if getattr(failure, "retryable", False) is True:
            return True
        return isinstance(failure, TimeoutError | ConnectionError)
    verdict = _header(headers, "x-should-retry")
    if verdict is not None:
        # The server knows best: "false" even on a 503 means don't
        # (docs/protocols.md, "Retries and relayed headers").
        if verdict.strip().lower() == "true":
            return True
        if verdict.strip().lower() == "false":
            return False
    return failure in RETRYABLE_STATUSES or failure >= 500


def retry_delay(
    attempt: int,
    headers: Headers | None = None,
    base: float = INITIAL_DELAY,
    cap: float = MAX_DELAY,
    *,
    max_retry_after: float = MAX_RETRY_AFTER,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0).

    The server's ``retry-after-ms`` / ``retry-after`` wins (clamped to
    ``max_retry_after``); else full-jitter backoff: ``rand() * min(cap, base * 2**attempt)``.
    ``rand`` is injectable so tests get exact values.

    >>> retry_delay(3, rand=lambda: 1.0), retry_delay(10, rand=lambda: 0.5)
    (4.0, 4.0)
    """
    if headers:
        suggested = parse_retry_after(_lowered(headers))
        if suggested is not None:
            return min(suggested, max_retry_after)
    ceiling = min(cap, base * (2.0 ** min(attempt, 62)))
    return max(0.0, rand() * ceiling)
