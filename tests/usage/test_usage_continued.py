"""``interlingua usage`` and a stream continued after a break: the broken attempt's row
(error ``continued``) adds its tokens to its group, but it is not a request (its request
is the finishing attempt's row), not an error, and its latency is not a request's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from interlingua.usage import Database, summarize
from interlingua.usage.record import CONTINUED

from .helpers import logged_database, make_record

SINCE = 1_700_000_000.0


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """Request 1 broke on `nim` after 40 + 12 tokens and was finished by `vllm` (52 + 30);
    request 2 was answered by `vllm` alone (5 + 6)."""
    rows = [
        make_record(1, key="team-a", model="smart", upstream="nim", error=CONTINUED,
                    input_tokens=40, output_tokens=12, cached_tokens=0, reasoning_tokens=0,
                    latency=30.0),
        make_record(2, key="team-a", model="smart", upstream="vllm", input_tokens=52,
                    output_tokens=30, cached_tokens=0, reasoning_tokens=0, latency=1.0),
        make_record(3, key="team-a", model="smart", upstream="vllm", input_tokens=5,
                    output_tokens=6, cached_tokens=0, reasoning_tokens=0, latency=3.0),
    ]  # fmt: skip
    async with logged_database(request, request.param, tmp_path, rows) as database:
        yield database


async def test_a_continued_attempt_is_tokens_not_a_request(db: Database) -> None:
    [total] = await summarize(db, SINCE, ())
    assert (total["requests"], total["errors"], total["continued"]) == (2, 0, 1)
    assert (total["input_tokens"], total["output_tokens"]) == (97, 48)
    assert (total["p50_latency_s"], total["p95_latency_s"]) == (2.0, 2.9)  # not the 30 s


async def test_by_upstream_the_broken_one_shows_its_tokens_and_no_request(db: Database) -> None:
    by_upstream = await summarize(db, SINCE, ("upstream",))
    assert [
        (e["upstream"], e["requests"], e["errors"], e["continued"], e["input_tokens"])
        for e in by_upstream
    ] == [("nim", 0, 0, 1, 40), ("vllm", 2, 0, 0, 57)]
    assert by_upstream[0]["p50_latency_s"] is None
