"""retry.py: which failures are retried and how long to wait (pure, no sleeping)."""

from __future__ import annotations

import email.utils
import time

import pytest

from interlingua.client import (
    APIConnectionError,
    APITimeoutError,
    BadRequestError,
    RateLimitError,
)
from interlingua.errors import UpstreamConnectionError, UpstreamTimeoutError
from interlingua.retry import MAX_DELAY, MAX_RETRY_AFTER, retry_delay, should_retry


@pytest.mark.parametrize(
    ("status", "expected"),
    [(400, False), (401, False), (403, False), (404, False), (408, True), (409, True),
     (422, False), (429, True), (500, True), (502, True), (503, True), (529, True), (200, False)],
)  # fmt: skip
def test_statuses(status: int, expected: bool) -> None:
    assert should_retry(status) is expected


def test_x_should_retry_wins_both_ways() -> None:
    assert should_retry(400, {"x-should-retry": "true"}) is True
    assert should_retry(503, {"x-should-retry": "false"}) is False
    assert should_retry(503, {"X-Should-Retry": "FALSE"}) is False  # any capitalization
    assert should_retry(429, {"x-should-retry": "maybe"}) is True  # unknown value: ignored


def test_exceptions() -> None:
    assert should_retry(APIConnectionError("down")) is True
    assert should_retry(APITimeoutError("slow")) is True
    assert should_retry(RateLimitError("429", status=429)) is True
    assert should_retry(BadRequestError("400", status=400)) is False
    # x-should-retry on the error's own headers
    assert should_retry(BadRequestError("400", status=400, headers={"x-should-retry": "true"}))
    assert should_retry(TimeoutError()) is True
    assert should_retry(ConnectionResetError()) is True
    assert should_retry(ValueError("bug")) is False
    # the gateway's error tree is judged by status too
    assert should_retry(UpstreamConnectionError("x")) is True  # 502
    assert should_retry(UpstreamTimeoutError("x")) is True  # 504


def test_retry_after_seconds_and_ms() -> None:
    assert retry_delay(0, {"retry-after": "3"}) == 3.0
    assert retry_delay(5, {"Retry-After": "2.5"}) == 2.5
    # retry-after-ms is preferred over retry-after
    assert retry_delay(0, {"retry-after-ms": "1500", "retry-after": "9"}) == 1.5


def test_retry_after_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    delay = retry_delay(0, {"retry-after": when})
    assert 25 <= delay <= 31


def test_retry_after_is_clamped() -> None:
    assert retry_delay(0, {"retry-after": "3600"}) == MAX_RETRY_AFTER
    assert retry_delay(0, {"retry-after": "3600"}, max_retry_after=5) == 5


def test_unparseable_retry_after_falls_back_to_backoff() -> None:
    assert retry_delay(2, {"retry-after": "soon"}, rand=lambda: 1.0) == 2.0


def test_full_jitter_backoff() -> None:
    # ceiling doubles from the base and stops at the cap; the draw scales it
    assert [retry_delay(n, rand=lambda: 1.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert retry_delay(3, rand=lambda: 0.25) == 1.0
    assert retry_delay(0, rand=lambda: 0.0) == 0.0
    assert retry_delay(100, rand=lambda: 1.0) == MAX_DELAY
    assert retry_delay(2, base=1.0, cap=3.0, rand=lambda: 1.0) == 3.0


def test_real_jitter_stays_in_bounds() -> None:
    delays = [retry_delay(2) for _ in range(200)]
    assert all(0.0 <= d <= 2.0 for d in delays)
    assert len(set(delays)) > 100  # actually random
